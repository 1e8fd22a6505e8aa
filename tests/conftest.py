import jax
import jax.numpy as jnp
import numpy as np
import pytest

X64 = bool(jax.config.jax_enable_x64)
DTYPE = jnp.zeros(()).dtype


def tol(f64: float, f32: float) -> float:
    """Dtype-aware tolerance: the first under float64, the second under float32."""
    return f64 if X64 else f32


@pytest.fixture
def rng():
    return np.random.default_rng(1234)

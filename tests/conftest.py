import jax
import jax.numpy as jnp
import numpy as np
import pytest

X64 = bool(jax.config.jax_enable_x64)
DTYPE = jnp.zeros(()).dtype

# The tests compare module-level cores (and their own jnp products) with float64 references at
# float32 tolerances. A Learner's functions fix their precision themselves (base.full_precision,
# checked on every backend in test_base.py); the cores follow JAX's default, which on NVIDIA GPUs
# is TensorFloat-32, so there the whole session runs at full float32 precision (on a CPU every
# precision computes the same products).
if jax.default_backend() != "cpu":
    jax.config.update("jax_default_matmul_precision", "highest")


def tol(f64: float, f32: float) -> float:
    """Dtype-aware tolerance: the first under float64, the second under float32."""
    return f64 if X64 else f32


def pytest_collection_modifyitems(config, items):
    """The float64 run leaves out the ``float32_only`` tests (CI runs the suite once per dtype)."""
    if not X64:
        return
    skip = pytest.mark.skip(reason="float32_only: runs in the float32 run")
    for item in items:
        if item.get_closest_marker("float32_only") is not None:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)

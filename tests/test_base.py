import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from onlinejax import Prediction
from onlinejax.base import normal_quantile
from conftest import tol


def test_interval_and_log_prob_match_scipy():
    mean = jnp.array([0.0, 1.5, -2.0])
    var = jnp.array([1.0, 0.25, 4.0])
    p = Prediction(mean, var)
    for level in (0.5, 0.95, 0.999):
        lo, hi = p.interval(level)
        rlo, rhi = stats.norm.interval(level, loc=np.asarray(mean, np.float64), scale=np.sqrt(np.asarray(var, np.float64)))
        np.testing.assert_allclose(lo, rlo, rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
        np.testing.assert_allclose(hi, rhi, rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    y = jnp.array([0.3, 1.0, 5.0])
    np.testing.assert_allclose(p.log_prob(y), stats.norm.logpdf(np.asarray(y), np.asarray(mean), np.sqrt(np.asarray(var))),
                               rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(p.std, np.sqrt([1.0, 0.25, 4.0]), rtol=tol(1e-12, 1e-6))


def test_scalar_prediction_interval_shapes():
    lo, hi = Prediction(jnp.asarray(1.0), jnp.asarray(4.0)).interval(0.95)
    assert lo.shape == () and hi.shape == ()
    assert float(hi - lo) == pytest.approx(2 * 1.959963984540054 * 2.0, rel=1e-5)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_bad_level_raises(bad):
    with pytest.raises(ValueError, match="level"):
        normal_quantile(bad)


def test_prediction_is_a_pytree_that_vmaps():
    p = jax.vmap(lambda m: Prediction(m, m * 0 + 1.0))(jnp.arange(3.0))
    assert p.mean.shape == (3,) and p.var.shape == (3,)


def test_check_int():
    from onlinejax.base import check_int

    assert check_int(np.int64(4), "window", 2) == 4 and check_int(4.0, "window", 2) == 4
    for bad in (True, 2.5, "4", None, 1):
        with pytest.raises(ValueError, match="window: must be an integer >= 2"):
            check_int(bad, "window", 2)

"""Climatology: the Student-t posterior predictive of the targets so far, against float64 scipy."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from onlinejax.core.base import StudentTPrediction
from onlinejax.wrappers.baseline import ClimatologyState, climatology, climatology_init, climatology_learn, climatology_predict
from onlinejax.evaluation import progressive_validation
from conftest import DTYPE, X64, tol


def _after(y, prior_var=1.0):
    """climatology_predict after learning the targets ``y`` (one jitted scan)."""
    def run(y):
        s = jax.lax.scan(lambda s, v: (climatology_learn(s, v), None), climatology_init(prior_var, DTYPE), y)[0]
        return climatology_predict(s)

    return jax.jit(run)(jnp.asarray(y, DTYPE))


def _reference(y):
    """scipy's Student-t predictive after ``n >= 2`` targets (BDA3 §3.2): ``t_{n-1}(ȳ, s·sqrt(1 + 1/n))``."""
    n = len(y)
    return stats.t(n - 1, np.mean(y), np.std(y, ddof=1) * np.sqrt(1.0 + 1.0 / n))


@pytest.mark.parametrize("n", [2, 3, 4, 10, 100, 1000])
def test_predictive_is_scipys_student_t(rng, n):
    y = 50.0 + 4.0 * rng.normal(size=n)
    y = np.asarray(np.asarray(y, DTYPE), np.float64)  # the targets the state dtype holds
    p, ref = _after(y), _reference(y)
    assert isinstance(p, StudentTPrediction) and p.df.dtype == DTYPE
    assert float(p.df) == n - 1
    grid = np.mean(y) + np.std(y) * np.array([-30.0, -3.0, -1.0, 0.0, 0.5, 2.0, 8.0])
    np.testing.assert_allclose(np.asarray(p.log_prob(jnp.asarray(grid, DTYPE))), ref.logpdf(grid),
                               rtol=tol(1e-9, 2e-5), atol=tol(1e-9, 2e-5))
    np.testing.assert_allclose(np.asarray(p.cdf(jnp.asarray(grid, DTYPE))), ref.cdf(grid), rtol=tol(1e-9, 1e-4),
                               atol=tol(1e-12, 2e-6))
    for level in (0.5, 0.95):
        lo, hi = p.interval(level)
        np.testing.assert_allclose([float(lo), float(hi)], ref.interval(level), rtol=tol(1e-9, 1e-5))
    assert float(p.var) == (np.inf if n <= 3 else pytest.approx(ref.var(), rel=tol(1e-9, 1e-4)))
    if n == 2:  # a Cauchy: no mean, so no finite CRPS
        assert float(p.crps(y[0])) == np.inf
    else:
        yy = float(y[0]) + 3.0
        f = lambda x, h: (ref.cdf(x) - h) ** 2  # noqa: E731
        want = integrate.quad(f, -np.inf, yy, args=(0.0,), limit=200)[0] + integrate.quad(
            f, yy, np.inf, args=(1.0,), limit=200)[0]
        assert float(p.crps(jnp.asarray(yy, DTYPE))) == pytest.approx(want, rel=tol(1e-6, 1e-4))


def test_before_two_targets_the_gaussian_prior():
    """Before two targets: N(ȳ, prior_var) (ȳ = 0 before the first), as a Student-t of 1/ε degrees of freedom."""
    for y, loc in (([], 0.0), ([2.5], 2.5)):
        p = _after(np.asarray(y, np.float64).reshape(-1), prior_var=4.0)
        assert float(p.df) == pytest.approx(1.0 / np.finfo(DTYPE).eps)
        grid = loc + np.array([-6.0, -2.0, 0.0, 1.0, 5.0])
        np.testing.assert_allclose(np.asarray(p.log_prob(jnp.asarray(grid, DTYPE))), stats.norm.logpdf(grid, loc, 2.0),
                                   rtol=tol(1e-9, 1e-5), atol=tol(1e-9, 1e-5))
        np.testing.assert_allclose(np.asarray(p.cdf(jnp.asarray(grid, DTYPE))), stats.norm.cdf(grid, loc, 2.0),
                                   atol=tol(1e-12, 1e-6))
        np.testing.assert_allclose(p.interval(0.95), stats.norm.interval(0.95, loc, 2.0), rtol=tol(1e-9, 1e-5))
        assert float(p.var) == pytest.approx(4.0, rel=tol(1e-9, 1e-5))
        assert float(p.crps(jnp.asarray(loc, DTYPE))) == pytest.approx(2.0 * (2 * stats.norm.pdf(0) - 1 / np.sqrt(np.pi)),
                                                                       rel=tol(1e-9, 1e-5))


def test_nearly_equal_first_targets_cost_tens_of_nats_not_millions(rng):
    """A unit-noise stream whose first two targets nearly coincide: the third is scored by a Cauchy."""
    y = rng.normal(size=3)
    y[1] = y[0] + 1e-6
    p = _after(y[:2])
    lp = float(p.log_prob(jnp.asarray(y[2], DTYPE)))
    assert np.isfinite(lp) and lp > -30.0
    d = float(np.asarray(y[1], DTYPE)) - float(np.asarray(y[0], DTYPE))
    assert lp == pytest.approx(stats.t.logpdf(y[2], 1, y[0] + d / 2, abs(d) * np.sqrt(0.75)), rel=tol(1e-6, 0.05))


@pytest.mark.parametrize("level", [0.0, 1234.5, -3e7])
def test_constant_targets_keep_a_scale_floor_relative_to_the_targets(level):
    """A stuck run: the scale never reaches 0; it stays at the dtype's resolution of the targets (ε|ȳ|)."""
    p = _after(np.full(50, level))
    fi = np.finfo(DTYPE)
    floor = fi.eps * abs(level) + np.sqrt(fi.tiny)
    assert floor <= float(p.scale) <= 2.0 * floor + 1e-30
    for y in (level, level + 1.0, level - 1e6):
        assert np.isfinite(float(p.log_prob(jnp.asarray(y, DTYPE))))
        assert np.isfinite(float(p.crps(jnp.asarray(y, DTYPE))))
    # the stuck value is the likeliest again, at the floor's density
    assert float(p.log_prob(jnp.asarray(level, DTYPE))) == pytest.approx(stats.t.logpdf(0.0, 49, 0.0, float(p.scale)),
                                                                         rel=tol(1e-9, 1e-5))


def test_saturated_count_predicts_a_large_df_student_t(rng):
    """At ``welford_update``'s largest count the predictive is a t of ~n_max degrees of freedom, computed
    without the gammaln cancellation of large ν."""
    n_max = 1.0 / (32.0 * np.finfo(DTYPE).eps)
    n = min(n_max, 2.0 ** 20)
    s = ClimatologyState(*(jnp.asarray(v, DTYPE) for v in (n, 7.0, 9.0, 1.0)), jnp.zeros((), jnp.int32))
    p = climatology_predict(s)
    ref = stats.t(n - 1, 7.0, 3.0 * np.sqrt((n + 1) / (n - 1)))
    grid = np.array([-20.0, 1.0, 7.0, 9.5, 40.0])
    np.testing.assert_allclose(np.asarray(p.log_prob(jnp.asarray(grid, DTYPE))), ref.logpdf(grid),
                               rtol=tol(1e-9, 1e-5))
    np.testing.assert_allclose(np.asarray(p.cdf(jnp.asarray(grid, DTYPE))), ref.cdf(grid), atol=tol(1e-12, 1e-6))
    np.testing.assert_allclose(p.interval(0.95), ref.interval(0.95), rtol=tol(1e-9, 1e-5))


def test_learner_scans_and_vmaps_one_prediction_type(rng):
    """Every item's prediction is the same StudentTPrediction pytree: progressive validation scans it, vmaps it."""
    Y = 10.0 + rng.normal(size=(3, 40))
    X = rng.normal(size=(3, 40, 2))
    clim = climatology(2)
    p = jax.jit(jax.vmap(lambda X, Y: progressive_validation(clim, clim.init(), X, Y).predictions))(
        jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE))
    assert isinstance(p, StudentTPrediction) and p.mean.shape == p.scale.shape == p.df.shape == (3, 40)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(p.log_prob(jnp.asarray(Y, DTYPE)))[i, 2:],
                                   [_reference(Y[i, :t]).logpdf(Y[i, t]) for t in range(2, 40)], rtol=tol(1e-9, 1e-4))
    assert np.all(np.isfinite(np.asarray(p.interval(0.95))))

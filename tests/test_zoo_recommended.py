"""The recommended configurations (zoo.recommended_learners): stable names, raw-scale streams, sane distributions."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax import zoo
from onlinejax.evaluation import progressive_validation
from onlinejax.core.registry import REGISTRY
from onlinejax.evaluation.metrics import log_score_skill
from onlinejax.learners.linear import thesis_features

from conftest import DTYPE

pytestmark = pytest.mark.float32_only  # float32 is the recommended learners' dtype; float64 runs them through the pinned rows


def _raw_drift_stream(n=500, seed=0):
    """Ordinal dates and a 1e-4-scale input fed raw, targets in the thousands, a level and slope change halfway."""
    rng = np.random.default_rng(seed)
    days = 7.36e5 + np.arange(n, dtype=np.float64)
    small = rng.uniform(1e-4, 3e-4, n)
    X = np.column_stack([days, small])
    t = (days - days[0]) / n
    y = 2000.0 + 300.0 * t + 4e6 * small + 20.0 * rng.normal(size=n)
    y[n // 2:] += 400.0 - 500.0 * t[n // 2:]
    return X, y


def test_names_are_stable_and_registered():
    zoo.register_all()
    names = [g.name for g in zoo.recommended_learners()]
    assert names == ["RecommendedGP", "RecommendedKernelRegression", "RecommendedWindowedLinear",
                     "RecommendedForgettingLinear", "RecommendedRandomFeatureGP", "RecommendedBOCPD",
                     "RecommendedCombination"]
    assert [g.name for g in zoo.recommended_learners(include_combination=False)] == names[:6]
    assert all(REGISTRY[n].name == n for n in names + [zoo.CLIMATOLOGY])
    # one family each: the main table's per-family summary must not merge two members
    assert len({REGISTRY[n].family for n in names}) == len(names)


def test_unit_prior_alpha_is_the_thesis_feature_count():
    assert [zoo.unit_prior_alpha(d) for d in (1, 2, 4)] == [4.0, 9.0, 22.0]
    assert zoo.unit_prior_alpha(10) == thesis_features(10).n_out == 85


def test_both_maps_feed_the_raw_map_and_the_odd_features_of_what_the_wrapper_passes():
    """``both_maps`` with a pass-through wrapper against a float64 Bayesian linear regression on the features
    computed by hand (the thesis's map of the raw inputs, then the first d features' odd log and root)."""
    from onlinejax.learners.linear import bayes_linreg

    rng = np.random.default_rng(3)
    d, n, alpha, beta = 2, 30, 2.0, 5.0
    X = rng.uniform(-3.0, 3.0, (n, d))
    y = X[:, 0] ** 2 - X[:, 1] + 0.1 * rng.normal(size=n)
    lrn = zoo.both_maps(d, lambda inner: inner, lambda m: bayes_linreg(m, alpha=alpha, beta=beta))
    s = lrn.init()
    for i in range(n - 1):
        s = lrn.learn(s, jnp.asarray(X[i], DTYPE), jnp.asarray(y[i], DTYPE))
    p = lrn.predict(s, jnp.asarray(X[-1], DTYPE))

    def phi(x):
        quad = [x[i] * x[j] for i in range(d) for j in range(i, d)]
        odd = [*(np.sign(x) * np.log1p(np.abs(x))), *(np.sign(x) * np.sqrt(np.abs(x)))]
        return np.array([*x, *quad, *odd, *odd])  # the raw map, then the odd features of its first d (= x)

    F = np.array([phi(x) for x in X])
    prec = alpha * np.eye(F.shape[1]) + beta * F[:-1].T @ F[:-1]
    mean = np.linalg.solve(prec, beta * F[:-1].T @ y[:-1])
    want_mu = F[-1] @ mean
    want_var = 1.0 / beta + F[-1] @ np.linalg.solve(prec, F[-1])
    rtol = 1e-9 if DTYPE == jnp.float64 else 2e-3
    np.testing.assert_allclose([float(p.mean), float(p.var)], [want_mu, want_var], rtol=rtol)


def test_forgetting_linear_learns_squares_of_heavy_tailed_inputs_and_timestamps_in_seconds():
    """The raw squares are not clipped where the quadratic term matters (Gaussian inputs' squares are beyond 5 sd
    on 1 item in 200), and inputs near 1.8e9 (today's Unix time in seconds) are learned, not refused."""
    rng = np.random.default_rng(5)
    lrn = zoo.configurations()["RecommendedForgettingLinear"].make(2)
    assert zoo.configurations()["RecommendedForgettingLinear"].make(2) is lrn  # built again: no new program
    run = jax.jit(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions.mean)
    n = 400
    X = rng.normal(size=(n, 2))
    y = X[:, 0] ** 2 + 0.1 * rng.normal(size=n)
    err = np.asarray(run(jnp.asarray(X, DTYPE), jnp.asarray(y, DTYPE)), np.float64)[100:] - y[100:]
    assert np.mean(err ** 2) < 0.05 and np.max(err ** 2) < 2.0, (np.mean(err ** 2), np.max(err ** 2))
    X = np.column_stack([1.79e9 + 60.0 * np.arange(n), rng.normal(size=n)])
    y = 2.0 * X[:, 1] + 0.3 * rng.normal(size=n)
    err = np.asarray(run(jnp.asarray(X, DTYPE), jnp.asarray(y, DTYPE)), np.float64)[100:] - y[100:]
    assert np.mean(err ** 2) < 0.1 * np.var(y[100:]), np.mean(err ** 2)


@pytest.mark.parametrize("name", zoo.RECOMMENDED_MEMBERS + (zoo.RECOMMENDED_BOCPD,))
def test_member_on_raw_drifting_stream(name):
    """Raw features of any scale, a drift: finite predictions with positive variance, calibrated 95 % intervals
    and log-score skill over climatology, in the state dtype."""
    X, y = _raw_drift_stream()
    lrn = zoo.configurations()[name].make(2)
    run = jax.jit(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions)
    p = run(jnp.asarray(X, DTYPE), jnp.asarray(y, DTYPE))
    mu, var = np.asarray(p.mean, np.float64), np.asarray(p.var, np.float64)
    assert np.all(np.isfinite(mu)) and np.all(np.isfinite(var)) and np.all(var > 0)
    lo, hi = (np.asarray(v, np.float64) for v in p.interval(0.95))
    cover = np.mean((y >= lo) & (y <= hi))
    assert 0.90 <= cover <= 0.99, cover
    skill = float(log_score_skill(jnp.asarray(y, DTYPE), p)["skill"])
    assert skill > 0.0, skill
    smse = np.mean((y[50:] - mu[50:]) ** 2) / np.var(y[50:])
    assert smse < 0.5, smse

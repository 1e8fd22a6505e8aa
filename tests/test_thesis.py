from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.wrappers.adaptive import adaptive
from onlinejax.core.base import normal_quantile
from onlinejax.data import thesis_grid
from onlinejax.evaluation import progressive_validation
from onlinejax.learners.linear import adhoc_bounds
from onlinejax.learners.linear.thesis import adhoc_init, adhoc_learn_one, adhoc_predict_one
from conftest import DTYPE, tol
from reference import rel_err


class _NumpyForgettingBLR:
    """Information-form reference: Λ ← λΛ + βxxᵀ, η ← λη + βxy (explicit solves)."""

    def __init__(self, d, alpha, beta, lam):
        self.L = alpha * np.eye(d)
        self.eta = np.zeros(d)
        self.beta, self.lam = beta, lam

    def mean(self, x):
        return x @ np.linalg.solve(self.L, self.eta)

    def var(self, x):
        return 1 / self.beta + x @ np.linalg.solve(self.L, x)

    def learn(self, x, y):
        self.L = self.lam * self.L + self.beta * np.outer(x, x)
        self.eta = self.lam * self.eta + self.beta * x * y


@pytest.mark.parametrize("floor", ["residual", "none"])
def test_adhoc_three_learner_bounds_match_reference(rng, floor):
    d, n, burn, ff, rho = 2, 150, 20, 0.05, 0.9
    X = rng.normal(size=(n, d))
    Y = X @ [1.0, -1.0] + 0.5 * rng.normal(size=n)
    lrn = oj.bayesian_mle_forgetting(d, forgetting_factor=ff, adhoc=oj.AdHocOptions(burn, 0.9, floor))
    res = progressive_validation(lrn, lrn.init(residual_forgetting=rho), X, Y)
    lam = 1 - ff
    base, up, low = (_NumpyForgettingBLR(d, 1e-4, lam, lam) for _ in range(3))
    z = normal_quantile(0.9)
    eps = np.finfo(np.asarray(res.predictions.var).dtype).eps
    ref_m, ref_v = [], []
    z2_sum = z2_w = y2_sum = 0.0
    for t, (x, y) in enumerate(zip(X, Y)):
        hi, lo = up.mean(x), low.mean(x)
        m, v = base.mean(x), base.var(x)
        ref_m.append(m)
        rule = ((hi - lo) / (2 * z)) ** 2 if t >= burn else v
        if floor == "none":
            fl = eps * v
        elif t >= d + 3:  # the running mean of the base's squared standardised one-step errors
            fl = max(z2_sum / z2_w, eps) * v
        else:  # too few of them: the squared error of predicting 0
            fl = max(v, y2_sum / max(t, 1))
        ref_v.append(max(rule, fl))
        if t >= d:
            z2_sum, z2_w = rho * z2_sum + (y - m) ** 2 / v, rho * z2_w + 1.0
        y2_sum += y * y
        base.learn(x, y)
        if t < burn or y > lo:
            up.learn(x, y)
        if t < burn or y < hi:
            low.learn(x, y)
    assert rel_err(res.predictions.mean, ref_m) < tol(1e-7, 2e-3)
    v, rv = np.asarray(res.predictions.var, np.float64), np.array(ref_v)
    # the bound width is a difference of two close means: compare on the std scale
    assert np.max(np.abs(np.sqrt(v) - np.sqrt(rv))) < tol(1e-7, 5e-3) * max(1.0, np.max(np.sqrt(rv)))


def _crossing_stream(rng, n=2000):
    """2 inputs on [0, 10], y = 3x₁ - 2x₂ + 5 + N(0, 1): the forgetting learners have no intercept, so the upper
    and lower copies' hyperplanes cross inside the input domain."""
    X = rng.uniform(0, 10, size=(n, 2))
    return X, X @ [3.0, -2.0] + 5.0 + rng.normal(size=n)


@pytest.mark.parametrize("make", [oj.bayesian_mle_forgetting, oj.bayesian_map_forgetting])
def test_adhoc_variance_never_collapses(rng, make):
    """Issue 23: the ad-hoc variance is ``((upper - lower)/2z)²``. On the first item after the burn-in the three
    copies are identical (width exactly 0: the variance was the dtype's tiny and the log density -inf) and
    later the width crosses 0 wherever the two copies' hyperplanes intersect; where positive, the rule
    settles near ±0.5 noise sd. The default floor (the base's recursive residuals) keeps the intervals
    calibrated; the thesis's own rule (``floor="none"``) keeps its coverage but never a tiny variance."""
    X, Y = _crossing_stream(rng)
    burn = 50
    for floor in ("residual", "none"):
        lrn = make(2, forgetting_factor=0.05, adhoc=oj.AdHocOptions(burn_in=burn, floor=floor))
        res = progressive_validation(lrn, lrn.init(), X, Y)
        v = np.asarray(res.predictions.var)
        fi = np.finfo(v.dtype)
        assert np.all(np.isfinite(v)) and np.min(v) > 1e6 * fi.tiny, (floor, np.min(v))
        lp = np.asarray(res.predictions.log_prob(Y), np.float64)
        assert np.all(np.isfinite(lp)), floor
        z = np.abs(Y - np.asarray(res.predictions.mean, np.float64)) / np.sqrt(v.astype(np.float64))
        cover = np.mean(z[100:] < 1.96)
        if floor == "residual":
            assert 0.92 < cover < 0.98, cover
            assert np.min(v[burn:]) > 0.2  # noise variance 1
            assert np.mean(lp[100:]) > -2.5  # N(0, 1) noise: -1.42 at best
        else:
            assert cover < 0.6, cover  # the thesis's rule, faithfully overconfident


def test_adhoc_floor_validated():
    with pytest.raises(ValueError, match="floor"):
        oj.bayesian_mle_forgetting(2, adhoc=oj.AdHocOptions(floor="tiny"))
    with pytest.raises(ValueError, match="residual_forgetting"):
        adhoc_bounds(oj.bayes_linreg(2, forgetting=0.9), residual_forgetting=0.0)
    with pytest.raises(ValueError, match="residual_forgetting"):
        oj.bayesian_map_forgetting(2).init(residual_forgetting=1.5)


def test_mle_forgetting_mean_is_thesis_rls(rng):
    """The base learner of BayesianMLEForgetting is RLS from kI with XXᵀ <- (1-ff)(XXᵀ + xxᵀ) (eq. 5.6)."""
    d, n, ff, k = 3, 100, 0.05, 1e4
    X = rng.normal(size=(n, d))
    Y = X @ [0.5, 2.0, -1.0] + 0.1 * rng.normal(size=n)
    lrn = oj.bayesian_mle_forgetting(d, forgetting_factor=ff, k=k)
    s = lrn.learn(lrn.init(), X, Y)
    G, b = np.eye(d) / k, np.zeros(d)
    for x, y in zip(X, Y):
        G = (1 - ff) * (G + np.outer(x, x))
        b = (1 - ff) * (b + x * y)
    assert rel_err(s.base.mean, np.linalg.solve(G, b)) < tol(1e-8, 1e-4)


def test_mle_windowed_is_windowed_rls_with_asymptotic_bounds(rng):
    d, W = 2, 40
    X = rng.uniform(0, 10, size=(200, d))
    Y = X @ [3.0, 1.0] + rng.normal(size=200)
    lrn = oj.bayesian_mle_windowed(d, W, options=oj.linear.MLE_WINDOWED._replace(onestep_floor=False))
    s = lrn.learn(lrn.init(), X, Y)
    Xw, Yw = X[-W:], Y[-W:]
    G = Xw.T @ Xw + 1e-4 * np.eye(d)
    w = np.linalg.solve(G, Xw.T @ Yw)
    assert rel_err(s.mean, w) < tol(1e-9, 1e-3)
    s2 = np.sum((Yw - Xw @ w) ** 2) / (W - d)
    xq = np.array([5.0, 5.0])
    assert float(lrn.predict(s, xq).var) == pytest.approx(s2 * (1 + xq @ np.linalg.solve(G, xq)), rel=tol(1e-8, 1e-3))
    # tune changes nothing of the model (prior 1e-4 on the raw weights, beta = 1): it only
    # standardises the features and rebuilds the factor (float32 adds its sqrt(eps) ridge floor)
    t = lrn.tune(s)
    assert not np.allclose(t.scale, 1.0) and float(t.beta) == 1.0
    p = lrn.predict(t, xq)
    assert float(p.mean) == pytest.approx(float(xq @ w), rel=tol(1e-9, 1e-3))
    assert float(p.var) == pytest.approx(s2 * (1 + xq @ np.linalg.solve(G, xq)), rel=tol(1e-8, 1e-2))


@pytest.mark.parametrize("name", ["SYNTH_ND_NCD_2000_4_50_3_22", "SYNTH_ND_CD_2000_4_50_1_33"])
def test_mle_windowed_mapped_stays_finite_on_the_grid(name):
    # 22 collinear mapped features of inputs of scale 50 on a 32-item window: in float32 the raw
    # factor had SMSE 2e15 / inf on these thesis-grid streams (float64: 0.01-0.3)
    g = thesis_grid(jax.random.PRNGKey(0), [name])[0]
    lrn = adaptive(oj.bayesian_mle_windowed(4, 32, features=oj.ThesisFeatures(mapped=True)), 32)
    m = np.asarray(progressive_validation(lrn, lrn.init(), g.X[0], g.Y[0]).predictions.mean, np.float64)
    y = np.asarray(g.Y[0], np.float64)
    assert np.all(np.isfinite(m))
    assert np.mean((m - y) ** 2) / np.var(y) < 1.0


def test_map_windowed_mapped_with_intercept_runs_and_tunes(rng):
    X = rng.uniform(0.5, 10, size=(300, 2))
    Y = 2 * X[:, 0] ** 2 - X[:, 1] + 3 + 0.1 * rng.normal(size=300)
    lrn = oj.bayesian_map_windowed(2, 64, features=oj.ThesisFeatures(mapped=True, intercept=True))
    s = lrn.tune(lrn.learn(lrn.init(), X, Y))
    assert s.mean.shape == (2 + 3 + 4 + 1,)
    p = lrn.predict(s, X[-10:])
    assert np.max(np.abs(np.asarray(p.mean) - Y[-10:])) < 0.5


def test_thesis_features_match_definition():
    fm = oj.thesis_features(3)
    assert fm.n_out == 3 + 6 + 6 and len(fm.names) == fm.n_out
    x = np.array([2.0, 0.5, 4.0])
    want = [2.0, 0.5, 4.0, 4.0, 1.0, 8.0, 0.25, 2.0, 16.0, *np.log1p(x), *np.sqrt(x)]
    np.testing.assert_allclose(fm(jnp.asarray(x)), want, rtol=tol(1e-12, 1e-6))
    # non-positive inputs stay finite (odd extensions)
    out = np.asarray(fm(jnp.asarray([0.0, -1.0, -4.0])))
    assert np.all(np.isfinite(out)) and out[-1] == pytest.approx(-2.0) and out[-4] == pytest.approx(-np.log(5.0), rel=1e-6)
    assert fm(jnp.ones((5, 3))).shape == (5, 15)


def test_thesis_features_saturate_squares_beyond_the_square_limit():
    from onlinejax.learners.linear.features import square_limit

    lim = square_limit(DTYPE)
    assert lim == pytest.approx((np.finfo(DTYPE).max / 4096) ** 0.25)
    fm = oj.thesis_features(2)
    out = np.asarray(fm(jnp.asarray([3.0 * lim, -2.0], DTYPE)), np.float64)
    # x, then x0², x0·x1, x1² of the inputs clipped at the limit, then the odd log and root of the raw inputs
    want = [3.0 * lim, -2.0, lim * lim, -2.0 * lim, 4.0, np.log1p(3.0 * lim), -np.log1p(2.0), np.sqrt(3.0 * lim),
            -np.sqrt(2.0)]
    np.testing.assert_allclose(out, want, rtol=tol(1e-12, 1e-6))
    # every feature's square stays finite, so a learner may absorb the item
    assert np.all(np.isfinite(out.astype(DTYPE) ** 2)) and np.all(np.isfinite(out ** 2 * 1000))
    assert oj.thesis_features(2) is fm and oj.linear.odd_features(9, 2) is oj.linear.odd_features(9, 2)


def test_odd_features_match_definition():
    fm = oj.linear.odd_features(5, 2)
    assert fm.n_out == 9 and len(fm.names) == 9
    v = np.array([-4.0, 0.25, 3.0, 7.0, -1.0])
    z = v[:2]
    want = [*v, *(np.sign(z) * np.log1p(np.abs(z))), *(np.sign(z) * np.sqrt(np.abs(z)))]
    np.testing.assert_allclose(fm(jnp.asarray(v, DTYPE)), want, rtol=tol(1e-12, 1e-6))
    assert fm(jnp.zeros((3, 5), DTYPE)).shape == (3, 9)
    with pytest.raises(ValueError, match="n_inputs"):
        oj.linear.odd_features(2, 3)


def test_map_features_checks_width():
    with pytest.raises(ValueError, match="learner"):
        oj.map_features(oj.thesis_features(2), oj.bayes_linreg(3))


def test_burn_in_validated():
    with pytest.raises(ValueError, match="burn_in"):
        oj.bayesian_mle_forgetting(2, adhoc=oj.AdHocOptions(burn_in=-1))
    with pytest.raises(ValueError, match="forgetting_factor"):
        oj.bayesian_mle_forgetting(2, forgetting_factor=1.0)


@pytest.mark.parametrize("floor", ["residual", "none"])
def test_adhoc_module_functions_are_the_learners_core(rng, floor):
    d, burn = 2, 5
    X, Y = jnp.asarray(rng.normal(size=(12, d)), DTYPE), jnp.asarray(rng.normal(size=12), DTYPE)
    base = oj.bayes_linreg(d, alpha=0.5, beta=4.0, forgetting=0.95)
    lrn = adhoc_bounds(base, burn_in=burn, level=0.9, floor=floor)
    s, t = lrn.init(residual_forgetting=0.8), adhoc_init(base, 0.8)
    opts = dict(learner=base, burn_in=burn, floor=floor)
    learn = jax.jit(partial(adhoc_learn_one, **opts))
    predict = jax.jit(partial(adhoc_predict_one, level=0.9, **opts))
    for i in range(12):
        p, q = lrn.predict(s, X[i]), predict(t, X[i])
        np.testing.assert_allclose([p.mean, p.var], [q.mean, q.var], rtol=tol(1e-12, 1e-5))
        s, t = lrn.learn(s, X[i], Y[i]), learn(t, X[i], Y[i])
    for u, v in zip(jax.tree.leaves(s), jax.tree.leaves(t)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-6))


def test_adhoc_nonfinite_item_is_counted_by_the_copies(rng):
    # AdHocState has no counter of its own: the copies' boundaries skip and count the item
    lrn = oj.bayesian_map_forgetting(2, adhoc=oj.AdHocOptions(burn_in=3))
    s = lrn.learn(lrn.init(), rng.normal(size=(6, 2)), rng.normal(size=6))
    t = jax.jit(lrn.learn)(s, jnp.asarray([np.nan, 1.0], DTYPE), jnp.asarray(0.5, DTYPE))
    assert int(t.n_seen) == 6 and int(t.base.n_skipped) == 1
    for u, v in zip(jax.tree.leaves(t._replace(base=s.base)), jax.tree.leaves(s)):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(t.base.mean, s.base.mean)


@pytest.mark.parametrize("k", [-1.0, 0.0, float("nan")])
def test_mle_factories_blame_k(k):
    """A bad ``k`` used to surface as an error about ``alpha = 1/k`` of the inner learner."""
    from onlinejax.learners.linear.thesis import bayesian_mle_forgetting, bayesian_mle_windowed

    with pytest.raises(ValueError, match=r"^k: "):
        bayesian_mle_forgetting(2, k=k)
    with pytest.raises(ValueError, match=r"^k: "):
        bayesian_mle_windowed(2, 16, k=k)

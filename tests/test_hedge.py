"""The Student-t mixture against scipy, and with_climatology against a float64 numpy replay of its weights."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, optimize, stats

from onlinejax import calibrated, with_climatology
from onlinejax.core.base import StudentTPrediction
from onlinejax.evaluation import progressive_validation
from onlinejax.wrappers.hedge import CLIMATOLOGY_MIN_DF
from onlinejax.learners.linear import bayes_linreg
from onlinejax.core.student_mixture import (StudentTMixture, bisect_floats, student_t_mixture_quantile,
                                           student_t_mixture_quantile_newton)

from conftest import DTYPE, X64, tol

CASES = [  # (weights, means, scales, dfs, y)
    ([0.3, 0.7], [0.0, 2.0], [1.0, 0.5], [4.0, 30.0], 1.3),
    ([0.9, 0.1], [5.0, -3.0], [0.1, 8.0], [1e7, 3.0], 20.0),
    ([0.5, 0.5], [0.0, 5.0], [1e-3, 1e3], [3.0, 3.0], 0.7),
    ([0.2, 0.8], [1.0, 1.5], [0.6, 0.3], [2.5, 1e7], -2.0),
    ([1.0, 0.0], [1.0, np.nan], [2.0, np.nan], [4.0, 3.0], 0.5),  # a component of weight 0 may hold NaN
]


def _ref_cdf(w, mu, s, nu):
    return lambda t: sum(wi * stats.t.cdf(t, n, m, si) for wi, m, si, n in zip(w, mu, s, nu) if wi > 0)


def _mixture(w, mu, s, nu):
    with np.errstate(divide="ignore"):
        return StudentTMixture(*(jnp.asarray(a, DTYPE) for a in (np.log(w), mu, s, nu)))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_student_t_mixture_scores_match_scipy(case):
    w, mu, s, nu, y = (np.asarray(a, np.float64) for a in CASES[case])
    p = _mixture(w, mu, s, nu)
    on = w > 0
    F = _ref_cdf(w, mu, s, nu)
    ref_lp = np.log(sum(wi * stats.t.pdf(y, n, m, si) for wi, m, si, n in zip(w[on], mu[on], s[on], nu[on])))
    np.testing.assert_allclose(float(p.log_prob(y)), ref_lp, rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(float(p.cdf(y)), F(y), rtol=tol(1e-10, 1e-5), atol=tol(1e-13, 1e-6))
    # CRPS = ∫ (F(t) - 1{t >= y})² dt, integrated by scipy in float64
    ref_crps = (integrate.quad(lambda t: F(t) ** 2, -np.inf, y, limit=400)[0]
                + integrate.quad(lambda t: (1 - F(t)) ** 2, y, np.inf, limit=400)[0])
    np.testing.assert_allclose(float(p.crps(y)), ref_crps, rtol=tol(1e-7, 2e-5))
    lo, hi = p.interval(0.9)
    np.testing.assert_allclose([F(float(lo)), F(float(hi))], [0.05, 0.95], atol=tol(1e-12, 2e-6))
    ref_mean = np.sum(w[on] * mu[on])
    ref_var = np.sum(w[on] * (s[on] ** 2 * nu[on] / (nu[on] - 2) + (mu[on] - ref_mean) ** 2))
    np.testing.assert_allclose(float(p.mean), ref_mean, rtol=tol(1e-12, 1e-6))
    np.testing.assert_allclose(float(p.var), ref_var, rtol=tol(1e-10, 1e-5))


def test_student_t_mixture_of_one_component_is_that_student_t():
    p = _mixture([1.0, 0.0], [2.0, 0.0], [1.5, 1.0], [4.0, 4.0])
    t = StudentTPrediction(*(jnp.asarray(v, DTYPE) for v in (2.0, 1.5, 4.0)))
    y = jnp.asarray([-3.0, 1.0, 2.5, 40.0], DTYPE)
    for f in ("log_prob", "cdf", "crps"):
        np.testing.assert_allclose(jax.jit(jax.vmap(getattr(p, f)))(y), getattr(t, f)(y), rtol=tol(1e-10, 2e-5),
                                   atol=tol(1e-12, 1e-6))
    np.testing.assert_allclose(jax.jit(lambda p: p.interval(0.95))(p), t.interval(0.95), rtol=tol(1e-9, 1e-5))
    # one probability or several in one bisection
    quantile = jax.jit(student_t_mixture_quantile, static_argnums=1)
    np.testing.assert_allclose(quantile(p, 0.975), t.interval(0.95)[1], rtol=tol(1e-9, 1e-5))
    np.testing.assert_allclose(quantile(p, (0.1, 0.5)), [2.0 - 1.5 * stats.t.ppf(0.9, 4.0), 2.0],
                               rtol=tol(1e-9, 1e-5), atol=tol(1e-12, 1e-5))
    with pytest.raises(ValueError, match="q"):
        student_t_mixture_quantile(p, 1.5)


def test_bisect_floats_ends_on_two_adjacent_floats_however_wide_the_bracket():
    """32 steps in float32 (64 in float64) of bisection in the floats' bit order leave the turn between two
    neighbouring floats, for brackets spanning 60 decades, reaching infinity or crossing zero; a NaN end gives NaN."""
    dt = np.dtype(DTYPE)
    cases = [(-1e30, 1e30, 0.3), (0.0, np.inf, np.sqrt(2.0)), (-5.0, -1e-30, -1e-20), (1e-37, 1.0, 3e-37),
             (-1.0, 1.0, 2e-30), (-1e30, 1e30, -7.5e12)]  # normal numbers: XLA:CPU flushes subnormals to 0
    for lo, hi, root in cases:
        root = dt.type(root)
        a, b = jax.jit(bisect_floats, static_argnums=0)(lambda t, r=root: t < r, jnp.asarray(lo, dt), jnp.asarray(hi, dt))
        a, b = dt.type(a), dt.type(b)
        assert a < root <= b and np.nextafter(a, dt.type(np.inf)) == b, (lo, hi, root, a, b)
    a, b = bisect_floats(lambda t: t < 1.0, jnp.asarray(np.nan, dt), jnp.asarray(2.0, dt))
    assert np.isnan(float(a)) and np.isnan(float(b))
    with pytest.raises(TypeError, match="float32 or float64"):
        bisect_floats(lambda t: t < 1.0, jnp.asarray(0.0, jnp.float16), jnp.asarray(2.0, jnp.float16))


def test_student_t_mixture_quantile_brackets_tails_heavier_than_cauchy():
    """Components with ν < 1: the bracket ``max(tan(π(p - ½)), 1/(2(1 - p)))^{1/ν}`` holds the quantile (the
    Cauchy bound's power alone does not: ``t_{0.5}(0.975)`` is 1,275, ``12.7²`` is 162)."""
    quantile = jax.jit(student_t_mixture_quantile, static_argnums=1)
    for nu in (0.5, 0.8):
        p = _mixture([1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [nu, 4.0])
        np.testing.assert_allclose(quantile(p, (0.025, 0.975)), stats.t.ppf([0.025, 0.975], nu), rtol=tol(1e-9, 1e-4))
    p = _mixture([0.5, 0.5], [0.0, 3.0], [1.0, 2.0], [0.5, 5.0])
    q = np.asarray(quantile(p, (0.05, 0.99)), np.float64)
    F = lambda t: 0.5 * stats.t.cdf(t, 0.5) + 0.5 * stats.t.cdf(t, 5.0, 3.0, 2.0)  # noqa: E731
    np.testing.assert_allclose([F(q[0]), F(q[1])], [0.05, 0.99], atol=tol(1e-12, 1e-5))


def test_newton_quantiles_of_a_run_mixture_equal_scipys():
    """Safeguarded Newton steps from the heaviest component: on mixtures like a change-point run mixture (one run
    dominant, the others near it, a broad component of weight 10⁻³ at the prior) 8 steps reach the quantile
    scipy's root finder gives; on a bimodal mixture the result stays inside the bisection's bracket and is finite."""
    rng = np.random.default_rng(11)
    newton = jax.jit(student_t_mixture_quantile_newton, static_argnums=(1, 2))
    for _ in range(5):
        m = 12
        w = np.concatenate([rng.dirichlet(np.full(m, 0.3)) * 0.999, [0.001]])
        loc = np.concatenate([rng.normal(0.0, 0.3, m), [0.0]])
        sc = np.concatenate([rng.uniform(0.5, 2.0, m), [10.0]])
        df = np.concatenate([rng.uniform(3.0, 30.0, m), [4.0]])
        p = _mixture(w, loc, sc, df)
        F = lambda t: sum(wi * stats.t.cdf(t, d, mu, s) for wi, mu, s, d in zip(w, loc, sc, df))  # noqa: E731
        for q in (0.025, 0.975):
            ref = optimize.brentq(lambda t: F(t) - q, -200.0, 200.0, xtol=1e-13)
            np.testing.assert_allclose(float(newton(p, q, 8)), ref, rtol=tol(1e-9, 1e-4))
    p = _mixture([0.5, 0.5], [-5.0, 5.0], [0.1, 0.1], [10.0, 10.0])
    both = np.asarray(newton(p, (0.3, 0.7), 8))
    assert np.all(np.isfinite(both)) and np.all(np.abs(both) < 10.0)
    with pytest.raises(ValueError, match="steps"):
        student_t_mixture_quantile_newton(p, 0.5, 0)


def test_student_t_mixture_crps_is_infinite_without_a_mean():
    assert np.isinf(float(_mixture([0.5, 0.5], [0.0, 1.0], [1.0, 1.0], [1.0, 4.0]).crps(0.3)))
    assert np.isfinite(float(_mixture([1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [4.0, 1.0]).crps(0.3)))


def _replay_weights(inner_preds, Y, keep_mean=False, prior=0.5):
    """float64 numpy replay of the hedge (module doc of :mod:`onlinejax.wrappers.hedge`): the mixture's log density and the climatology's weight at each item."""
    n = len(Y)
    lw = np.log([1.0 - prior, prior])
    k, out_lp, out_w = 0, [], []
    for i in range(n):
        m, sc, nu = (float(a[i]) for a in inner_preds)
        l1 = stats.t.logpdf(Y[i], nu, m, sc)
        if i >= 2:
            s, mc = Y[:i].std(ddof=1) * np.sqrt(1 + 1 / i), Y[:i].mean()
            if keep_mean:  # the climatology's spread around the learner's mean
                s, mc = np.sqrt(s * s + (m - mc) ** 2), m
            l2 = stats.t.logpdf(Y[i], max(i - 1, CLIMATOLOGY_MIN_DF), mc, s)
            out_lp.append(np.logaddexp(lw[0] + l1, lw[1] + l2))
            out_w.append(np.exp(lw[1]))
            post = lw + [l1, l2]
            post -= np.logaddexp(*post)
            a = 1.0 / (k + 1)
            with np.errstate(divide="ignore"):  # a = 1 at the first item: the prior again
                lw = np.logaddexp(np.log1p(-a) + post, np.log(a * np.array([1.0 - prior, prior])))
            k += 1
        else:
            out_lp.append(l1)
            out_w.append(0.0)
    return np.array(out_lp), np.array(out_w)


def _stream(seed, n, signal=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    Y = 50.0 + signal * X @ np.array([2.0, -1.0]) + rng.normal(size=n)
    return X, Y


@pytest.mark.float32_only
@pytest.mark.parametrize("keep_mean,prior", [(False, 0.5), (True, 0.5), (False, 0.1)])
def test_with_climatology_mixes_by_bayes_weights_with_a_one_over_t_share(keep_mean, prior):
    X, Y = _stream(3, 60)
    Xd, Yd = jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)
    inner = calibrated(bayes_linreg(2))
    pin = progressive_validation(inner, inner.init(), Xd, Yd).predictions
    hedged = with_climatology(inner, keep_mean=keep_mean, climatology_prior=prior)
    p = progressive_validation(hedged, hedged.init(), Xd, Yd).predictions
    assert isinstance(p, StudentTMixture)
    # the learner's own component is its prediction: the wrapper does not change what it learns
    for a, b in ((p.means[:, 0], pin.mean), (p.scales[:, 0], pin.scale), (p.dfs[:, 0], pin.df)):
        np.testing.assert_allclose(a, b, rtol=tol(1e-12, 1e-5))
    if keep_mean:  # the prediction's mean is the learner's: its MSE does not change
        np.testing.assert_allclose(np.asarray(p.mean), np.asarray(pin.mean), rtol=tol(1e-12, 1e-6))
    ref_lp, ref_w = _replay_weights((pin.mean, pin.scale, pin.df), np.asarray(Yd, np.float64), keep_mean, prior)
    np.testing.assert_allclose(np.asarray(p.log_prob(Yd)), ref_lp, rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(np.asarray(p.weights[:, 1]), ref_w, rtol=tol(1e-8, 1e-3), atol=tol(1e-12, 1e-6))
    assert np.all(np.asarray(p.weights[:2, 1]) == 0.0)  # the climatology joins with two targets


@pytest.mark.float32_only
def test_with_climatology_falls_back_to_the_climatology_on_a_series_without_signal():
    """A learner given noise features scores within a few nats in all of the climatology; with signal the learner
    keeps nearly all the weight."""
    X, Y = _stream(8, 200, signal=0.0)
    X = X * 30.0  # large, useless inputs: an overfitting learner
    lrn = with_climatology(calibrated(bayes_linreg(2, alpha=1e-6)))
    p = progressive_validation(lrn, lrn.init(), jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)).predictions
    clim_lp = np.array([stats.t.logpdf(Y[i], i - 1, Y[:i].mean(), Y[:i].std(ddof=1) * np.sqrt(1 + 1 / i))
                        for i in range(2, 200)])
    hedged_lp = np.asarray(p.log_prob(jnp.asarray(Y, DTYPE)), np.float64)[2:]
    assert hedged_lp.sum() > clim_lp.sum() - np.log(2) - 0.5 * np.log(200) - 1.0
    X, Y = _stream(9, 200)
    p = progressive_validation(lrn, lrn.init(), jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)).predictions
    assert float(p.weights[-1, 1]) < 0.02


@pytest.mark.float32_only
def test_with_climatology_learns_like_its_learner_under_jit_vmap_and_update():
    X, Y = _stream(4, 40)
    Xd, Yd = jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)
    lrn = with_climatology(calibrated(bayes_linreg(2)))
    s_step = lrn.init()
    for i in range(40):
        s_step, pred = lrn.step(s_step, Xd[i], Yd[i])
    s_upd = lrn.init()
    for i in range(40):
        s_upd = lrn.update(s_upd, Xd[i], Yd[i], lrn.predict(s_upd, Xd[i]))
    for a, b in zip(jax.tree_util.tree_leaves(s_step), jax.tree_util.tree_leaves(s_upd)):
        np.testing.assert_allclose(a, b, rtol=tol(1e-12, 1e-5))
    batch = jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions.mean)(
        jnp.stack([Xd, Xd[::-1]]), jnp.stack([Yd, Yd[::-1]]))
    assert batch.shape == (2, 40) and np.all(np.isfinite(batch))


def test_with_climatology_skips_non_finite_items_and_refuses_other_learners():
    X, Y = _stream(5, 10)
    lrn = with_climatology(calibrated(bayes_linreg(2)))
    s = lrn.learn(lrn.init(), jnp.asarray(X[:5], DTYPE), jnp.asarray(Y[:5], DTYPE))
    s2 = jax.jit(lrn.learn)(s, jnp.asarray(X[5], DTYPE), jnp.asarray(np.nan, DTYPE))  # inside jit: skipped
    np.testing.assert_array_equal(s2.log_weights, s.log_weights)
    assert float(s2.clim.n) == float(s.clim.n)
    with pytest.raises(TypeError, match="learner"):
        with_climatology("not a learner")
    with pytest.raises(TypeError, match="keep_mean"):
        with_climatology(calibrated(bayes_linreg(2)), keep_mean="yes")
    for bad in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="climatology_prior"):
            with_climatology(calibrated(bayes_linreg(2)), climatology_prior=bad)
    gauss = with_climatology(bayes_linreg(2))  # a Gaussian prediction is mixed as a t of 1/eps degrees of freedom
    st, p = gauss.step(gauss.init(), jnp.asarray(X[0], DTYPE), jnp.asarray(Y[0], DTYPE))
    assert isinstance(p, StudentTMixture) and np.isfinite(float(p.log_prob(Y[0])))


@pytest.mark.float32_only
def test_run_grid_keeps_the_hedged_learners_own_moments_for_the_replay():
    """``GridResult.predictions``: a hedged row keeps the mixture's moments and its learner's (the replay mixes
    those); an unhedged row keeps its own twice."""
    from onlinejax.data import thesis_grid
    from onlinejax.runner import run_grid
    from onlinejax.wrappers.hedge import HedgedPrediction
    from onlinejax.core.registry import GridLearner

    grp = thesis_grid(jax.random.key(2), ["SYNTH_ND_NCD_60_2_10_0_11"])[0]
    hedged = GridLearner("hedged", "linear", lambda d: with_climatology(bayes_linreg(d), keep_mean=True))
    plain = GridLearner("plain", "linear", lambda d: bayes_linreg(d))
    res = run_grid([hedged, plain], [grp], keep_predictions=True, progress=False)
    s = grp.names[0]
    lrn = hedged.make(2)
    p = progressive_validation(lrn, lrn.init(), jnp.asarray(grp.X[0], DTYPE), jnp.asarray(grp.Y[0], DTYPE)).predictions
    assert isinstance(p, HedgedPrediction)
    m, v, _, m_in, v_in = res.predictions[("hedged", s)]
    np.testing.assert_allclose(v, p.var, rtol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(m_in, p.learner.mean, rtol=tol(1e-9, 1e-4), atol=tol(1e-12, 1e-5))
    # a Gaussian learner inside: its variance, not the mixture's
    np.testing.assert_allclose(v_in, p.learner.var, rtol=tol(1e-9, 1e-4))
    assert np.any(np.abs(v / v_in - 1.0) > 0.01)
    m, v, _, m_in, v_in = res.predictions[("plain", s)]
    np.testing.assert_array_equal(m, m_in)
    np.testing.assert_array_equal(v, v_in)

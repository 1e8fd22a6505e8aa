"""The combination learner against float64 numpy recomputations and closed forms."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, optimize, stats

from onlinejax.wrappers.combination import (MixturePrediction, bma, combine, ewa_squared_error, fixed_share, mean_correction,
                                            mixture_crps, mixture_prediction,
                                            mixture_quantile, mixture_quantile_newton, replay, stacking)
from onlinejax.core.base import learnable
from onlinejax.evaluation import delayed_progressive_validation, progressive_validation
from onlinejax.learners.kernel_regression import kernel_regression
import optax

from onlinejax.evaluation.delayed import schedule_from_delays
from onlinejax.learners.linear import bayes_linreg, sgd_linreg

from conftest import DTYPE, X64, tol

pytestmark = pytest.mark.float32_only  # the combination's plumbing; float64 runs it through the pinned rows


def _stream(n=300, d=2, seed=0, drift=True):
    r = np.random.default_rng(seed)
    X = r.uniform(-1, 1, (n, d))
    w1, w2 = r.normal(size=d), r.normal(size=d)
    f = np.where(np.arange(n) < n // 2, X @ w1, np.sin(3 * X[:, 0]) + X @ w2) if drift else X @ w1
    return X.astype(DTYPE), (f + 0.1 * r.normal(size=n)).astype(DTYPE)


def _members(d=2):
    return (bayes_linreg(d, alpha=1.0, beta=100.0),
            bayes_linreg(d, alpha=1.0, beta=100.0, forgetting=0.95),
            kernel_regression(d, 16))


def _record(s):
    return s.log_weights, s.last_log_density


def _gauss_logpdf(y, m, v):
    return -0.5 * (np.log(2 * np.pi * v) + (y - m) ** 2 / v)


@pytest.mark.parametrize("rule", [bma(), bma(0.9), fixed_share(0.05), stacking("crps"), stacking("log"),
                                  ewa_squared_error()],
                         ids=["bma", "bma0.9", "share", "stack-crps", "stack-log", "ewa-se"])
def test_single_member_is_that_member_exactly(rule):
    X, Y = _stream()
    m = kernel_regression(2, 16)
    c = combine([m], rule)
    ref = progressive_validation(m, m.init(), X, Y).predictions
    got = progressive_validation(c, c.init(), X, Y).predictions
    np.testing.assert_array_equal(np.asarray(got.mean), np.asarray(ref.mean))
    np.testing.assert_array_equal(np.asarray(got.var), np.asarray(ref.var))
    lo, hi = got.interval(0.9, exact=True)
    rlo, rhi = ref.interval(0.9)
    np.testing.assert_allclose(np.asarray(lo), np.asarray(rlo), rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(np.asarray(hi), np.asarray(rhi), rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))


def _members_alone(members, X, Y):
    """Each member run on its own: float64 log predictive densities [n, M]."""
    cols = []
    for m in members:
        p = progressive_validation(m, m.init(), X, Y).predictions
        cols.append(_gauss_logpdf(np.asarray(Y, np.float64), np.asarray(p.mean, np.float64),
                                  np.asarray(p.var, np.float64)))
    return np.stack(cols, 1)


def test_bma_without_forgetting_is_the_posterior_model_probability():
    X, Y = _stream(400)
    # members that never abstain (kernel regression does, on its first item), so no convention enters
    ms = (bayes_linreg(2, alpha=1.0, beta=100.0), bayes_linreg(2, alpha=1.0, beta=100.0, forgetting=0.95),
          sgd_linreg(2, optax.sgd(0.05)))
    c = combine(ms, bma(1.0))
    res = progressive_validation(c, c.init(), X, Y, record=_record)
    ell = _members_alone(ms, X, Y)
    # p(m | y_1..t) ∝ Π p_m(y_s | y_<s): members run alone, so this is independent of the combination
    log_post = np.cumsum(ell, 0)
    post = np.exp(log_post - log_post.max(1, keepdims=True))
    post /= post.sum(1, keepdims=True)
    w = np.exp(np.asarray(res.records[0], np.float64))
    np.testing.assert_allclose(w, post, atol=tol(1e-9, 2e-3))
    np.testing.assert_allclose(np.asarray(res.records[1], np.float64), ell, rtol=tol(1e-9, 1e-3), atol=tol(1e-9, 1e-3))
    # the posterior has chosen decisively on this stream, which makes the check informative
    assert w[-1].max() > 0.99


@pytest.mark.parametrize("which", ["bma", "share"])
def test_weights_equal_numpy_recomputation_from_stored_log_densities(which):
    X, Y = _stream(400, seed=3)
    rule, param = (bma(0.97), 0.97) if which == "bma" else (fixed_share(0.02), 0.02)
    c = combine(_members(), rule, )
    res = progressive_validation(c, c.init(prior=[0.5, 0.3, 0.2]), X, Y, record=_record)
    ell = np.asarray(res.records[1], np.float64)
    got = np.exp(np.asarray(res.records[0], np.float64))
    lw = np.log(np.array([0.5, 0.3, 0.2]))
    S = lw.copy()
    want = []
    for t in range(len(Y)):
        if which == "bma":
            S = param * S + ell[t]
            lw = S - np.logaddexp.reduce(S)
        else:
            v = lw + ell[t]
            v = v - np.logaddexp.reduce(v)
            lw = np.logaddexp(np.log1p(-param) + v, np.log(param / 3))
        want.append(np.exp(lw))
    np.testing.assert_allclose(got, np.array(want), atol=tol(1e-10, 1e-5))
    np.testing.assert_allclose(got.sum(1), 1.0, atol=tol(1e-12, 1e-6))
    # the weights moved (the test would pass trivially otherwise)
    assert np.ptp(got[:, 0]) > 0.3


def test_mixture_moments_quantiles_density_against_scipy():
    r = np.random.default_rng(0)
    w = np.array([0.2, 0.5, 0.3])
    mu = np.array([-1.0, 0.5, 3.0])
    var = np.array([0.3, 1.0, 0.1])
    p = mixture_prediction(jnp.log(jnp.asarray(w, DTYPE)), jnp.asarray(mu, DTYPE), jnp.asarray(var, DTYPE))
    mean = w @ mu
    np.testing.assert_allclose(float(p.mean), mean, rtol=tol(1e-12, 1e-6))
    np.testing.assert_allclose(float(p.var), w @ (var + mu ** 2) - mean ** 2, rtol=tol(1e-12, 1e-5))
    cdf = lambda t: w @ stats.norm.cdf(t, mu, np.sqrt(var))
    for q in (0.025, 0.3, 0.5, 0.975):
        ref = optimize.brentq(lambda t: cdf(t) - q, -20, 20, xtol=1e-14)
        np.testing.assert_allclose(float(mixture_quantile(p, q)), ref, atol=tol(1e-10, 1e-5))
    lo, hi = p.interval(0.95, exact=True)
    np.testing.assert_allclose(cdf(float(hi)) - cdf(float(lo)), 0.95, atol=tol(1e-10, 1e-5))
    for y in r.normal(size=4) * 2:
        ref = np.log(w @ stats.norm.pdf(y, mu, np.sqrt(var)))
        np.testing.assert_allclose(float(p.log_prob(y)), ref, rtol=tol(1e-12, 1e-5))


def test_mixture_crps_equals_the_integral_definition():
    w = np.array([0.6, 0.4])
    mu = np.array([0.0, 2.0])
    var = np.array([1.0, 0.25])
    cdf = lambda t: w @ stats.norm.cdf(t, mu, np.sqrt(var))
    for y in (-0.5, 1.0, 3.0):
        ref = (integrate.quad(lambda t: cdf(t) ** 2, -30, y, limit=200)[0]
               + integrate.quad(lambda t: (1 - cdf(t)) ** 2, y, 30, limit=200)[0])
        got = mixture_crps(*(jnp.asarray(a, DTYPE) for a in (w, mu, var)), jnp.asarray(y, DTYPE))
        np.testing.assert_allclose(float(got), ref, rtol=tol(1e-9, 1e-5))


def test_broken_member_gets_no_weight_and_no_nan():
    lw = jnp.log(jnp.asarray([0.5, 0.5], DTYPE))
    p = mixture_prediction(lw, jnp.asarray([1.0, jnp.nan], DTYPE), jnp.asarray([2.0, 1.0], DTYPE))
    assert float(p.mean) == 1.0 and float(p.var) == 2.0
    p = mixture_prediction(lw, jnp.asarray([jnp.nan, jnp.nan], DTYPE), jnp.asarray([1.0, 1.0], DTYPE))
    assert np.isnan(float(p.mean))  # all broken: NaN, not a silent number
    # a broken member next to an abstaining one and an informative one: scores and weights stay finite
    from onlinejax.wrappers.combination import mix_init, mix_step

    cap = float(np.sqrt(np.finfo(np.dtype(DTYPE)).max))
    for rule in (fixed_share(0.05), ewa_squared_error()):
        ms = mix_init(rule, 3, DTYPE)
        for _ in range(3):
            ms, p = mix_step(rule, 0.9, ms, jnp.asarray([1.0, jnp.nan, 0.0], DTYPE),
                             jnp.asarray([1.0, 1.0, cap], DTYPE), jnp.asarray(1.5, DTYPE))
            assert np.all(np.isfinite(np.asarray(ms.log_weights))) and np.isfinite(float(p.mean))
            assert np.isfinite(float(p.log_prob(1.5)))
        if rule.name == "ewa_se":
            # the abstainer is charged the informative member's error, so it keeps that member's
            # weight; the broken one is charged 4x it on every item: log(w1/w0) = -eta N (4-1)/2
            w = np.exp(np.asarray(ms.log_weights, np.float64))
            np.testing.assert_allclose(w[2], w[0], rtol=1e-5)
            n_eff = 1 + 0.95 + 0.95 ** 2
            np.testing.assert_allclose(w[1] / w[0], np.exp(-1.5 * n_eff), rtol=1e-4)


def test_an_abstaining_member_is_left_out_and_keeps_its_relative_weight():
    cap = float(np.sqrt(np.finfo(np.dtype(DTYPE)).max))
    lw = jnp.log(jnp.asarray([0.5, 0.25, 0.25], DTYPE))
    p = mixture_prediction(lw, jnp.asarray([1.0, 3.0, 0.0], DTYPE), jnp.asarray([1.0, 1.0, cap], DTYPE))
    np.testing.assert_allclose(float(p.mean), (0.5 * 1 + 0.25 * 3) / 0.75, rtol=1e-6)
    assert float(p.var) < 10
    from onlinejax.wrappers.combination import mix_init, mix_step

    ms = mix_init(bma(1.0), 3, DTYPE)
    y = jnp.asarray(2.0, DTYPE)
    ms2, _ = mix_step(bma(1.0), 0.9, ms, jnp.asarray([1.0, 3.0, 0.0], DTYPE), jnp.asarray([1.0, 1.0, cap], DTYPE), y)
    w = np.exp(np.asarray(ms2.log_weights, np.float64))
    # members 0 and 1 tie on y = 2; the abstaining member is scored like their mixture, so all stay equal
    np.testing.assert_allclose(w, [1 / 3] * 3, rtol=1e-5)
    assert float(ms2.var_scale[2]) == 1.0  # no recalibration from an abstention


def test_float32_weights_stay_finite_and_normalised_with_extreme_scores():
    # one member is absurdly overconfident and wrong: log densities of -1e6 and below
    X, Y = _stream(500)
    Y = Y * 1000
    good = bayes_linreg(2, alpha=1e-6, beta=1e-4)
    bad = bayes_linreg(2, alpha=1e6, beta=1e8)
    for rule in (bma(1.0), bma(0.5), fixed_share(0.0), fixed_share(0.3), stacking("log"), stacking("crps"),
                 ewa_squared_error(1.0, 5.0), ewa_squared_error(0.9)):
        c = combine([good, bad], rule)
        res = progressive_validation(c, c.init(), X, Y, record=_record)
        w = np.exp(np.asarray(res.records[0], np.float64))
        assert np.all(np.isfinite(np.asarray(res.records[0]))), rule.name
        np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-5)
        if rule.name == "ewa_se":
            # the two members' means are identical (same alpha/beta ratio); ewa_se weighs means only
            np.testing.assert_allclose(w, 0.5, atol=1e-3)
        else:
            assert w[-1, 0] > 0.5, rule.name
        assert np.all(np.isfinite(np.asarray(res.predictions.mean)))


def test_stacking_moves_weight_to_the_better_member_and_stays_on_the_simplex():
    X, Y = _stream(600, drift=False)
    ms = (bayes_linreg(2, alpha=1.0, beta=100.0), sgd_linreg(2, optax.sgd(1e-4)))
    for score in ("crps", "log"):
        c = combine(ms, stacking(score))
        res = progressive_validation(c, c.init(), X, Y, record=_record)
        w = np.exp(np.asarray(res.records[0], np.float64))
        assert np.all(w >= 0) and np.allclose(w.sum(1), 1.0, atol=1e-5)
        assert w[-1, 0] > 0.9, (score, w[-1])


def _simplex_projection(v):
    """Euclidean projection on the probability simplex (Duchi et al. 2008, fig. 1), float64."""
    u = np.sort(v)[::-1]
    excess = np.cumsum(u) - 1.0
    rho = np.nonzero(u - excess / np.arange(1, len(v) + 1) > 0)[0][-1]
    return np.maximum(v - excess[rho] / (rho + 1), 0.0)


def _stacking_gradient(score, w, mu, var, y):
    """Closed-form gradient in ``w`` of the mixture's CRPS (``a - B w``) or negative log density (``-p / w·p``)."""
    if score == "log":
        p = stats.norm.pdf(y, mu, np.sqrt(var))
        return -p / (w @ p)

    def abs_moment(u, s):  # E|u + s Z|, the folded-normal mean
        return 2 * s * stats.norm.pdf(u / s) + u * (2 * stats.norm.cdf(u / s) - 1)

    a = abs_moment(y - mu, np.sqrt(var))
    B = abs_moment(mu[:, None] - mu[None, :], np.sqrt(var[:, None] + var[None, :]))
    return a - B @ w


def _stacking_numpy(score, steps, mu, var, y, lr=0.02, b1=0.9, b2=0.999, eps=1e-8):
    """Float64 recomputation of ``replay(stacking(score, steps=steps))``'s weights: Adam(lr) then projection."""
    n, M = mu.shape
    w, m, v, t, out = np.full(M, 1.0 / M), np.zeros(M), np.zeros(M), 0, []
    for i in range(n):
        for _ in range(steps):
            g = _stacking_gradient(score, w, mu[i], var[i], y[i])
            t += 1
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            w = _simplex_projection(w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps))
        out.append(w)
    return np.array(out)


@pytest.mark.parametrize("score,steps", [("crps", 1), ("log", 1), ("crps", 2), ("log", 2)])
def test_stacking_weights_equal_a_float64_projected_adam_recomputation(score, steps):
    """Every item's weights: Adam(0.02) on the score's closed-form gradient, each step projected on the simplex.

    Two biased members (offsets of opposite sign) and a noisy unbiased one keep the CRPS weights inside the
    simplex; the log score with two steps per item drives a member's weight to 0 (the projection clips) and back.
    """
    r = np.random.default_rng(0)
    n = 300
    s = np.sin(np.arange(n) / 10)
    y = s + 0.3 * r.normal(size=n)
    mu = np.stack([s + 0.5 + 0.1 * r.normal(size=n), s - 0.5 + 0.1 * r.normal(size=n), s + 0.4 * r.normal(size=n)], 1)
    var = np.broadcast_to([0.2, 0.2, 0.5], (n, 3))
    mu, var, y = (np.asarray(np.asarray(a, DTYPE), np.float64) for a in (mu, var, y))  # the library's inputs
    _, log_w = replay(stacking(score, steps=steps), jnp.asarray(mu, DTYPE), jnp.asarray(var, DTYPE),
                      jnp.asarray(y, DTYPE), record=lambda ms: ms.log_weights)
    got = np.exp(np.asarray(log_w, np.float64))
    want = _stacking_numpy(score, steps, mu, var, y)
    # CRPS leaves a zero-weight member out of its gradient (mixture_crps), a convention not recomputed here
    assert want.min() > 0.05 if score == "crps" else (want.min() == 0.0) == (steps == 2)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol(1e-12, 2e-5))


def test_members_of_different_types_vmap_over_streams_like_single_runs():
    Xs, Ys = zip(*(_stream(200, seed=s) for s in range(3)))
    Xs, Ys = np.stack(Xs), np.stack(Ys)
    c = combine(_members(), bma(0.95))
    run = jax.jit(jax.vmap(lambda X, Y: progressive_validation(c, c.init(), X, Y).predictions))
    got = run(Xs, Ys)
    for s in range(3):
        ref = progressive_validation(c, c.init(), Xs[s], Ys[s]).predictions
        np.testing.assert_allclose(np.asarray(got.mean[s]), np.asarray(ref.mean), rtol=tol(1e-10, 1e-4),
                                   atol=tol(1e-10, 1e-4))


def test_python_loop_steps_equal_scan_and_compile_once():
    X, Y = _stream(40)
    c = combine(_members(), fixed_share(0.01))
    s = c.init()
    means = []
    for i in range(len(Y)):
        s, p = c.step(s, X[i], Y[i])
        means.append(float(p.mean))
    ref = progressive_validation(c, c.init(), X, Y)
    np.testing.assert_allclose(means, np.asarray(ref.predictions.mean), rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    # mini-batch step is the sequential one
    s2, pb = c.step(c.init(), X, Y)
    np.testing.assert_allclose(np.asarray(pb.mean), means, rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    # a second stream through the same learner compiles nothing new
    with jax.log_compiles():
        import logging
        rec = []
        h = logging.Handler()
        h.emit = rec.append
        logging.getLogger("jax").addHandler(h)
        try:
            s3 = c.init()
            for i in range(5):
                s3, _ = c.step(s3, X[i] + 1, Y[i])
            c.predict(s3, X[0])
        finally:
            logging.getLogger("jax").removeHandler(h)
    assert not [r for r in rec if "Compiling" in r.getMessage() and "step" in r.getMessage()], rec


def test_non_finite_item_is_skipped():
    X, Y = _stream(30)
    c = combine(_members(), bma(0.9))
    s = c.learn(c.init(), X[:10], Y[:10])
    s2 = jax.jit(c.learn)(s, X[10], jnp.asarray(jnp.nan, DTYPE))
    assert int(s2.n_skipped) == 1 and int(s2.n_seen) == 10
    np.testing.assert_array_equal(np.asarray(s2.log_weights), np.asarray(s.log_weights))


def test_delayed_validation_accepts_a_mixture_prediction():
    X, Y = _stream(100)
    c = combine(_members(), bma(0.95))
    res = delayed_progressive_validation(c, c.init(), X, Y, schedule_from_delays(np.full(100, 5)))
    assert np.all(np.isfinite(np.asarray(res.predictions.mean)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one"):
        combine([])
    with pytest.raises(ValueError, match="n_features"):
        combine([bayes_linreg(2), bayes_linreg(3)])
    with pytest.raises(ValueError, match="forgetting"):
        bma(1.5)
    with pytest.raises(ValueError, match="rate"):
        fixed_share(1.0)
    with pytest.raises(ValueError, match="score"):
        stacking("mse")
    with pytest.raises(ValueError, match="eta"):
        ewa_squared_error(eta=0.0)
    with pytest.raises(ValueError, match="forgetting"):
        ewa_squared_error(forgetting=1.5)
    with pytest.raises(TypeError, match="WeightRule"):
        combine([bayes_linreg(2)], "bma")
    c = combine(_members(), fixed_share())
    with pytest.raises(ValueError, match="prior"):
        c.init(prior=[1.0, 2.0])
    with pytest.raises(ValueError, match="prior"):
        c.init(prior=[-1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="rate"):
        c.init(rate=1.0)
    with pytest.raises(ValueError, match="forgetting"):
        combine(_members(), bma()).init(forgetting=0.0)
    with pytest.raises(ValueError, match="recalibrate"):
        combine(_members(), recalibrate=1.0)
    assert isinstance(c.predict(c.init(), np.zeros(2)), MixturePrediction)


def test_recalibrated_fixed_share_equals_numpy_from_members_run_alone():
    """Variance scales c_m, log densities and weights recomputed in float64 from the members' own predictions."""
    X, Y = _stream(300, seed=7)
    ms = _members()
    c = combine(ms, fixed_share(0.05), recalibrate=0.9)
    rec = lambda s: (s.log_weights, s.mix.var_scale)
    res = progressive_validation(c, c.init(), X, Y, record=rec)
    preds = [progressive_validation(m, m.init(), X, Y).predictions for m in ms]
    mu = np.stack([np.asarray(p.mean, np.float64) for p in preds], 1)
    v = np.stack([np.asarray(p.var, np.float64) for p in preds], 1)
    y = np.asarray(Y, np.float64)
    lw, cs, E = np.full(3, -np.log(3)), np.ones(3), np.full(3, np.inf)
    W, C, means = [], [], []
    cap = float(np.sqrt(np.finfo(np.dtype(DTYPE)).max))
    for t in range(len(y)):
        info = v[t] < cap  # kernel regression abstains (variance = cap) on its first item
        w = np.where(info, np.exp(lw), 0.0)
        w /= w.sum()
        means.append(w @ mu[t])
        vs = cs * v[t]
        vs = np.where(np.isfinite(E) & (E > 0), np.minimum(vs, 25.0 * E), vs)  # capped at 25 x own MSE
        vs = np.where(info, vs, v[t])
        ell = _gauss_logpdf(y[t], mu[t], vs)
        ell = np.where(info, ell, np.log(w @ np.exp(np.where(info, ell, -np.inf))))
        u = lw + ell
        u -= np.logaddexp.reduce(u)
        lw = np.logaddexp(np.log(0.95) + u, np.log(0.05 / 3))
        cs = np.where(info, 0.9 * cs + 0.1 * np.minimum((y[t] - mu[t]) ** 2 / v[t], 25.0 * cs), cs)
        E = np.where(np.isfinite(E), 0.9 * E + 0.1 * (y[t] - mu[t]) ** 2, (y[t] - mu[t]) ** 2)
        W.append(np.exp(lw))
        C.append(cs.copy())
    np.testing.assert_allclose(np.exp(np.asarray(res.records[0], np.float64)), W, atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(np.asarray(res.records[1], np.float64), C, rtol=tol(1e-9, 1e-3))
    np.testing.assert_allclose(np.asarray(res.predictions.mean, np.float64), means, rtol=tol(1e-9, 1e-4),
                               atol=tol(1e-9, 1e-4))
    assert np.ptp(np.asarray(C)[:, 0]) > 0.5  # the scales moved


def test_ewa_squared_error_equals_numpy_from_members_run_alone():
    """Weights and mixture means recomputed in float64 from the members' own predictions
    (members that never abstain, with a prior), and they follow the better member after the drift."""
    X, Y = _stream(400, seed=5)
    ms = (bayes_linreg(2, alpha=1.0, beta=100.0), bayes_linreg(2, alpha=1.0, beta=100.0, forgetting=0.9),
          sgd_linreg(2, optax.sgd(0.05)))
    prior = np.array([0.5, 0.3, 0.2])
    c = combine(ms, ewa_squared_error(0.95, 1.0), recalibrate=0.9)
    res = progressive_validation(c, c.init(prior=prior), X, Y, record=lambda s: s.log_weights)
    preds = [progressive_validation(m, m.init(), X, Y).predictions for m in ms]
    mu = np.stack([np.asarray(p.mean, np.float64) for p in preds], 1)
    y = np.asarray(Y, np.float64)
    L, N, lw = np.zeros(3), 0.0, np.log(prior)
    W, means = [], []
    for t in range(len(y)):
        means.append(np.exp(lw) @ mu[t])
        L = 0.95 * L + (y[t] - mu[t]) ** 2
        N = 0.95 * N + 1.0
        e = L / N
        z = np.log(prior) - N * (e - e.min()) / (2 * e.min())
        lw = z - np.logaddexp.reduce(z)
        W.append(np.exp(lw))
    got = np.exp(np.asarray(res.records, np.float64))
    np.testing.assert_allclose(got, W, atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(np.asarray(res.predictions.mean, np.float64), means, rtol=tol(1e-9, 1e-4),
                               atol=tol(1e-9, 1e-4))
    # after the drift at n/2 the member that never forgets is the worst (squared error 1.6 against
    # 0.29 and 0.64): its weight goes to ~0 and the forgetting member carries the combination
    assert got[-1, 0] < 0.01 and got[250:, 1].mean() > 0.5 and np.ptp(got[:, 0]) > 0.4, got[::50]


def test_recalibration_survives_a_member_with_erratic_variances():
    """A member whose stated variance collapses to ~0 now and then (as the ad-hoc bounds do) must not
    blow the mixture's intervals up: before the clip and the cap, one such item set its scale to
    ~1e10 and the 95 % interval to ~1e5 target std for hundreds of items."""
    r = np.random.default_rng(0)
    n = 600
    y = r.normal(size=n)
    mu = np.stack([np.zeros(n), y + 0.5 * r.normal(size=n)], 1)
    v2 = np.where(np.arange(n) % 40 == 0, 1e-12, 0.25)
    var = np.stack([np.ones(n), v2], 1)
    p = replay(ewa_squared_error(0.95, 1.0), jnp.asarray(mu, DTYPE), jnp.asarray(var, DTYPE), jnp.asarray(y, DTYPE),
               recalibrate=0.95)[0]
    lo, hi = (np.asarray(a, np.float64) for a in p.interval(0.95))
    width = (hi - lo)[100:]
    assert np.all(np.isfinite(width)) and np.max(width) < 15.0, np.max(width)
    cover = np.mean((y[100:] >= lo[100:]) & (y[100:] <= hi[100:]))
    assert 0.85 < cover <= 1.0, cover


@pytest.mark.parametrize("correct, after_spread, gap", [(None, False, False), (mean_correction(), False, False),
                                                        (mean_correction(), True, True)])
def test_replay_equals_the_combination_learner(correct, after_spread, gap):
    """Also with missing targets (items 50-59) and inputs (items 80-84), which leave the weights and scales as
    they are in both (``replay(learned=)``)."""
    X, Y = _stream(250, seed=2)
    if gap:
        Y = np.where((np.arange(len(Y)) >= 50) & (np.arange(len(Y)) < 60), np.nan, Y).astype(Y.dtype)
        X = np.array(X)
        X[80:85, 0] = np.nan
    ms = _members()
    rule = fixed_share(0.05)
    c = combine(ms, rule, recalibrate=0.95, correct=correct, after_spread=after_spread)
    res = progressive_validation(c, c.init(), X, Y)
    got = res.predictions
    preds = [progressive_validation(m, m.init(), X, Y).predictions for m in ms]
    means = jnp.stack([p.mean for p in preds], 1)
    vars = jnp.stack([p.var for p in preds], 1)
    ref = replay(rule, means, vars, Y, recalibrate=0.95, correct=correct, after_spread=after_spread,
                 learned=learnable(X, Y) if gap else None)[0]
    np.testing.assert_allclose(np.asarray(ref.mean), np.asarray(got.mean), rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(np.asarray(ref.var), np.asarray(got.var), rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    # predict (outside step) applies the same shift as step
    X2, Y2 = _stream(3, seed=9)
    p_pred = c.predict(res.state, X2[0])
    p_step = c.step(res.state, X2[0], Y2[0])[1]
    np.testing.assert_allclose(np.asarray(p_pred.mean), np.asarray(p_step.mean), rtol=tol(1e-12, 1e-5))
    with pytest.raises(ValueError, match="means, vars"):
        replay(rule, means[:, 0], vars, Y)


def test_metrics_score_a_mixture_exactly():
    """Coverage/width from exact quantiles, mixture log density and CRPS, against scipy in float64."""
    from onlinejax.evaluation import prequential
    from onlinejax.evaluation.metrics import score

    r = np.random.default_rng(3)
    n, M = 40, 3
    mu = r.normal(size=(n, M)) * 2
    var = r.uniform(0.1, 2.0, (n, M))
    var[:, 2] = 1e12  # a clueless member with a small weight: moment matching would give widths of 1e5
    w = np.array([0.6, 0.39, 0.01])
    y = r.normal(size=n)
    p = jax.vmap(lambda m, v: mixture_prediction(jnp.log(jnp.asarray(w, DTYPE)), m, v))(
        jnp.asarray(mu, DTYPE), jnp.asarray(var, DTYPE))
    got = score(prequential(0.9), jnp.asarray(y, DTYPE), p)
    cov, width, lpd, crps = [], [], [], []
    for t in range(n):
        sd = np.sqrt(var[t])
        cdf = lambda q: w @ stats.norm.cdf(q, mu[t], sd)
        lo = optimize.brentq(lambda q: cdf(q) - 0.05, -1e3, 1e3, xtol=1e-12)
        hi = optimize.brentq(lambda q: cdf(q) - 0.95, -1e3, 1e3, xtol=1e-12)
        cov.append(lo <= y[t] <= hi)
        width.append(hi - lo)
        lpd.append(np.log(w @ stats.norm.pdf(y[t], mu[t], sd)))
        crps.append(float(mixture_crps(*(jnp.asarray(a, jnp.float64 if X64 else DTYPE) for a in (w, mu[t], var[t])),
                                       y[t])))
    assert float(got["icr"]) == pytest.approx(np.mean(cov), abs=1e-6)
    assert float(got["aiw"]) == pytest.approx(np.mean(width), rel=tol(1e-8, 1e-4))
    assert float(got["mlpd"]) == pytest.approx(np.mean(lpd), rel=tol(1e-8, 1e-4))
    assert float(got["crps"]) == pytest.approx(np.mean(crps), rel=tol(1e-6, 1e-3))
    assert np.mean(width) < 20  # the exact interval ignores the 1% clueless member


def _mean_correction_numpy(mu, var, y, gamma, lam, tau, kappa):
    """Float64 recomputation of replay(ewa_squared_error(gamma), correct=mean_correction(lam, tau, kappa))."""
    n, M = mu.shape
    L, N, lw = np.zeros(M), 0.0, np.full(M, -np.log(M))
    G, b, S, C = np.zeros((M, M)), np.zeros(M), 0.0, 0.0
    out_mean, out_var, clipped = [], [], 0
    for t in range(n):
        w = np.exp(lw)
        m0 = w @ mu[t]
        z = mu[t] - m0
        v0 = w @ (var[t] + z ** 2)
        coef = np.linalg.solve(G + tau * (S / max(C, 1.0)) * np.eye(M), b) if C > 0 else np.zeros(M)
        shift = coef @ z
        lim = kappa * np.sqrt(v0)
        clipped += abs(shift) > lim
        out_mean.append(m0 + np.clip(shift, -lim, lim))
        out_var.append(v0)
        r = y[t] - m0
        G, b, S, C = lam * G + np.outer(z, z), lam * b + z * r, lam * S + z @ z / M, lam * C + 1.0
        L = gamma * L + (y[t] - mu[t]) ** 2
        N = gamma * N + 1.0
        e = L / N
        zz = -N * (e - e.min()) / (2 * e.min())
        lw = zz - np.logaddexp.reduce(zz)
    return np.array(out_mean), np.array(out_var), clipped


def _biased_members(n, seed=0):
    """Three members: two with opposite drifting biases (their average is nearly exact) and a noisy one."""
    r = np.random.default_rng(seed)
    y = np.sin(np.arange(n) / 20.0) + 0.1 * r.normal(size=n)
    bias = 0.5 + 0.3 * np.sin(np.arange(n) / 150.0)
    mu = np.stack([y + bias + 0.1 * r.normal(size=n), y - bias + 0.1 * r.normal(size=n), y + 0.4 * r.normal(size=n)], 1)
    var = np.tile([0.3, 0.3, 0.2], (n, 1))
    return mu, var, y


@pytest.mark.parametrize("kappa", [0.25, 100.0])
def test_mean_correction_equals_numpy(kappa):
    mu, var, y = _biased_members(500)
    corr = mean_correction(0.99, 100.0, kappa)
    p = replay(ewa_squared_error(0.98, 1.0), jnp.asarray(mu, DTYPE), jnp.asarray(var, DTYPE), jnp.asarray(y, DTYPE),
               correct=corr)[0]
    ref_m, ref_v, clipped = _mean_correction_numpy(mu, var, y, 0.98, 0.99, 100.0, kappa)
    np.testing.assert_allclose(np.asarray(p.mean, np.float64), ref_m, rtol=tol(1e-9, 2e-4), atol=tol(1e-9, 2e-4))
    np.testing.assert_allclose(np.asarray(p.var, np.float64), ref_v, rtol=tol(1e-9, 2e-4))
    if kappa < 1:
        assert clipped > 50, clipped  # the clip is exercised
    else:
        assert clipped == 0


def test_mean_correction_beats_every_member_where_their_errors_cancel():
    """Members biased in opposite directions: the rule's convex weights can only track the better of
    them; the correction learns the combination that cancels the biases."""
    mu, var, y = _biased_members(2000, seed=3)
    args = (jnp.asarray(mu, DTYPE), jnp.asarray(var, DTYPE), jnp.asarray(y, DTYPE))
    plain = np.asarray(replay(ewa_squared_error(0.98, 1.0), *args)[0].mean, np.float64)
    corr = np.asarray(replay(ewa_squared_error(0.98, 1.0), *args, correct=mean_correction(0.99, 100.0, 100.0))[0].mean,
                      np.float64)
    mse = lambda m: np.mean((m[200:] - y[200:]) ** 2)  # noqa: E731
    best_member = min(mse(mu[:, k]) for k in range(3))
    assert mse(corr) < 0.5 * min(best_member, mse(plain)), (mse(corr), best_member, mse(plain))


def test_mean_correction_leaves_a_single_member_and_bad_items_alone():
    mu, var, y = _biased_members(300)
    args = (jnp.asarray(mu[:, :1], DTYPE), jnp.asarray(var[:, :1], DTYPE), jnp.asarray(y, DTYPE))
    p = replay(ewa_squared_error(), *args, correct=mean_correction())[0]
    np.testing.assert_array_equal(np.asarray(p.mean), np.asarray(args[0][:, 0]))
    mu2 = mu.copy()
    mu2[100:110, 0] = np.nan  # a broken member: left out, and the correction stays finite
    y2 = y.copy()
    y2[150] = np.inf
    p = replay(ewa_squared_error(), jnp.asarray(mu2, DTYPE), jnp.asarray(var, DTYPE), jnp.asarray(y2, DTYPE),
               correct=mean_correction())[0]
    assert np.all(np.isfinite(np.asarray(p.mean))) and np.all(np.isfinite(np.asarray(p.var)))
    with pytest.raises(TypeError, match="correct"):
        combine(_members(), correct=(0.99, 100.0))
    with pytest.raises(ValueError, match="forgetting"):
        mean_correction(forgetting=1.5)
    with pytest.raises(ValueError, match="max_shift"):
        mean_correction(max_shift=0.0)


def test_mixture_crps_is_finite_with_point_masses_and_dropped_members():
    """A zero-variance member scores |y - μ| (not 0/0); a zero-weight member with infinite variance drops out."""
    from onlinejax.wrappers.combination import mixture_crps

    dt = jnp.zeros(()).dtype
    w = jnp.asarray([1.0, 0.0], dt)
    got = mixture_crps(w, jnp.asarray([1.0, 5.0], dt), jnp.asarray([0.0, jnp.inf], dt), jnp.asarray(3.5, dt))
    assert float(got) == pytest.approx(2.5)
    # two point masses: CRPS = Σ w_i|y - μ_i| - ½ Σ w_i w_j |μ_i - μ_j|
    got = mixture_crps(jnp.asarray([0.5, 0.5], dt), jnp.asarray([0.0, 2.0], dt), jnp.zeros(2, dt), jnp.asarray(1.5, dt))
    assert float(got) == pytest.approx(0.5 * 1.5 + 0.5 * 0.5 - 0.5 * 2 * 0.25 * 2.0)


def _np_mixture_crps_integral(w, mu, var, y):
    """float64 ∫ (F(t) - 1{t >= y})² dt of the mixture F, split at y and at the members' means."""
    sd = np.sqrt(var)
    F = lambda t: w @ stats.norm.cdf(t, mu, sd)  # noqa: E731
    lo, hi = min(mu.min() - 40 * sd.max(), y - 1.0), max(mu.max() + 40 * sd.max(), y + 1.0)
    pts = sorted(set([lo, *mu[(mu > lo) & (mu < y)], y]))
    below = sum(integrate.quad(lambda t: F(t) ** 2, a, b, limit=200, epsabs=1e-14)[0] for a, b in zip(pts, pts[1:]))
    pts = sorted(set([y, *mu[(mu > y) & (mu < hi)], hi]))
    above = sum(integrate.quad(lambda t: (1.0 - F(t)) ** 2, a, b, limit=200, epsabs=1e-14)[0]
                for a, b in zip(pts, pts[1:]))
    return below + above


def test_mixture_prediction_crps_equals_the_integral_over_leading_axes():
    """MixturePrediction.crps on a [2, 3] batch of 3-member mixtures (one member left out of some) against a
    float64 numerical integral of (F(t) - 1{t >= y})², item by item."""
    r = np.random.default_rng(11)
    mu = r.normal(size=(2, 3, 3)) * 2
    var = r.uniform(0.05, 3.0, (2, 3, 3))
    mu[0, 1, 2] = np.nan  # a broken member: weight 0, left out of the mixture and of its CRPS
    lw = np.log(r.dirichlet(np.ones(3), (2, 3)))
    y = r.normal(size=(2, 3)) * 2
    p = mixture_prediction(jnp.asarray(lw, DTYPE), jnp.asarray(mu, DTYPE), jnp.asarray(var, DTYPE))
    got = np.asarray(p.crps(jnp.asarray(y, DTYPE)), np.float64)
    assert got.shape == (2, 3)
    w = np.exp(np.asarray(p.log_weights, np.float64))
    mu, var, y = (np.asarray(jnp.asarray(a, DTYPE), np.float64) for a in (mu, var, y))  # the inputs as rounded
    for i in np.ndindex(2, 3):
        on = w[i] > 0
        ref = _np_mixture_crps_integral(w[i][on], mu[i][on], var[i][on], y[i])
        np.testing.assert_allclose(got[i], ref, rtol=tol(1e-9, 2e-5), atol=tol(1e-12, 1e-6))
    # y broadcasts against the mixture's leading axes; one mixture is mixture_crps itself
    np.testing.assert_array_equal(np.asarray(p.crps(float(y[1, 0]))[1, 0]), got.astype(DTYPE)[1, 0])
    one = jax.tree_util.tree_map(lambda a: a[1, 2], p)
    np.testing.assert_array_equal(np.asarray(one.crps(y[1, 2])),
                                  np.asarray(mixture_crps(one.weights, one.means, one.vars, jnp.asarray(y[1, 2], DTYPE))))


def test_newton_quantiles_of_a_member_mixture_equal_scipys():
    """Eight safeguarded Newton steps from the heaviest member reach scipy's root of the mixture CDF on mixtures
    like a combination's (members near one another, one broad member of small weight); a bimodal mixture stays
    finite inside the members' quantiles; a member of weight 0 holding NaN is left out."""
    r = np.random.default_rng(3)
    newton = jax.jit(mixture_quantile_newton, static_argnums=(1, 2))
    for _ in range(5):
        w = np.concatenate([r.dirichlet(np.full(4, 1.0)) * 0.99, [0.01]])
        mu = np.concatenate([r.normal(0.0, 0.3, 4), [0.5]])
        var = np.concatenate([r.uniform(0.2, 3.0, 4), [100.0]])
        p = mixture_prediction(jnp.log(jnp.asarray(w, DTYPE)), jnp.asarray(mu, DTYPE), jnp.asarray(var, DTYPE))
        cdf = lambda t: w @ stats.norm.cdf(t, mu, np.sqrt(var))  # noqa: E731
        got = np.asarray(newton(p, (0.025, 0.975), 8))
        for g, q in zip(got, (0.025, 0.975)):
            ref = optimize.brentq(lambda t: cdf(t) - q, -100, 100, xtol=1e-14)
            np.testing.assert_allclose(g, ref, rtol=tol(1e-9, 1e-4))
        lo, hi = p.interval_newton(0.95)
        np.testing.assert_allclose([float(lo), float(hi)], got, rtol=tol(1e-12, 1e-6))
    p = mixture_prediction(jnp.log(jnp.asarray([0.5, 0.5, 0.0], DTYPE)), jnp.asarray([-5.0, 5.0, jnp.nan], DTYPE),
                           jnp.asarray([0.01, 0.01, 1.0], DTYPE))
    both = np.asarray(newton(p, (0.3, 0.7), 8))
    assert np.all(np.isfinite(both)) and np.all(np.abs(both) <= 5.0 + 0.01 ** 0.5 * 0.6)
    with pytest.raises(ValueError, match="steps"):
        mixture_quantile_newton(p, (0.5,), 0)


def test_mixture_interval_default_is_the_exact_quantiles():
    """interval(level) (the method the metrics call) gives mixture_quantile's (1 ∓ level)/2 quantiles bit for bit."""
    r = np.random.default_rng(5)
    mu, var = r.normal(size=(7, 3)), r.uniform(0.1, 2.0, (7, 3))
    var[:, 2] = 1e12  # a wide member: the moment-matched interval differs wildly
    p = mixture_prediction(jnp.log(jnp.asarray([0.5, 0.45, 0.05], DTYPE)), jnp.asarray(mu, DTYPE),
                           jnp.asarray(var, DTYPE))
    lo, hi = p.interval(0.8)
    elo, ehi = p.interval(0.8, exact=True)
    np.testing.assert_array_equal(np.asarray(lo), np.asarray(elo))
    np.testing.assert_array_equal(np.asarray(hi), np.asarray(ehi))
    # (0.5 ∓ 0.5·level, as interval computes them: 0.5 - 0.4 is not the float 0.1)
    np.testing.assert_array_equal(np.asarray(lo), np.asarray(mixture_quantile(p, 0.5 - 0.5 * 0.8)))
    np.testing.assert_array_equal(np.asarray(hi), np.asarray(mixture_quantile(p, 0.5 + 0.5 * 0.8)))
    mlo, mhi = p.interval(0.8, exact=False)
    assert np.all(np.asarray(mhi - mlo) > 100 * np.asarray(hi - lo))


def test_package_keeps_every_name_and_imports_one_way():
    """Every name imported from onlinejax.wrappers.combination before it became a package still is; inside the
    package, imports flow distribution -> rules / correction -> learner."""
    import ast
    import pathlib

    import onlinejax.wrappers.combination as C

    names = ("MixturePrediction mixture_prediction mixture_quantile mixture_quantile_newton mixture_crps CombinationState "
             "MixState WeightRule "
             "bma fixed_share stacking ewa_squared_error combine mix_init mix_step replay gaussian_log_density "
             "mean_correction MeanCorrection MeanCorrectionState RECALIBRATION_CLIP RECALIBRATION_VAR_CAP "
             "BMAState FixedShareState EWASquaredErrorState").split()
    assert [n for n in names if not hasattr(C, n)] == []
    assert set(C.__all__) <= set(dir(C))
    allowed = {"distribution": set(), "rules": {"distribution"}, "correction": {"distribution"},
               "learner": {"distribution", "rules", "correction"}}
    pkg = pathlib.Path(C.__file__).parent
    for mod, ok in allowed.items():
        tree = ast.parse((pkg / f"{mod}.py").read_text())
        used = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1}
        assert used <= ok, (mod, used)


@pytest.mark.parametrize("forgetting", [0.98, 0.9])
def test_one_spike_in_the_targets_leaves_the_weights_and_the_correction_as_on_the_clean_stream(forgetting):
    """A target 1e6 noise sd off, which every member misses: from ten items after it the default rule's weights are
    those of the same stream without the spike and the corrected mean's MSE within 1 % of its (unclipped, the spike's
    squared error swamped the members' differences for ~1000 items, weights near uniform, and the correction
    regressed on it)."""
    rng = np.random.default_rng(4)
    n, at = 800, 200
    truth = np.sin(np.arange(n) / 20.0)
    y = truth + 0.3 * rng.standard_normal(n)
    mu = np.stack([truth + 0.05 * rng.standard_normal(n), truth + 0.6 * rng.standard_normal(n),
                   truth + 0.3 + 0.3 * rng.standard_normal(n)], 1)
    var = np.full_like(mu, 0.2)
    spiked = y.copy()
    spiked[at] = 1e6 * 0.3

    def run(Y):
        p, rec = replay(ewa_squared_error(forgetting, 1.0), jnp.asarray(mu, DTYPE), jnp.asarray(var, DTYPE),
                        jnp.asarray(Y, DTYPE), recalibrate=0.95, correct=mean_correction(),
                        record=lambda ms: ms.log_weights)
        return np.asarray(p.mean, np.float64), np.exp(np.asarray(rec, np.float64))

    (m0, w0), (m1, w1) = run(y), run(spiked)
    assert np.median(w0[at + 10:, 0]) > 0.9  # the clean stream's weights sit on the best member
    np.testing.assert_allclose(w1[at + 10:], w0[at + 10:], atol=0.06)
    after = slice(at + 10, n)
    assert np.mean((m1[after] - y[after]) ** 2) <= 1.01 * np.mean((m0[after] - y[after]) ** 2)

"""The calibration layer against float64 numpy references, the ACI coverage bound and the Learner contract."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import ndtri

from onlinejax.wrappers.adaptive import AdaptiveState, adaptive
from onlinejax.core.base import Prediction, make_learner
from onlinejax.wrappers.calibration import (LOG_CHI2_MEAN, RECALIBRATION_BAND, RECALIBRATION_FAST, RECALIBRATION_FLOOR,
                                            RECALIBRATION_LEVEL_DECAY, RECALIBRATION_LOG_CLIP, SCORE_CLIP, CalibratedState,
                                            ConformalOptions, RecalibrationOptions, aci_init, aci_update, calibrated, conformal,
                                            correct, quantile_init, quantile_update, recalibrate, recalibrated_variance,
                                            recalibration_init, recalibration_update, step_one, upper_normal_quantile)
from onlinejax.wrappers.calibration import ACIOptions, QuantileOptions
from onlinejax.wrappers.calibration import init as calibrated_init
from onlinejax.wrappers.combination import combine
from onlinejax.evaluation import delayed_progressive_validation, progressive_validation
from onlinejax.evaluation.delayed import ANSWER, schedule_from_delays
from onlinejax.evaluation.metrics import item_quantities
from onlinejax.learners.linear import bayes_linreg, windowed_bayes_linreg

from conftest import DTYPE, X64, tol

BIG = float(np.sqrt(np.finfo(DTYPE).max))  # the library's "no information" variance


def _oracle():
    """A learner that predicts ``N(x[0], x[1])``: the stream sets every prediction."""
    return make_learner(init=lambda dtype=None: {"n": jnp.zeros((), dtype or DTYPE)},
                        learn_one=lambda s, x, y: {"n": s["n"] + 1.0},
                        predict_one=lambda s, x: Prediction(x[0], x[1]), n_features=2)


ORACLE = _oracle()


def _scan(learner, state, X, Y):
    """Predict-then-learn in one jitted ``lax.scan`` (non-finite labels allowed)."""
    return jax.jit(lambda s, X, Y: jax.lax.scan(lambda s, xy: learner.step(s, *xy), s, (X, Y)))(
        state, jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE))


def _hostile_stream(n=1500, seed=0):
    """Oracle inputs whose stated variance is off by factors 1/20 .. 20 in blocks, with outliers,
    an abstaining prediction and a NaN label."""
    r = np.random.default_rng(seed)
    mean = np.sin(np.arange(n) / 40.0)
    var = np.exp(r.uniform(-1, 1, n))
    k = np.repeat(r.choice([0.05, 1.0, 20.0], n // 100 + 1), 100)[:n]  # true variance / stated
    y = mean + np.sqrt(k * var) * r.standard_normal(n)
    y[[200, 201, 700]] += 1e3  # z² ~ 1e6: the clip binds
    var[900] = BIG  # abstains: returned as is, not learned from
    y[1100] = np.nan  # skipped
    X = np.stack([mean, var], 1).astype(DTYPE)
    return X, y.astype(DTYPE)


def _ok(X, Y):
    """``(μ, σ², y, ok)`` in float64; ``ok``: the calibrators learn from the item."""
    m, v = X[:, 0].astype(np.float64), X[:, 1].astype(np.float64)
    y = Y.astype(np.float64)
    return m, v, y, np.isfinite(y) & (v < BIG)


def _informative(v):
    return v < BIG  # the prediction is corrected (whatever its label)


# --------------------------------------------------------------------------
# float64 numpy references, step by step
# --------------------------------------------------------------------------
def _ref_recal(m, v, y, ok, decay, clip=25.0, max_scale=1e12):
    """The recalibrator step by step in float64 (module doc, "Variance recalibration")."""
    a, band, lm = RECALIBRATION_LOG_CLIP, np.log(RECALIBRATION_BAND), LOG_CHI2_MEAN
    tiny = np.finfo(np.float64).tiny
    s, n, f, g, L, lw, out = 1.0, 1.0, lm, lm, 0.0, 0.0, []
    for t in range(len(y)):
        floor = RECALIBRATION_FLOOR * np.exp(L - lm) if lw > 0 else 0.0
        out.append(max(s * v[t], floor) if _informative(v[t]) else v[t])
        if ok[t]:
            n_new = decay * n + 1.0
            w = 1.0 / n_new
            e2 = (y[t] - m[t]) ** 2
            e2f = max(e2, floor)
            s_new = (1.0 - w) * s + w * min(e2f / v[t], clip * s)
            lz2 = np.log(max(e2f, tiny)) - np.log(v[t])
            f_new = f + max(RECALIBRATION_FAST, w) * (np.clip(lz2, f - a, f + a) - f)
            g_new = g + w * (np.clip(lz2, g - a, g + a) - g)
            shift = np.clip(g_new, f_new - band, f_new + band) - g_new
            g_new, s_new = g_new + shift, s_new * np.exp(shift)
            s_new = np.clip(s_new, np.exp(g_new), RECALIBRATION_BAND * np.exp(g_new - lm))
            hi = np.log(max_scale)
            s_new = min(max(s_new, 1.0 / max_scale), max_scale)
            f_new, g_new = np.clip(f_new, lm - hi, lm + hi), np.clip(g_new, lm - hi, lm + hi)
            lw_new = RECALIBRATION_LEVEL_DECAY * lw + 1.0
            if lw > 0:
                down = a if lw * (1.0 - decay) < 1.0 else np.log(2.0)
                le2 = np.clip(np.log(max(e2, tiny)), L - down, L + np.log(clip))
            else:
                le2 = np.log(v[t]) + np.clip(lz2, g - a, g + a)
            L = L + (le2 - L) / lw_new
            s, n, f, g, lw = s_new, n_new, f_new, g_new, lw_new
    return np.array(out), s


def _q(a):
    return np.inf if a <= 0 else (0.0 if a >= 1 else -ndtri(a / 2))


def _ref_quantile(m, v, y, ok, level, lr, time_scale, gain=None, csat=1.0, max_scale=1e4):
    a = 1.0 - level
    z = -ndtri(a / 2)
    qp, S, n, R, out = z, 0.0, 0, np.sqrt(2 / np.pi), []
    for t in range(len(y)):
        q = qp
        if gain is not None:
            tt = max(n, 1)
            arg = S * np.log(tt) / (tt * csat)
            q = qp + (np.inf if arg >= np.pi / 2 else -np.inf if arg <= -np.pi / 2 else gain * np.tan(arg))
        c2 = min(max((max(q, 0.0) / z) ** 2, 1.0 / max_scale), max_scale)
        var = c2 * v[t] if _informative(v[t]) else v[t]
        out.append(var)
        if ok[t]:
            err = float(abs(y[t] - m[t]) > z * np.sqrt(var))
            score = abs(y[t] - m[t]) / np.sqrt(v[t])
            if time_scale:
                R = R + (min(score, SCORE_CLIP * R) - R) / time_scale
                eta = lr * SCORE_CLIP * R
            else:
                eta = lr
            qp = min(max(qp + eta * (err - a), z / np.sqrt(max_scale)), z * np.sqrt(max_scale))
            if time_scale:
                R = max(R, qp * np.sqrt(2 / np.pi) / z)
            S += err - a
            n += 1
    return np.array(out), qp


def test_upper_normal_quantile_matches_scipy():
    lo = 2.0 ** -126
    a = np.concatenate([np.geomspace(lo, 1.0, 20001), np.linspace(1e-3, 1.0, 20001)]).astype(DTYPE)
    got = np.asarray(upper_normal_quantile(jnp.asarray(a)), np.float64)
    ref = -ndtri(a.astype(np.float64) / 2)
    mid = a <= 0.98
    assert np.max(np.abs(got[mid] / ref[mid] - 1)) < 5e-6
    assert np.max(np.abs(got[~mid] - ref[~mid])) < 1e-6
    order = np.argsort(a)
    assert np.all(np.diff(got[order]) <= 0)  # monotone: a smaller α_t never narrows the interval
    edge = np.asarray(upper_normal_quantile(jnp.asarray([0.0, -0.1, 1.0, 1.5], DTYPE)))
    assert edge[0] == np.inf and edge[1] == np.inf and edge[2] == 0 and edge[3] == 0


@pytest.mark.parametrize("decay", [0.9, 0.99])
def test_recalibration_matches_numpy_reference(decay):
    X, Y = _hostile_stream()
    m, v, y, ok = _ok(X, Y)
    lrn = recalibrate(ORACLE)
    st, preds = _scan(lrn, lrn.init(recalibration={"decay": decay}), X, Y)
    want, s_end = _ref_recal(m, v, y, ok, decay)
    np.testing.assert_allclose(np.asarray(preds.var, np.float64), want, rtol=tol(1e-10, 1e-4))
    np.testing.assert_allclose(float(st.recalibration.scale), s_end, rtol=tol(1e-10, 1e-4))
    assert int(st.recalibration.n) == ok.sum() and int(st.n_skipped) == (~ok).sum()
    assert float(preds.var[900]) == BIG  # an abstention is returned as it is


def test_recalibration_update_alone_is_the_weighted_mean_with_a_unit_prior():
    # without the clip: s_t = (ρ^t + Σ ρ^{t-i} z_i²) / (ρ^t + Σ ρ^{t-i}), while z² stays in a range where
    # neither the floor nor the bands of the log-scale estimates bind (z² from 2 to 4)
    r = np.random.default_rng(3)
    z2 = r.uniform(2.0, 4.0, 50)
    st = recalibration_init(0.9, dtype=DTYPE)
    for z in z2:
        st = recalibration_update(st, jnp.zeros((), DTYPE), jnp.ones((), DTYPE), jnp.asarray(np.sqrt(z), DTYPE),
                                  clip=1e30)
    w = 0.9 ** np.arange(len(z2))[::-1]
    want = (0.9 ** len(z2) + w @ z2) / (0.9 ** len(z2) + w.sum())
    np.testing.assert_allclose(float(st.scale), want, rtol=tol(1e-12, 1e-5))


def test_recalibration_follows_a_variance_growing_item_after_item():
    # a learner whose variance grows 3 % per item while its errors stay N(0, 1) (a model whose units drift):
    # the recalibrated variance should stay near 1; the slow scale is held within a factor b of the fast one
    # both ways, so it lags by about that factor (with a band twice as wide above: 6.5-13 times too wide)
    upd = jax.jit(recalibration_update)
    medians = []
    for seed in range(5):
        r = np.random.default_rng(seed)
        st, issued = recalibration_init(0.99, dtype=DTYPE), []
        for t in range(300):
            var = jnp.asarray(1.03 ** t, DTYPE)
            issued.append(float(recalibrated_variance(st, var)))
            st = upd(st, jnp.zeros((), DTYPE), var, jnp.asarray(r.normal(), DTYPE))
        medians.append(np.median(issued[150:]))
    assert max(medians) < 2.5 * RECALIBRATION_BAND, medians


def _trace(learner, state, X, Y):
    """``(final state, the state before each item [n], the predictions [n])`` of one jitted scan."""
    def body(s, xy):
        s2, p = learner.step(s, *xy)
        return s2, (s, p)

    return jax.jit(lambda s, X, Y: jax.lax.scan(body, s, (X, Y)))(state, jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE))


def _f64(a):
    return np.asarray(a, np.float64)


@pytest.mark.parametrize("gamma", [0.005, 0.05])
def test_aci_matches_numpy_reference(gamma):
    X, Y = _hostile_stream()
    m, v, y, ok = _ok(X, Y)
    level, a = 0.9, 0.1
    lrn = conformal(ORACLE, level)
    st, (before, preds) = _trace(lrn, lrn.init(conformal={"gamma": gamma}), X, Y)
    at = np.append(_f64(before.conformal.alpha_t), float(st.conformal.alpha_t))
    assert at.min() < 0 and at.max() > 0.15  # the stream moved α_t far from α = 0.1, below 0 too
    # step by step from the recorded α_t: the interval is the base Gaussian's at level 1 - α_t ...
    z = -ndtri(a / 2)
    c2 = np.clip(np.array([_q(t) for t in at[:-1]]) ** 2 / z ** 2, 1e-4, 1e4)
    want = np.where(v < BIG, c2 * v, v)
    # (Φ⁻¹ is tabulated: relative error < 5e-6, twice that in c²)
    np.testing.assert_allclose(_f64(preds.var), want, rtol=tol(2e-5, 3e-5))
    # ... and α_{t+1} = α_t + γ(α - err_t) in [-γ, 1 + γ], err_t the miss of the returned interval
    err = np.abs(y - m) > z * np.sqrt(_f64(preds.var))
    nxt = np.clip(at[:-1] + gamma * (a - err), -gamma, 1 + gamma)
    np.testing.assert_allclose(at[1:], np.where(ok, nxt, at[:-1]), rtol=0, atol=tol(1e-15, 1e-6))


@pytest.mark.parametrize("time_scale, gain", [(None, None), (50, None), (50, 1.0)], ids=["const", "range", "range+I"])
def test_quantile_tracker_matches_numpy_reference(time_scale, gain):
    X, Y = _hostile_stream()
    m, v, y, ok = _ok(X, Y)
    lr, level, a, csat = (0.05 if time_scale is None else 0.02), 0.9, 0.1, 2.0
    lrn = conformal(ORACLE, level, "quantile", quantile=QuantileOptions(lr=lr, time_scale=time_scale,
                                                                      integrator_gain=gain, saturation=csat))
    st, (before, preds) = _trace(lrn, lrn.init(), X, Y)
    b = before.conformal
    q, S, n, R = _f64(b.q), _f64(b.integral), np.asarray(b.n), _f64(b.score_scale)
    z = -ndtri(a / 2)
    thr = q.copy()
    if gain is not None:  # r_t(S_t) = K_I tan(S_t log t/(t C_sat)), saturating
        t = np.maximum(n, 1)
        arg = S * np.log(t) / (t * csat)
        thr = q + np.where(arg >= np.pi / 2, np.inf, np.where(arg <= -np.pi / 2, -np.inf,
                                                               gain * np.tan(np.clip(arg, -np.pi / 2, np.pi / 2))))
    c2 = np.clip((np.maximum(thr, 0) / z) ** 2, 1e-4, 1e4)
    np.testing.assert_allclose(_f64(preds.var), np.where(v < BIG, c2 * v, v), rtol=tol(1e-12, 1e-5))
    # q̂_{t+1} = q̂_t + η_t(err_t - α) in [z/100, 100z], η_t = lr·k R_t with the winsorised running scale
    # R_t = R_{t-1} + (min(s_t, k R_{t-1}) - R_{t-1})/W, then at least q̂_{t+1} E|Z|/z; S_{t+1} = S_t + err_t - α
    err = np.abs(y - m) > z * np.sqrt(_f64(preds.var))
    score = np.abs(y - m) / np.sqrt(v)
    R_new = R + (np.minimum(score, SCORE_CLIP * R) - R) / time_scale if time_scale else R
    eta = lr * SCORE_CLIP * R_new if time_scale else lr
    q_new = np.clip(q + eta * (err - a), z / 100, 100 * z)
    if time_scale:
        R_new = np.maximum(R_new, q_new * np.sqrt(2 / np.pi) / z)
    nxt = lambda arr, last: np.append(arr[1:], float(last))  # noqa: E731  the state after each item
    q1, S1, R1 = nxt(q, st.conformal.q), nxt(S, st.conformal.integral), nxt(R, st.conformal.score_scale)
    np.testing.assert_allclose(q1, np.where(ok, q_new, q), rtol=tol(1e-12, 1e-6), atol=tol(1e-14, 1e-6))
    np.testing.assert_allclose(S1, np.where(ok, S + err - a, S), rtol=tol(1e-12, 1e-6), atol=tol(1e-12, 1e-4))
    if time_scale:
        np.testing.assert_allclose(R1, np.where(ok, R_new, R), rtol=tol(1e-12, 1e-6))
    if X64:
        ref_var, q_end = _ref_quantile(m, v, y, ok, level, lr, time_scale, gain, csat)
        np.testing.assert_allclose(_f64(preds.var), ref_var, rtol=1e-9)
        np.testing.assert_allclose(float(st.conformal.q), q_end, rtol=1e-9)


def test_recalibrated_aci_matches_numpy_reference():
    X, Y = _hostile_stream()
    m, v, y, ok = _ok(X, Y)
    lrn = conformal(ORACLE, 0.9, recalibrate=0.95)
    st, (before, preds) = _trace(lrn, lrn.init(), X, Y)
    scale, _ = _ref_recal(m, v, y, ok, 0.95)  # s_{t-1} σ²_t, free-running
    info = v < BIG
    np.testing.assert_allclose((_f64(before.recalibration.scale) * v)[info], scale[info], rtol=tol(1e-10, 1e-4))
    # ACI acts on the recalibrated Gaussian: N(μ, c²(α_t) s σ²)
    at = _f64(before.conformal.alpha_t)
    c2 = np.clip(np.array([_q(t) for t in at]) ** 2 / ndtri(0.05) ** 2, 1e-4, 1e4)
    base = _f64(before.recalibration.scale) * v
    np.testing.assert_allclose(_f64(preds.var), np.where(v < BIG, c2 * base, v), rtol=tol(2e-5, 3e-5))
    err = np.abs(y - m) > -ndtri(0.05) * np.sqrt(_f64(preds.var))
    at1 = np.append(at[1:], float(st.conformal.alpha_t))
    np.testing.assert_allclose(at1, np.where(ok, at + 0.005 * (0.1 - err), at), rtol=0, atol=tol(1e-15, 1e-6))


# --------------------------------------------------------------------------
# Coverage
# --------------------------------------------------------------------------
def _coverage(Y, preds, level):
    return np.asarray(item_quantities(jnp.asarray(Y), preds, level)[:, 2], np.float64)


@pytest.mark.parametrize("gamma", [0.01, 0.05])
def test_aci_long_run_coverage_bound_on_an_adversarial_stream(gamma):
    # Gibbs & Candès Prop. 4.1: |mean err - α| <= (max(α₁, 1 - α₁) + γ)/(γT), on the returned intervals,
    # with the stated variance 100x too small and 100x too large in alternating blocks
    T, level = 4000, 0.9
    r = np.random.default_rng(7)
    k = np.where((np.arange(T) // 250) % 2 == 0, 100.0, 0.01)
    X = np.stack([np.zeros(T), np.ones(T)], 1)
    Y = np.sqrt(k) * r.standard_normal(T)
    lrn = conformal(ORACLE, level, aci=ACIOptions(gamma=gamma))
    st, preds = _scan(lrn, lrn.init(), X, Y)
    err = 1.0 - _coverage(Y.astype(DTYPE), preds, level)
    alpha = 1.0 - level
    bound = (max(alpha, 1 - alpha) + gamma) / (gamma * T)
    assert abs(err.mean() - alpha) <= bound
    # the identity behind it: mean err - α = (α₁ - α_{T+1})/(γT), so the miss indicator is that of the interval
    np.testing.assert_allclose(err.mean() - alpha, (alpha - float(st.conformal.alpha_t)) / (gamma * T),
                               atol=tol(1e-9, 2e-5))
    assert -gamma <= float(st.conformal.alpha_t) <= 1 + gamma


def _linear_stream(n, seed, noise_sd=0.5, d=2):
    r = np.random.default_rng(seed)
    X = r.uniform(-1, 1, (n, d))
    Y = X @ r.normal(size=d) + 0.3 + noise_sd * r.standard_normal(n)
    return X.astype(DTYPE), Y.astype(DTYPE)


# true noise precision 4; beta = 40 makes the variance ~10x too small, 0.4 ~10x too large
@pytest.mark.parametrize("beta", [40.0, 0.4], ids=["too-small", "too-large"])
def test_miscalibrated_learner_is_repaired(beta):
    T, level = 3000, 0.95
    X, Y = _linear_stream(T, seed=11)
    inner = bayes_linreg(2, beta=beta, intercept=True)
    bare = progressive_validation(inner, inner.init(), X, Y).predictions
    assert abs(_coverage(Y, bare, level).mean() - level) > 0.04  # the learner is badly calibrated
    half = slice(T // 2, None)
    for lrn, gamma in [(conformal(inner, level, aci=ACIOptions(gamma=0.05)), 0.05),
                       (conformal(inner, level, recalibrate=0.99), 0.005)]:
        st, preds = progressive_validation(lrn, lrn.init(), X, Y)[:2]
        cov = _coverage(Y, preds, level)
        assert abs(cov.mean() - level) <= (level + gamma) / (gamma * T)  # Prop. 4.1
        assert abs(cov[half].mean() - level) < 0.02
    q = conformal(inner, level, "quantile", quantile=QuantileOptions(lr=0.05))
    cov = _coverage(Y, progressive_validation(q, q.init(), X, Y).predictions, level)
    assert abs(cov[half].mean() - level) < 0.02
    rec = recalibrate(inner)
    p = progressive_validation(rec, rec.init(), X, Y).predictions
    z2 = (Y - np.asarray(p.mean)) ** 2 / np.asarray(p.var)
    assert abs(z2[half].mean() - 1.0) < 0.1


# --------------------------------------------------------------------------
# Pathologies: a constant run, one outlier
# --------------------------------------------------------------------------
N_PATH = 4000


def _pathology_stream(seed, kind, n=N_PATH):
    """``y = x·w + N(0, 1)`` on two standard normal inputs; ``"constant"``: items 500-999 are one
    value (the end of the pathology: 1000), ``"outlier"``: item 1000 is ``1e6`` (the end: 1001)."""
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, 2))
    y = X @ (2.0 * r.standard_normal(2)) + r.standard_normal(n)
    if kind == "constant":
        y[500:1000] = 3.0
    elif kind == "outlier":
        y[1000] = 1e6
    return X.astype(DTYPE), y.astype(DTYPE), {"constant": 1000, "outlier": 1001, "clean": 1000}[kind]


def _windows_recovered(y, lo, hi, end, after=300, width=500):
    """Coverage of the interval over every ``width``-item window starting ``after`` or more items past
    ``end`` (the pathology's last item + 1): ``(min, max)``."""
    cov = (y >= lo) & (y <= hi)
    w = np.array([cov[t:t + width].mean() for t in range(end + after, len(y) - width + 1)])
    return w.min(), w.max()


def _calibrated_linreg():
    return calibrated(bayes_linreg(2, forgetting=0.98, intercept=True))


def _check_recovery(y, pred, end, clean_width=None):
    lo, hi = (np.asarray(v, np.float64) for v in pred.interval(0.95))
    var = np.asarray(pred.var, np.float64)
    assert np.all(np.isfinite(var)) and np.all(var > 0) and np.all(np.isfinite(np.asarray(pred.mean)))
    # every 500-item window from 300 items after the pathology holds the 95 % interval's coverage
    wmin, wmax = _windows_recovered(y.astype(np.float64), lo, hi, end)
    assert 0.90 <= wmin and wmax <= 0.98, (wmin, wmax)
    if clean_width is not None:  # and the intervals are as wide as on the same stream without it
        width = np.median((hi - lo)[end + 300:])
        assert width < 1.3 * clean_width, (width, clean_width)


@pytest.mark.parametrize("kind", ["constant", "outlier"])
def test_calibrated_recovers_from_a_constant_run_and_an_outlier(kind):
    # a constant run collapses a running mean of z² (the next residual then scores huge and the tracker's
    # threshold jumps, to come down by tiny steps); one outlier set the tracker's step by its own score
    lrn = _calibrated_linreg()
    X, y, end = _pathology_stream(0, kind)
    pred = progressive_validation(lrn, lrn.init(), X, y).predictions
    width = None
    if kind == "constant":
        Xc, yc, _ = _pathology_stream(0, "clean")
        lo, hi = progressive_validation(lrn, lrn.init(), Xc, yc).predictions.interval(0.95)
        width = np.median((np.asarray(hi, np.float64) - np.asarray(lo, np.float64))[end + 300:])
    _check_recovery(y, pred, end, width)


def test_calibrated_recovers_from_pathologies_vmapped_over_seeds():
    lrn = _calibrated_linreg()
    streams = [_pathology_stream(s, k) for k in ("constant", "outlier", "clean") for s in range(4)]
    Xs = jnp.asarray(np.stack([s[0] for s in streams]))
    Ys = jnp.asarray(np.stack([s[1] for s in streams]))
    run = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions))
    preds = run(Xs, Ys)
    for i, (_, y, end) in enumerate(streams[:8]):
        pred = jax.tree_util.tree_map(lambda a: a[i], preds)
        clean_width = None
        if i < 4:
            c = jax.tree_util.tree_map(lambda a: a[8 + i], preds)
            lo, hi = (np.asarray(v, np.float64) for v in c.interval(0.95))
            clean_width = np.median((hi - lo)[end + 300:])
        _check_recovery(y, pred, end, clean_width)


def test_quantile_step_is_bounded_by_the_score_scale():
    """A score of 1e6 moves the threshold by one ordinary miss's step (times 1 + (k - 1)/W), and 300
    Gaussian scores later the tracker is where the same tracker without it is."""
    lr, W, level = 0.02, 100, 0.95
    st = quantile_init(level, lr, W, dtype=DTYPE)
    z, a = float(st.z_alpha), 1.0 - level
    typical = float(quantile_update(st, True, jnp.asarray(1.1 * z, DTYPE)).q) - z  # a miss by a little
    wild = quantile_update(st, True, jnp.asarray(1e6, DTYPE))
    assert 0 < float(wild.q) - z <= typical * (1 + (SCORE_CLIP - 1) / W) * (1 + 1e-5)
    # independent bound: lr·k·(scale) with the scale at most E|Z| grown by one clipped score
    assert float(wild.q) - z <= lr * SCORE_CLIP * np.sqrt(2 / np.pi) * (1 + (SCORE_CLIP - 1) / W) * (1 - a) * (1 + 1e-5)
    r0 = np.sqrt(2 / np.pi)  # E|Z|: the scale of a calibrated Gaussian's scores
    assert float(wild.score_scale) <= max(r0 * (1 + (SCORE_CLIP - 1) / W), float(wild.q) * r0 / z) * (1 + 1e-6)
    step = jax.jit(lambda s, x: quantile_update(s, x > s.q, x))
    scores = np.abs(np.random.default_rng(0).standard_normal(300)).astype(DTYPE)
    hit, clean = wild, st
    for x in scores:
        hit, clean = step(hit, jnp.asarray(x)), step(clean, jnp.asarray(x))
    assert abs(float(hit.q) - float(clean.q)) < 3 * typical


def test_no_finite_input_drives_a_calibrator_to_nan_zero_or_its_bounds():
    """Residuals, variances and scores from 1e-30 to 1e30 (and exact fits) leave every statistic finite
    and positive, the recalibrated variance above the floor, α_t in [-γ, 1 + γ], q̂ in [z/100, 100z]."""
    r = np.random.default_rng(4)
    n = 400
    e = np.where(r.uniform(size=n) < 0.3, 0.0, 10.0 ** r.uniform(-15, 15, n)) * r.choice([-1, 1], n)
    var = 10.0 ** r.uniform(-15, 15, n)
    rec = recalibration_init(0.99, dtype=DTYPE)
    q = quantile_init(0.95, 0.02, 100, dtype=DTYPE)
    aci = aci_init(0.95, 0.05, dtype=DTYPE)
    upd = jax.jit(lambda rec, q, aci, e, v: (
        recalibration_update(rec, jnp.zeros((), DTYPE), v, e),
        quantile_update(q, jnp.abs(e) > q.q * jnp.sqrt(v), jnp.abs(e) / jnp.sqrt(v)),
        aci_update(aci, jnp.abs(e) > jnp.sqrt(v))))
    z = float(q.z_alpha)
    for ei, vi in zip(e.astype(DTYPE), var.astype(DTYPE)):
        rec, q, aci = upd(rec, q, aci, jnp.asarray(ei), jnp.asarray(vi))
        # (sq_err stays at its "no error seen" inf: it is tracked only with an error cap)
        leaves = np.array([float(v) for v in jax.tree_util.tree_leaves((rec._replace(sq_err=0.0), q, aci))], np.float64)
        assert np.all(np.isfinite(leaves))
        assert 1e-12 * (1 - 1e-6) <= float(rec.scale) <= 1e12 * (1 + 1e-6)
        assert z / 100 * (1 - 1e-6) <= float(q.q) <= 100 * z * (1 + 1e-6) and float(q.score_scale) > 0
        assert -0.05 - 1e-7 <= float(aci.alpha_t) <= 1.05 + 1e-7
    # a run of exact fits stops at a floor relative to the residuals' level, not at 0: 1 % of the
    # variance before the run (1), halved at most once per ~1000 labels
    v1 = jnp.ones((), DTYPE)
    body = jax.jit(lambda rec, e: (recalibration_update(rec, jnp.zeros((), DTYPE), v1, e), None))
    rec = jax.lax.scan(body, recalibration_init(0.99, dtype=DTYPE), jnp.asarray(r.standard_normal(200), DTYPE))[0]
    rec = jax.lax.scan(body, rec, jnp.zeros(3000, DTYPE))[0]
    assert float(recalibrated_variance(rec, v1)) >= 1e-2 / 2 ** 6
# --------------------------------------------------------------------------
# The returned distribution and the Learner contract
# --------------------------------------------------------------------------
def test_wrapped_prediction_is_one_gaussian_at_the_working_level():
    X, Y = _linear_stream(400, seed=2)
    inner = bayes_linreg(2, beta=40.0)
    lrn = conformal(inner, 0.9, aci=ACIOptions(gamma=0.05))
    r = progressive_validation(lrn, lrn.init(), X, Y, record=lambda s: s.conformal.alpha_t)
    st = r.state
    assert float(st.conformal.alpha_t) < 0.05  # the learner was overconfident: a higher working level
    # step corrects the inner learner's prediction made before learning y, with α_t from before y
    bare = progressive_validation(inner, inner.init(), X, Y).predictions
    np.testing.assert_array_equal(np.asarray(r.predictions.mean), np.asarray(bare.mean))
    at = np.append(0.1, _f64(r.records)[:-1])
    c2 = np.clip(np.array([_q(t) for t in at]) ** 2 / ndtri(0.05) ** 2, 1e-4, 1e4)
    np.testing.assert_allclose(_f64(r.predictions.var), c2 * _f64(bare.var), rtol=tol(2e-5, 3e-5))
    at = 0.02
    st = st._replace(conformal=st.conformal._replace(alpha_t=jnp.asarray(at, DTYPE)))
    x, y = X[:5], Y[:5]
    p = lrn.predict(st, x)
    base = inner.predict(st.inner, x)
    # the interval at the calibrated level is the base Gaussian's at level 1 - α_t
    lo, hi = p.interval(0.9)
    half = -ndtri(at / 2) * np.sqrt(np.asarray(base.var, np.float64))
    np.testing.assert_allclose(np.asarray(hi, np.float64) - np.asarray(base.mean), half, rtol=tol(1e-5, 1e-4))
    np.testing.assert_allclose(np.asarray(base.mean) - np.asarray(lo, np.float64), half, rtol=tol(1e-5, 1e-4))
    # every level, the density and the CRPS describe N(μ, c²σ²)
    sd = np.sqrt(np.asarray(p.var, np.float64))
    mu = np.asarray(p.mean, np.float64)
    lo8, hi8 = p.interval(0.8)
    np.testing.assert_allclose(np.asarray(hi8), stats.norm.ppf(0.9, mu, sd), rtol=tol(1e-10, 1e-5))
    np.testing.assert_allclose(np.asarray(p.log_prob(y)), stats.norm.logpdf(y, mu, sd), rtol=tol(1e-10, 1e-5))
    q = np.asarray(item_quantities(jnp.asarray(y), p, 0.9), np.float64)
    zz = (y - mu) / sd
    crps = sd * (zz * (2 * stats.norm.cdf(zz) - 1) + 2 * stats.norm.pdf(zz) - 1 / np.sqrt(np.pi))
    np.testing.assert_allclose(q[:, 5], crps, rtol=tol(1e-9, 1e-4))
    # predict agrees with the prediction step makes
    s2, p2 = lrn.step(st, x, y)
    np.testing.assert_allclose(np.asarray(p2.var)[0], np.asarray(p.var)[0], rtol=tol(1e-12, 1e-6))


def test_vmap_over_streams_and_gammas_equals_single_runs():
    streams = [_linear_stream(300, seed=s) for s in (1, 2)]
    Xs = jnp.asarray(np.stack([s[0] for s in streams]))
    Ys = jnp.asarray(np.stack([s[1] for s in streams]))
    lrn = conformal(bayes_linreg(2, beta=40.0), 0.9)
    gammas = jnp.asarray([0.01, 0.05], DTYPE)
    states = jax.vmap(lambda g: lrn.init(conformal={"gamma": g}))(gammas)
    pv = lambda s, X, Y: progressive_validation(lrn, s, X, Y).predictions.var
    got = jax.jit(jax.vmap(jax.vmap(pv, (0, None, None)), (None, 0, 0)))(states, Xs, Ys)  # [S, H, n]
    for i in range(2):
        for j, g in enumerate([0.01, 0.05]):
            single = progressive_validation(lrn, lrn.init(conformal={"gamma": g}), Xs[i], Ys[i]).predictions.var
            np.testing.assert_allclose(np.asarray(got[i, j]), np.asarray(single), rtol=tol(1e-12, 1e-5))
    assert not np.allclose(np.asarray(got[0, 0]), np.asarray(got[0, 1]))  # γ really differs


def test_skips_non_finite_labels_and_batches_are_sequential():
    X, Y = _linear_stream(60, seed=4)
    Y = Y.copy()
    Y[[10, 30]] = np.nan
    lrn = conformal(bayes_linreg(2, beta=40.0), 0.9, aci=ACIOptions(gamma=0.05), recalibrate=0.9)
    st, _ = _scan(lrn, lrn.init(), X, Y)
    assert int(st.n_skipped) == 2 and int(st.conformal.n) == 58 and int(st.recalibration.n) == 58
    assert int(st.inner.n_skipped) == 2
    # the skipped items change nothing: the same as the stream without them
    keep = np.isfinite(Y)
    st2, _ = _scan(lrn, lrn.init(), X[keep], Y[keep])
    for a, b in zip(jax.tree_util.tree_leaves(st.conformal), jax.tree_util.tree_leaves(st2.conformal)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol(1e-12, 1e-6))
    # a mini-batch learn/step is exactly the sequential one
    Xf, Yf = X[keep], Y[keep]
    sb, pb = lrn.step(lrn.init(), Xf, Yf)
    np.testing.assert_allclose(float(sb.conformal.alpha_t), float(st2.conformal.alpha_t), rtol=tol(1e-12, 1e-6))
    sl = lrn.learn(lrn.init(), Xf, Yf)
    np.testing.assert_allclose(float(sl.recalibration.scale), float(st2.recalibration.scale), rtol=tol(1e-12, 1e-6))


def test_composes_with_adaptive_combine_tune_downdate_and_evict():
    X, Y = _linear_stream(300, seed=5)
    # calibrator outside the state machine; init kwargs go through both wrappers
    ad = conformal(adaptive(windowed_bayes_linreg(2, 32), 32), 0.9, recalibrate=0.98)
    st = ad.init(window=16)
    assert isinstance(st, CalibratedState) and isinstance(st.inner, AdaptiveState) and int(st.inner.phase_length) == 16
    r = progressive_validation(ad, st, X, Y, record=lambda s: s.inner.last)
    assert np.all(np.isfinite(np.asarray(r.predictions.var))) and int(r.state.inner.n_tunes) >= 1
    assert int(r.state.conformal.n) == 300
    # a combination of one calibrated member is that member exactly
    c = conformal(bayes_linreg(2, beta=40.0), 0.9)
    comb = combine([c])
    a = progressive_validation(c, c.init(), X, Y).predictions
    b = progressive_validation(comb, comb.init(), X, Y).predictions
    np.testing.assert_array_equal(np.asarray(a.mean), np.asarray(b.mean))
    np.testing.assert_array_equal(np.asarray(a.var), np.asarray(b.var))
    # tune, downdate and evict reach the inner learner; the calibrator keeps its state
    inner = bayes_linreg(2, beta=40.0)
    rc = recalibrate(inner)
    s = rc.learn(rc.init(), X[:100], Y[:100])
    t = rc.tune(s)
    np.testing.assert_allclose(float(t.inner.beta), float(inner.tune(s.inner).beta), rtol=tol(1e-12, 1e-6))
    assert t.recalibration == s.recalibration
    d = rc.downdate(s, X[99], Y[99])
    np.testing.assert_allclose(np.asarray(d.inner.mean), np.asarray(inner.downdate(s.inner, X[99], Y[99]).mean),
                               rtol=tol(1e-12, 1e-6))
    win = windowed_bayes_linreg(2, 8)
    w = recalibrate(win)
    sw = w.learn(w.init(), X[:8], Y[:8])
    leaves = jax.tree_util.tree_leaves
    for got, want in zip(leaves(w.evict(sw).inner), leaves(win.evict(sw.inner))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_delayed_labels_calibrate_at_learn():
    X, Y = _linear_stream(120, seed=6)
    lrn = conformal(bayes_linreg(2, beta=40.0), 0.9, aci=ACIOptions(gamma=0.05))
    sched = schedule_from_delays(np.full(120, 5))
    res = delayed_progressive_validation(lrn, lrn.init(), X, Y, sched)
    # the same as replaying the events: predict at the question, learn (and calibrate) at the answer with the
    # prediction issued at the question
    s, issued = lrn.init(), {}
    for k, i in zip(sched.kind, sched.item):
        if k == ANSWER:
            s = lrn.update(s, X[i], Y[i], issued.pop(int(i)))
        else:
            issued[int(i)] = lrn.predict(s, X[i])
    np.testing.assert_allclose(float(res.state.conformal.alpha_t), float(s.conformal.alpha_t), rtol=tol(1e-12, 1e-5))
    assert int(res.state.conformal.n) == 120
    assert np.all(np.isfinite(np.asarray(res.predictions.var)))


def test_bad_arguments_raise_naming_them():
    lrn = bayes_linreg(2)
    for kw, name in [({"level": 1.2}, "level"), ({"level": 0.0}, "level"), ({"level": 1.0}, "level"),
                     ({"aci": ACIOptions(0.0)}, "aci.gamma"), ({"aci": ACIOptions(-0.1)}, "aci.gamma"),
                     ({"method": "pid"}, "method"), ({"quantile": QuantileOptions(lr=0.0)}, "quantile.lr"),
                     ({"quantile": QuantileOptions(time_scale=0)}, "quantile.time_scale"),
                     ({"max_scale": 1.0}, "max_scale"), ({"recalibrate": 1.0}, "recalibrate"),
                     ({"quantile": QuantileOptions(integrator_gain=-1.0)}, "quantile.integrator_gain")]:
        with pytest.raises(ValueError, match=rf"^{name}: "):
            conformal(lrn, **kw)
    for decay in (0.0, 1.0, 1.5, np.nan):
        with pytest.raises(ValueError, match="decay"):
            recalibrate(lrn, decay)
    with pytest.raises(ValueError, match="level"):
        conformal(lrn).init(conformal={"level": 1.5})
    with pytest.raises(ValueError, match="gamma"):
        conformal(lrn).init(conformal={"gamma": 0.0})
    with pytest.raises(ValueError, match="decay"):
        recalibrate(lrn).init(recalibration={"decay": 1.0})
    with pytest.raises(ValueError, match="conformal"):
        recalibrate(lrn).init(conformal={"gamma": 0.1})
    with pytest.raises(ValueError, match="level"):
        aci_init(level=-0.5)
    with pytest.raises(ValueError, match="lr"):
        quantile_init(lr=-1.0)


def test_student_t_output_keeps_the_calibrated_interval():
    """conformal(df=ν): a Student-t with the Gaussian's calibrated interval at `level`, heavier tails elsewhere."""
    from scipy import stats as st

    from onlinejax.core.base import StudentTPrediction
    from onlinejax.evaluation import progressive_validation

    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 2))
    y = X @ np.array([1.0, -1.0]) + 0.5 * rng.normal(size=300)
    y[150] += 200.0  # one surprise
    g = conformal(bayes_linreg(2, beta=4.0), 0.9, method="quantile")
    t = conformal(bayes_linreg(2, beta=4.0), 0.9, method="quantile", df=4.0)
    pg = progressive_validation(g, g.init(), X, y).predictions
    pt = progressive_validation(t, t.init(), X, y).predictions
    assert isinstance(pt, StudentTPrediction)
    lo_g, hi_g = pg.interval(0.9)
    lo_t, hi_t = pt.interval(0.9)
    rt = 1e-9 if X64 else 2e-4
    np.testing.assert_allclose(np.asarray(hi_t), np.asarray(hi_g), rtol=rt, atol=rt)
    np.testing.assert_allclose(np.asarray(pt.scale) * st.t.ppf(0.95, 4.0), np.sqrt(np.asarray(pg.var)) * st.norm.ppf(0.95),
                               rtol=rt)
    # the surprise costs the t a few nats, the Gaussian thousands
    assert float(pt.log_prob(y)[150]) > -30 > -1000 > float(pg.log_prob(y)[150])
    with pytest.raises(ValueError, match="df"):
        conformal(bayes_linreg(2), df=2.0)


# --------------------------------------------------------------------------
# The module-level functions
# --------------------------------------------------------------------------
def test_pure_step_one_equals_the_learner():
    """``step_one`` with the inner learner and the options passed by hand is ``conformal(...).step``, bit for bit."""
    X, Y = _hostile_stream(1200, seed=3)
    rc = RecalibrationOptions(0.99, 25.0, 1e12, None)
    for method, time_scale in (("quantile", 100), ("aci", 100)):
        cc = ConformalOptions(method, 0.9, 0.005, 0.02, time_scale, None, 1.0, 1e4, 4.0)
        lrn = conformal(ORACLE, 0.9, method, recalibrate=0.99, df=4.0)
        pure = jax.jit(lambda s0, X, Y: jax.lax.scan(lambda s, xy: step_one(ORACLE, rc, cc, s, *xy), s0, (X, Y)))
        got = pure(calibrated_init(ORACLE, rc, cc), jnp.asarray(X), jnp.asarray(Y))
        want = _scan(lrn, lrn.init(), X, Y)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert int(got[0].n_skipped) == 2  # the abstaining prediction and the NaN label


def test_correct_is_the_identity_when_calibrated_and_keeps_abstentions():
    """Fresh calibrators (c = 1) return the inner prediction; an abstaining one is returned as it is."""
    rc = RecalibrationOptions(0.99, 25.0, 1e6, None)
    cc = ConformalOptions("aci", 0.95, 0.005, 0.01, None, None, 1.0, 1e4)
    s = calibrated_init(ORACLE, rc, cc)
    pred = Prediction(jnp.asarray([0.3, 1.0], DTYPE), jnp.asarray([2.0, BIG], DTYPE))
    out, v0, info = correct(rc, cc, s, pred)
    # c = 1 up to the tabulated quantile's error (upper_normal_quantile: relative 5e-6)
    np.testing.assert_allclose(np.asarray(out.var), np.asarray(pred.var), rtol=2e-5)
    assert np.asarray(out.var)[1] == np.asarray(pred.var)[1]
    assert list(np.asarray(info)) == [True, False]
    np.testing.assert_array_equal(np.asarray(v0), np.asarray(pred.var))
    with pytest.raises(ValueError, match="conformal"):
        calibrated_init(ORACLE, rc, None, conformal={"gamma": 0.1})


def test_judged_gaussian_has_the_inner_predictions_central_interval():
    """The calibrators judge a Student-t or a mixture by the Gaussian with its mean and its central interval's
    width (scipy's quantiles): a mixture with a broad component of weight 10⁻³ has a variance many times its
    interval's, and the judged variance follows the interval; a Gaussian is itself; no conformal step: the moments."""
    from onlinejax.core.base import StudentTPrediction
    from onlinejax.core.student_mixture import StudentTMixture
    from onlinejax.wrappers.calibration import judged

    conf = ConformalOptions("quantile", 0.95, 0.005, 0.02, 100, None, 1.0, 1e4, 4.0)
    z = stats.norm.ppf(0.975)
    t = StudentTPrediction(jnp.asarray(1.0, DTYPE), jnp.asarray(2.0, DTYPE), jnp.asarray(5.0, DTYPE))
    g = judged(conf, t)
    np.testing.assert_allclose(float(g.var), (2.0 * stats.t.ppf(0.975, 5.0) / z) ** 2, rtol=tol(1e-6, 2e-3))
    assert float(g.mean) == 1.0
    lw = jnp.log(jnp.asarray([0.999, 0.001], DTYPE))
    mix = StudentTMixture(lw, jnp.asarray([0.0, 0.0], DTYPE), jnp.asarray([0.01, 3.0], DTYPE),
                          jnp.asarray([30.0, 8.0], DTYPE))
    g = judged(conf, mix)
    w, loc, sc, df = [0.999, 0.001], [0.0, 0.0], [0.01, 3.0], [30.0, 8.0]
    cdf = lambda y: sum(wi * stats.t.cdf((y - m) / s, d) for wi, m, s, d in zip(w, loc, sc, df))
    from scipy.optimize import brentq
    hi = brentq(lambda y: cdf(y) - 0.975, 0.0, 10.0, xtol=1e-12)
    np.testing.assert_allclose(float(g.var), (hi / z) ** 2, rtol=tol(1e-6, 2e-3))
    assert float(mix.var) > 50.0 * float(g.var)
    gauss = Prediction(jnp.asarray(0.5, DTYPE), jnp.asarray(3.0, DTYPE))
    assert judged(conf, gauss) is gauss
    assert judged(None, mix) is mix

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

import onlinejax as oj
from onlinejax.evaluation import progressive_validation
from onlinejax.learners.gp import (GPHyper, GPParams, GPTuneOptions, GPWindowOptions, gp_params, gp_window, latent,
                                   log_marginal_likelihood, noise_var, signal_var, tune_hyperparameters)
from onlinejax.learners.gp.kernels import KERNELS, gram
from onlinejax.learners.gp.params import noise_floor_rel
from onlinejax.learners.gp.window import NOISE_FLOOR, _restart_starts, tune_window, window_scale
from conftest import DTYPE, X64, tol
from reference import gp_predict, rel_err


def _stream(rng, n, d=2, noise=0.1, dup_every=0):
    X = rng.uniform(0, 10, size=(n, d))
    if dup_every:
        X[dup_every::dup_every] = X[dup_every - 1:-1:dup_every][: len(X[dup_every::dup_every])]  # repeated inputs
    Y = np.sin(X[:, 0]) + np.cos(X[:, -1]) + noise * rng.normal(size=n)
    return X, Y


def _np_gram(A, B, sv, ls, kernel="se"):
    """float64 numpy kernel matrix (R&W eq. 4.17 for the Matérn kernels)."""
    r2 = (((A[:, None, :] - B[None, :, :]) / np.broadcast_to(ls, (A.shape[1],))) ** 2).sum(-1)
    r = np.sqrt(r2)
    if kernel == "se":
        return sv * np.exp(-0.5 * r2)
    if kernel == "matern32":
        return sv * (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
    return sv * (1 + np.sqrt(5) * r + 5 * r2 / 3) * np.exp(-np.sqrt(5) * r)


def _np_scale(Xw, Yw, sv, nv, ls, kernel="se", coef=None, p=0):
    """float64 reference of ``window_scale``: ``max(1, (1 + rᵀK_y⁻¹r)/(1 + n - p))``, or the targets' spread while ``n <= p``."""
    n = len(Yw)
    if n - p >= 1:
        r = Yw - (0.0 if coef is None else Xw @ coef[:-1] + coef[-1])
        c = (1.0 + r @ np.linalg.solve(_np_gram(Xw, Xw, sv, ls, kernel) + nv * np.eye(n), r)) / (1.0 + n - p)
    else:
        c = (1.0 + (np.sum((Yw - Yw.mean()) ** 2) if n else 0.0) / (sv + nv)) / max(n, 1)
    return max(c, 1.0)


def _np_mean_coef(Xw, Yw, mean, d):
    """float64 ``[d + 1]`` coefficients of the window's mean function ``[x, 1]·c``: zero, the average target, or
    least squares with intercept (``np.linalg.lstsq``: minimum norm while the window has fewer than d + 1 points)."""
    coef = np.zeros(d + 1)
    if len(Yw) and mean == "average":
        coef[-1] = Yw.mean()
    elif len(Yw) and mean == "ols":
        coef = np.linalg.lstsq(np.column_stack([Xw, np.ones(len(Yw))]), Yw, rcond=None)[0]
    return coef


def _np_window_predictive(Xw, Yw, x, hyp, kernel="se", mean="zero"):
    """float64 predictive ``(mean, observed variance, ĉ)`` at ``x`` of the GP on the window ``(Xw, Yw)``.

    The mean function fitted on the window (plug-in, :func:`_np_mean_coef`) plus the GP on its residuals (R&W
    eq. 2.25–2.26, a direct solve); the variance ``ĉ·(latent + σ_n²)`` with :func:`_np_scale`'s window scale,
    whose degrees of freedom lose the mean's coefficient count (0 zero, 1 average, d + 1 OLS).
    """
    sv, nv, ls = hyp
    d = len(x)
    coef = _np_mean_coef(Xw, Yw, mean, d)
    rm, rv = gp_predict(Xw, Yw, x, sv, nv, ls, kernel, coef)
    c = _np_scale(Xw, Yw, sv, nv, ls, kernel, coef, {"zero": 0, "average": 1, "ols": d + 1}[mean])
    return rm[0], c * (rv[0] + nv), c


def _worst_errors(pred, X, Y, windows, hyp, kernel="se", mean="zero", start=0):
    """Worst errors of ``pred`` (item ``start + i`` predicted from the window ``X[lo:hi]``, ``(lo, hi) = windows[i]``)
    against :func:`_np_window_predictive`: ``(mean's abs error, variance's abs error / ĉ, variance's relative
    error, largest reference ĉ)``."""
    mu, var = np.asarray(pred.mean, np.float64), np.asarray(pred.var, np.float64)
    worst_m = worst_v = worst_rel = c_max = 0.0
    for i, (lo, hi) in enumerate(windows):
        rm, rvar, c = _np_window_predictive(X[lo:hi], Y[lo:hi], X[start + i], hyp, kernel, mean)
        worst_m = max(worst_m, abs(mu[i] - rm))
        worst_v = max(worst_v, abs(var[i] - rvar) / c)
        worst_rel = max(worst_rel, abs(var[i] / rvar - 1.0))
        c_max = max(c_max, c)
    return worst_m, worst_v, worst_rel, c_max


def _every_step_errors(lrn, state, X, Y, W, hyp, kernel="se", mean="zero", start=0, freeze=False):
    """Run ``lrn`` from ``state`` over items ``start:`` (the window then holds the ``W`` items before ``start``, or
    all of them if fewer) and compare each prediction with :func:`_np_window_predictive` on its window;
    ``freeze``: the window stops at the first ``W`` items (``GPWindowOptions(freeze_when_full=True)``).

    Returns:
      ``(worst errors of`` :func:`_worst_errors` ``, progressive_validation's result)``.
    """
    res = progressive_validation(lrn, state, X[start:], Y[start:])
    ts = range(start, len(Y))
    windows = [(0, min(t, W)) if freeze else (max(0, t - W), t) for t in ts]
    return _worst_errors(res.predictions, X, Y, windows, hyp, kernel, mean, start), res


def _check_every_step(lrn, X, Y, W, sv, nv_user, ls, kernel="se", mean="zero"):
    """Predictions made before each item vs a float64 direct solve on the window (variance times the reference
    window scale ``ĉ``); returns the worst abs errors (the variance's relative to ``ĉ``)."""
    nv = nv_user + noise_floor_rel(lrn.init().y.dtype) * sv
    (worst_m, worst_v, _, _), res = _every_step_errors(lrn, lrn.init(), X, Y, W, (sv, nv, ls), kernel, mean)
    return worst_m, worst_v, res


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_every_step_equals_direct_solve(rng, kernel):
    W = 16
    X, Y = _stream(rng, 300, dup_every=7)
    lrn = gp_window(2, W, kernel=kernel, mean="zero", initial=GPHyper(lengthscale=1.5, noise_std=0.1))
    wm, wv, _ = _check_every_step(lrn, X, Y, W, 1.0, 0.01, 1.5, kernel)
    assert wm < tol(1e-9, 1e-4) and wv < tol(1e-9, 1e-4)


def test_average_mean_variant(rng):
    W = 12
    X, Y = _stream(rng, 150)
    Y = Y + 5.0
    lrn = gp_window(2, W, mean="average", initial=GPHyper(lengthscale=1.0, noise_std=0.2))
    wm, wv, _ = _check_every_step(lrn, X, Y, W, 1.0, 0.04, 1.0, mean="average")
    assert wm < tol(1e-9, 1e-4) and wv < tol(1e-9, 1e-4)


def _np_hyp(state):
    """float64 ``(σ_f², σ_n², ℓ)`` of a state's stored logs, the noise with the dtype's floor of ``σ_f²``."""
    p = state.params
    sv = np.exp(2.0 * float(p.log_signal_std))
    nv = np.exp(2.0 * float(p.log_noise_std)) + noise_floor_rel(state.y.dtype) * sv
    return sv, nv, np.exp(np.asarray(p.log_lengthscale, np.float64))


def _trend_stream(rng, n, amplitude=3.0):
    """``_stream``'s inputs; targets a linear trend plus ``amplitude`` times the stream's wiggle, noise sd 0.5:
    the defaults (signal 1, noise 0.2) under-explain them, so the window scale ``ĉ`` stays above 1."""
    X, Y = _stream(rng, n, noise=0.5)
    return X, amplitude * Y + X @ [2.0, -1.0] + 3.0


def test_ols_mean_variance_every_step(rng):
    """OLS mean: the predictive mean and variance before every item equal the float64 GP on the window's OLS
    residuals, the variance scaled by ``ĉ`` with the mean's ``d + 1`` coefficients off its degrees of freedom."""
    W = 20
    X, Y = _trend_stream(rng, 120)
    lrn = gp_window(2, W, mean="ols", initial=GPHyper(lengthscale=1.0, noise_std=0.2))
    s0 = lrn.init()
    (wm, _, wrel, c_max), _ = _every_step_errors(lrn, s0, X, Y, W, _np_hyp(s0), mean="ols")
    assert c_max > 1.5, c_max  # the scale is exercised
    assert wm < tol(1e-8, 1e-3) * np.std(Y), wm
    assert wrel < tol(1e-8, 1e-3), wrel


@pytest.mark.parametrize("mean", ["average", "ols"])
def test_freeze_when_full_variance_every_step(rng, mean):
    """``freeze_when_full``: every prediction, mean and variance (with ``ĉ``), is the float64 GP on the items seen
    so far, and once the window is full on the first ``W`` items."""
    W = 16
    X, Y = _trend_stream(rng, 60)
    lrn = gp_window(2, W, mean=mean, initial=GPHyper(lengthscale=1.0, noise_std=0.2),
                    window_options=GPWindowOptions(freeze_when_full=True))
    s0 = lrn.init()
    (wm, _, wrel, c_max), res = _every_step_errors(lrn, s0, X, Y, W, _np_hyp(s0), mean=mean, freeze=True)
    assert int(res.state.n_seen) == W and c_max > 1.5, c_max
    assert wm < tol(1e-8, 1e-3) * np.std(Y), wm
    assert wrel < tol(1e-8, 1e-3), wrel


@pytest.mark.parametrize("mean", ["average", "ols"])
def test_tuned_window_variance_every_step(rng, mean):
    """After a tune, every later prediction (the first one from the rebuilt factor included) is the float64 GP
    with the tuned hyperparameters read from the state; the targets' amplitude then doubles, so ``ĉ`` grows."""
    W, n0 = 24, 40
    X, Y = _trend_stream(rng, n0 + 60)
    Y[n0:] += Y[n0:] - X[n0:] @ [2.0, -1.0] - 3.0  # wiggle and noise twice as large
    lrn = gp_window(2, W, mean=mean, initial=GPHyper(lengthscale=1.0, noise_std=0.2))
    t = lrn.tune(lrn.learn(lrn.init(), X[:n0], Y[:n0]))
    hyp = _np_hyp(t)
    assert int(t.n_tunes) == 1 and not np.allclose(np.hstack(hyp), np.hstack(_np_hyp(lrn.init())))  # it tuned
    (wm, _, wrel, c_max), _ = _every_step_errors(lrn, t, X, Y, W, hyp, mean=mean, start=n0)
    assert c_max > 1.5, c_max
    assert wm < tol(1e-8, 1e-3) * np.std(Y), wm
    assert wrel < tol(1e-8, 1e-3), wrel


def test_ols_mean_variant_matches_windowed_least_squares(rng):
    W = 20
    X, Y = _stream(rng, 100)
    Y = Y + X @ [2.0, -1.0] + 3.0
    lrn = gp_window(2, W, mean="ols", initial=GPHyper(lengthscale=1.0, noise_std=0.2))
    s = lrn.learn(lrn.init(), X, Y)
    Z = np.column_stack([X[-W:], np.ones(W)])
    coef = np.linalg.lstsq(Z, Y[-W:], rcond=None)[0]
    np.testing.assert_allclose(s.mean_coef, coef, rtol=tol(1e-6, 1e-3), atol=tol(1e-8, 1e-3))
    rm, rv = gp_predict(X[-W:], Y[-W:], X[:3], 1.0, 0.04 + noise_floor_rel(s.y.dtype), 1.0, mean_coef=np.asarray(s.mean_coef, np.float64))
    p = lrn.predict(s, X[:3])
    assert np.max(np.abs(np.asarray(p.mean) - rm)) < tol(1e-8, 1e-3)


@pytest.mark.parametrize("n_items", [1, 2, 3, 4, 9])
def test_ols_mean_is_least_squares_while_the_window_fills(rng, n_items):
    """Fewer than d + 1 points: the minimum-norm solution (SVD branch); then the centred-QR one."""
    from onlinejax.learners.gp import mean_coefficients

    W, d = 8, 3
    X = rng.uniform(0, 50, size=(W, d))
    y = X @ [1.0, -2.0, 0.5] + 4.0 + rng.normal(size=W)
    valid = np.arange(W) >= W - n_items
    coef = np.asarray(mean_coefficients("ols", jnp.asarray(X), jnp.asarray(y), jnp.asarray(valid)), np.float64)
    Z = np.column_stack([X, np.ones(W)])[valid]
    ref = np.linalg.lstsq(Z, y[valid], rcond=None)[0]  # minimum norm when rank-deficient
    np.testing.assert_allclose(coef, ref, rtol=tol(1e-8, 2e-3), atol=tol(1e-8, 2e-3) * np.abs(ref).max())
    tiny = mean_coefficients("ols", jnp.asarray(X[:2, :]), jnp.asarray(y[:2]), jnp.ones(2, bool))  # W <= d
    np.testing.assert_allclose(np.asarray(tiny, np.float64), np.linalg.lstsq(np.column_stack([X[:2], np.ones(2)]), y[:2], rcond=None)[0],
                               rtol=tol(1e-8, 2e-3), atol=tol(1e-8, 2e-3))


def test_long_stream_wraps_many_times(rng):
    """5,000 items through a W = 64 window (78 wraps): float64 1e-9 rel, float32 1e-4 at noise var 1e-2."""
    W = 64
    X, Y = _stream(rng, 5000)
    lrn = gp_window(2, W, mean="zero", initial=GPHyper(lengthscale=1.0, noise_std=0.1))
    wm, wv, res = _check_every_step(lrn, X, Y, W, 1.0, 0.01, 1.0)
    assert wm < tol(1e-9, 1e-4) and wv < tol(1e-9, 1e-4)


def test_no_error_accumulation_over_a_long_stream(rng):
    """100,000 items, no periodic rebuild: the last predictions are as accurate as after 5,000 (no drift)."""
    W, n = 64, 100_000
    X, Y = _stream(rng, n, dup_every=11)
    lrn = gp_window(2, W, mean="zero", initial=GPHyper(lengthscale=1.0, noise_std=0.1))
    res = progressive_validation(lrn, lrn.init(), X, Y)
    mu, var = np.asarray(res.predictions.mean, np.float64), np.asarray(res.predictions.var, np.float64)
    nv = 0.01 + noise_floor_rel(res.predictions.mean.dtype)
    for t in range(n - 200, n):
        rm, rv = gp_predict(X[t - W:t], Y[t - W:t], X[t], 1.0, nv, 1.0)
        assert abs(mu[t] - rm[0]) < tol(1e-9, 1e-4) and abs(var[t] - rv[0] - nv) < tol(1e-9, 1e-4), t


def test_hard_case_small_noise_long_lengthscale(rng):
    """noise variance 1e-4, lengthscale 2 (condition number ~1e5): float32 within 1e-2."""
    W = 64
    X, Y = _stream(rng, 2000, noise=0.01, dup_every=11)
    lrn = gp_window(2, W, mean="zero", initial=GPHyper(lengthscale=2.0, noise_std=0.01))
    wm, wv, _ = _check_every_step(lrn, X, Y, W, 1.0, 1e-4, 2.0)
    assert wm < tol(1e-7, 1e-2) and wv < tol(1e-7, 1e-2)


@pytest.mark.parametrize("W", [32, 128])
def test_long_lengthscale_window_stays_accurate(rng, W):
    """The worst case for the sliding factor: a lengthscale 3x the inputs' range makes ``K`` nearly rank
    one, so the condition number sits at the noise floor's bound ``1 + W/floor`` on every step; a floor of a
    few hundred or thousand eps lets the factor lose all accuracy here (``kernels.noise_floor_rel``)."""
    n = W + 400
    X = rng.uniform(0, 10, size=(n, 1))
    Y = 10.0 * np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    lrn = gp_window(1, W, mean="zero", initial=GPHyper(signal_std=10.0, noise_std=1e-6, lengthscale=30.0))
    wm, wv, _ = _check_every_step(lrn, X, Y, W, 100.0, 1e-12, 30.0)
    assert wm < tol(1e-4, 2e-2) * np.std(Y), wm  # std(Y) ~ 7


def test_duplicates_keep_factor_finite(rng):
    X = np.repeat(rng.uniform(0, 1, size=(5, 2)), 20, axis=0)  # each input 20 times in a row
    Y = X.sum(1)
    lrn = gp_window(2, 32, mean="zero", initial=GPHyper(lengthscale=3.0, noise_std=1e-3))
    res = progressive_validation(lrn, lrn.init(), X, Y)
    assert np.all(np.isfinite(np.asarray(res.predictions.var))) and np.all(np.asarray(res.predictions.var) > 0)
    assert np.all(np.isfinite(np.asarray(res.state.inv_chol)))


def test_evict_evicts_oldest(rng):
    W = 10
    X, Y = _stream(rng, 25)
    lrn = gp_window(2, W, mean="zero", initial=GPHyper(lengthscale=1.0, noise_std=0.1))
    for n_items in (25, 6):  # full window, and a partly filled one
        s = lrn.learn(lrn.init(), X[:n_items], Y[:n_items])
        have = min(n_items, W)
        for k in range(1, 4):
            s = lrn.evict(s)
            Xw, Yw = X[n_items - have + k: n_items], Y[n_items - have + k: n_items]
            rm, rv = gp_predict(Xw, Yw, X[:4], 1.0, 0.01 + noise_floor_rel(s.y.dtype), 1.0)
            p = lrn.predict(s, X[:4])
            assert np.max(np.abs(np.asarray(p.mean) - rm)) < tol(1e-9, 1e-4)
            assert np.max(np.abs(np.asarray(p.var) - rv - 0.01 - noise_floor_rel(s.y.dtype))) < tol(1e-9, 1e-4)
        # learning continues consistently after evictions
        s = lrn.learn(s, X[0], Y[0])
        assert int(jnp.sum(s.valid)) == have - 3 + 1


def test_latent_and_observed_variance(rng):
    X, Y = _stream(rng, 30)
    lrn = gp_window(2, 16, mean="zero", initial=GPHyper(noise_std=0.3))
    s = lrn.learn(lrn.init(), X, Y)
    p = lrn.predict(s, X[:2])
    np.testing.assert_allclose(np.asarray(p.var) - np.asarray(latent(s, p).var), float(s.scale * noise_var(s.params)),
                               rtol=1e-5)


def _np_lml(theta, X, y):
    sf, sn, l1, l2 = np.exp(theta)
    r2 = ((X[:, None, 0] - X[None, :, 0]) / l1) ** 2 + ((X[:, None, 1] - X[None, :, 1]) / l2) ** 2
    K = sf ** 2 * np.exp(-0.5 * r2) + (sn ** 2 + noise_floor_rel(jnp.zeros(()).dtype) * sf ** 2) * np.eye(len(y))
    L = np.linalg.cholesky(K)
    a = np.linalg.solve(K, y)
    return -0.5 * y @ a - np.log(np.diag(L)).sum() - 0.5 * len(y) * np.log(2 * np.pi), K, a


def test_lml_and_gradient_match_reference(rng):
    X, Y = _stream(rng, 25)
    valid = np.ones(25, bool)
    valid[:5] = False  # masked slots are ignored
    theta = np.log([1.3, 0.2, 1.7, 0.8])
    p = GPParams(jnp.asarray(theta[0]), jnp.asarray(theta[1]), jnp.asarray(theta[2:]))
    p = jax.tree_util.tree_map(lambda a: a.astype(jnp.zeros(()).dtype), p)
    f = lambda q: log_marginal_likelihood(KERNELS["se"], q, jnp.asarray(X), jnp.asarray(Y), jnp.asarray(valid))  # noqa: E731
    ref, K, a = _np_lml(theta, X[5:], Y[5:])
    assert float(f(p)) == pytest.approx(ref, rel=tol(1e-10, 1e-5))
    g = jax.grad(f)(p)
    g = np.array([float(g.log_signal_std), float(g.log_noise_std), *np.asarray(g.log_lengthscale, np.float64)])
    # thesis eq. 4.30-4.33: dL/dθ = ½ tr((α αᵀ - K⁻¹) dK/dθ)
    Xv = X[5:]
    sf, sn, l1, l2 = np.exp(theta)
    Kf = sf ** 2 * np.exp(-0.5 * (((Xv[:, None, 0] - Xv[None, :, 0]) / l1) ** 2 + ((Xv[:, None, 1] - Xv[None, :, 1]) / l2) ** 2))
    floor = noise_floor_rel(jnp.zeros(()).dtype)
    dK = [2 * Kf + 2 * floor * sf ** 2 * np.eye(20), 2 * sn ** 2 * np.eye(20),
          Kf * ((Xv[:, None, 0] - Xv[None, :, 0]) / l1) ** 2, Kf * ((Xv[:, None, 1] - Xv[None, :, 1]) / l2) ** 2]
    Q = np.outer(a, a) - np.linalg.inv(K)
    ref_g = np.array([0.5 * np.trace(Q @ D) for D in dK])
    np.testing.assert_allclose(g, ref_g, rtol=tol(1e-7, 2e-3), atol=tol(1e-9, 1e-3))
    fd = optimize.approx_fprime(theta, lambda t: _np_lml(t, Xv, Y[5:])[0], 1e-6)
    np.testing.assert_allclose(ref_g, fd, rtol=1e-4, atol=1e-4)


def test_tuning_reaches_scipy_lbfgs(rng):
    """On 20 random windows the optax tune reaches scipy L-BFGS's likelihood within 1e-3 nats per point."""
    W = 32
    worse = []
    ml = GPTuneOptions(noise_floor=0.0, lengthscale_prior=None, from_data=False)  # maximum likelihood from q
    tune = jax.jit(lambda q, X, Y: tune_hyperparameters(KERNELS["se"], "zero", q, X, Y, jnp.ones(W, bool),
                                                        tune_options=ml))
    for trial in range(20):
        X, Y = _stream(rng, W, noise=rng.uniform(0.05, 0.5))
        ls0 = rng.uniform(0.5, 3.0)
        p0 = gp_params(2, 1.0, 0.3, ls0)
        f = lambda q: log_marginal_likelihood(KERNELS["se"], q, jnp.asarray(X), jnp.asarray(Y), jnp.ones(W, bool))  # noqa: E731
        p = tune(p0, jnp.asarray(X), jnp.asarray(Y))
        ours = float(f(p))
        ref = optimize.minimize(lambda t: -_np_lml(t, X, Y)[0], np.array([0.0, np.log(0.3), np.log(ls0), np.log(ls0)]),
                                method="L-BFGS-B", bounds=[(-5, 5), (-9, 3), (-5, 5), (-5, 5)])
        worse.append((-ref.fun - ours) / W)
    assert max(worse) < 1e-3, worse


def test_tune_rebuilds_and_no_recompile(rng):
    from test_progressive import count_compiles

    X, Y = _stream(rng, 80)
    lrn = gp_window(2, 32, mean="zero", initial=GPHyper(noise_std=0.5, lengthscale=5.0))
    s = lrn.learn(lrn.init(), X, Y)
    t = lrn.tune(s)
    assert float(noise_var(t.params)) < 0.1  # true noise 0.01
    rm, _ = gp_predict(X[-32:], Y[-32:], X[:3], float(signal_var(t.params)), float(noise_var(t.params)),
                       np.exp(np.asarray(t.params.log_lengthscale, np.float64)))
    assert np.max(np.abs(np.asarray(lrn.predict(t, X[:3]).mean) - rm)) < tol(1e-8, 2e-3)
    lrn.predict(t, X[0])
    t2 = lrn.learn(t, X[1], Y[1])
    assert count_compiles(lambda: jax.block_until_ready((lrn.tune(t2), lrn.learn(t2, X[2], float(Y[2])),
                                                         lrn.predict(t2, X[3])))) == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="window"):
        gp_window(2, 1)
    with pytest.raises(ValueError, match="kernel"):
        gp_window(2, 8, kernel="rbf2")
    with pytest.raises(ValueError, match="kernel"):
        gp_window(2, 8, kernel=lambda p, x: 0.0)  # not a pair kernel
    with pytest.raises(ValueError, match=r"^tune_options\.method: "):
        gp_window(2, 8, tune_options=GPTuneOptions(method="newton"))
    with pytest.raises(ValueError, match="mean"):
        gp_window(2, 8, mean="median")
    with pytest.raises(ValueError, match="noise_std"):
        gp_window(2, 8, initial=GPHyper(noise_std=0.0))
    with pytest.raises(ValueError, match="lengthscale"):
        gp_window(2, 8).init(lengthscale=-1.0)


def test_batch_gp_baseline_freezes_after_first_window(rng):
    X, Y = _stream(rng, 60)
    lrn = gp_window(2, 20, mean="zero", initial=GPHyper(lengthscale=1.0, noise_std=0.1),
                    window_options=GPWindowOptions(freeze_when_full=True))
    s = lrn.learn(lrn.init(), X, Y)
    rm, rv = gp_predict(X[:20], Y[:20], X[50:53], 1.0, 0.01 + noise_floor_rel(s.y.dtype), 1.0)
    p = lrn.predict(s, X[50:53])
    assert np.max(np.abs(np.asarray(p.mean) - rm)) < tol(1e-9, 1e-4)
    assert int(s.n_seen) == 20


def test_vmap_over_streams_and_hyperparameters(rng):
    lrn = gp_window(2, 8, mean="zero")
    Xs = rng.uniform(0, 5, size=(3, 30, 2))
    Ys = np.sin(Xs).sum(-1)
    states = jax.vmap(lambda l: lrn.init(lengthscale=l))(jnp.asarray([0.5, 1.0, 2.0]))
    out = jax.vmap(lambda s, X, Y: progressive_validation(lrn, s, X, Y).predictions.mean)(states, Xs, Ys)
    one = progressive_validation(lrn, lrn.init(lengthscale=2.0), Xs[2], Ys[2]).predictions.mean
    assert rel_err(out[2], one) < tol(1e-12, 1e-5)


@pytest.mark.parametrize("name", ["se", "matern32", "matern52"])
def test_gram_fast_path_equals_the_vmapped_pair_kernel(name, rng):
    """gram() evaluates built-in kernels from the r² matrix; it must equal lifting the pair kernel, with gradients."""
    from onlinejax.learners.gp.kernels import cross, gp_params

    kern = KERNELS[name]
    X1 = jnp.asarray(rng.uniform(0, 3, (7, 2)), DTYPE)
    X2 = jnp.concatenate([X1[:3], jnp.asarray(rng.uniform(0, 3, (4, 2)), DTYPE)])  # duplicates: r = 0
    p = gp_params(2, signal_std=1.3, noise_std=0.1, lengthscale=jnp.asarray([0.7, 1.9], DTYPE))

    def lifted(q):
        return jax.vmap(lambda a: cross(kern, q, X2, a))(X1)

    np.testing.assert_allclose(np.asarray(gram(kern, p, X1, X2)), np.asarray(lifted(p)), rtol=tol(1e-13, 1e-6))
    G = jnp.asarray(rng.normal(size=(7, 7)), DTYPE)
    g1 = jax.grad(lambda q: jnp.sum(G * gram(kern, q, X1, X2)))(p)
    g2 = jax.grad(lambda q: jnp.sum(G * lifted(q)))(p)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
        assert np.all(np.isfinite(np.asarray(a)))


@pytest.mark.float32_only  # which starts a tune runs; the tune's numerics are tested in both dtypes
def test_later_tunes_use_retune_restarts(rng):
    """The first tune runs every start; later ones only ``retune_restarts`` (n_active), without recompiling."""
    X, Y = _stream(rng, 40)
    opts = GPTuneOptions(restarts=3, retune_restarts=1, steps=8)
    lrn = gp_window(2, 32, mean="zero", initial=GPHyper(noise_std=0.5, lengthscale=5.0), tune_options=opts)
    s = lrn.learn(lrn.init(), X, Y)
    kfn = KERNELS["se"]
    args = (s.X, s.y, s.valid)
    t1 = lrn.tune(s)
    # both compiled, so that float32 rounding follows the same fused program as far as XLA allows
    ref1 = jax.jit(lambda q: tune_hyperparameters(kfn, "zero", q, *args, tune_options=opts))(s.params)
    def chex_close(a, b, rtol=tol(1e-10, 1e-4)):
        np.testing.assert_allclose(np.asarray(a.log_lengthscale), np.asarray(b.log_lengthscale), rtol=rtol)
    chex_close(t1.params, ref1)
    assert int(t1.n_tunes) == 1
    t2 = lrn.tune(t1._replace(params=t1.params._replace(log_noise_std=t1.params.log_noise_std + 1.0)))
    p_shift = t1.params._replace(log_noise_std=t1.params.log_noise_std + 1.0)
    # one active start out of the three compiled (the learner's program), against one start alone
    chex_close(t2.params, jax.jit(lambda q: tune_hyperparameters(kfn, "zero", q, *args, tune_options=opts,
                                                                 n_active=1))(p_shift))
    chex_close(t2.params, tune_hyperparameters(kfn, "zero", p_shift, *args, tune_options=opts._replace(restarts=1)),
               rtol=1e-2)
    assert int(t2.n_tunes) == 2
    with pytest.raises(ValueError, match=r"^tune_options\.retune_restarts: "):
        gp_window(2, 8, tune_options=GPTuneOptions(retune_restarts=0))


def _np_neg_lml(X, y, p):
    """float64 numpy: ``-log N(y | 0, σ_f² K_SE + σ_n²·I)`` (R&W eq. 2.30) at :class:`GPParams` ``p``."""
    from onlinejax.learners.gp.params import noise_var

    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    u = X / np.exp(np.asarray(p.log_lengthscale, np.float64))
    K = np.exp(2.0 * float(p.log_signal_std)) * np.exp(-0.5 * ((u[:, None] - u[None]) ** 2).sum(-1))
    K += float(noise_var(p)) * np.eye(len(y))
    sign, logdet = np.linalg.slogdet(K)
    return 0.5 * (y @ np.linalg.solve(K, y) + logdet + len(y) * np.log(2 * np.pi))


@pytest.mark.float32_only  # which starts a tune runs; the tune's numerics are tested in both dtypes
def test_retune_from_initial_starts_the_second_tune_also_from_the_initial_hyperparameters(rng):
    """With ``retune_from_initial`` the second tune, begun from a lengthscale 150× too long (where the likelihood
    has no gradient in it: a tune from there stays), also starts from the initial hyperparameters and ends at a
    marginal likelihood as good as the better of one start from each (float64 numpy); the third runs one start."""
    X, Y = _stream(rng, 32, noise=0.3)
    opts = GPTuneOptions(restarts=2, steps=20, noise_floor=0.0, lengthscale_prior=None, from_data=False)
    initial = GPHyper(noise_std=0.3, lengthscale=2.0)
    lrn = gp_window(2, 32, mean="zero", initial=initial, tune_options=opts._replace(retune_from_initial=True))
    plain = gp_window(2, 32, mean="zero", initial=initial, tune_options=opts)
    s = lrn.learn(lrn.init(), X, Y)
    t1 = lrn.tune(s)
    stuck = t1._replace(params=t1.params._replace(log_lengthscale=t1.params.log_lengthscale + 5.0))
    t2, t2_plain = lrn.tune(stuck), plain.tune(stuck)
    assert int(t2.n_tunes) == 2
    kfn, args = KERNELS["se"], (s.X, s.y, s.valid)
    one = opts._replace(restarts=1)
    from_stuck = tune_hyperparameters(kfn, "zero", stuck.params, *args, tune_options=one)
    from_initial = tune_hyperparameters(kfn, "zero", lrn.init().params, *args, tune_options=one)
    nll = [_np_neg_lml(X, Y, q) for q in (t2.params, t2_plain.params, from_stuck, from_initial)]
    assert nll[0] <= min(nll[2], nll[3]) + 1e-3 * abs(nll[3])
    assert nll[1] > nll[3] + 1.0  # without the option the second tune stays where it began
    third = lrn.tune(t2._replace(params=stuck.params))  # one start: from where it is
    np.testing.assert_allclose(_np_neg_lml(X, Y, third.params), nll[2], rtol=1e-3)
    with pytest.raises(TypeError, match=r"tune_options\.retune_from_initial"):
        gp_window(2, 8, tune_options=GPTuneOptions(retune_from_initial=1))
    with pytest.raises(ValueError, match=r"^tune_options\.retune_from_initial: needs restarts >= 2"):
        gp_window(2, 8, tune_options=GPTuneOptions(restarts=1, retune_restarts=1, retune_from_initial=True))


# --- issue 23: overconfident tuned windows --------------------------------------------------------
# A window on raw-scale data (4 inputs of scale 50, targets ~3e4 ± 1e4) with the unit-scale defaults
# (signal 1, noise 0.1, lengthscale 1), like the thesis grid's 4-d streams of scale 50. One learner (the
# mean read from the state) serves both means.
_RAW_W = 48


def _raw_stream(rng, n):
    X = rng.uniform(0, 50, size=(n, 4))
    F = np.sin(X[:, 0] / 10.0) + np.cos(X[:, 1] / 10.0) + np.sin((X[:, 2] + X[:, 3]) / 15.0)
    return X, 3e4 + 1e4 * F + 100.0 * rng.normal(size=n)


@pytest.fixture(scope="module")
def raw_windows():
    """``{mean: (learner, untuned state after W items, their predictions, tuned state)}`` and fresh items."""
    rng = np.random.default_rng(23)
    X, Y = _raw_stream(rng, _RAW_W + 200)
    lrn = gp_window(4, _RAW_W, window_options=GPWindowOptions(mean_from_state=True))
    out = {}
    for mean in ("zero", "average"):
        res = progressive_validation(lrn, lrn.init(mean=mean), X[:_RAW_W], Y[:_RAW_W])
        out[mean] = (lrn, res.state, res.predictions, lrn.tune(res.state))
    return out, X, Y


@pytest.mark.parametrize("mean", ["zero", "average"])
def test_untuned_window_variance_follows_the_targets_scale(raw_windows, mean):
    """Before the first tune the predictive variance is scaled by the window's ``ĉ``: with the unit defaults on
    targets of scale 3e4 the cold-start items' z² would otherwise be of the order of the targets' variance."""
    out, X, Y = raw_windows
    lrn, s, pred, _ = out[mean]
    z2 = (Y[:_RAW_W] - np.asarray(pred.mean, np.float64)) ** 2 / np.asarray(pred.var, np.float64)
    assert 0.05 < np.mean(z2[3:]) < 20.0, np.mean(z2[3:])
    # the state's scale is the float64 reference on the window
    p = s.params
    sv, nv = float(signal_var(p)), float(noise_var(p))
    ls = np.exp(np.asarray(p.log_lengthscale, np.float64))
    Xw, Yw = X[:_RAW_W], Y[:_RAW_W]
    coef = None if mean == "zero" else np.r_[np.zeros(4), Yw.mean()]
    ref = _np_scale(Xw, Yw, sv, nv, ls, "se", coef, {"zero": 0, "average": 1}[mean])
    assert float(s.scale) == pytest.approx(ref, rel=tol(1e-8, 1e-3))


@pytest.mark.parametrize("mean", ["zero", "average"])
def test_tune_from_unit_defaults_leaves_the_white_noise_plateau(raw_windows, mean):
    """The tune starts from the window's statistics. From lengthscale 1 on 4 inputs of scale 50 every pair of
    points is ~20 lengthscales apart, the likelihood is flat in the lengthscales, and a tune from there stops
    at a white-noise fit predicting the mean function everywhere."""
    out, X, Y = raw_windows
    lrn, _, _, t = out[mean]
    p = lrn.predict(t, X[_RAW_W:])
    e = Y[_RAW_W:] - np.asarray(p.mean, np.float64)
    assert np.mean(e ** 2) / np.var(Y[_RAW_W:]) < 0.4
    assert np.all(np.exp(np.asarray(t.params.log_lengthscale, np.float64)) > 5.0)
    assert 0.02 < np.mean(e ** 2 / np.asarray(p.var, np.float64)) < 3.0


def test_noise_floor_bounds_the_overconfidence_after_a_jump(rng):
    """OLS mean on noise-free linear targets: without a floor the tune puts the noise at the dtype's floor of a
    collapsed signal variance, so a jump of one target sd scores a huge |z|, and so does learning the new
    concept (hyperparameters of the old one). σ_n² >= f·var(y) bounds |z| by 1/√f and ``ĉ`` widens the
    predictions while the new concept fills the window."""
    W = 32
    X = rng.uniform(0, 10, size=(W + 16, 2))
    Y = 50.0 * X[:, 0] - 20.0 * X[:, 1] + 7.0
    lrn = gp_window(2, W, mean="ols")
    s = lrn.tune(lrn.learn(lrn.init(), X[:W], Y[:W]))
    var_y = np.var(Y[:W])
    assert float(noise_var(s.params)) >= NOISE_FLOOR * var_y * (1 - tol(1e-9, 1e-4))
    Y2 = Y + np.sqrt(var_y)  # the next concept: shifted by one standard deviation
    res = progressive_validation(lrn, s, X[W:], Y2[W:])
    z = np.abs(Y2[W:] - np.asarray(res.predictions.mean, np.float64)) / np.sqrt(np.asarray(res.predictions.var, np.float64))
    assert z[0] <= 1.05 / np.sqrt(NOISE_FLOOR), z[0]
    assert np.all(z[4:] < 10.0), z


def test_map_tune_reaches_scipy_on_the_same_objective(rng):
    """With the noise floor and the lengthscale prior, the tune reaches scipy L-BFGS's optimum of the float64
    objective (log marginal likelihood + log prior, noise variance = excess + f·var(y)) within 1e-3 per point."""
    W, f, s_l = 32, 0.05, 1.0
    opts = GPTuneOptions(noise_floor=f, lengthscale_prior=s_l)
    tune = jax.jit(lambda q, X, Y: tune_hyperparameters(KERNELS["se"], "zero", q, X, Y, jnp.ones(W, bool),
                                                        tune_options=opts))
    floor_rel = noise_floor_rel(jnp.zeros(()).dtype)

    def objective(sf, sn2, ls, X, Y):  # sn2: the noise variance before the dtype's floor
        K = _np_gram(X, X, sf ** 2, ls) + (sn2 + floor_rel * sf ** 2) * np.eye(W)
        L = np.linalg.cholesky(K)
        lml = -0.5 * Y @ np.linalg.solve(K, Y) - np.log(np.diag(L)).sum() - 0.5 * W * np.log(2 * np.pi)
        return lml - 0.5 * np.sum(((np.log(ls) - np.log(X.std(0))) / s_l) ** 2)

    worse = []
    for trial in range(5):
        X, Y = _stream(rng, W, noise=0.02)
        X = X * 3.0
        p = tune(gp_params(2, 1.0, 0.1, 1.0), jnp.asarray(X), jnp.asarray(Y))
        sn2 = float(jnp.exp(2.0 * p.log_noise_std))
        assert sn2 >= f * np.var(Y) * (1 - tol(1e-9, 1e-4))
        ours = objective(float(jnp.exp(p.log_signal_std)), sn2, np.exp(np.asarray(p.log_lengthscale, np.float64)), X, Y)
        ref = optimize.minimize(lambda t: -objective(np.exp(t[0]), np.exp(2 * t[1]) + f * np.var(Y), np.exp(t[2:]), X, Y),
                                np.array([0.0, np.log(0.1), *np.log(X.std(0))]), method="L-BFGS-B",
                                bounds=[(-5, 5), (-12, 3), (-5, 5), (-5, 5)])
        worse.append((-ref.fun - ours) / W)
    assert max(worse) < 1e-3, worse


def test_a_constant_input_keeps_its_lengthscale_through_a_tune(rng):
    """A window in which one input is stuck (a stuck sensor) says nothing about that input's lengthscale, so a
    tune leaves it where it was. Its sample sd there is rounding noise, not 0; a prior centred on it gave a
    lengthscale of ~1e-7, and once the input moved again every new value was unseen (the GP predicted its mean)."""
    W = 32
    X = np.stack([np.full(W, 0.7310586), rng.uniform(-2, 2, W)], axis=1)
    Y = np.sin(2.0 * X[:, 1]) + 0.1 * rng.normal(size=W)
    lrn = gp_window(2, W, initial=GPHyper(lengthscale=0.8))
    s = lrn.learn(lrn.init(), X, Y)
    t = lrn.tune(s)
    assert float(t.n_tunes) == 1
    assert abs(float(t.params.log_lengthscale[0]) - np.log(0.8)) < tol(1e-12, 1e-6)
    assert abs(float(t.params.log_lengthscale[1]) - np.log(0.8)) > 0.05  # the other input was tuned
    w = tune_window("average", jnp.asarray(X), jnp.asarray(Y), jnp.ones(W, bool))
    assert w.spread.tolist() == [False, True]
    starts = _restart_starts(s.params, 3, w.spread)  # no restart moves the stuck input's lengthscale
    assert np.all(np.asarray(starts.log_lengthscale[:, 0]) == np.asarray(s.params.log_lengthscale[0]))
    # the input moving again (by an eighth of its lengthscale) changes the prediction as the kernel says, no more
    x_new = np.array([[0.7310586 + 0.1, 0.3]])
    m_old = float(lrn.predict(t, np.array([[0.7310586, 0.3]])).mean[0])
    assert abs(float(lrn.predict(t, x_new).mean[0]) - m_old) < 0.1 * np.std(Y)


def test_new_knobs_are_checked():
    with pytest.raises(ValueError, match=r"^tune_options\.noise_floor: "):
        gp_window(2, 8, tune_options=GPTuneOptions(noise_floor=-1e-3))
    with pytest.raises(ValueError, match=r"^tune_options\.lengthscale_prior: "):
        gp_window(2, 8, tune_options=GPTuneOptions(lengthscale_prior=0.0))
    with pytest.raises(ValueError, match=r"^tune_options\.noise_floor: "):
        tune_hyperparameters(KERNELS["se"], "zero", gp_params(1), jnp.zeros((4, 1)), jnp.zeros(4), jnp.ones(4, bool),
                             tune_options=GPTuneOptions(noise_floor=float("nan")))


def test_wrong_shape_hyperparameters_are_named():
    """A [3] lengthscale for d = 2 used to fail in broadcasting with no argument named."""
    with pytest.raises(ValueError, match=r"^lengthscale: .*shape \[2\]"):
        gp_window(2, window=8).init(lengthscale=jnp.ones(3))
    with pytest.raises(ValueError, match=r"^initial\.lengthscale: "):
        gp_window(2, window=8, initial=GPHyper(lengthscale=[1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match=r"^noise_std: must be a scalar"):
        gp_params(2, noise_std=jnp.ones(2))
    p = gp_params(2, lengthscale=[1.0, 2.0])
    np.testing.assert_allclose(np.exp(np.asarray(p.log_lengthscale)), [1.0, 2.0], rtol=1e-6)

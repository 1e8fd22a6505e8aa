from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.learners import kernel_regression as kr
from onlinejax.learners.kernel_regression import (THESIS_ALPHAS, KernelRegressionOptions, kernel_regression, loo_cv_scores,
                                                  residual_variance, window_sums)
from onlinejax.evaluation.progressive import progressive_validation
from conftest import DTYPE, X64, tol
from reference import ll_loo_cv, nw_loo_cv, nw_window_reference, rel_err, ridged_line_intercept


def _no_info(yw, mean):
    """Float64 climatology cap of the module doc: c_n s_y² + (ȳ - m̂)², c_n = (1 + 1/n) r_ν, ν = n - 1:
    r_ν = ν/(ν - 2) for ν >= 3, the squared ratio of the t and normal 97.5 % quantiles for ν = 1, 2."""
    from scipy.stats import norm, t

    yw = np.asarray(yw, np.float64)
    n = len(yw)
    nu = n - 1
    r = nu / (nu - 2) if nu >= 3 else (t.ppf(0.975, nu) / norm.ppf(0.975)) ** 2
    return (1 + 1 / n) * r * np.var(yw, ddof=1) + (yw.mean() - mean) ** 2


def _windows(X, Y, W):
    """The window (oldest first) before each item i: items max(0, i-W)..i-1."""
    return [(X[max(0, i - W):i], Y[max(0, i - W):i]) for i in range(len(Y))]


def _sums_in_time_order(state_rec, W, i):
    """Sums after learning item i, reordered oldest first (ring slot of item j is j % W)."""
    lo = max(0, i + 1 - W)
    slots = np.arange(lo, i + 1) % W
    return state_rec[0][i][slots], state_rec[1][i][slots]


@pytest.mark.parametrize("bounds", [pytest.param("asymptotic", marks=pytest.mark.slow), "exact",
                                    pytest.param("thesis", marks=pytest.mark.slow)])  # the same update; CI time
def test_matches_from_scratch_after_every_step(rng, bounds):
    """5,000 items through W = 64 (78 wraps), with repeated inputs and a tune half way."""
    n, d, W = 5000, 2, 64
    X = rng.uniform(0, 3, (n, d))
    X[1000:1100] = X[900:1000]  # exact duplicates inside the window
    X[2000:2050, 0] = 1.5  # a constant coordinate
    Y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=n)
    lrn = kernel_regression(d, W, lengthscale=0.5, options=KernelRegressionOptions(bounds, "confidence"))
    lrn_p = kernel_regression(d, W, lengthscale=0.5, options=KernelRegressionOptions(bounds, "prediction"))
    rec = lambda s: (s.density, s.contribution)
    half = 2500
    s0 = lrn.init()
    r1 = progressive_validation(lrn, s0, X[:half], Y[:half], record=rec)
    s_t = lrn.tune(r1.state)
    assert float(s_t.bandwidth_scale) > 0  # the tune picked a bandwidth from the grid
    r2 = progressive_validation(lrn, s_t, X[half:], Y[half:], record=rec)
    mean = np.concatenate([r1.predictions.mean, r2.predictions.mean])
    var = np.concatenate([r1.predictions.var, r2.predictions.var])
    D = np.concatenate([r1.records[0], r2.records[0]])
    C = np.concatenate([r1.records[1], r2.records[1]])
    # the prediction-interval variant adds exactly the residual variance
    rp = progressive_validation(lrn_p, s0, X[:half], Y[:half])
    A0, A1 = np.asarray(s0.whiten), np.asarray(s_t.whiten)
    t_m, t_v, t_s = tol(1e-10, 2e-5), tol(1e-9, 2e-3), tol(1e-10, 1e-5)
    for i in range(1, n):
        A = A0 if i < half else A1
        lo = max(0, i - W)
        ref = nw_window_reference(A, X[lo:i], Y[lo:i], X[i])
        scale = np.max(np.abs(Y[lo:i])) + 1e-12
        assert abs(mean[i] - ref["mean"]) <= t_m * scale, (i, mean[i], ref["mean"])
        if i >= 2:
            # the bounds, capped by the window's climatology where they exceed it (module doc)
            cap = _no_info(Y[lo:i], ref["mean"])
            assert rel_err(var[i], min(ref[bounds], cap)) <= t_v, (i, var[i], ref[bounds], cap)
        if i < half and i >= 2:
            exp_p = min(ref[bounds] + ref["sigma2"], max(cap, ref["sigma2"]))
            assert rel_err(rp.predictions.var[i], exp_p) <= t_v, i
        # incrementally maintained sums after learning item i == from scratch on the window
        lo2 = max(0, i + 1 - W)
        slots = np.arange(lo2, i + 1) % W
        ref2 = nw_window_reference(A, X[lo2:i + 1], Y[lo2:i + 1])
        assert np.max(np.abs(D[i][slots] - ref2["D"]) / ref2["D"]) <= t_s * W, i
        assert np.max(np.abs(C[i][slots] - ref2["C"])) <= t_s * W * (np.abs(ref2["C"]).max() + 1), i


def test_newest_point_is_counted_in_its_own_and_others_sums():
    """The thesis code's loops skipped the newest point; two identical points must give D = 2 each."""
    lrn = kernel_regression(1, 4)
    s = lrn.learn(lrn.init(), [0.0], 1.0)
    s = lrn.learn(s, [0.0], 3.0)
    np.testing.assert_allclose(np.asarray(s.density)[:2], [2.0, 2.0])
    np.testing.assert_allclose(np.asarray(s.contribution)[:2], [4.0, 4.0])


def test_far_query_no_nan_and_nearest_neighbour_limit():
    lrn = kernel_regression(2, 8, lengthscale=0.1)
    s = lrn.init()
    for x, y in [([0.0, 0.0], 1.0), ([1.0, 0.0], 2.0), ([0.0, 1.0], 3.0)]:
        s = lrn.learn(s, x, y)
    p = lrn.predict(s, [1000.0, 0.0])  # every kernel value underflows to 0 in linear space
    assert np.isfinite(float(p.mean)) and np.isfinite(float(p.var))
    assert float(p.mean) == pytest.approx(2.0, abs=1e-6)  # the nearest point dominates
    # the bounds know nothing there: the window's climatology about the prediction (s_y² = 1, n = 3)
    assert float(p.var) == pytest.approx(_no_info([1.0, 2.0, 3.0], 2.0), rel=tol(1e-12, 1e-6))
    # an empty window predicts the prior N(0, prior_var), never NaN
    p0 = lrn.predict(lrn.init(), [0.0, 0.0])
    assert float(p0.mean) == 0.0 and float(p0.var) == 1.0


def test_loo_scores_and_tuned_alpha_equal_brute_force(rng):
    W, d = 24, 2
    X = rng.uniform(0, 10, (W, d)) @ np.array([[1.0, 0.3], [0.0, 0.5]])
    Y = np.sin(X[:, 0]) + 0.2 * X[:, 1] + 0.1 * rng.normal(size=W)
    alphas = THESIS_ALPHAS[::7]
    ref = nw_loo_cv(X, Y, alphas)
    scores, _ = loo_cv_scores(jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE), jnp.ones(W, bool), jnp.asarray(alphas, DTYPE))
    np.testing.assert_allclose(np.asarray(scores), ref, rtol=tol(1e-10, 1e-4))
    # a partly filled window (invalid slots hold garbage) scores like its valid rows alone
    valid = np.arange(W) % 3 != 0
    Xg, Yg = X.copy(), Y.copy()
    Xg[~valid], Yg[~valid] = 1e6, -1e6
    part, _ = loo_cv_scores(jnp.asarray(Xg, DTYPE), jnp.asarray(Yg, DTYPE), jnp.asarray(valid), jnp.asarray(alphas, DTYPE))
    np.testing.assert_allclose(np.asarray(part), nw_loo_cv(X[valid], Y[valid], alphas), rtol=tol(1e-10, 1e-4))
    # tuned α == brute-force argmin over the full thesis grid; H = α·COV
    full = nw_loo_cv(X, Y, THESIS_ALPHAS)
    lrn = kernel_regression(d, W, lengthscale=100.0)  # a bad start, so the tune must move
    s = lrn.init()
    for i in range(W):
        s = lrn.learn(s, X[i], Y[i])
    t = lrn.tune(s)
    assert float(t.bandwidth_scale) == pytest.approx(THESIS_ALPHAS[np.argmin(full)], abs=1e-6)
    H = np.linalg.inv(np.asarray(t.whiten, np.float64).T @ np.asarray(t.whiten, np.float64))
    np.testing.assert_allclose(H, THESIS_ALPHAS[np.argmin(full)] * np.cov(X.T, ddof=1), rtol=tol(1e-6, 1e-3))
    # sums rebuilt for the new bandwidth
    D, C = window_sums(t.whiten, t.buffer.x, t.buffer.y, t.buffer.valid)
    np.testing.assert_allclose(np.asarray(t.density), np.asarray(D), rtol=tol(1e-12, 1e-5))
    # a second tune keeps the bandwidth (no α is strictly better than the current one)
    t2 = lrn.tune(t)
    np.testing.assert_array_equal(np.asarray(t2.whiten), np.asarray(t.whiten))


def test_evict_evicts_oldest(rng):
    W = 6
    X = rng.uniform(0, 1, (9, 2))
    Y = rng.normal(size=9)
    lrn = kernel_regression(2, W, lengthscale=0.3)
    s = lrn.init()
    for i in range(9):
        s = lrn.learn(s, X[i], Y[i])
    s = lrn.evict(lrn.evict(s))  # window was items 3..8; now 5..8
    assert int(s.buffer.count) == 4
    ref = nw_window_reference(s.whiten, X[5:9], Y[5:9], X[0])
    slots = np.arange(5, 9) % W
    np.testing.assert_allclose(np.asarray(s.density)[slots], ref["D"], rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(np.asarray(s.contribution)[slots], ref["C"], rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    p = lrn.predict(s, X[0])
    assert float(p.mean) == pytest.approx(ref["mean"], rel=tol(1e-10, 1e-5))
    empty = s
    for _ in range(6):
        empty = lrn.evict(empty)  # popping an empty window is a no-op
    assert int(empty.buffer.count) == 0 and not np.any(np.asarray(empty.buffer.valid))


def test_batch_learn_equals_sequential_and_vmap_over_streams(rng):
    lrn = kernel_regression(2, 16, lengthscale=0.4)
    Xs = rng.uniform(0, 1, (3, 50, 2))
    Ys = rng.normal(size=(3, 50))
    s = lrn.learn(lrn.init(), Xs[0], Ys[0])
    t = lrn.init()
    for i in range(50):
        t = lrn.learn(t, Xs[0, i], Ys[0, i])
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), s, t)
    run = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions))
    P = run(jnp.asarray(Xs, DTYPE), jnp.asarray(Ys, DTYPE))
    for k in range(3):
        p = progressive_validation(lrn, lrn.init(), Xs[k], Ys[k]).predictions
        np.testing.assert_allclose(np.asarray(P.mean[k]), np.asarray(p.mean), rtol=tol(1e-12, 1e-5), atol=1e-6)


def test_no_recompile_and_nonfinite_skip(rng):
    from test_progressive import count_compiles

    lrn = kernel_regression(2, 8)
    s = lrn.init()
    X = rng.uniform(size=(10, 2))
    s = lrn.learn(s, X[0], 1.0)
    jax.block_until_ready((lrn.predict(s, X[1]), lrn.tune(s), lrn.step(s, X[1], 0.5)))
    s2 = lrn.learn(s, X[2], np.float64(2.0))
    assert count_compiles(lambda: jax.block_until_ready(
        (lrn.learn(s2, X[3], 3), lrn.predict(s2, X[4]), lrn.tune(s2), lrn.step(s2, X[5], np.float32(1.0))))) == 0
    # under jit a NaN item is skipped, never learned
    f = jax.jit(lrn.learn)
    t = f(s2, jnp.asarray([jnp.nan, 0.0], DTYPE), jnp.asarray(1.0, DTYPE))
    assert int(t.n_skipped) == 1 and int(t.buffer.count) == int(s2.buffer.count)


def test_bad_arguments():
    with pytest.raises(ValueError, match="window"):
        kernel_regression(2, 1)
    with pytest.raises(ValueError, match="bounds"):
        kernel_regression(2, 8, options=KernelRegressionOptions(bounds="wide"))
    with pytest.raises(ValueError, match="interval"):
        kernel_regression(2, 8, options=KernelRegressionOptions(interval="both"))
    with pytest.raises(ValueError, match="lengthscale"):
        kernel_regression(2, 8, lengthscale=-1.0)
    with pytest.raises(ValueError, match="alphas"):
        kernel_regression(2, 8, options=KernelRegressionOptions(alphas=(0.1, 0.0)))
    with pytest.raises(ValueError, match="options.local"):
        kernel_regression(2, 8, options=KernelRegressionOptions(local="quadratic"))
    lrn = kernel_regression(2, 8)
    with pytest.raises(ValueError, match="x"):
        lrn.learn(lrn.init(), [1.0, 2.0, 3.0], 1.0)
    with pytest.raises(ValueError, match="y"):
        lrn.learn(lrn.init(), [1.0, 2.0], float("nan"))


@pytest.mark.parametrize("q", [10.0, 1e4, 1e10, 1e20, 1e30, -1e30, "max", "-max"])
def test_far_query_averages_equidistant_targets(q):
    """Issue 23: y = 1..4 at x = 0 predicted 10.0 (the sum) at x = 1e4 and NaN at 1e20 (float32 log-sum-exp).

    In the limit the Nadaraya–Watson weights of the nearest points are equal, so the mean is their
    average, and the variance is the window's climatology about it (module doc), finite.
    """
    if isinstance(q, str):  # the largest finite query of the dtype
        q = float(np.finfo(DTYPE).max) * (-1.0 if q.startswith("-") else 1.0)
    lrn = kernel_regression(1, 4)
    s = lrn.init()
    for y in [1.0, 2.0, 3.0, 4.0]:
        s = lrn.learn(s, [0.0], y)
    p = lrn.predict(s, [q])
    assert float(p.mean) == pytest.approx(2.5, rel=tol(1e-14, 1e-6))
    # D_i = 4, fit 2.5, RSS = 5, df = 4 - 1: σ̂² = 5/3 < c_4 s_y² = (5/4)·3·(5/3)
    assert float(p.var) == pytest.approx(_no_info([1.0, 2.0, 3.0, 4.0], 2.5), rel=tol(1e-12, 1e-6))
    # two equidistant nearest points of a 2-d window share the weight; a farther point gets none
    lrn2 = kernel_regression(2, 8)
    t = lrn2.learn(lrn2.init(), np.array([[0.0, 1.0], [0.0, -1.0], [-5.0, 0.0]]), np.array([1.0, 3.0, 10.0]))
    p2 = lrn2.predict(t, [abs(q), 0.0])
    assert float(p2.mean) == pytest.approx(2.0, rel=tol(1e-12, 1e-5))
    assert np.isfinite(float(p2.var)) and 0 < float(p2.var) <= _no_info([1.0, 3.0, 10.0], 2.0) * (1 + tol(1e-12, 1e-5))


def test_loo_score_of_far_equidistant_points_averages():
    """The tune's score of the current bandwidth used the same float32 log-sum-exp: compare with float64."""
    from onlinejax.learners.kernel_regression import _loo_score

    X = np.array([[0.0], [0.0], [0.0], [1e9]])
    Y = np.array([1.0, 2.0, 4.0, 0.0])
    q = (X - X.T) ** 2
    logK = jnp.asarray(-0.5 * q, DTYPE)
    got = float(_loo_score(logK, jnp.asarray(Y, DTYPE), jnp.ones(4, bool)))
    # LOO means: (2+4)/2, (1+4)/2, (1+2)/2 for the duplicates; the far point gets their average 7/3
    ref = np.mean([(3.0 - 1) ** 2, (2.5 - 2) ** 2, (1.5 - 4) ** 2, (7 / 3) ** 2])
    assert got == pytest.approx(ref, rel=tol(1e-12, 1e-6))
    huge = jnp.where(jnp.asarray(q > 0), -jnp.inf, 0.0).astype(DTYPE)  # every distinct pair overflowed
    assert float(_loo_score(huge, jnp.asarray(Y, DTYPE), jnp.ones(4, bool))) == pytest.approx(
        np.mean([4.0, 0.25, 6.25]), rel=tol(1e-12, 1e-6))  # the far point has no LOO estimate


def _regularised_whitening_reference(X, floor=1e-3):
    """Float64 numpy: H₁⁻¹ = AᵀA of the module doc (constant columns dropped, correlation eigenvalues floored)."""
    X = np.asarray(X, np.float64)
    cov = np.cov(X.T, ddof=1).reshape(X.shape[1], X.shape[1])
    sd = np.sqrt(np.diag(cov))
    keep = sd > 0
    P = np.zeros_like(cov)
    R = cov[np.ix_(keep, keep)] / np.outer(sd[keep], sd[keep])
    lam, V = np.linalg.eigh(R)
    R = (V * np.maximum(lam, floor)) @ V.T
    P[np.ix_(keep, keep)] = np.linalg.inv(R) / np.outer(sd[keep], sd[keep])
    return P


def test_whitening_of_constant_and_collinear_windows(rng):
    """Issue 23: a constant window gave A ≈ 1/sqrt(eps·tr + sqrt(tiny)) (10⁷–10⁷⁷): every query was far."""
    from onlinejax.learners.kernel_regression import covariance_whitening

    W = 32
    x = rng.uniform(0, 1, W)
    cases = {
        "constant": np.full((W, 1), 0.37),
        "constant column": np.c_[x, np.full(W, 1e6 + 0.25)],
        "duplicated column": np.c_[x, x],
        "collinear, different scales": np.c_[x, 1e4 * x + 3.0, rng.uniform(-1e-4, 1e-4, W)],
        "well conditioned, different scales": np.c_[x, 1e4 * rng.uniform(0, 1, W), 1e-4 * rng.uniform(0, 1, W)],
    }
    for name, X in cases.items():
        A = np.asarray(covariance_whitening(jnp.asarray(X, DTYPE), jnp.ones(W, bool)), np.float64)
        assert np.all(np.isfinite(A)) and np.allclose(A, np.tril(A)), name
        P, P_ref = A.T @ A, _regularised_whitening_reference(X)
        dg = np.where(np.diag(P_ref) > 0, np.diag(P_ref), 1.0)  # a constant column's row and column are 0
        scale = np.sqrt(np.outer(dg, dg))
        np.testing.assert_allclose(P / scale, P_ref / scale, atol=tol(1e-9, 2e-3), err_msg=name)


def test_tune_on_repeated_inputs_keeps_cusum_alive(rng):
    """Issue 23: inputs constant over blocks of 100 items (targets 2.7·x + noise): the tune after the
    cold start made every later point "far", the predictions summed the window's targets (1900 of
    2000 errors > 3) and the variance cap gave z² ≈ 0, so CUSUM never alarmed."""
    from onlinejax.wrappers.adaptive import adaptive

    n, W = 2000, 64
    x = np.repeat(rng.uniform(0, 1, n // 100), 100)
    Y = 2.7 * x + 0.05 * rng.normal(size=n)
    lrn = adaptive(kernel_regression(1, W), W)
    r = progressive_validation(lrn, lrn.init(), x[:, None], Y)
    m, v = np.asarray(r.predictions.mean, np.float64), np.asarray(r.predictions.var, np.float64)
    e = Y - m
    assert np.sum(np.abs(e) > 3) == 0  # targets span 2.7: an error > 3 is a broken mean
    assert int(r.state.n_alarms) >= 5  # most of the 19 block changes are detected
    assert np.all(np.isfinite(v)) and np.all(v > 0) and np.max(v[2:]) <= 10 * np.var(Y)
    assert v[1] == pytest.approx(1.0 + Y[0] ** 2, rel=tol(1e-12, 1e-6))  # one point: N(y₁, prior_var + y₁²)
    z2 = e[W:] ** 2 / v[W:]
    assert 0.1 < np.median(z2) < 10  # standardised errors of the right order, not ≈ 0


def test_abstention_is_a_finite_climatology(rng):
    """Issue 23: with fewer than two points the learner returned the cap sqrt(finfo.max) (std 4.3e9 in
    float32), which leaked into width metrics. Now: N(0, prior_var), then N(y₁, prior_var + y₁²),
    then never wider than the window's climatology about the prediction."""
    lrn = kernel_regression(2, 16)
    p = lrn.predict(lrn.init(), [0.3, 0.1])
    assert float(p.mean) == 0.0 and float(p.var) == 1.0
    p = lrn.predict(lrn.init(prior_var=4.0), [0.3, 0.1])
    assert float(p.var) == 4.0
    s = lrn.learn(lrn.init(), [0.0, 0.0], 30.0)
    p = lrn.predict(s, [5.0, 5.0])
    assert float(p.mean) == pytest.approx(30.0) and float(p.var) == pytest.approx(901.0, rel=tol(1e-14, 1e-6))
    # a cold start on targets of scale 100: every predictive is finite, positive and of the targets' scale
    X = rng.uniform(0, 50, (40, 2))
    Y = 100.0 + 20.0 * np.sin(X[:, 0] / 5) + rng.normal(size=40)
    s0 = lrn.init()
    P = progressive_validation(lrn, s0, X, Y).predictions
    v = np.asarray(P.var, np.float64)
    assert np.all(np.isfinite(v)) and np.all(v > 0)
    assert np.max(np.sqrt(v[1:])) <= 2 * np.max(np.abs(Y))  # was 4.3e9 (float32) / 1.2e77 (float64)
    for i in range(2, 40):  # prediction interval: min(Var[m̂] + σ̂², max(climatology about m̂, σ̂²))
        lo = max(0, i - 16)
        ref = nw_window_reference(s0.whiten, X[lo:i], Y[lo:i], X[i])
        cap = max(_no_info(Y[lo:i], ref["mean"]), ref["sigma2"])
        assert rel_err(v[i], min(ref["asymptotic"] + ref["sigma2"], cap)) <= tol(1e-9, 2e-3), i
    # constant targets, constant inputs: a positive variance that is neither tiny nor the cap
    c = lrn.learn(lrn.init(), np.zeros((8, 2)), np.zeros(8))
    vc = float(lrn.predict(c, [0.0, 0.0]).var)
    fi = np.finfo(np.asarray(P.var).dtype)
    assert fi.tiny < vc < 1e-6 and vc != np.sqrt(fi.max)
    # prior_var is an array in the state, so it vmaps
    st = jax.vmap(lambda pv: lrn.init(prior_var=pv))(jnp.asarray([1.0, 9.0], DTYPE))
    pv = jax.vmap(lambda s: lrn.predict(s, jnp.zeros(2, DTYPE)).var)(st)
    np.testing.assert_allclose(np.asarray(pv), [1.0, 9.0])
    with pytest.raises(ValueError, match="prior_var"):
        kernel_regression(2, 8, prior_var=0.0)
    with pytest.raises(ValueError, match="prior_var"):
        lrn.init(prior_var=-1.0)


def _assert_trees_close(a, b, rtol):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("bounds,interval", [("asymptotic", "prediction"), ("exact", "confidence"),
                                             ("thesis", "prediction")])
def test_module_functions_are_the_learners_core(rng, bounds, interval):
    # the pure functions of the module, called directly, give the Learner's states and predictions
    d, W, n = 2, 6, 11
    X = jnp.asarray(rng.uniform(size=(n, d)), DTYPE)
    Y = jnp.asarray(5.0 * np.sin(6.0 * np.asarray(X[:, 0])) + 0.1 * rng.normal(size=n), DTYPE)
    alphas = (0.1, 0.5, 1.0)
    lrn = kr.kernel_regression(d, W, lengthscale=100.0, options=KernelRegressionOptions(bounds, interval, alphas))
    s, t = lrn.init(), kr.init(d, W, lengthscale=100.0)
    _assert_trees_close(s, t, 0.0)
    learn = jax.jit(kr.learn_one)
    opts = dict(bounds=bounds, interval=interval)
    predict = jax.jit(jax.vmap(partial(kr.predict_one, **opts), in_axes=(None, 0)))
    rtol = tol(1e-12, 1e-5)
    for i in range(n):
        s, t = lrn.learn(s, X[i], Y[i]), learn(t, X[i], Y[i])
        if i == 7:
            s, t = lrn.tune(s), jax.jit(partial(kr.tune, alphas=alphas))(t)
            assert float(t.bandwidth_scale) > 0  # a lengthscale of 100 is far too wide: the tune moves
    _assert_trees_close(s, t, rtol)
    _assert_trees_close(lrn.predict(s, X[:3]), predict(t, X[:3]), rtol)
    _assert_trees_close(lrn.evict(s), jax.jit(kr.evict)(t), rtol)
    assert int(t.n_seen) == n and int(t.buffer.count) == W


def test_nonfinite_item_changes_only_the_skip_counter(rng):
    # the boundary (make_learner(skip_nonfinite=True)) owns the skip: state unchanged but n_skipped
    lrn = kr.kernel_regression(2, 4)
    s = lrn.learn(lrn.init(), rng.uniform(size=(5, 2)), rng.normal(size=5))
    f = jax.jit(lrn.learn)
    for x, y in (([np.nan, 1.0], 0.0), ([1.0, np.inf], 0.0), ([1.0, 2.0], -np.inf)):
        t = f(s, jnp.asarray(x, DTYPE), jnp.asarray(y, DTYPE))
        assert int(t.n_skipped) == int(s.n_skipped) + 1
        _assert_trees_close(t._replace(n_skipped=s.n_skipped), s, 0.0)


LOCAL_LINEAR = KernelRegressionOptions(local="linear")


def _ridge_reference(yw, sigma2):
    """Float64 ρ = clip(σ̂²/(s_y² - σ̂²), 10⁻³, 10³), s_y² the window targets' sample variance (the module doc)."""
    signal = np.var(np.asarray(yw, np.float64), ddof=1) - sigma2
    return float(np.clip(sigma2 / max(signal, sigma2 / 1e3), 1e-3, 1e3))


@pytest.mark.parametrize("where", ["inside", "edge", "outside"])
def test_local_linear_prediction_equals_a_ridged_weighted_line(rng, where):
    """The mean is the intercept of the ridged kernel-weighted least-squares line through the window (float64
    reference by least squares on stacked rows), the confidence variance Nadaraya-Watson's plus the slope's
    share σ̂² ūᵀ(S + ρI)⁻¹ū, and the prediction variance min(conf + σ̂², max(V, σ̂²))."""
    W, d = 20, 2
    X = rng.uniform(0, 2, (W, d))
    Y = 1.5 * X[:, 0] - X[:, 1] + 0.3 * np.sin(3 * X[:, 1]) + 0.2 * rng.normal(size=W)
    A = np.array([[1.6, 0.0], [0.4, 1.2]])
    lrn = kernel_regression(d, W, options=LOCAL_LINEAR)
    s = lrn.learn(lrn.init(), X, Y)._replace(whiten=jnp.asarray(A, DTYPE))
    s = s._replace(**dict(zip(("density", "contribution"), window_sums(s.whiten, s.buffer.x, s.buffer.y, s.buffer.valid))))
    xq = {"inside": [1.0, 1.0], "edge": [2.1, 0.05], "outside": [3.0, -0.5]}[where]
    ref = nw_window_reference(A, X, Y, xq)
    rho = _ridge_reference(Y, ref["sigma2"])
    assert rho < 1.0  # a window with signal: a weak ridge
    U = (X - np.asarray(xq)) @ A.T
    mean, inv, ubar = ridged_line_intercept(U, Y, np.exp(-0.5 * np.sum(U * U, -1)), rho)
    conf = ref["asymptotic"] + ref["sigma2"] * ubar @ inv @ ubar
    var = min(conf + ref["sigma2"], max(_no_info(Y, mean), ref["sigma2"]))
    p = lrn.predict(s, jnp.asarray(xq, DTYPE))
    assert float(p.mean) == pytest.approx(mean, rel=tol(1e-9, 1e-4), abs=tol(1e-9, 1e-4))
    assert float(p.var) == pytest.approx(var, rel=tol(1e-9, 1e-4))
    # on this slope the Nadaraya-Watson mean is biased away from the function at the window's edge
    truth = 1.5 * xq[0] - xq[1] + 0.3 * np.sin(3 * xq[1])
    if where == "edge":
        assert abs(mean - truth) < 0.5 * abs(ref["mean"] - truth)


def test_local_linear_far_query_is_the_nearest_targets_average():
    """Far from every point the kernel counts vanish, the slope with them: the Nadaraya-Watson limit, finite."""
    lrn = kernel_regression(2, 8, lengthscale=0.1, options=LOCAL_LINEAR)
    s = lrn.init()
    for x, y in [([0.0, 0.0], 1.0), ([1.0, 0.0], 2.0), ([0.0, 1.0], 3.0)]:
        s = lrn.learn(s, x, y)
    for q in ([1000.0, 0.0], [1e30, 0.0]):
        p = lrn.predict(s, jnp.asarray(q, DTYPE))
        assert float(p.mean) == pytest.approx(2.0, abs=1e-6)
        assert float(p.var) == pytest.approx(_no_info([1.0, 2.0, 3.0], 2.0), rel=tol(1e-12, 1e-6))


def test_local_linear_loo_scores_and_tune_equal_brute_force(rng):
    """``loo_cv_scores(ridge=ρ)`` equals every point's ridged line fitted on the others (float64 loops), and the
    learner's tune picks that score's first minimum over its grid."""
    W, d = 24, 2
    X = rng.uniform(0, 10, (W, d)) @ np.array([[1.0, 0.3], [0.0, 0.5]])
    Y = np.sin(0.3 * X[:, 0]) + 0.2 * X[:, 1] + 0.1 * rng.normal(size=W)
    alphas = THESIS_ALPHAS[::7]
    rho = 0.05
    scores, _ = loo_cv_scores(jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE), jnp.ones(W, bool), jnp.asarray(alphas, DTYPE),
                              jnp.asarray(rho, DTYPE))
    ref_rho = ll_loo_cv(X, Y, alphas, rho)
    np.testing.assert_allclose(np.asarray(scores), ref_rho, rtol=tol(1e-9, 2e-3))
    # on this smooth slope the Nadaraya-Watson score picks a narrower bandwidth than the weakly ridged line's
    assert alphas[np.argmin(ref_rho)] > alphas[np.argmin(nw_loo_cv(X, Y, alphas))]
    # the tune's ridge is the state's ρ; a bad start (lengthscale 100) so the tune must move
    lrn = kernel_regression(d, W, lengthscale=100.0, options=LOCAL_LINEAR._replace(alphas=tuple(alphas)))
    s = lrn.learn(lrn.init(), X, Y)
    rho_s = float(kr.local_linear_ridge(s))
    assert rho_s == pytest.approx(_ridge_reference(Y, nw_window_reference(np.asarray(s.whiten, np.float64), X, Y)["sigma2"]),
                                  rel=tol(1e-9, 1e-4))
    ref = ll_loo_cv(X, Y, alphas, rho_s)
    t = lrn.tune(s)
    assert float(t.bandwidth_scale) == pytest.approx(alphas[np.argmin(ref)], abs=1e-6)


def test_local_linear_is_flat_where_the_inputs_explain_nothing(rng):
    """Targets independent of the inputs: the ridge is at its cap (no explained variance) and the local linear
    mean is the Nadaraya-Watson mean within a part in 10³ of the targets' spread."""
    W, d = 32, 2
    X, Y = rng.uniform(0, 1, (W, d)), rng.normal(size=W)
    lrn, nw = kernel_regression(d, W, options=LOCAL_LINEAR), kernel_regression(d, W)
    s = lrn.tune(lrn.learn(lrn.init(), X, Y))
    ref = nw_window_reference(np.asarray(s.whiten, np.float64), X, Y)
    rho = _ridge_reference(Y, ref["sigma2"])
    assert float(kr.local_linear_ridge(s)) == pytest.approx(rho, rel=tol(1e-9, 1e-4))
    assert rho > 10.0
    q = jnp.asarray(rng.uniform(0, 1, (5, d)), DTYPE)
    np.testing.assert_allclose(np.asarray(lrn.predict(s, q).mean), np.asarray(nw.predict(s, q).mean), atol=1e-3 * np.std(Y))


def test_local_linear_default_grid_is_geometric_over_the_thesis_range(rng):
    """``alphas=None`` means the fit's grid: the thesis's 195 for the Nadaraya-Watson mean, 24 geometric steps
    from 0.05 to 1.99 for the local linear fit; the local linear tune picks its first leave-one-out minimum."""
    geometric = 0.05 * (1.99 / 0.05) ** (np.arange(24) / 23.0)
    assert KernelRegressionOptions().checked().alphas == tuple(float(a) for a in THESIS_ALPHAS)
    np.testing.assert_allclose(LOCAL_LINEAR.checked().alphas, geometric, atol=5e-5)
    assert np.all(np.diff(LOCAL_LINEAR.checked().alphas) > 0)
    with pytest.raises(ValueError, match="^local: "):
        kr.default_alphas("quadratic")
    W, d = 24, 2
    X = rng.uniform(0, 10, (W, d))
    Y = np.sin(0.4 * X[:, 0]) + 0.2 * X[:, 1] + 0.1 * rng.normal(size=W)
    lrn = kernel_regression(d, W, lengthscale=100.0, options=LOCAL_LINEAR)
    s = lrn.learn(lrn.init(), X, Y)
    alphas = np.asarray(LOCAL_LINEAR.checked().alphas)
    ref = ll_loo_cv(X, Y, alphas, float(kr.local_linear_ridge(s)))
    assert float(lrn.tune(s).bandwidth_scale) == pytest.approx(alphas[np.argmin(ref)], rel=1e-6)

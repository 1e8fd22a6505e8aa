import jax
import jax.numpy as jnp
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.kernel_regression import THESIS_ALPHAS, kernel_regression, loo_cv_scores, residual_variance, window_sums
from onlinejax.evaluation.progressive import progressive_validation
from conftest import DTYPE, X64, tol
from reference import nw_loo_cv, nw_window_reference, rel_err


def _windows(X, Y, W):
    """The window (oldest first) before each item i: items max(0, i-W)..i-1."""
    return [(X[max(0, i - W):i], Y[max(0, i - W):i]) for i in range(len(Y))]


def _sums_in_time_order(state_rec, W, i):
    """Sums after learning item i, reordered oldest first (ring slot of item j is j % W)."""
    lo = max(0, i + 1 - W)
    slots = np.arange(lo, i + 1) % W
    return state_rec[0][i][slots], state_rec[1][i][slots]


@pytest.mark.parametrize("bounds", ["asymptotic", "exact", "thesis"])
def test_matches_from_scratch_after_every_step(rng, bounds):
    """5,000 items through W = 64 (78 wraps), with repeated inputs and a tune half way."""
    n, d, W = 5000, 2, 64
    X = rng.uniform(0, 3, (n, d))
    X[1000:1100] = X[900:1000]  # exact duplicates inside the window
    X[2000:2050, 0] = 1.5  # a constant coordinate
    Y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=n)
    lrn = kernel_regression(d, W, lengthscale=0.5, bounds=bounds, interval="confidence")
    lrn_p = kernel_regression(d, W, lengthscale=0.5, bounds=bounds, interval="prediction")
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
            assert rel_err(var[i], ref[bounds]) <= t_v, (i, var[i], ref[bounds])
        if i < half and i >= 2:
            assert rel_err(rp.predictions.var[i], ref[bounds] + ref["sigma2"]) <= t_v, i
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
    assert float(p.var) > 1e6  # and the bounds say it knows nothing there
    # an empty window predicts 0 with the variance cap (no information), never NaN
    p0 = lrn.predict(lrn.init(), [0.0, 0.0])
    assert float(p0.mean) == 0.0 and np.isfinite(float(p0.var)) and float(p0.var) > 1e15


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


def test_downdate_evicts_oldest(rng):
    W = 6
    X = rng.uniform(0, 1, (9, 2))
    Y = rng.normal(size=9)
    lrn = kernel_regression(2, W, lengthscale=0.3)
    s = lrn.init()
    for i in range(9):
        s = lrn.learn(s, X[i], Y[i])
    s = lrn.downdate(lrn.downdate(s))  # window was items 3..8; now 5..8
    assert int(s.buffer.count) == 4
    ref = nw_window_reference(s.whiten, X[5:9], Y[5:9], X[0])
    slots = np.arange(5, 9) % W
    np.testing.assert_allclose(np.asarray(s.density)[slots], ref["D"], rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(np.asarray(s.contribution)[slots], ref["C"], rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    p = lrn.predict(s, X[0])
    assert float(p.mean) == pytest.approx(ref["mean"], rel=tol(1e-10, 1e-5))
    empty = s
    for _ in range(6):
        empty = lrn.downdate(empty)  # popping an empty window is a no-op
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
        kernel_regression(2, 8, bounds="wide")
    with pytest.raises(ValueError, match="interval"):
        kernel_regression(2, 8, interval="both")
    with pytest.raises(ValueError, match="lengthscale"):
        kernel_regression(2, 8, lengthscale=-1.0)
    with pytest.raises(ValueError, match="alphas"):
        kernel_regression(2, 8, alphas=[0.1, 0.0])
    lrn = kernel_regression(2, 8)
    with pytest.raises(ValueError, match="x"):
        lrn.learn(lrn.init(), [1.0, 2.0, 3.0], 1.0)
    with pytest.raises(ValueError, match="y"):
        lrn.learn(lrn.init(), [1.0, 2.0], float("nan"))

import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
import pytest

from onlinejax.core.linalg import (exclusive_row_prefix, inv_chol_append, inv_chol_drop_first, inv_chol_slide,
                                   lower_triangular_inverse, psd_solve, sqrt_cov_add_precision, sqrt_cov_batch_update,
                                   sqrt_cov_rank1)
from conftest import tol
from reference import rel_err


def _spd(rng, n, cond=10.0):
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return Q @ np.diag(np.geomspace(1.0, cond, n)) @ Q.T


@pytest.mark.parametrize("n", [2, 7, 40, 150])
def test_inv_chol_drop_first_and_append(rng, n):
    K = _spd(rng, n, 1e3)
    R = np.linalg.inv(np.linalg.cholesky(K))
    R22 = np.asarray(inv_chol_drop_first(jnp.asarray(R)), np.float64)
    ref = np.linalg.inv(np.linalg.cholesky(K[1:, 1:]))
    assert rel_err(R22, ref) < tol(1e-10, 2e-3)
    k = K[1:, 0]
    R2 = np.asarray(inv_chol_append(jnp.asarray(ref), jnp.asarray(k), jnp.asarray(K[0, 0]), jnp.asarray(1e-12)), np.float64)
    P = np.eye(n)[np.r_[1:n, 0]]  # K with the first item moved last
    assert rel_err(R2, np.linalg.inv(np.linalg.cholesky(P @ K @ P.T))) < tol(1e-10, 2e-3)


@pytest.mark.parametrize("n", [2, 9, 64, 130])
def test_inv_chol_slide_equals_factorising_the_slid_window(rng, n):
    """Evict item 0 and append a new item in one step == the factor and whitened residuals of the new window."""
    Kfull = _spd(rng, n + 1, 1e3)  # items 0..n; the window holds 0..n-1, then 1..n
    K_old, K_new = Kfull[:n, :n], Kfull[1:, 1:]
    R = np.linalg.inv(np.linalg.cholesky(K_old))
    r = rng.normal(size=n)  # residuals of the new window
    Rn, z, v = (np.asarray(a, np.float64) for a in inv_chol_slide(
        jnp.asarray(R), jnp.asarray(Kfull[n, :n]), jnp.asarray(Kfull[n, n]), jnp.asarray(1e-12), jnp.asarray(r)))
    ref = np.linalg.inv(np.linalg.cholesky(K_new))
    assert rel_err(Rn, ref) < tol(1e-10, 2e-3)
    assert rel_err(z, ref @ r) < tol(1e-10, 2e-3)
    assert rel_err(v, R @ Kfull[n, :n]) < tol(1e-12, 1e-5)


def test_inv_chol_slide_on_a_partly_filled_window(rng):
    """Empty front slots are decoupled identity rows: sliding just shifts them out."""
    n, used = 8, 5
    K = _spd(rng, used + 1, 1e2)
    R = np.eye(n)
    R[n - used:, n - used:] = np.linalg.inv(np.linalg.cholesky(K[:used, :used]))
    k = np.zeros(n)
    k[n - used:] = K[used, :used]
    r = np.zeros(n)
    r[n - used - 1:] = rng.normal(size=used + 1)
    Rn, z, _ = (np.asarray(a, np.float64) for a in inv_chol_slide(
        jnp.asarray(R), jnp.asarray(k), jnp.asarray(K[used, used]), jnp.asarray(1e-12), jnp.asarray(r)))
    ref = np.eye(n)
    ref[n - used - 1:, n - used - 1:] = np.linalg.inv(np.linalg.cholesky(K))
    assert rel_err(Rn, ref) < tol(1e-10, 1e-3)
    assert rel_err(z, ref @ r) < tol(1e-10, 1e-3)


def test_slide_and_prefix_reject_bad_shapes():
    R = jnp.eye(4)
    with pytest.raises(ValueError, match="k:"):
        inv_chol_slide(R, jnp.ones(3), jnp.asarray(1.0), jnp.asarray(1e-3), jnp.ones(4))
    with pytest.raises(ValueError, match="R:"):
        inv_chol_slide(jnp.ones((4, 3)), jnp.ones(4), jnp.asarray(1.0), jnp.asarray(1e-3), jnp.ones(4))
    with pytest.raises(ValueError, match="B:"):
        exclusive_row_prefix(jnp.ones(5))
    with pytest.raises(ValueError, match="weights:"):
        exclusive_row_prefix(jnp.ones((5, 2)), jnp.ones(4))


@pytest.mark.parametrize("n", [1, 2, 63, 600])
def test_exclusive_row_prefix(rng, n):
    B = rng.normal(size=(n, 5))
    w = rng.uniform(-2, 2, size=n)
    out = np.asarray(exclusive_row_prefix(jnp.asarray(B)), np.float64)
    np.testing.assert_allclose(out, np.cumsum(B, axis=0) - B, atol=tol(1e-12, 1e-4) * max(1.0, np.sqrt(n)))
    out_w = np.asarray(exclusive_row_prefix(jnp.asarray(B), jnp.asarray(w)), np.float64)  # weighted rows
    WB = w[:, None] * B
    np.testing.assert_allclose(out_w, np.cumsum(WB, axis=0) - WB, atol=tol(1e-12, 1e-4) * 2 * max(1.0, np.sqrt(n)))


def test_decoupled_first_row_is_a_no_op(rng):
    R = np.linalg.inv(np.linalg.cholesky(_spd(rng, 6)))
    R[0, :] = 0
    R[:, 0] = 0
    R[0, 0] = 1.0
    np.testing.assert_array_equal(np.asarray(inv_chol_drop_first(jnp.asarray(R))), R[1:, 1:].astype(np.asarray(inv_chol_drop_first(jnp.asarray(R))).dtype))


def test_append_floor_keeps_duplicates_finite():
    R = jnp.eye(1)
    out = inv_chol_append(R, jnp.ones(1), jnp.asarray(1.0), jnp.asarray(1e-4))  # exact duplicate: Schur complement 0
    assert np.all(np.isfinite(np.asarray(out))) and float(out[1, 1]) == pytest.approx(100.0, rel=1e-5)


def test_sqrt_cov_rank1_add_remove_and_batch(rng):
    d = 5
    W = np.linalg.cholesky(np.linalg.inv(_spd(rng, d)))
    m = rng.normal(size=d)
    X = rng.normal(size=(4, d))
    Y = rng.normal(size=4)
    Wj, mj = jnp.asarray(W), jnp.asarray(m)
    for x, y in zip(X, Y):
        Wj, mj = sqrt_cov_rank1(Wj, mj, jnp.asarray(x), jnp.asarray(y), 0.5, 1.0)
    Wb, mb = sqrt_cov_batch_update(jnp.asarray(W), jnp.asarray(m), jnp.asarray(X), jnp.asarray(Y), jnp.full(4, 2.0))
    S0 = W @ W.T
    Sn = np.linalg.inv(np.linalg.inv(S0) + 2.0 * X.T @ X)
    mn = Sn @ (np.linalg.inv(S0) @ m + 2.0 * X.T @ Y)
    for Wx, mx in ((Wj, mj), (Wb, mb)):
        Wx = np.asarray(Wx, np.float64)
        assert rel_err(Wx @ Wx.T, Sn) < tol(1e-10, 1e-4) and rel_err(mx, mn) < tol(1e-10, 1e-4)
    for x, y in zip(X[::-1], Y[::-1]):
        Wj, mj = sqrt_cov_rank1(Wj, mj, jnp.asarray(x), jnp.asarray(y), 0.5, -1.0)
    assert rel_err(np.asarray(Wj) @ np.asarray(Wj).T, S0) < tol(1e-9, 1e-3) and rel_err(mj, m) < tol(1e-9, 1e-3)


def test_sqrt_cov_add_precision_equals_the_inverse_of_the_added_precisions(rng):
    """``(S⁻¹ + αI)⁻¹`` in float64 for a wound-up ``S`` (variances 1e-3..3e3) and for a singular one."""
    n, alpha = 12, 0.1
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    S = Q @ np.diag(np.geomspace(1e-3, 3e3, n)) @ Q.T
    W = np.linalg.cholesky(S)
    got = np.asarray(sqrt_cov_add_precision(jnp.asarray(W), jnp.asarray(alpha)), np.float64)
    ref = np.linalg.inv(np.linalg.inv(S) + alpha * np.eye(n))
    assert rel_err(got @ got.T, ref) < tol(1e-10, 1e-4)
    assert np.max(np.diag(got @ got.T)) < 1.0 / alpha  # every variance below the added precision's
    tight = Q[:, 0]  # the tightest direction keeps its variance
    assert abs(tight @ got @ got.T @ tight / 1e-3 - 1.0) < 1e-3
    Ws = W.copy()
    Ws[:, -3:] = 0.0  # rank n - 3: S = WsWsᵀ has no inverse, the result is Ws(I + αWsᵀWs)⁻¹Wsᵀ
    got = np.asarray(sqrt_cov_add_precision(jnp.asarray(Ws), jnp.asarray(alpha)), np.float64)
    ref = Ws @ np.linalg.inv(np.eye(n) + alpha * Ws.T @ Ws) @ Ws.T
    assert rel_err(got @ got.T, ref) < tol(1e-10, 1e-4)


def test_psd_solve(rng):
    A = _spd(rng, 8, 100.0)
    b = rng.normal(size=8)
    assert rel_err(psd_solve(jnp.asarray(A), jnp.asarray(b)), np.linalg.solve(A, b)) < tol(1e-6, 1e-2)


@pytest.mark.parametrize("n", [1, 5, 16, 17, 48, 96, 128, 131])
def test_lower_triangular_inverse_matches_float64_and_a_triangular_solve(rng, n):
    """The blocked inverse (halving down to 16-row leaves) against numpy's float64 inverse, and no less
    accurate than XLA's triangular solve with an identity right-hand side, which it replaces."""
    L = np.linalg.cholesky(_spd(rng, n, 1e4))
    ref = np.linalg.inv(L)
    Lj = jnp.asarray(L, jnp.zeros(()).dtype)
    got = np.asarray(lower_triangular_inverse(Lj), np.float64)
    solved = np.asarray(jax.scipy.linalg.solve_triangular(Lj, jnp.eye(n, dtype=Lj.dtype), lower=True), np.float64)
    assert np.all(np.triu(got, 1) == 0.0)
    assert rel_err(got, ref) < tol(1e-12, 2e-5)
    assert rel_err(got, ref) <= 4.0 * rel_err(solved, ref) + tol(1e-15, 1e-7)
    with pytest.raises(ValueError, match="square"):
        lower_triangular_inverse(Lj[:, :1] if n > 1 else jnp.zeros((2, 3)))


def test_cap_variance_clamps_in_the_cap_whitened_basis(rng):
    """Against float64 numpy: a no-op below the cap; above it ``C^{1/2} U min(Λ, h) Uᵀ C^{1/2}`` from the
    eigendecomposition ``C^{-1/2} S C^{-1/2} = UΛUᵀ``, so the directions the data keeps tight keep their
    variance; with ``scale = inf`` every direction sits at ``h`` times its cap."""
    from onlinejax.core.linalg import CAP_HEADROOM as h, cap_variance

    d = 5
    cap = np.array([4.0, 1.0, 9.0, 2.0, 3.0])
    A = rng.normal(size=(d, d))
    W = 0.1 * A
    np.testing.assert_allclose(np.asarray(cap_variance(jnp.asarray(W), jnp.asarray(cap), 1.5), np.float64), 1.5 * W,
                               rtol=tol(1e-12, 1e-6))
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    S = 50.0 * (np.eye(d) - np.outer(u, u)) + 1e-3 * np.outer(u, u)  # wide, except along u
    W = np.linalg.cholesky(S)
    for scale, headroom in ((1.0, None), (2.0, None), (2.0, 0.01)):
        Wc = np.asarray(cap_variance(jnp.asarray(W), jnp.asarray(cap), scale, headroom=headroom), np.float64)
        r = np.sqrt(cap)
        lam, U = np.linalg.eigh((scale ** 2 * S) / np.outer(r, r))
        ref = np.outer(r, r) * ((U * np.minimum(lam, h if headroom is None else headroom)) @ U.T)
        Sc = Wc @ Wc.T
        np.testing.assert_allclose(Sc, ref, rtol=tol(1e-9, 2e-4), atol=tol(1e-12, 1e-5))
        assert np.all(np.diag(Sc) <= cap * (1 + tol(1e-12, 1e-5)))
        assert u @ Sc @ u == pytest.approx(u @ ref @ u, rel=tol(1e-8, 1e-2))  # the tight direction stays tight
        assert u @ Sc @ u < 1e-2
    Winf = np.asarray(cap_variance(jnp.asarray(W), jnp.asarray(cap), jnp.inf), np.float64)
    np.testing.assert_allclose(Winf @ Winf.T, h * np.diag(cap), rtol=tol(1e-9, 1e-4), atol=tol(1e-12, 1e-5))
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="headroom"):
            cap_variance(jnp.asarray(W), jnp.asarray(cap), headroom=bad)


def test_cap_variance_under_vmap_equals_one_stream_at_a_time(rng):
    """Six streams, some over their cap and some not, a batched ``scale`` (one infinite) with one ``W``:
    the clamp runs on the streams that need it, a few at a time, and each equals its own single call."""
    import jax

    from onlinejax.core.linalg import cap_variance

    d = 4
    cap = jnp.asarray([1.0, 2.0, 3.0, 4.0])
    W = jnp.asarray(np.linalg.cholesky(np.diag([0.5, 1.0, 0.2, 3.0]) + 0.1))
    scales = jnp.asarray([1.0, 2.0, 0.5, 3.0, jnp.inf, 1.2])
    got = jax.vmap(lambda sc: cap_variance(W, cap, sc))(scales)
    cov = lambda A: np.asarray(A, np.float64) @ np.asarray(A, np.float64).T  # noqa: E731 (a root is unique up to rotation)
    for i, sc in enumerate(scales):
        np.testing.assert_allclose(cov(got[i]), cov(cap_variance(W, cap, sc)), rtol=tol(1e-12, 1e-5),
                                   atol=tol(1e-12, 1e-6))
        S = cov(got[i])
        assert np.all(np.isfinite(S)) and np.all(np.diag(S) <= np.asarray(cap) * (1 + tol(1e-12, 1e-5)))
    Ws = jnp.stack([W * f for f in (0.1, 3.0, 0.2, 5.0, 0.3, 4.0)])  # batched W, unbatched scale
    got = jax.vmap(lambda w: cap_variance(w, cap, 1.0))(Ws)
    for i in range(6):
        np.testing.assert_allclose(cov(got[i]), cov(cap_variance(Ws[i], cap, 1.0)), rtol=tol(1e-12, 1e-5),
                                   atol=tol(1e-12, 1e-6))


@pytest.mark.parametrize("level", [-1, -2])
def test_affine_weights_inverse_is_the_explicit_inverse_transpose(level):
    """``affine_weights_inverse`` equals ``M⁻ᵀv`` with ``M`` built as a dense float64 matrix (the first ``d`` rows
    ``z' = r ⊙ z + c``, the constant at ``level``, other rows the identity), for a vector and a factor; the
    identity move returns ``v`` bit for bit."""
    from onlinejax.core.linalg import affine_weights_inverse

    rng = np.random.default_rng(5)
    d, F = 3, 6
    r, c = rng.uniform(0.3, 3.0, d), rng.normal(size=d)
    M = np.eye(F)
    M[np.arange(d), np.arange(d)] = r
    M[:d, level % F] = c
    dt = jnp.zeros(()).dtype
    for v in (rng.normal(size=F), rng.normal(size=(F, F))):
        got = affine_weights_inverse(jnp.asarray(v, dt), jnp.asarray(r, dt), jnp.asarray(c, dt), level)
        np.testing.assert_allclose(np.asarray(got), np.linalg.solve(M.T, v), rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
        same = affine_weights_inverse(jnp.asarray(v, dt), jnp.ones(d, dt), jnp.zeros(d, dt), level)
        np.testing.assert_array_equal(np.asarray(same), np.asarray(jnp.asarray(v, dt)))

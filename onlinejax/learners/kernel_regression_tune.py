"""The leave-one-out bandwidth tune of :func:`~onlinejax.learners.kernel_regression.kernel_regression`.

Thesis 4.3.2.4 and Algorithm 4: :func:`tune` picks ``H = α·COV`` over the
grid :data:`THESIS_ALPHAS` (the local linear fit: :data:`LOCAL_LINEAR_ALPHAS`)
by leave-one-out CV, every ``α`` scored at once (:func:`loo_cv_scores`), by
the Nadaraya–Watson estimate or the ridged local linear fit; :func:`covariance_whitening` is the regularised
whitening of ``COV`` for degenerate windows. The rules, which "the module
doc" below refers to, are in the module doc of :mod:`onlinejax.learners.kernel_regression`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .kernel_regression_state import KernelRegressionState, _pair_q, local_linear_ridge, window_sums

Array = jax.Array

__all__ = ["tune", "loo_cv_scores", "covariance_whitening", "default_alphas", "THESIS_ALPHAS", "LOCAL_LINEAR_ALPHAS",
           "CORRELATION_FLOOR"]

#: Algorithm 4's grid: α from 0.05 while α < 2.0, step 0.01 (195 values).
THESIS_ALPHAS = np.round(0.05 + 0.01 * np.arange(195), 2)

#: The local linear fit's grid: Algorithm 4's range in 24 geometric steps (ratio 1.17, the bandwidth's 8 %).
#: Each of its ``α`` costs a ``d × d`` solve per window point, and on the grid's streams the tune's choices
#: from these 24 predict as well as from the 195 (a wider range predicted worse: leave-one-out on 64 points
#: then picks bandwidths too wide for the next items).
LOCAL_LINEAR_ALPHAS = np.round(np.geomspace(0.05, 1.99, 24), 4)


def default_alphas(local: str) -> np.ndarray:
    """The ``α`` grid (``[m]``) that ``alphas=None`` means for the fit ``local``: :data:`THESIS_ALPHAS` for
    ``"constant"``, :data:`LOCAL_LINEAR_ALPHAS` for ``"linear"`` (``ValueError`` naming ``local`` otherwise)."""
    if local not in ("constant", "linear"):
        raise ValueError(f"local: must be 'constant' or 'linear', got {local!r}")
    return LOCAL_LINEAR_ALPHAS if local == "linear" else THESIS_ALPHAS


#: Floor on the eigenvalues of the window inputs' correlation matrix in the tune (module doc).
CORRELATION_FLOOR = 1e-3


def covariance_whitening(X: Array, valid: Array) -> Array:
    """``A₁ = chol(COV)⁻¹`` for the valid rows' covariance (``ddof = 1``), regularised, ``[d, d]``.

    ``COV = S R S`` (``S`` the columns' standard deviations, ``R`` their
    correlation). A column constant over the window (standard deviation
    ``<= 4·eps·|value|``, exactly 0 for repeated values: the rows are centred
    on the first valid row, so identical values cancel exactly) gets a zero
    column in ``A₁``: an infinite bandwidth. The other columns' ``R`` has its
    eigenvalues floored at :data:`CORRELATION_FLOOR` when one is below it
    (collinear or duplicated columns); otherwise ``A₁`` is ``chol(COV)⁻¹``.
    ``H = α·COV`` then has whitening ``A₁ / sqrt(α)``. See the module doc.
    """
    dt = X.dtype
    d = X.shape[-1]
    eye = jnp.eye(d, dtype=dt)
    v = valid.astype(dt)
    n = jnp.sum(v)
    ref = X[jnp.argmax(valid)]  # the first valid row: repeated values centre to exact zeros
    Xs = (X - ref) * v[:, None]
    Xc = (Xs - jnp.sum(Xs, axis=0) / jnp.maximum(n, 1.0)) * v[:, None]
    scale = jnp.max(jnp.abs(Xc), axis=0)
    scale = jnp.where(scale > 0, scale, 1.0)  # column scaling: no overflow in the products for any finite input
    Xn = Xc / scale
    cov_n = Xn.T @ Xn / jnp.maximum(n - 1.0, 1.0)
    sd_n = jnp.sqrt(jnp.diag(cov_n))
    const = sd_n * scale <= 4.0 * jnp.finfo(dt).eps * jnp.abs(ref)
    sd_n = jnp.where(const, 1.0, sd_n)
    R = cov_n / (sd_n[:, None] * sd_n[None, :])
    R = jnp.where(const[:, None] | const[None, :], eye, R)
    lam, V = jnp.linalg.eigh(R)
    R = jnp.where(jnp.min(lam) < CORRELATION_FLOOR, (V * jnp.maximum(lam, CORRELATION_FLOOR)) @ V.T, R)
    L = jnp.linalg.cholesky(0.5 * (R + R.T))
    A_R = jax.scipy.linalg.solve_triangular(L, eye, lower=True)
    # chol(S R S) = S L, so A₁ = L⁻¹ S⁻¹: column j divided by column j's standard deviation
    return jnp.where(const[None, :], 0.0, A_R / (sd_n * scale)[None, :])


def _loo_score(logK: Array, y: Array, valid: Array) -> Array:
    """Leave-one-out CV(H) (thesis 4.3.2.4) from the ``[W, W]`` log-kernel matrix."""
    W = y.shape[0]
    mask = valid[None, :] & valid[:, None] & ~jnp.eye(W, dtype=bool)
    logits = jnp.where(mask, logK, -jnp.inf)
    top = jnp.max(logits, axis=1)
    ok = valid & jnp.isfinite(top)  # a point with no other point in the window has no LOO estimate
    # weights relative to the nearest point (1 there): a log-sum-exp would lose log k next to a large q
    e = jnp.exp(logits - jnp.where(ok, top, 0.0)[:, None])
    tot = jnp.where(ok, jnp.sum(e, axis=1), 1.0)
    pred = jnp.where(ok, (e @ jnp.where(valid, y, 0.0)) / tot, 0.0)
    okf = ok.astype(y.dtype)
    return jnp.sum(okf * (pred - y) ** 2) / jnp.maximum(jnp.sum(okf), 1.0)


def _loo_gaps(A1: Array, X: Array, valid: Array) -> tuple[Array, Array, Array]:
    """``(gap [W, W], q_min [W], ok [W])``: each row's quadratic forms to the other valid points relative to its
    nearest one (``inf`` off the mask), the nearest one's form, and whether the row has another point at all."""
    W = X.shape[0]
    q1 = _pair_q(A1, X)
    mask = valid[None, :] & valid[:, None] & ~jnp.eye(W, dtype=bool)
    # each row's largest logit is its nearest other point's for every α, so the log-sum-exp shift is
    # found once and each α costs one exp per pair and one matrix product
    qmin = jnp.min(jnp.where(mask, q1, jnp.inf), axis=1)
    ok = valid & jnp.isfinite(qmin)  # a point with no other point in the window has no LOO estimate
    gap = jnp.where(mask & ok[:, None], q1 - jnp.where(ok, qmin, 0.0)[:, None], jnp.inf)  # >= 0, 0 at the nearest
    return gap, jnp.where(ok, qmin, 0.0), ok


def _local_linear_loo(A1: Array, X: Array, y: Array, valid: Array, alphas: Array, ridge: Array) -> Array:
    """Leave-one-out mean squared error of the ridged local linear fit (module doc) with whitening
    ``A₁/sqrt(α)``, for every ``α`` at once: ``[m]``.

    Row ``i``'s fit at ``x_i`` from the other points, in the ``α = 1`` coordinates ``U = A₁(x - x̄)``: weighted
    moments ``K @ [1, U, y, U⊗U, U y]`` give the weighted means and scatter, and the slope solves
    ``(S + ρα·I) b = s`` (the ridge ``ρ`` on the slope per whitened unit of ``A₁/sqrt(α)``, in kernel counts:
    the rows' weights are the counts times ``exp(q_min/2α)``).
    """
    dt = X.dtype
    W, d = X.shape
    vm = valid[:, None]
    xbar = jnp.sum(jnp.where(vm, X, 0.0), axis=0) / jnp.maximum(jnp.sum(valid), 1).astype(dt)
    U = jnp.where(vm, (X - xbar) @ A1.T, 0.0)  # centred on the window: the scatter's moments keep their precision
    gap, qmin, ok = _loo_gaps(A1, X, valid)
    yv = jnp.where(valid, y, 0.0)
    cols = jnp.concatenate([jnp.ones((W, 1), dt), U, yv[:, None], (U[:, :, None] * U[:, None, :]).reshape(W, d * d),
                            U * yv[:, None]], axis=1)
    okf = ok.astype(dt)
    eye = jnp.eye(d, dtype=dt)

    def score(a):
        M = jnp.exp(-0.5 * gap / a) @ cols  # [W, 2 + d + d² + d]
        m0 = jnp.where(ok, M[:, 0], 1.0)  # >= 1 where ok: the nearest other point's weight is 1
        ub, yb = M[:, 1:1 + d] / m0[:, None], M[:, 1 + d] / m0
        S = M[:, 2 + d:2 + d + d * d].reshape(W, d, d) - m0[:, None, None] * ub[:, :, None] * ub[:, None, :]
        sv = M[:, 2 + d + d * d:] - m0[:, None] * ub * yb[:, None]
        r = ridge * a * jnp.exp(jnp.minimum(0.5 * qmin / a, 60.0))  # exp(60) < float32's max
        b = jnp.linalg.solve(S + r[:, None, None] * eye, sv[:, :, None])[..., 0]
        pred = yb + jnp.sum(b * (U - ub), axis=1)
        pred = jnp.where(jnp.isfinite(pred), pred, yb)
        return jnp.sum(okf * (pred - y) ** 2) / jnp.maximum(jnp.sum(okf), 1.0)

    return jax.vmap(score)(jnp.asarray(alphas, dt))


def loo_cv_scores(X: Array, y: Array, valid: Array, alphas: Array, ridge: Array | None = None) -> tuple[Array, Array]:
    """CV(α·COV) for every ``α`` at once (thesis Algorithm 4, vectorised).

    Args:
      X: ``[W, d]``; y: ``[W]``; valid: ``[W]`` bool; alphas: ``[m]``.
      ridge: ``None`` (default): the Nadaraya–Watson estimate's scores (the thesis); ``[]``: the ridged local
        linear fit's with this ridge ``ρ`` (module doc).
    Returns:
      ``(scores [m], A₁ [d, d])``: the leave-one-out mean squared error of each
      bandwidth and the whitening of ``COV`` (so ``H = α·COV`` has ``A₁/sqrt(α)``).
    """
    A1 = covariance_whitening(X, valid)
    if ridge is not None:
        return _local_linear_loo(A1, X, y, valid, alphas, ridge), A1
    gap, _, ok = _loo_gaps(A1, X, valid)
    yv = jnp.where(valid, y, 0.0)
    rhs = jnp.stack([yv, jnp.ones_like(yv)], axis=1)
    okf = ok.astype(y.dtype)

    def score(a):
        sums = jnp.exp(-0.5 * gap / a) @ rhs  # [W, 2]: Σ_j k_ij y_j and Σ_j k_ij (the latter >= 1 where ok)
        pred = jnp.where(ok, sums[:, 0] / jnp.where(ok, sums[:, 1], 1.0), 0.0)
        return jnp.sum(okf * (pred - y) ** 2) / jnp.maximum(jnp.sum(okf), 1.0)

    return jax.vmap(score)(jnp.asarray(alphas, X.dtype)), A1


def tune(state: KernelRegressionState, *, alphas=None, local: str = "constant") -> KernelRegressionState:
    """Pick the bandwidth ``H = α·COV`` by leave-one-out CV over the grid ``alphas`` (thesis 4.3.2.4, Algorithm 4).

    Every ``α`` is scored in one vectorised call (:func:`loo_cv_scores`), by
    the estimate that predicts (``local``, static: ``"constant"`` the
    Nadaraya–Watson mean, ``"linear"`` the ridged local linear fit); the
    current bandwidth is kept unless some ``α`` is strictly better (the first
    minimum, like Algorithm 4's strict ``<``), in which case ``D``, ``C`` are
    recomputed from scratch (:func:`window_sums`, ``O(W² d)``).

    Args:
      state: the current state.
      alphas: ``[m]`` the grid of ``α > 0`` (static: a tuple of floats or a NumPy array);
        ``None``: the fit's default grid (:func:`default_alphas`).
      local: ``"constant"`` or ``"linear"`` (static), the predicting estimate's fit; ``"linear"`` scores every
        bandwidth with the state's ridge (:func:`~onlinejax.learners.kernel_regression_state.local_linear_ridge`,
        from the current bandwidth's residual variance).
    """
    s = state
    buf = s.buffer
    dt = buf.y.dtype
    grid = jnp.asarray(default_alphas(local) if alphas is None else alphas, dt)
    if local == "linear":
        ridge = local_linear_ridge(s)
        scores, A1 = loo_cv_scores(buf.x, buf.y, buf.valid, grid, ridge)
        current = _local_linear_loo(s.whiten, buf.x, buf.y, buf.valid, jnp.ones((1,), dt), ridge)[0]
    else:
        scores, A1 = loo_cv_scores(buf.x, buf.y, buf.valid, grid)
        current = _loo_score(-0.5 * _pair_q(s.whiten, buf.x), buf.y, buf.valid)
    scores = jnp.where(jnp.isfinite(scores), scores, jnp.inf)
    best = jnp.argmin(scores)  # first minimum, like Algorithm 4's strict '<'
    better = (buf.count >= 2) & (scores[best] < current) & jnp.all(jnp.isfinite(A1))
    A = jnp.where(better, A1 / jnp.sqrt(grid[best]), s.whiten)
    Dn, Cn = window_sums(A, buf.x, buf.y, buf.valid)
    return s._replace(whiten=A, density=jnp.where(better, Dn, s.density),
                      contribution=jnp.where(better, Cn, s.contribution),
                      bandwidth_scale=jnp.where(better, grid[best], s.bandwidth_scale))

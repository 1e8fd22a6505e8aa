"""Sliding-window Nadaraya–Watson kernel regression.

Thesis 4.3.2 (kernel density estimate eq. 4.37–4.39, the Nadaraya–Watson
estimator eq. 4.42, bounds eq. 4.43, leave-one-out bandwidth choice 4.3.2.4)
and 5.4.4 (Algorithms 3 and 4).

Kernel and bandwidth
--------------------
The Gaussian kernel with bandwidth matrix ``H`` (Wand & Jones' convention,
``H`` is the kernel's covariance) is ``K_H(u) = |H|^{-1/2} (2π)^{-d/2}
exp(-½ uᵀH⁻¹u)``. The state stores a *whitening* matrix ``A`` with
``H⁻¹ = AᵀA``, so the quadratic form is ``q = ‖A u‖²`` computed from the
difference (no cancellation). This is the only reading under which the
thesis's tuning rule ``H = α·COV`` (Algorithm 4, COV the window's input
covariance) is dimensionally consistent: the kernel's lengthscales become
``sqrt(α)`` times the inputs' standard deviations.

What is maintained per item (Algorithm 3, corrected)
----------------------------------------------------
For every point ``i`` of the window the thesis keeps its density sum
``D_i = Σ_j k(x_i, x_j)`` and contribution sum ``C_i = Σ_j k(x_i, x_j) y_j``
over the window (``k = exp(-½q)``, self term ``k(x_i, x_i) = 1``
included). ``learn`` subtracts the evicted point's terms and adds the new
point's, ``O(W d²)``; the new point's own sums are computed over the *whole*
remaining window plus itself (the thesis code's loops skipped the newest
point). These sums give the in-window fit ``C_i / D_i``, hence the residual
variance used by the bounds, in ``O(W)``. Every sum is computed from scratch
when its point enters and receives at most ``2W`` additions before the point
leaves, so rounding error is bounded by ``~2W·eps`` relative to ``D_i >= 1``
whatever the stream length: no periodic refresh is needed.

Predictions
-----------
Weights are computed in log space, ``w = softmax(-½ q)``, so a query far
from every window point gets the nearest points' weights instead of ``0/0``.
Bounds (``bounds=``):

* ``"asymptotic"`` (default): ``Var[m̂(x)] = ‖K‖₂² σ̂² / (n |H|^{1/2} f̂(x))``
  (Härdle, *Applied Nonparametric Regression*, Thm 4.2.1, the source the thesis
  cites as [31]); with the Gaussian kernel ``‖K‖₂² = (4π)^{-d/2}`` this is
  ``2^{-d/2} σ̂² / Σ_j exp(-½ q_j)``.
* ``"exact"``: the finite-sample variance of the linear smoother given the
  inputs, ``σ̂² Σ_j w_j²``.
* ``"thesis"``: eq. 4.43 as printed, ``‖K‖₂² ASE / f̂(x)`` with
  ``f̂`` the normalised density (eq. 4.39) and ``ASE = RSS/n``. It lacks the
  ``1/(n|H|^{1/2})`` factor, so its width scales with the input units.

``σ̂²`` is the in-window residual variance with the linear-smoother
degrees-of-freedom correction ``RSS / (n - tr S)`` (``tr S = Σ_i 1/D_i``);
while fewer than one residual degree of freedom exists it is blended with
the window's target variance, and with fewer than two points it is the
variance cap ``sqrt(finfo.max)`` (no information). A floor ``100·eps·mean(y²)``
keeps it positive.

These are **confidence** intervals for the regression function ``m(x)``, not
prediction intervals for a new ``y``: they ignore the noise. The thesis used
them as prediction bounds at 95 % and 99.9 % ("HighConf"; use
``pred.interval(0.999)``). ``interval="prediction"`` (the default, matching
:class:`~onlinejax.Prediction`'s contract that ``var`` is the observation's)
adds ``σ̂²``; ``interval="confidence"`` reproduces the thesis.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .base import Learner, Prediction, check_int, check_positive, default_float_dtype, keep_if, make_learner
from .window import RingBuffer, ring_init, ring_oldest, ring_pop_oldest, ring_push

Array = jax.Array

__all__ = [
    "KernelRegressionState",
    "kernel_regression",
    "window_sums",
    "residual_variance",
    "loo_cv_scores",
    "covariance_whitening",
    "THESIS_ALPHAS",
    "BOUNDS",
    "INTERVALS",
]

BOUNDS = ("asymptotic", "exact", "thesis")
INTERVALS = ("prediction", "confidence")
#: Algorithm 4's grid: α from 0.05 while α < 2.0, step 0.01 (195 values).
THESIS_ALPHAS = np.round(0.05 + 0.01 * np.arange(195), 2)


class KernelRegressionState(NamedTuple):
    """State of :func:`kernel_regression` (capacity ``W``, ``d`` inputs).

    Attributes:
      buffer: :class:`~onlinejax.window.RingBuffer` (``x [W, d]``, ``y [W]``, ``valid [W]``).
      density: ``[W]`` ``D_i = Σ_j k(x_i, x_j)`` over the window (self included).
      contribution: ``[W]`` ``C_i = Σ_j k(x_i, x_j) y_j``.
      whiten: ``[d, d]`` lower-triangular ``A`` with ``H⁻¹ = AᵀA``.
      bandwidth_scale: ``[]`` the ``α`` of the last tune (``H = α·COV``), 0 if never tuned.
      n_seen, n_skipped: ``[]`` int32.
    """

    buffer: RingBuffer
    density: Array
    contribution: Array
    whiten: Array
    bandwidth_scale: Array
    n_seen: Array
    n_skipped: Array


def _var_cap(dtype) -> float:
    return float(np.sqrt(np.finfo(dtype).max))


def _log_kernel(A: Array, X: Array, x: Array) -> Array:
    """``-½‖A(X_j - x)‖²`` for every row: ``[W]``."""
    u = (X - x) @ A.T
    return -0.5 * jnp.sum(u * u, axis=-1)


def _pair_q(A: Array, X: Array) -> Array:
    """``[W, W]`` quadratic forms ``‖A(x_i - x_j)‖²``."""
    return -2.0 * jax.vmap(lambda x: _log_kernel(A, X, x))(X)


def window_sums(A: Array, X: Array, y: Array, valid: Array) -> tuple[Array, Array]:
    """Density and contribution sums computed from scratch, ``O(W² d)``.

    Args:
      A: ``[d, d]`` whitening; X: ``[W, d]``; y: ``[W]``; valid: ``[W]`` bool.
    Returns:
      ``(D, C)``, each ``[W]`` (zero on invalid slots).
    """
    K = jnp.exp(-0.5 * _pair_q(A, X)) * valid[None, :] * valid[:, None]
    return jnp.sum(K, axis=1), K @ (y * valid)


def residual_variance(s: KernelRegressionState) -> tuple[Array, Array]:
    """``(σ̂², ASE)`` of the window's in-sample fit ``C_i/D_i``.

    ``σ̂² = RSS / (n - tr S)`` with ``tr S = Σ_i 1/D_i`` (the diagonal of the
    smoother matrix is ``k(x_i, x_i)/D_i``), blended with the targets' sample
    variance while ``n - tr S < 1``; ``ASE = RSS/n`` (thesis 4.3.2.4).
    Both are floored at ``100·eps·mean(y²)``; with fewer than two items both
    are the variance cap ``sqrt(finfo.max)``.
    """
    buf = s.buffer
    dt = buf.y.dtype
    v = buf.valid.astype(dt)
    n = jnp.sum(v)
    D = jnp.where(buf.valid, s.density, 1.0)
    fit = s.contribution / D
    rss = jnp.sum(v * (buf.y - fit) ** 2)
    df = n - jnp.sum(v / D)
    ybar = jnp.sum(v * buf.y) / jnp.maximum(n, 1.0)
    s2y = jnp.sum(v * (buf.y - ybar) ** 2) / jnp.maximum(n - 1.0, 1.0)
    sigma2 = (rss + s2y * jnp.maximum(1.0 - df, 0.0)) / jnp.maximum(df, 1.0)
    floor = 100.0 * jnp.finfo(dt).eps * jnp.sum(v * buf.y ** 2) / jnp.maximum(n, 1.0) + jnp.finfo(dt).tiny
    cap = _var_cap(dt)
    few = n < 2
    sigma2 = jnp.where(few, cap, jnp.clip(sigma2, floor, cap))
    ase = jnp.where(few, cap, jnp.clip(rss / jnp.maximum(n, 1.0), floor, cap))
    return sigma2, ase


def covariance_whitening(X: Array, valid: Array) -> Array:
    """``A₁ = chol(COV)⁻¹`` for the valid rows' covariance (``ddof = 1``), ``[d, d]``.

    A relative jitter ``eps·tr(COV)`` (plus ``sqrt(tiny)``) keeps the
    factorisation defined for collinear or constant inputs while changing the
    bandwidth by no more than rounding does; ``H = α·COV``
    then has whitening ``A₁ / sqrt(α)``.
    """
    dt = X.dtype
    d = X.shape[-1]
    v = valid.astype(dt)
    n = jnp.sum(v)
    mu = (v @ X) / jnp.maximum(n, 1.0)
    Xc = (X - mu) * v[:, None]
    cov = Xc.T @ Xc / jnp.maximum(n - 1.0, 1.0)
    eps = jnp.finfo(dt).eps
    jit = eps * jnp.trace(cov) + jnp.sqrt(jnp.finfo(dt).tiny)
    L = jnp.linalg.cholesky(cov + jit * jnp.eye(d, dtype=dt))
    return jax.scipy.linalg.solve_triangular(L, jnp.eye(d, dtype=dt), lower=True)


def _loo_score(logK: Array, y: Array, valid: Array) -> Array:
    """Leave-one-out CV(H) (thesis 4.3.2.4) from the ``[W, W]`` log-kernel matrix."""
    W = y.shape[0]
    mask = valid[None, :] & valid[:, None] & ~jnp.eye(W, dtype=bool)
    logits = jnp.where(mask, logK, -jnp.inf)
    lse = jax.nn.logsumexp(logits, axis=1)
    ok = valid & jnp.isfinite(lse)  # a point with no other point in the window has no LOO estimate
    w = jnp.exp(logits - jnp.where(ok, lse, 0.0)[:, None])
    pred = jnp.where(ok, w @ jnp.where(valid, y, 0.0), 0.0)
    okf = ok.astype(y.dtype)
    return jnp.sum(okf * (pred - y) ** 2) / jnp.maximum(jnp.sum(okf), 1.0)


def loo_cv_scores(X: Array, y: Array, valid: Array, alphas: Array) -> tuple[Array, Array]:
    """CV(α·COV) for every ``α`` at once (thesis Algorithm 4, vectorised).

    Args:
      X: ``[W, d]``; y: ``[W]``; valid: ``[W]`` bool; alphas: ``[m]``.
    Returns:
      ``(scores [m], A₁ [d, d])``: the leave-one-out mean squared error of each
      bandwidth and the whitening of ``COV`` (so ``H = α·COV`` has ``A₁/sqrt(α)``).
    """
    A1 = covariance_whitening(X, valid)
    q1 = _pair_q(A1, X)
    W = y.shape[0]
    mask = valid[None, :] & valid[:, None] & ~jnp.eye(W, dtype=bool)
    # each row's largest logit is its nearest other point's for every α, so the log-sum-exp shift is
    # found once and each α costs one exp per pair and one matrix product (2 exps per pair before:
    # one tune, 195 α: W = 128 9.5 -> 3.1-3.4 ms, W = 32 2.0 -> 0.45 ms)
    qmin = jnp.min(jnp.where(mask, q1, jnp.inf), axis=1)
    ok = valid & jnp.isfinite(qmin)  # a point with no other point in the window has no LOO estimate
    gap = jnp.where(mask & ok[:, None], q1 - jnp.where(ok, qmin, 0.0)[:, None], jnp.inf)  # >= 0, 0 at the nearest
    yv = jnp.where(valid, y, 0.0)
    rhs = jnp.stack([yv, jnp.ones_like(yv)], axis=1)
    okf = ok.astype(y.dtype)

    def score(a):
        sums = jnp.exp(-0.5 * gap / a) @ rhs  # [W, 2]: Σ_j k_ij y_j and Σ_j k_ij (the latter >= 1 where ok)
        pred = jnp.where(ok, sums[:, 0] / jnp.where(ok, sums[:, 1], 1.0), 0.0)
        return jnp.sum(okf * (pred - y) ** 2) / jnp.maximum(jnp.sum(okf), 1.0)

    return jax.vmap(score)(jnp.asarray(alphas, X.dtype)), A1


def kernel_regression(n_features: int, window: int, *, lengthscale=1.0, bounds: str = "asymptotic",
                      interval: str = "prediction", alphas=THESIS_ALPHAS, dtype=None) -> Learner:
    """Sliding-window Nadaraya–Watson regression (thesis 4.3.2, 5.4.4) as a :class:`~onlinejax.Learner`.

    Args:
      n_features: ``d`` (static).
      window: capacity ``W >= 2`` (static).
      lengthscale: initial bandwidth, ``H = diag(lengthscale²)`` (scalar or ``[d]``;
        ``init`` overrides).
      bounds: ``"asymptotic"``, ``"exact"`` or ``"thesis"`` (see module doc).
      interval: ``"prediction"`` (adds the residual variance) or ``"confidence"``.
      alphas: the ``α`` grid that ``tune`` searches (``H = α·COV``); default the
        thesis's 0.05, 0.06, …, 1.99.
      dtype: default floating dtype.
    Returns:
      A learner; ``init(lengthscale=, dtype=)``; ``downdate(state)`` evicts the
      oldest item; ``tune(state)`` picks the leave-one-out-best ``α`` over the
      whole grid in one vectorised call and keeps the current bandwidth unless
      some ``α`` is strictly better (Algorithm 4).
    """
    d = check_int(n_features, "n_features", 1)
    W = check_int(window, "window", 2)
    if bounds not in BOUNDS:
        raise ValueError(f"bounds: must be one of {BOUNDS}, got {bounds!r}")
    if interval not in INTERVALS:
        raise ValueError(f"interval: must be one of {INTERVALS}, got {interval!r}")
    alphas_np = np.asarray(alphas, np.float64).reshape(-1)
    if alphas_np.size == 0 or not np.all(np.isfinite(alphas_np)) or not np.all(alphas_np > 0):
        raise ValueError(f"alphas: must be a non-empty array of finite values > 0, got {alphas!r}")
    check_positive(lengthscale, "lengthscale")

    def _init(lengthscale=lengthscale, dtype=dtype):
        check_positive(lengthscale, "lengthscale")
        dt = dtype or default_float_dtype()
        ell = jnp.broadcast_to(jnp.asarray(lengthscale, dt), (d,))
        return KernelRegressionState(
            buffer=ring_init(W, d, dt), density=jnp.zeros((W,), dt), contribution=jnp.zeros((W,), dt),
            whiten=jnp.diag(1.0 / ell), bandwidth_scale=jnp.zeros((), dt),
            n_seen=jnp.zeros((), jnp.int32), n_skipped=jnp.zeros((), jnp.int32),
        )

    def _remove_oldest(s: KernelRegressionState, go: Array) -> KernelRegressionState:
        xo, yo, present = ring_oldest(s.buffer)
        k = jnp.exp(_log_kernel(s.whiten, s.buffer.x, xo)) * s.buffer.valid * (present & go)
        buf = keep_if(go, ring_pop_oldest(s.buffer), s.buffer)
        return s._replace(buffer=buf, density=s.density - k, contribution=s.contribution - k * yo)

    def learn_one(s: KernelRegressionState, x, y):
        ok = jnp.all(jnp.isfinite(x)) & jnp.isfinite(y)
        t = _remove_oldest(s, s.buffer.count == W)  # when full, the head slot is the oldest
        buf = t.buffer
        k = jnp.exp(_log_kernel(s.whiten, buf.x, x)) * buf.valid
        D = t.density + k
        C = t.contribution + k * y
        h = buf.head
        D = D.at[h].set(jnp.sum(k) + 1.0)  # the new point's sums include every window point and itself
        C = C.at[h].set(k @ jnp.where(buf.valid, buf.y, 0.0) + y)
        new = t._replace(buffer=ring_push(buf, x, y), density=D, contribution=C, n_seen=s.n_seen + 1)
        return keep_if(ok, new, s._replace(n_skipped=s.n_skipped + (~ok)))

    def downdate(s: KernelRegressionState):
        return _remove_oldest(s, jnp.asarray(True))

    log_norm_k2 = -0.5 * d * math.log(4.0 * math.pi)  # ‖K‖₂² of the standard Gaussian kernel

    def predict_one(s: KernelRegressionState, x):
        buf = s.buffer
        dt = buf.y.dtype
        cap = _var_cap(dt)
        logits = jnp.where(buf.valid, _log_kernel(s.whiten, buf.x, x), -jnp.inf)
        n = buf.count
        lse = jax.nn.logsumexp(logits)
        has = n > 0
        w = jnp.exp(logits - jnp.where(has, lse, 0.0))
        mean = jnp.where(has, w @ jnp.where(buf.valid, buf.y, 0.0), 0.0)
        sigma2, ase = residual_variance(s)
        if bounds == "asymptotic":
            # ‖K‖₂² σ̂² / Σ_j K(A u_j) with the normalised kernel: the (2π)^{-d/2} cancel into 2^{-d/2}
            log_var = jnp.log(sigma2) - 0.5 * d * math.log(2.0) - lse
        elif bounds == "exact":
            log_var = jnp.log(sigma2) + jax.nn.logsumexp(2.0 * logits) - 2.0 * lse
        else:  # eq. 4.43 as printed: ‖K‖₂² ASE / f̂(x), f̂ the normalised density (eq. 4.39)
            log_det_A = jnp.sum(jnp.log(jnp.abs(jnp.diag(s.whiten))))  # A is triangular (diag or chol⁻¹)
            log_f = lse - jnp.log(n.astype(dt)) + log_det_A - 0.5 * d * math.log(2.0 * math.pi)
            log_var = log_norm_k2 + jnp.log(ase) - log_f
        var = jnp.exp(jnp.minimum(log_var, math.log(cap)))
        if interval == "prediction":
            var = jnp.minimum(var + sigma2, cap)
        return Prediction(mean, jnp.where(has & jnp.isfinite(var), var, cap))

    alphas_static = tuple(float(a) for a in alphas_np)

    def tune(s: KernelRegressionState):
        buf = s.buffer
        dt = buf.y.dtype
        grid = jnp.asarray(alphas_static, dt)
        scores, A1 = loo_cv_scores(buf.x, buf.y, buf.valid, grid)
        current = _loo_score(-0.5 * _pair_q(s.whiten, buf.x), buf.y, buf.valid)
        scores = jnp.where(jnp.isfinite(scores), scores, jnp.inf)
        best = jnp.argmin(scores)  # first minimum, like Algorithm 4's strict '<'
        better = (buf.count >= 2) & (scores[best] < current) & jnp.all(jnp.isfinite(A1))
        A = jnp.where(better, A1 / jnp.sqrt(grid[best]), s.whiten)
        Dn, Cn = window_sums(A, buf.x, buf.y, buf.valid)
        return s._replace(whiten=A, density=jnp.where(better, Dn, s.density), contribution=jnp.where(better, Cn, s.contribution),
                          bandwidth_scale=jnp.where(better, grid[best], s.bandwidth_scale))

    return make_learner(init=_init, learn_one=learn_one, predict_one=predict_one, n_features=d,
                        downdate=downdate, downdate_takes_item=False, tune=jax.jit(tune))

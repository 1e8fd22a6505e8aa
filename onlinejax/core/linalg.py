"""Square-root covariance updates shared by every linear learner.

The linear learners keep the posterior covariance as a square-root factor
``W`` with ``S = W Wᵀ`` (Potter's square-root form, Bierman 1977, ch. V).
Compared with the plain covariance (Sherman–Morrison on ``S``, the thesis's
eq. 5.4/5.9) this

* keeps ``S`` symmetric positive semi-definite by construction, whatever the
  rounding: there is no subtraction of two nearly equal matrices;
* needs only matrix-vector products and one outer product per item — no
  sequential loop over columns as a Cholesky rank-1 update does, a loop that
  is slow inside ``lax.scan`` (``benchmarks/bayes_linreg.py``);
* supports the exact rank-1 *downdate* (removing an item) with the same
  formula and a sign flip.

For a measurement ``y = xᵀw + ε``, ``ε ~ N(0, r)`` (``r = 1/β``), with
``f = Wᵀx``, ``φ = fᵀf = xᵀSx`` and ``σ = +1`` (add) or ``-1`` (remove)::

    ρ  = r + σ φ                       # predictive variance of y (add); r - xᵀSx (remove)
    m₊ = m + σ (W f / ρ) (y - xᵀm)      # Bishop eq. 3.50-3.51 written as a gain
    W₊ = W - σ c (W f) fᵀ,  c = 1 / (ρ + sqrt(r ρ))

so that ``W₊W₊ᵀ = (S⁻¹ + σ x xᵀ / r)⁻¹`` exactly. A downdate is only well
defined while ``ρ = r - xᵀSx > 0``, i.e. while the item really is part of the
posterior; ``ρ`` is floored at ``r·eps`` so a removal that rounding makes
indefinite degrades gracefully instead of producing NaN (windowed learners
additionally rebuild their factor from pure updates every window, see
:mod:`onlinejax.learners.linear.windowed`).
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from .batching import cond_if_any

Array = jax.Array

__all__ = [
    "sqrt_cov_rank1",
    "sqrt_cov_batch_update",
    "sqrt_cov_add_precision",
    "prior_sqrt_cov",
    "cap_variance",
    "psd_solve",
    "jitter",
    "variance_floor",
    "inv_chol_drop_first",
    "inv_chol_append",
    "inv_chol_slide",
    "exclusive_row_prefix",
    "lower_triangular_inverse",
    "affine_weights_inverse",
]


def jitter(dtype) -> Array:
    """``sqrt(finfo(dtype).eps)``: the relative diagonal jitter used for PSD solves.

    The square root of machine epsilon is the classic compromise: large enough
    to make a PSD matrix with condition number up to ``1/sqrt(eps)`` safely
    factorisable, small enough to perturb solutions by ``O(sqrt(eps))`` relative.
    """
    return jnp.sqrt(jnp.finfo(dtype).eps).astype(dtype)


def variance_floor(level_sq: Array) -> Array:
    """The smallest predictive variance a learner returns: ``eps·level² + sqrt(tiny)`` (the dtype's).

    ``level_sq`` (any shape, e.g. the squared predictive mean, or the window's
    mean squared target) is the targets' scale: a spread below the dtype's
    resolution there is no spread. The absolute ``sqrt(tiny)`` keeps a window
    of identical zeros (a stuck sensor, standardised) from predicting a
    variance of 0, while its square and reciprocal stay finite.
    """
    fi = jnp.finfo(jnp.result_type(level_sq))
    return fi.eps * level_sq + jnp.sqrt(fi.tiny)


def prior_sqrt_cov(alpha: Array) -> Array:
    """``W₀ = diag(alpha^{-1/2})`` for the prior ``N(0, diag(alpha)^{-1})``.

    Args:
      alpha: ``[d]`` prior precisions (Bishop eq. 3.52 with a diagonal prior).
    Returns:
      ``[d, d]`` square root of the prior covariance.
    """
    return jnp.diag(jax.lax.rsqrt(alpha))


def sqrt_cov_rank1(W: Array, m: Array, x: Array, y: Array, r: Array, sign: float | Array = 1.0,
                   f: Array | None = None):
    """Add (``sign=+1``) or remove (``sign=-1``) one observation from ``N(m, WWᵀ)``.

    Args:
      W: ``[d, d]`` square-root covariance, ``S = W Wᵀ``.
      m: ``[d]`` posterior mean.
      x: ``[d]`` features of the observation.
      y: ``[]`` target.
      r: ``[]`` noise variance of the observation (``1/β``, or ``1/(wβ)`` for a
        weighted observation).
      sign: ``+1`` to absorb the observation, ``-1`` to remove it.
      f: ``None``, or ``Wᵀx`` (``[d]``) when the caller has it already (a
        prediction's ``xᵀSx = fᵀf`` needs it too).
    Returns:
      ``(W₊, m₊)`` with ``W₊W₊ᵀ = (S⁻¹ + sign·xxᵀ/r)⁻¹`` and the matching mean
      (Bishop eq. 3.50–3.51; thesis eq. 5.4 for ``+``, eq. 5.9–5.11 for ``-``).
    """
    f = W.T @ x if f is None else f
    Wf = W @ f
    rho = r + sign * (f @ f)
    eps = jnp.finfo(W.dtype).eps
    rho = jnp.maximum(rho, r * eps)
    m_new = m + sign * (Wf / rho) * (y - x @ m)
    c = 1.0 / (rho + jnp.sqrt(r * rho))
    W_new = W - (sign * c) * jnp.outer(Wf, f)
    return W_new, m_new


def _sqrt_cov_times_inverse_root(W: Array, B: Array) -> Array:
    """``W L⁻ᵀ`` with ``LLᵀ = I + B`` (Cholesky): the square root of ``W(I + B)⁻¹Wᵀ``."""
    L = jnp.linalg.cholesky(jnp.eye(W.shape[1], dtype=W.dtype) + B)
    return solve_triangular(L, W.T, lower=True).T


def sqrt_cov_add_precision(W: Array, precision: Array) -> Array:
    """``W₊`` with ``W₊W₊ᵀ = (S⁻¹ + precision·I)⁻¹``, ``S = WWᵀ`` (``W: [d, d]``, ``precision: []`` > 0).

    By Woodbury, ``W(I + precision·WᵀW)⁻¹Wᵀ``, factorised by a Cholesky decomposition (``O(d³)``); a
    singular ``S`` is fine. Every variance ends below ``1/precision``; a direction whose variance is far
    below it keeps its variance.
    """
    return _sqrt_cov_times_inverse_root(W, precision * (W.T @ W))


def sqrt_cov_batch_update(W: Array, m: Array, X: Array, Y: Array, prec: Array):
    """Absorb a mini-batch of observations at once (exactly the sequential result).

    With ``F = X W`` and ``P = diag(prec)`` (per-row noise precisions),
    ``S₊ = W (I + FᵀPF)⁻¹ Wᵀ``; factorising ``I + FᵀPF = LLᵀ`` gives the square
    root ``W₊ = W L⁻ᵀ``, and ``m₊ = m + S₊ Xᵀ P (Y - X m)`` (Bishop eq. 3.50–3.51
    for a block of rows; the Woodbury form of thesis eq. 5.2–5.5).

    Args:
      W: ``[d, d]``; m: ``[d]``.
      X: ``[b, d]``; Y: ``[b]``.
      prec: ``[b]`` noise precision of each row (``β``, times a weight).
    Returns:
      ``(W₊, m₊)``. Cost ``O(b d² + d³)``.
    """
    F = X @ W
    W_new = _sqrt_cov_times_inverse_root(W, (F.T * prec) @ F)
    resid = Y - X @ m
    m_new = m + W_new @ (W_new.T @ (X.T @ (prec * resid)))
    return W_new, m_new


def cap_variance(W: Array, cap: Array, scale: Array | float = 1.0, headroom: float | None = None,
                 max_batch: int | None = None) -> Array:
    """Return a square root of ``scale²·WWᵀ`` with its marginal variances capped (a windup guard).

    With exponential forgetting a direction the inputs stop exciting has its
    variance multiplied by ``1/λ`` every step and overflows. Where a marginal
    variance of ``S = scale²·WWᵀ`` exceeds ``cap``, ``S`` is clamped in the
    basis whitened by the cap: with ``C = diag(cap)``,
    ``C^{-1/2} S C^{-1/2} = UΣ²Uᵀ`` becomes ``U min(Σ², h) Uᵀ`` (``h`` =
    ``headroom``, default :data:`CAP_HEADROOM`), so every marginal variance is at most its cap
    (``diag(S) <= cap``) and the directions the data keeps tight keep their
    variance and orientation. The clamp is not differentiated (its inputs
    pass through ``stop_gradient``), so a learner that forgets stays
    differentiable (:func:`~onlinejax.evaluation.tune_prequential`); the
    gradient treats a clamped covariance as given.
    (Shrinking rows, ``DSD`` with diagonal ``D``, would loosen them: in a
    stream of repeated inputs the next update's gain then moved the mean
    along directions no recent input had excited.) A no-op while every
    marginal variance is below the cap; the clamp (an SVD) runs only when
    one is not, lazily under ``vmap`` (:func:`~onlinejax.core.batching.cond_if_any`).
    ``scale`` may be ``inf`` (a forgetting factor that underflowed over a
    long mini-batch): every direction with any variance then sits at ``h`` times its cap.

    Args:
      W: ``[d, d]``; cap: ``[d]`` largest allowed marginal variances;
      scale: ``[]`` factor applied to ``W`` first (``λ^{-1/2}`` when forgetting).
      headroom: static ``h`` in (0, 1]: a smaller one clamps further below the cap, so the next clamp
        is further away (``log(1/h)/log(1/λ)`` items).
      max_batch: static; under ``vmap`` the clamp runs on this many of the ``W`` that need it at a time
        (default :data:`CAP_BATCH`; 1 where clamps seldom coincide).
    """
    scale = jnp.asarray(scale, W.dtype)
    r = jnp.sqrt(jnp.minimum(jnp.asarray(cap, W.dtype), jnp.finfo(W.dtype).max))  # an infinite cap: no NaN rows
    over = jnp.any(jnp.square(scale) * jnp.sum(W * W, axis=1) > cap)
    # the clamp is not differentiated (cond_if_any has no reverse-mode rule, and an SVD's gradient is undefined
    # at the equal singular values a clamp leaves): gradients flow through every item it leaves alone
    frozen = jax.lax.stop_gradient((W, scale, r))
    h = CAP_HEADROOM if headroom is None else float(headroom)
    if not 0.0 < h <= 1.0:  # above 1 a clamped variance would exceed its cap
        raise ValueError(f"headroom: must lie in (0, 1], got {headroom!r}")
    Wc = cond_if_any(partial(_clamp_whitened, headroom=h),
                     max_batch=CAP_BATCH if max_batch is None else max_batch)(over, frozen)[0]
    return jnp.where(over, Wc, W * jnp.where(jnp.isfinite(scale), scale, 1.0))


#: :func:`cap_variance` clamps a direction over its cap to this share of it, so that with forgetting ``λ``
#: the next clamp is ``log(1/CAP_HEADROOM)/log(1/λ)`` items away (28 at ``λ = 0.95``), not one.
CAP_HEADROOM = 0.25

#: Under ``vmap`` the clamp runs on the streams that need it, this many at a time (most items need none).
CAP_BATCH = 4


def _clamp_whitened(Wsr, headroom: float):
    """``(W', scale, r)``: ``W' = r·U·min(scale·Σ, √h)`` from the SVD ``W/r = UΣVᵀ``, ``h`` = ``headroom``."""
    W, scale, r = Wsr
    U, sig, _ = jnp.linalg.svd(W / r[:, None])
    top = jnp.where(sig > 0, jnp.minimum(scale * sig, headroom ** 0.5), 0.0)
    return r[:, None] * U * top[None, :], scale, r


def affine_weights_inverse(v: Array, x_ratio: Array, x_shift: Array, level: int) -> Array:
    """``M⁻ᵀv``: weights ``v`` (``[F]``, or a factor ``[F, k]`` over its rows) carried to affinely moved inputs.

    For features whose first ``d`` entries are inputs ``z`` and whose entry ``level`` is the constant 1, the
    move ``z' = r ⊙ z + c`` is ``φ' = Mφ`` and ``wᵀφ = (M⁻ᵀw)ᵀφ'``: ``z``'s rows divided by ``r``, the level's
    less ``Σ_j (c_j/r_j) v_j``, every other row as it is (one elementwise pass). With ``r = 1``, ``c = 0``
    ``v`` is returned bit for bit.

    Args:
      v: ``[F]`` or ``[F, k]``; x_ratio, x_shift: ``[d]`` ``r > 0`` and ``c``, ``d < F``; level: the constant's
        row (static, e.g. ``-1``), not among the first ``d``.
    """
    d, F = x_ratio.shape[-1], v.shape[0]
    ratio = jnp.concatenate([x_ratio, jnp.ones((F - d,), v.dtype)])
    lift = (x_shift / x_ratio) @ v[:d]
    is_level = jnp.arange(F) == (level % F)
    if v.ndim == 2:
        ratio, is_level = ratio[:, None], is_level[:, None]
    moved = v / ratio
    return jnp.where(is_level, moved - lift, moved)


def psd_solve(A: Array, B: Array, diagonal_boost: Array | float | None = None) -> Array:
    """Solve ``A X = B`` for symmetric PSD ``A``: symmetrise, add jitter, Cholesky-solve.

    Args:
      A: ``[n, n]`` symmetric positive (semi-)definite.
      B: ``[n]`` or ``[n, k]``.
      diagonal_boost: added to the diagonal; default ``jitter(dtype)·mean(diag(A))``.
    """
    A = 0.5 * (A + A.T)
    if diagonal_boost is None:
        diagonal_boost = jitter(A.dtype) * jnp.mean(jnp.diag(A))
    A = A + diagonal_boost * jnp.eye(A.shape[0], dtype=A.dtype)
    return jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(A), True), B)


def lower_triangular_inverse(L: Array, leaf: int = 16) -> Array:
    """``L⁻¹`` of a lower-triangular ``L: [n, n]`` by recursive 2 × 2 blocking (``[n, n]``, lower).

    ``[[A, 0], [B, C]]⁻¹ = [[A⁻¹, 0], [-C⁻¹BA⁻¹, C⁻¹]]``, halving down to
    blocks of at most ``leaf`` rows, which are inverted by a triangular solve
    against the identity — the recursive triangular inversion LAPACK's
    ``trtri`` uses, with the same accuracy (``tests/test_linalg.py``).

    Why not one triangular solve against the identity: on a CPU that solve
    goes to OpenBLAS, which spreads an ``[n, n]`` right-hand side over all
    its threads, and when the cores are busy with other work (a second
    process, the other pytest-xdist worker, another host device) its threads
    wait on each other. The GP likelihood gradient needs ``K⁻¹ = L⁻ᵀL⁻¹`` on
    every evaluation of a tune, so a stalled solve stalls the tune. The
    blocked version costs the same whether the cores are busy or idle: its
    leaves are too small for OpenBLAS to thread and the rest are XLA matrix
    products.
    """
    if L.ndim != 2 or L.shape[0] != L.shape[1]:
        raise ValueError(f"L: expected a square [n, n] array, got shape {L.shape}")
    n = L.shape[0]
    if n <= leaf:
        return jax.scipy.linalg.solve_triangular(L, jnp.eye(n, dtype=L.dtype), lower=True)
    h = n // 2
    Ai = lower_triangular_inverse(L[:h, :h], leaf)
    Ci = lower_triangular_inverse(L[h:, h:], leaf)
    return jnp.block([[Ai, jnp.zeros((h, n - h), L.dtype)], [-(Ci @ L[h:, :h]) @ Ai, Ci]])


def exclusive_row_prefix(B: Array, weights: Array | None = None) -> Array:
    """``P[i] = Σ_{j<i} w_j B[j]`` for ``B: [n, c]`` (an exclusive prefix sum over rows; ``w = 1`` by default).

    XLA:CPU has no fast cumulative sum over the rows of a matrix inside a
    ``lax.scan`` step: ``jnp.cumsum`` (reduce-window), a product with a
    constant triangular matrix (``n²c`` flops) and ``associative_scan`` all
    cost several times a chain of ``n`` row additions. Each link ends in an
    optimisation barrier: left to itself XLA fuses longer chains into loops
    that recompute the running sum, whose cost grows as ``n³``.
    ``weights: [n]`` scale the rows inside the links, so ``w ⊙ B`` is never
    written out (one pass over ``B`` fewer). Beyond ``n = 512`` (where the
    chain's compile time grows) the associative scan is used.
    """
    if B.ndim != 2:
        raise ValueError(f"B: expected a [n, c] array, got shape {B.shape}")
    n = B.shape[0]
    if weights is not None and weights.shape != (n,):
        raise ValueError(f"weights: expected shape {(n,)} to match B, got {weights.shape}")
    if n > 512:
        WB = B if weights is None else weights[:, None] * B
        return jax.lax.associative_scan(jnp.add, WB, axis=0) - WB
    if weights is not None:
        weights = jax.lax.optimization_barrier(weights)  # materialised once, not recomputed in every link
    rows = [jnp.zeros_like(B[0])]
    for i in range(1, n):
        term = B[i - 1] if weights is None else weights[i - 1] * B[i - 1]
        rows.append(jax.lax.optimization_barrier(rows[-1] + term))
    return jnp.stack(rows)


def _drop_first_coefficients(R: Array):
    """``(p, m, a, b)`` of the rank-1 update that removes the first item (see :func:`inv_chol_drop_first`)."""
    p = -R[1:, 0] / R[0, 0]
    s = 1.0 + jnp.cumsum(p * p)
    s_prev = jnp.concatenate([jnp.ones((1,), R.dtype), s[:-1]])
    m = jnp.sqrt(s / s_prev)
    q = p / jnp.sqrt(s * s_prev)
    return p, m, -p / (m * s_prev), q * s / m


def _drop_first_rows(R: Array, m: Array, a: Array, b: Array) -> Array:
    """``[n-1, n]`` rows ``M⁻¹R[1:, :] = R[1:]/m + a ⊙ prefix(b ⊙ R[1:])``.

    All columns are kept, the evicted item's first one included (callers drop it).

    The prefix chain reads the rows of ``R`` itself (the weights ``b`` are
    applied inside its links) and the result is consumed by one fusion, so
    ``R`` is read twice here and nothing of its size is written but the
    result (forming ``b ⊙ R₂₂``, a sliced copy, first would write one more
    ``[W, W]`` array per item).
    """
    Rt = R[1:]
    return Rt / m[:, None] + a[:, None] * exclusive_row_prefix(Rt, b)


def inv_chol_drop_first(R: Array) -> Array:
    """Inverse Cholesky factor of ``K[1:, 1:]`` from that of ``K``, in ``O(n²)`` memory.

    With ``K = LLᵀ`` and ``R = L⁻¹`` (lower triangular, ``K⁻¹ = RᵀR``):
    dropping the first row/column of ``K`` is the rank-1 *update*
    ``K₂₂ = L₂₂L₂₂ᵀ + l₂₁l₂₁ᵀ`` of the trailing factor. In the product form
    ``L₂₂' = L₂₂M`` with ``M = chol(I + ppᵀ)`` (Gill, Golub, Murray & Saunders
    1974, "Methods for modifying matrix factorizations") the vector is
    ``p = L₂₂⁻¹l₂₁ = -R[1:, 0]/R[0, 0]`` (block inverse of a triangular
    matrix) — no solve needed. With ``s_j = 1 + Σ_{k<=j} p_k²``, ``M`` has the
    closed form ``M_jj = sqrt(s_j/s_{j-1})``, ``M_ij = p_i p_j/sqrt(s_j s_{j-1})``
    (``i > j``), and its inverse is again diagonal plus a rank-1 strictly
    lower part: ``M⁻¹ = diag(1/m) + tril(a bᵀ, -1)`` with
    ``m_j = sqrt(s_j/s_{j-1})``, ``a_i = -p_i/(m_i s_{i-1})`` and
    ``b_j = q_j s_j/m_j`` (``q_j = p_j/sqrt(s_j s_{j-1})``), because the
    products of ``1 - q_k p_k/m_k = s_{k-1}/s_k`` telescope; so
    ``R₂₂' = M⁻¹R₂₂`` is one prefix sum over rows. All ``s_j >= 1``, and
    ``‖M⁻¹‖₂ <= 1`` (``MMᵀ = I + ppᵀ ⪰ I``): the update never amplifies the
    rounding already in ``R``.

    Args:
      R: ``[n, n]`` lower-triangular inverse Cholesky factor of ``K``.
    Returns:
      ``[n-1, n-1]`` inverse Cholesky factor of ``K[1:, 1:]``. If ``R[1:, 0]``
      is zero (a decoupled first row) the result is ``R[1:, 1:]`` exactly.
    """
    _, m, a, b = _drop_first_coefficients(R)
    return _drop_first_rows(R, m, a, b)[:, 1:]


def inv_chol_append(R: Array, k: Array, kxx: Array, floor: Array) -> Array:
    """Inverse Cholesky factor of ``[[K, k], [kᵀ, kxx]]`` from ``R = chol(K)⁻¹`` (bordering).

    ``c = Rk``, ``δ = sqrt(max(kxx - cᵀc, floor))``; the new last row is
    ``[-(cᵀR)/δ, 1/δ]``. For ``K_y = K + σ_n²I`` the exact Schur complement
    ``kxx - cᵀc`` is ``>= σ_n²``, so ``floor = σ_n²`` never biases an exact
    result and keeps the factor finite for duplicate inputs.

    Args:
      R: ``[n, n]``; k: ``[n]``; kxx: ``[]``; floor: ``[]``.
    Returns:
      ``[n+1, n+1]``.
    """
    c = R @ k
    dlt = jnp.sqrt(jnp.maximum(kxx - c @ c, floor))
    n = R.shape[0]
    out = jnp.zeros((n + 1, n + 1), R.dtype).at[:-1, :-1].set(R)
    return out.at[-1, :-1].set(-(c @ R) / dlt).at[-1, -1].set(1.0 / dlt)


def inv_chol_slide(R: Array, k: Array, kxx: Array, floor: Array, r: Array):
    """Evict the oldest item and append a new one: :func:`inv_chol_drop_first` then :func:`inv_chol_append`, fused.

    One sliding-window step of the GP factor, reading ``R`` three times
    (``Rk``, ``R[0; r']``, ``gᵀR₂₂``) and writing it once; the appended row
    and the new whitened residuals are derived from products with the *old*
    factor through the structured ``M⁻¹`` of :func:`inv_chol_drop_first`
    (``R' = M⁻¹R₂₂``):

    * ``c = R'k' = M⁻¹(R₂₂k')`` with ``R₂₂k' = (Rk)[1:] - R[1:, 0]k₀``;
    * new last row ``[-(R'ᵀc)ᵀ/δ, 1/δ]``, ``R'ᵀc = R₂₂ᵀ(M⁻ᵀc)``,
      ``δ = sqrt(max(kxx - cᵀc, floor))`` (the Schur complement, as in :func:`inv_chol_append`);
    * ``z₊ = R₊r = [M⁻¹R₂₂r'; (r_new - cᵀM⁻¹R₂₂r')/δ]``.

    Args:
      R: ``[n, n]`` inverse Cholesky factor of the window (time order, oldest first).
      k: ``[n]`` kernel values between the new input and the *current* window
        (``k[0]``, the oldest item's, is only used to remove it).
      kxx: ``[]`` ``k(x, x) + σ_n²``; floor: ``[]`` lower bound of ``δ²`` (``σ_n²``).
      r: ``[n]`` residuals of the *new* window (oldest dropped, the new item last).
    Returns:
      ``(R₊, z₊, v)``: the new ``[n, n]`` factor, ``z₊ = R₊r`` and ``v = Rk``
      (which the prediction of the new input from the current window needs).
    """
    if R.ndim != 2 or R.shape[0] != R.shape[1] or R.shape[0] < 2:
        raise ValueError(f"R: expected a square [n, n] factor with n >= 2, got shape {R.shape}")
    for name, a in (("k", k), ("r", r)):
        if a.shape != R.shape[:1]:
            raise ValueError(f"{name}: expected shape {R.shape[:1]} to match R, got {a.shape}")
    n1 = R.shape[0] - 1
    dt = R.dtype
    # exclusive prefix / suffix sums of vectors: for a vector XLA:CPU's blocked cumsum is cheaper
    # than a product with a constant triangular matrix
    prefix = lambda x: jnp.cumsum(x) - x  # noqa: E731
    suffix = lambda x: jnp.cumsum(x[::-1])[::-1] - x  # noqa: E731  (not sum - cumsum: no cancellation)
    v = R @ k
    u2 = (R @ jnp.concatenate([jnp.zeros((1,), dt), r[:-1]]))[1:]
    col = R[1:, 0]
    _, m, a, b = _drop_first_coefficients(R)
    m_inv = lambda u: u / m + a * prefix(b * u)  # M⁻¹u, the vector form of _drop_first_rows  # noqa: E731
    c = m_inv(v[1:] - col * k[0])
    zr = m_inv(u2)
    dlt = jnp.sqrt(jnp.maximum(kxx - c @ c, floor))
    g = c / m + b * suffix(a * c)  # M⁻ᵀc
    w = (jnp.concatenate([jnp.zeros((1,), dt), g]) @ R)[1:]  # gᵀR₂₂ without copying out R₂₂
    Rp = _drop_first_rows(R, m, a, b)[:, 1:]
    last = jnp.concatenate([-w / dlt, (1.0 / dlt)[None]])
    Rn = jnp.concatenate([jnp.concatenate([Rp, jnp.zeros((n1, 1), dt)], axis=1), last[None]], axis=0)
    z = jnp.concatenate([zr, ((r[-1] - c @ zr) / dlt)[None]])
    return Rn, z, v

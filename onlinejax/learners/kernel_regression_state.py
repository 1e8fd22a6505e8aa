"""The state of :func:`~onlinejax.learners.kernel_regression.kernel_regression` and the window quantities its steps share.

:class:`KernelRegressionState`; the kernel's quadratic forms (``_log_kernel``,
``_pair_q``) and a query's weights relative to its nearest point
(``_relative_logits``); the density and contribution sums from scratch
(:func:`window_sums`); the window's climatology (:func:`window_climatology`),
the residual variance of its in-window fit (:func:`residual_variance`) and the
local linear fit's ridge (:func:`local_linear_ridge`).
The formulas, which "the module doc" below refers to, are in the module doc
of :mod:`onlinejax.learners.kernel_regression`, which re-exports these names.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.window import RingBuffer

Array = jax.Array

__all__ = ["KernelRegressionState", "window_sums", "window_climatology", "residual_variance", "local_linear_ridge"]

#: The local linear fit's ridge ``ρ = σ̂²/(s_y² - σ̂²)`` is clipped to ``[RIDGE_MIN, RIDGE_MAX]`` (module doc).
RIDGE_MIN, RIDGE_MAX = 1e-3, 1e3


class KernelRegressionState(NamedTuple):
    """State of :func:`kernel_regression` (capacity ``W``, ``d`` inputs).

    Attributes:
      buffer: :class:`~onlinejax.core.window.RingBuffer` (``x [W, d]``, ``y [W]``, ``valid [W]``).
      density: ``[W]`` ``D_i = Σ_j k(x_i, x_j)`` over the window (self included).
      contribution: ``[W]`` ``C_i = Σ_j k(x_i, x_j) y_j``.
      whiten: ``[d, d]`` lower-triangular ``A`` with ``H⁻¹ = AᵀA``.
      bandwidth_scale: ``[]`` the ``α`` of the last tune (``H = α·COV``), 0 if never tuned.
      prior_var: ``[]`` predictive variance of an empty window (see the module doc).
      n_seen, n_skipped: ``[]`` int32.
    """

    buffer: RingBuffer
    density: Array
    contribution: Array
    whiten: Array
    bandwidth_scale: Array
    prior_var: Array
    n_seen: Array
    n_skipped: Array


def _var_cap(dtype) -> float:
    return float(np.sqrt(np.finfo(dtype).max))


_Z975 = 1.959963984540054
#: Small-sample factor r_ν of the climatology for ν = 1, 2 (module doc): t₁ quantile tan(0.475π), t₂ 0.95·sqrt(2/0.0975).
_R_FEW = ((math.tan(0.475 * math.pi) / _Z975) ** 2, (0.95 * math.sqrt(2.0 / 0.0975) / _Z975) ** 2)


def _small_sample_factor(n: Array) -> Array:
    """``c_n = (1 + 1/n) r_ν``, ``ν = n - 1`` (module doc); meaningful for ``n >= 2``."""
    nu = n - 1.0
    r = jnp.where(nu >= 3.0, nu / jnp.maximum(nu - 2.0, 1.0), jnp.where(nu >= 2.0, _R_FEW[1], _R_FEW[0]))
    return (1.0 + 1.0 / jnp.maximum(n, 1.0)) * r


def _floor(dt, mean_y2: Array) -> Array:
    """Variance floor ``100·eps·mean(y²) + sqrt(tiny)``: the dtype's resolution at the targets' scale."""
    fi = jnp.finfo(dt)
    return 100.0 * fi.eps * mean_y2 + jnp.sqrt(fi.tiny)


def _log_kernel(A: Array, X: Array, x: Array) -> Array:
    """``-½‖A(X_j - x)‖²`` for every row: ``[W]``.

    A NaN can only come from an overflow inside the product (``inf - inf``),
    i.e. from a point beyond the dtype's range: it is read as ``-inf``
    (kernel value 0) so it cannot poison the maintained sums.
    """
    u = (X - x) @ A.T
    lk = -0.5 * jnp.sum(u * u, axis=-1)
    return jnp.where(jnp.isnan(lk), -jnp.inf, lk)


def _relative_logits(A: Array, X: Array, valid: Array, x: Array) -> tuple[Array, Array]:
    """``(l, q_m)``: ``l_j = -½(q_j - q_m)`` relative to the nearest valid point ``m`` (``[W]``, 0 at ``m``,
    ``-inf`` on invalid slots) and ``q_m`` (``[]``, ``inf`` when it overflows).

    With ``x̄`` the valid rows' mean, ``δ_j = A(x_j - x̄)`` and ``b = A(x̄ - x)``: ``q_j = ‖δ_j + b‖²``, so
    ``q_j - q_m = g_j - g_m`` with ``g_j = ‖δ_j‖² + 2δ_jᵀb``. These keep their precision however far the
    query is (``x_j - x̄`` carries the window's detail that ``x_j - x`` rounds away) and grow only
    linearly in ``|x|``; dividing by ``c = max(1, max|x̄ - x|)`` keeps them finite for any finite query.
    Equidistant points get bit-equal ``g``, so ``l_j = 0`` exactly for each of them.
    """
    vm = valid[:, None]
    xbar = jnp.sum(jnp.where(vm, X, 0.0), axis=0) / jnp.maximum(jnp.sum(valid), 1).astype(X.dtype)
    c = jnp.maximum(jnp.max(jnp.abs(xbar - x)), 1.0)  # divided by, not multiplied by 1/c: 1/c may be subnormal
    delta = (X - xbar) @ A.T
    b = ((xbar - x) / c) @ A.T  # A(x̄ - x)/c
    g = jnp.where(valid, jnp.sum(delta * (delta / c + 2.0 * b), axis=-1), jnp.inf)  # g_j / c
    g_m = jnp.min(g)
    gap = g - g_m  # >= 0, 0 at the nearest point(s); inf on invalid slots
    logits = jnp.where(valid, -0.5 * jnp.where(gap > 0, gap * c, 0.0), -jnp.inf)
    # q_m = ‖A(x̄ - x)‖² + g_m; its rounding error, eps·‖A(x̄ - x)‖², is no cancellation of the query's
    return logits, jnp.maximum(c * (c * jnp.sum(b * b) + g_m), 0.0)


def _used_dims(A: Array) -> tuple[Array, Array]:
    """``(d_used, log|det|)`` of a triangular whitening over its nonzero diagonal (zero = infinite bandwidth)."""
    a = jnp.abs(jnp.diag(A))
    nz = a > 0
    return jnp.sum(nz).astype(A.dtype), jnp.sum(jnp.where(nz, jnp.log(jnp.where(nz, a, 1.0)), 0.0))


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


def _target_moments(buf: RingBuffer) -> tuple[Array, Array, Array, Array]:
    """``(n, ȳ, s_y², mean(y²))`` of the window's valid targets (``s_y²`` with ``ddof = 1``; every value ``[]``)."""
    v = buf.valid.astype(buf.y.dtype)
    n = jnp.sum(v)
    yv = jnp.where(buf.valid, buf.y, 0.0)
    ybar = jnp.sum(yv) / jnp.maximum(n, 1.0)
    s2y = jnp.sum(v * (yv - ybar) ** 2) / jnp.maximum(n - 1.0, 1.0)
    return n, ybar, s2y, jnp.sum(yv * yv) / jnp.maximum(n, 1.0)


def window_climatology(s: KernelRegressionState) -> tuple[Array, Array]:
    """``(ȳ, v)``: the window's climatology, the predictive of a new target ignoring the inputs.

    With ``n >= 2`` targets ``v = c_n s_y²``, ``s_y²`` the sample variance
    (``ddof = 1``, floored like ``σ̂²``) and ``c_n`` the small-sample factor
    of the module doc. With one target ``(y₁, prior_var + y₁²)``; with none
    ``(0, prior_var)``.
    """
    n, ybar, s2y, mean_y2 = _target_moments(s.buffer)
    many = jnp.maximum(_small_sample_factor(n) * s2y, _floor(s.buffer.y.dtype, mean_y2))
    few = s.prior_var + jnp.where(n >= 1, ybar * ybar, 0.0)
    return ybar, jnp.where(n >= 2, many, few)


def residual_variance(s: KernelRegressionState) -> tuple[Array, Array]:
    """``(σ̂², ASE)`` of the window's in-sample fit ``C_i/D_i``.

    ``σ̂² = RSS / (n - tr S)`` with ``tr S = Σ_i 1/D_i`` (the diagonal of the
    smoother matrix is ``k(x_i, x_i)/D_i``), blended with the targets' sample
    variance while ``n - tr S < 1``; ``ASE = RSS/n`` (thesis 4.3.2.4).
    Both are floored at ``100·eps·mean(y²) + sqrt(tiny)``; with fewer than two
    items both are the climatology's variance (:func:`window_climatology`).
    """
    buf = s.buffer
    dt = buf.y.dtype
    v = buf.valid.astype(dt)
    n, _, s2y, mean_y2 = _target_moments(buf)
    D = jnp.where(buf.valid, s.density, 1.0)
    fit = s.contribution / D
    rss = jnp.sum(v * (buf.y - fit) ** 2)
    df = n - jnp.sum(v / D)
    sigma2 = (rss + s2y * jnp.maximum(1.0 - df, 0.0)) / jnp.maximum(df, 1.0)
    floor = _floor(dt, mean_y2)
    cap = _var_cap(dt)
    few = n < 2
    v0 = window_climatology(s)[1]
    sigma2 = jnp.where(few, v0, jnp.clip(sigma2, floor, cap))
    ase = jnp.where(few, v0, jnp.clip(rss / jnp.maximum(n, 1.0), floor, cap))
    return sigma2, ase


def local_linear_ridge(s: KernelRegressionState) -> Array:
    """``ρ = clip(σ̂²/(s_y² - σ̂²), RIDGE_MIN, RIDGE_MAX)``: the local linear slope's ridge in kernel counts (module doc).

    ``σ̂²`` the residual variance (:func:`residual_variance`), ``s_y²`` the window targets' sample variance, so
    ``s_y² - σ̂²`` the variance the inputs explain: a slope prior ``N(0, (s_y² - σ̂²)·I)`` per whitened unit (one
    bandwidth) against noise ``σ̂²``. A window whose inputs explain nothing gets the cap, a flat local fit (the
    Nadaraya–Watson mean); the floor keeps the fit well posed on noise-free targets.
    """
    s2y = _target_moments(s.buffer)[2]
    sigma2 = residual_variance(s)[0]
    return jnp.clip(sigma2 / jnp.maximum(s2y - sigma2, sigma2 / RIDGE_MAX), RIDGE_MIN, RIDGE_MAX)

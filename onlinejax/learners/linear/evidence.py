"""Type-II maximum likelihood (the evidence approximation) for ``alpha`` and ``beta``.

Bishop, *Pattern Recognition and Machine Learning*, section 3.5.2: with the
eigenvalues ``e_i`` of ``ΦᵀΦ``, iterate

    γ = Σ βe_i / (α + βe_i)                       (eq. 3.91)
    α = γ / (m_Nᵀ m_N)                            (eq. 3.92)
    1/β = Σ (t_n - m_Nᵀφ_n)² / (N - γ)            (eq. 3.95)

with ``m_N = β (αI + βΦᵀΦ)⁻¹ Φᵀt`` (eq. 3.53–3.54). Everything needed is the
sufficient statistics ``(ΦᵀΦ, Φᵀt, tᵀt, N)`` — weighted by the forgetting
factor for forgetting learners, computed from the ring buffer for windowed
ones — so tuning online costs ``O(d³)`` once per call, independent of how
many items were seen. This answers the blog's open question "learning alpha
and beta" (``002_c70c839f662b534f.txt``, Conclusion).

Numerics: the eigenvalues and ``m_N`` come from a square root of the Gram
matrix restricted to the directions its dtype resolves (:func:`_resolved_sqrt`:
Jacobi scaling, directions below the rounding of the stored entries treated as
unobserved), and the residual sum of squares from non-negative terms, so that
inputs with a large common offset (``x = 10⁴ + U(0, 1)``) give the float64
optimum in float32 wherever the float32 statistics still hold the information,
and the prior elsewhere (never ``alpha`` on its floor and ``m_N`` of ``10⁸``).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array

__all__ = ["SufficientStats", "evidence_fixed_point", "posterior_from_stats", "log_evidence"]

_LO, _HI = 1e-8, 1e8


class SufficientStats(NamedTuple):
    """Sufficient statistics of (weighted) linear-Gaussian data.

    Attributes:
      gram: ``[d, d]`` ``Σ w_n φ_n φ_nᵀ``.
      xty: ``[d]`` ``Σ w_n φ_n t_n``.
      yty: ``[]`` ``Σ w_n t_n²``.
      n: ``[]`` ``Σ w_n`` (the effective number of items).
    """

    gram: Array
    xty: Array
    yty: Array
    n: Array


def _resolved_sqrt(stats: SufficientStats, rtol=None):
    """A square root ``B`` of the part of the Gram matrix its dtype resolves, and ``xty`` in its coordinates.

    Returns ``(B [d, d], a [d])`` with ``BᵀB = G_r`` and ``Bᵀa = b_r``: the
    Gram matrix ``G`` and ``b = xty`` restricted to the directions that ``G``
    resolves. Directions come from the eigendecomposition of the
    Jacobi-scaled ``G' = S G S`` (``S = diag(G)^{-1/2}``, unit diagonal), so
    features of different scales weigh alike; an eigenvalue of ``G'`` below
    ``rtol · max eig`` (default ``16 d eps``) is the rounding noise of ``G``'s
    entries (relative precision ``eps``, accumulated over many updates) and
    its direction is treated as unobserved (zero data precision, no
    component of ``b``). Why: offset inputs (``x = 10⁴ + U(0, 1)``) put the
    information about the differences between features ``10⁻⁹`` below the
    Gram's scale while float32 resolves ``~10⁻⁷``; ``eigh(G)`` gives noise for
    that direction, and a fixed point that divides by it sends ``alpha`` to its
    floor and ``m_N`` to ``10⁸``. Working from ``B`` (singular values ``σ``,
    ``e = σ²``) instead of ``eigh(G)`` also avoids squaring the condition
    number again.
    """
    G = 0.5 * (stats.gram + stats.gram.T)
    d = G.shape[0]
    dt = G.dtype
    eps = jnp.finfo(dt).eps
    rtol = 16.0 * d * eps if rtol is None else rtol
    dg = jnp.diagonal(G)
    pos = dg > jnp.finfo(dt).tiny
    s = jnp.where(pos, jax.lax.rsqrt(jnp.where(pos, dg, 1.0)), 0.0)
    e, Q = jnp.linalg.eigh(G * s[:, None] * s[None, :])
    keep = e > rtol * jnp.maximum(jnp.max(e), jnp.finfo(dt).tiny)  # rtol = 0: every direction e > 0
    sq = jnp.sqrt(jnp.where(keep, e, 1.0))
    root_dg = jnp.where(pos, jnp.sqrt(jnp.where(pos, dg, 0.0)), 0.0)  # S⁻¹ (0 for a feature never seen)
    B = jnp.where(keep[:, None], sq[:, None] * Q.T, 0.0) * root_dg[None, :]
    a = jnp.where(keep, (Q.T @ (s * stats.xty)) / sq, 0.0)
    return B, a


def _spectrum(stats: SufficientStats):
    """``(σ [d], g [d], rss_ls [])``: singular values of the resolved root, ``xty``'s coordinates, LS residual."""
    B, a = _resolved_sqrt(stats)
    U, sig, _ = jnp.linalg.svd(B)
    g = U.T @ a
    yty = jnp.maximum(stats.yty, 0.0)
    return sig, g, jnp.maximum(yty - g @ g, jnp.finfo(sig.dtype).eps * yty)


def _fit_terms(sig, g, rss_ls, alpha, beta):
    """``(t [d], m_Nᵀm_N [], E_D [])`` at ``(alpha, beta)`` (see :func:`evidence_fixed_point`)."""
    e = sig * sig
    t = beta * e / (alpha + beta * e)
    mv = beta * sig * g / (alpha + beta * e)  # m_N in the basis v_i
    return t, mv @ mv, rss_ls + jnp.sum(g * g * (1.0 - t) ** 2)


def evidence_fixed_point(stats: SufficientStats, alpha: Array, beta: Array, n_iter: int = 100):
    """Re-estimate a shared prior precision ``alpha`` and the noise precision ``beta``.

    Args:
      stats: sufficient statistics (``d`` features).
      alpha: ``[]`` starting prior precision (a shared, isotropic prior).
      beta: ``[]`` starting noise precision.
      n_iter: number of fixed-point iterations (static; each is ``O(d)``
        after one ``O(d³)`` decomposition).
    Returns:
      ``(alpha, beta)``, each ``[]``, clipped to ``[1e-8, 1e8]``; when the
      data cannot determine them (``N - γ <= 0``, no data, zero residuals) the
      affected value is left unchanged.

    With ``G_r = Σ σ_i² v_i v_iᵀ`` (:func:`_resolved_sqrt`, ``e_i = σ_i²``),
    ``g = Uᵀa`` the coordinates of ``xty`` and ``t_i = βe_i/(α + βe_i)``:
    ``γ = Σ t_i``, ``m_N = Σ β σ_i g_i/(α + βe_i) v_i`` and the residual sum of
    squares ``E_D = (tᵀt - Σ g_i²) + Σ g_i² (1 - t_i)²`` — the least-squares
    residual plus the shrinkage's, both ``>= 0``, instead of
    ``tᵀt - 2 m_Nᵀb + m_Nᵀ G m_N``, whose terms cancel. The least-squares
    residual is floored at ``eps · tᵀt``, the resolution of the stored ``tᵀt``.
    """
    sig, g, rss_ls = _spectrum(stats)
    dt = sig.dtype
    tiny = jnp.finfo(dt).tiny

    def body(_, ab):
        al, bt = ab
        t, mm, ed = _fit_terms(sig, g, rss_ls, al, bt)
        gamma = jnp.sum(t)
        a_new = jnp.where(mm > tiny, gamma / jnp.maximum(mm, tiny), al)
        dof = stats.n - gamma
        ok = (dof > 0) & (ed > tiny)
        bt_new = jnp.where(ok, dof / jnp.maximum(ed, tiny), bt)
        return jnp.clip(a_new, _LO, _HI), jnp.clip(bt_new, _LO, _HI)

    al, bt = jax.lax.fori_loop(0, n_iter, body, (jnp.asarray(alpha, dt), jnp.asarray(beta, dt)))
    return al, bt


def posterior_from_stats(stats: SufficientStats, alpha: Array, beta: Array):
    """Posterior ``N(m, WWᵀ)`` from scratch: ``Λ = diag(alpha) + β·gram``.

    Args:
      stats: sufficient statistics.
      alpha: ``[]`` or ``[d]`` prior precision; beta: ``[]``.
    Returns:
      ``(W [d, d], m [d])`` with ``WWᵀ = Λ⁻¹`` and ``m = β Λ⁻¹ xty`` (Bishop
      eq. 3.53–3.54). With ``BᵀB = gram`` (:func:`_resolved_sqrt` keeping
      every direction: the whole Gram matrix, so that later rank-1 downdates of
      the window's items stay consistent), ``D = diag(alpha)^{-1/2}`` and the
      SVD ``√β B D = U Σ Vᵀ``: ``Λ = D⁻¹ V (I + Σ²) Vᵀ D⁻¹`` and
      ``W = D V (I + Σ²)^{-1/2}``, exact for any PSD ``gram`` and with no
      inverse; the Jacobi scaling inside keeps features of very different
      scales apart.
    """
    d = stats.xty.shape[0]
    B, _ = _resolved_sqrt(stats, rtol=0.0)
    alpha = jnp.broadcast_to(jnp.asarray(alpha, B.dtype), (d,))
    Dv = jax.lax.rsqrt(alpha)
    beta = jnp.asarray(beta, B.dtype)
    _, sig, Vt = jnp.linalg.svd(jnp.sqrt(beta) * B * Dv[None, :])
    W = Dv[:, None] * Vt.T * jax.lax.rsqrt(1.0 + sig * sig)[None, :]
    m = beta * (W @ (W.T @ stats.xty))
    return W, m


def log_evidence(stats: SufficientStats, alpha: Array, beta: Array) -> Array:
    """Log marginal likelihood ``ln p(t | α, β)`` (Bishop eq. 3.86), isotropic ``alpha``.

    Computed from the resolved spectrum (:func:`_resolved_sqrt`): ``ln|Λ| = Σ ln(α + βe_i)``.
    """
    d = stats.xty.shape[0]
    sig, g, rss_ls = _spectrum(stats)
    alpha = jnp.asarray(alpha, sig.dtype)
    beta = jnp.asarray(beta, sig.dtype)
    _, mm, ed = _fit_terms(sig, g, rss_ls, alpha, beta)
    e_m = 0.5 * beta * ed + 0.5 * alpha * mm
    logdet = jnp.sum(jnp.log(alpha + beta * sig * sig))
    return (
        0.5 * d * jnp.log(alpha)
        + 0.5 * stats.n * jnp.log(beta)
        - e_m
        - 0.5 * logdet
        - 0.5 * stats.n * jnp.log(2.0 * jnp.pi)
    )

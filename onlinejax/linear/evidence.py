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


def _mean_given(Q, e, b, alpha, beta):
    # m_N = β Q diag(1/(α + βe)) Qᵀ b
    return beta * (Q @ ((Q.T @ b) / (alpha + beta * e)))


def evidence_fixed_point(stats: SufficientStats, alpha: Array, beta: Array, n_iter: int = 100):
    """Re-estimate a shared prior precision ``alpha`` and the noise precision ``beta``.

    Args:
      stats: sufficient statistics (``d`` features).
      alpha: ``[]`` starting prior precision (a shared, isotropic prior).
      beta: ``[]`` starting noise precision.
      n_iter: number of fixed-point iterations (static; each is ``O(d²)``
        after one ``O(d³)`` eigendecomposition).
    Returns:
      ``(alpha, beta)``, each ``[]``, clipped to ``[1e-8, 1e8]``; when the
      data cannot determine them (``N - γ <= 0``, no data, zero residuals) the
      affected value is left unchanged.
    """
    e, Q = jnp.linalg.eigh(0.5 * (stats.gram + stats.gram.T))
    e = jnp.maximum(e, 0.0)
    b = stats.xty
    tiny = jnp.finfo(e.dtype).tiny

    def body(_, ab):
        a, bt = ab
        m = _mean_given(Q, e, b, a, bt)
        lam = bt * e
        gamma = jnp.sum(lam / (a + lam))
        mm = m @ m
        a_new = jnp.where(mm > tiny, gamma / jnp.maximum(mm, tiny), a)
        ed = stats.yty - 2.0 * (m @ b) + m @ (stats.gram @ m)
        dof = stats.n - gamma
        ok = (dof > 0) & (ed > tiny)
        bt_new = jnp.where(ok, dof / jnp.maximum(ed, tiny), bt)
        return jnp.clip(a_new, _LO, _HI), jnp.clip(bt_new, _LO, _HI)

    a, bt = jax.lax.fori_loop(0, n_iter, body, (jnp.asarray(alpha, e.dtype), jnp.asarray(beta, e.dtype)))
    return a, bt


def posterior_from_stats(stats: SufficientStats, alpha: Array, beta: Array):
    """Posterior ``N(m, WWᵀ)`` from scratch: ``Λ = diag(alpha) + β·gram``.

    Args:
      stats: sufficient statistics.
      alpha: ``[]`` or ``[d]`` prior precision; beta: ``[]``.
    Returns:
      ``(W [d, d], m [d])`` with ``WWᵀ = Λ⁻¹`` and ``m = β Λ⁻¹ xty`` (Bishop
      eq. 3.53–3.54). The square root comes from an eigendecomposition, so it is
      exact for any PSD ``gram``.
    """
    d = stats.xty.shape[0]
    alpha = jnp.broadcast_to(alpha, (d,))
    lam = jnp.diag(alpha) + beta * 0.5 * (stats.gram + stats.gram.T)
    ev, Q = jnp.linalg.eigh(lam)
    ev = jnp.maximum(ev, jnp.min(alpha))  # Λ >= min(alpha)·I exactly; guard rounding
    W = Q * jax.lax.rsqrt(ev)[None, :]
    m = beta * (W @ (W.T @ stats.xty))
    return W, m


def log_evidence(stats: SufficientStats, alpha: Array, beta: Array) -> Array:
    """Log marginal likelihood ``ln p(t | α, β)`` (Bishop eq. 3.86), isotropic ``alpha``."""
    d = stats.xty.shape[0]
    W, m = posterior_from_stats(stats, alpha, beta)
    lam = alpha * jnp.eye(d, dtype=m.dtype) + beta * stats.gram
    ed = stats.yty - 2.0 * (m @ stats.xty) + m @ (stats.gram @ m)
    e_m = 0.5 * beta * ed + 0.5 * alpha * (m @ m)
    logdet = jnp.linalg.slogdet(lam)[1]
    return (
        0.5 * d * jnp.log(alpha)
        + 0.5 * stats.n * jnp.log(beta)
        - e_m
        - 0.5 * logdet
        - 0.5 * stats.n * jnp.log(2.0 * jnp.pi)
    )

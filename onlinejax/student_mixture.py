"""A finite mixture of Student-t predictive distributions: moments, exact quantiles, log density and CRPS.

``p(y) = Σ_m w_m t_{ν_m}(y; μ_m, s_m)``. :func:`onlinejax.hedge.with_climatology`
returns it (a learner's Student-t predictive mixed with the climatology's).
:class:`StudentTMixture` duck-types :class:`~onlinejax.base.Prediction`
(``mean``, ``var``, ``std``, ``interval``, ``cdf``, ``log_prob``, ``crps``),
so every evaluation path scores it by its own distribution:

* ``cdf``: ``Σ_m w_m F_{ν_m}((y - μ_m)/s_m)``; ``log_prob`` by log-sum-exp;
* ``interval``: the exact quantiles, by a fixed number of bisections of the
  CDF between the smallest and largest component quantile;
* ``crps``: the kernel form ``Σ_m w_m E|X_m - y| - ½ Σ_jk w_j w_k E|X_j - X_k|``
  (Gneiting & Raftery 2007, eq. 21; Grimit et al. 2006 for Gaussian mixtures),
  with ``E|X_m - y|`` and ``E|X_m - X'_m|`` in closed form
  (:func:`~onlinejax.base.student_t_abs_moments`) and the cross terms
  ``E|X_j - X_k|`` by Gauss-Legendre quadrature over the lighter-tailed
  component.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .base import StudentTPrediction, check_in_range, normal_quantile, student_t_abs_moments, student_t_cdf

Array = jax.Array

__all__ = ["StudentTMixture", "student_t_mixture_quantile", "student_t_mixture_crps"]

#: Gauss-Legendre nodes of the CRPS cross terms (the integrand is smooth in the mapped variable).
_QUADRATURE_NODES = 64


class StudentTMixture(NamedTuple):
    """``Σ_m w_m (μ_m + s_m T_{ν_m})``: a mixture of Student-t distributions.

    Attributes:
      log_weights: ``[..., M]`` normalised log-weights (``-inf``: a component left out).
      means: ``[..., M]`` component locations ``μ_m``.
      scales: ``[..., M]`` component scales ``s_m > 0``.
      dfs: ``[..., M]`` component degrees of freedom ``ν_m > 0``.
    """

    log_weights: Array
    means: Array
    scales: Array
    dfs: Array

    @property
    def weights(self) -> Array:
        """``[..., M]`` ``exp(log_weights)``."""
        return jnp.exp(self.log_weights)

    def component(self, m: int) -> StudentTPrediction:
        """The ``m``-th component as a :class:`~onlinejax.base.StudentTPrediction` (``[...]`` leaves)."""
        return StudentTPrediction(self.means[..., m], self.scales[..., m], self.dfs[..., m])

    @property
    def mean(self) -> Array:
        """``[...]`` ``Σ w_m μ_m`` (components of weight 0 left out)."""
        w = self.weights
        return jnp.sum(jnp.where(w > 0, w * self.means, 0.0), axis=-1)

    @property
    def var(self) -> Array:
        """``[...]`` ``Σ w_m (Var_m + (μ_m - mean)²)`` (law of total variance); ``+inf`` if a weighted ``ν_m <= 2``."""
        w = self.weights
        on = w > 0
        comp = StudentTPrediction(self.means, self.scales, self.dfs).var
        dev = self.means - self.mean[..., None]
        return jnp.sum(jnp.where(on, w * (comp + dev * dev), 0.0), axis=-1)

    @property
    def std(self) -> Array:
        """``sqrt(var)``."""
        return jnp.sqrt(self.var)

    def interval(self, level: float = 0.95) -> tuple[Array, Array]:
        """Central ``level`` interval: the mixture's ``(1 ∓ level)/2`` quantiles (:func:`student_t_mixture_quantile`)."""
        normal_quantile(level)  # validates level
        return (student_t_mixture_quantile(self, 0.5 - 0.5 * float(level)),
                student_t_mixture_quantile(self, 0.5 + 0.5 * float(level)))

    def cdf(self, y: Array) -> Array:
        """``Σ_m w_m F_{ν_m}((y - μ_m)/s_m)``, shape of ``mean``."""
        y = jnp.asarray(y, self.means.dtype)[..., None]
        c = StudentTPrediction(self.means, self.scales, self.dfs).cdf(y)
        w = self.weights
        return jnp.sum(jnp.where(w > 0, w * c, 0.0), axis=-1)

    def log_prob(self, y: Array) -> Array:
        """``log Σ_m w_m t_{ν_m}(y; μ_m, s_m)`` by log-sum-exp, shape of ``mean``."""
        y = jnp.asarray(y, self.means.dtype)[..., None]
        lp = StudentTPrediction(self.means, self.scales, self.dfs).log_prob(y)
        return jax.nn.logsumexp(jnp.where(self.log_weights > -jnp.inf, self.log_weights + lp, -jnp.inf), axis=-1)

    def crps(self, y: Array) -> Array:
        """CRPS at ``y`` (:func:`student_t_mixture_crps`), shape of ``mean``; ``+inf`` if a weighted ``ν_m <= 1``."""
        y = jnp.asarray(y, self.means.dtype)
        return jnp.vectorize(student_t_mixture_crps, signature="(m),(m),(m),(m),()->()")(
            self.weights, self.means, self.scales, self.dfs, y)


def student_t_mixture_quantile(pred: StudentTMixture, q: float) -> Array:
    """The ``q``-quantile of a Student-t mixture, by bisection on its CDF.

    The mixture's CDF is a convex combination of its components', so its
    quantile lies between their smallest and largest ``q``-quantile. The
    bracket is halved ``nmant + 66`` times (as
    :func:`~onlinejax.combination.mixture_quantile` does), enough for a
    bracket 2⁶⁴ times wider than the answer.

    Args:
      pred: ``[..., M]`` components.
      q: probability in (0, 1) (static).
    Returns:
      ``[...]`` quantiles.
    """
    check_in_range(q, "q", 0.0, 1.0, hi_open=True)
    live = pred.log_weights > -jnp.inf
    comp = StudentTPrediction(pred.means, pred.scales, pred.dfs)
    lo_c, hi_c = comp.interval(abs(1.0 - 2.0 * q))
    qm = hi_c if q > 0.5 else lo_c
    lo = jnp.min(jnp.where(live, qm, jnp.inf), axis=-1)
    hi = jnp.max(jnp.where(live, qm, -jnp.inf), axis=-1)
    w = pred.weights

    def body(_, b):
        lo, hi = b
        mid = 0.5 * (lo + hi)
        below = jnp.sum(jnp.where(live, w * comp.cdf(mid[..., None]), 0.0), axis=-1) < q
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, int(np.finfo(pred.means.dtype).nmant) + 66, body, (lo, hi))
    return 0.5 * (lo + hi)


def _cross_abs_moment(mu_a, s_a, nu_a, mu_b, s_b, nu_b):
    """``E|X_a - X_b|`` of independent t's, as ``E_{X_b}[E|X_a - X_b| given X_b]`` by Gauss-Legendre quadrature.

    ``X_b = μ_b + s_b tan θ``, ``θ ∈ (-π/2, π/2)``: the density of ``tan θ``
    times ``sec² θ`` is bounded for ``ν_b >= 1``, the integrand for ``ν_b >= 2``, and the inner closed form
    (:func:`~onlinejax.base.student_t_abs_moments`) grows like ``|tan θ|``, so
    the integrand is smooth; the weights are renormalised to integrate the
    density to 1.
    """
    dt = jnp.result_type(mu_a)
    x, w = np.polynomial.legendre.leggauss(_QUADRATURE_NODES)
    theta = jnp.asarray(0.5 * np.pi * x, dt)
    u = jnp.tan(theta)
    dens = jnp.exp(StudentTPrediction(jnp.zeros((), dt), jnp.ones((), dt), nu_b).log_prob(u)) / jnp.cos(theta) ** 2
    wq = jnp.asarray(w, dt) * dens
    t = mu_b + s_b * u
    e_abs, _ = student_t_abs_moments(mu_a, s_a, nu_a, t, (t - mu_a) / s_a)
    return jnp.sum(wq * e_abs) / jnp.sum(wq)


def student_t_mixture_crps(weights: Array, means: Array, scales: Array, dfs: Array, y: Array) -> Array:
    """CRPS of one Student-t mixture at ``y``: ``Σ_m w_m E|X_m - y| - ½ Σ_jk w_j w_k E|X_j - X_k|``.

    The kernel form of the CRPS (Gneiting & Raftery 2007, eq. 21); the same-
    component terms are closed forms, the cross terms
    ``E|X_j - X_k|`` are integrated over the component with more degrees of
    freedom (:func:`_cross_abs_moment`). ``+inf`` where a component of
    positive weight has ``ν <= 1`` (no mean).

    Args:
      weights, means, scales, dfs: ``[M]``; y: ``[]``.
    Returns:
      ``[]`` the CRPS (units of ``y``).
    """
    tiny = jnp.sqrt(jnp.finfo(means.dtype).tiny)
    s = jnp.maximum(scales, tiny)
    on = weights > 0
    e_abs, half_pair = student_t_abs_moments(means, s, dfs, y, (y - means) / s)
    M = means.shape[-1]
    j, k = np.triu_indices(M, 1)
    # integrate over the narrower of the two (the other's E|X - t| is smooth on its scale), unless only
    # the wider one has tails light enough (ν >= 2) for a smooth integrand
    key = jnp.where(dfs >= 2.0, jnp.log(s), jnp.inf)
    a_first = key[k] <= key[j]
    a = (jnp.where(a_first, means[j], means[k]), jnp.where(a_first, s[j], s[k]), jnp.where(a_first, dfs[j], dfs[k]))
    b = (jnp.where(a_first, means[k], means[j]), jnp.where(a_first, s[k], s[j]), jnp.where(a_first, dfs[k], dfs[j]))
    cross = jax.vmap(_cross_abs_moment)(*(jnp.maximum(v, 1.0 + 1e-3) if i in (2, 5) else v
                                          for i, v in enumerate(a + b)))
    pair = jnp.diag(2.0 * half_pair).at[j, k].set(cross).at[k, j].set(cross)
    w = jnp.where(on, weights, 0.0)
    out = jnp.sum(w * jnp.where(on, e_abs, 0.0)) - 0.5 * w @ jnp.where(on[:, None] & on[None, :], pair, 0.0) @ w
    return jnp.where(jnp.any(on & (dfs <= 1.0)), jnp.inf, jnp.maximum(out, 0.0))

"""A finite mixture of Student-t predictive distributions: moments, exact quantiles, log density and CRPS.

``p(y) = Σ_m w_m t_{ν_m}(y; μ_m, s_m)``. :func:`onlinejax.wrappers.hedge.with_climatology`
returns it (a learner's Student-t predictive mixed with the climatology's).
:class:`StudentTMixture` duck-types :class:`~onlinejax.core.base.Prediction`
(``mean``, ``var``, ``std``, ``interval``, ``cdf``, ``log_prob``, ``crps``),
so every evaluation path scores it by its own distribution:

* ``cdf``: ``Σ_m w_m F_{ν_m}((y - μ_m)/s_m)``; ``log_prob`` by log-sum-exp;
* ``interval``: the exact quantiles, by a fixed number of bisections of the
  CDF between the smallest and largest component quantile;
* ``crps``: the kernel form ``Σ_m w_m E|X_m - y| - ½ Σ_jk w_j w_k E|X_j - X_k|``
  (Gneiting & Raftery 2007, eq. 21; Grimit et al. 2006 for Gaussian mixtures),
  with ``E|X_m - y|`` and ``E|X_m - X'_m|`` in closed form
  (:func:`~onlinejax.core.base.student_t_abs_moments`) and the cross terms
  ``E|X_j - X_k|`` by Gauss-Legendre quadrature over the lighter-tailed
  component.
"""
from __future__ import annotations

import statistics
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .checks import check_in_range, check_int
from .distributions import StudentTPrediction, normal_quantile, student_t_abs_moments

Array = jax.Array

__all__ = ["StudentTMixture", "student_t_mixture_quantile", "student_t_mixture_quantile_newton", "student_t_mixture_crps",
           "safeguarded_newton_quantile", "bisect_floats"]

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

    def affine(self, shift: Array, scale: Array) -> "StudentTMixture":
        """The law of ``shift + scale·Y`` (``scale > 0``): every component moved and scaled, the weights kept."""
        s = jnp.asarray(scale)[..., None]
        return StudentTMixture(self.log_weights, jnp.asarray(shift)[..., None] + s * self.means, s * self.scales,
                               self.dfs)

    @property
    def weights(self) -> Array:
        """``[..., M]`` ``exp(log_weights)``."""
        return jnp.exp(self.log_weights)

    def component(self, m: int) -> StudentTPrediction:
        """The ``m``-th component as a :class:`~onlinejax.core.base.StudentTPrediction` (``[...]`` leaves)."""
        return StudentTPrediction(self.means[..., m], self.scales[..., m], self.dfs[..., m])

    @property
    def mean(self) -> Array:
        """``[...]`` ``Σ w_m μ_m`` (components of weight 0 left out)."""
        w = self.weights
        # a weight of 0 leaves its component out; a NaN weight (an item skipped at a boundary) stays NaN
        return jnp.sum(jnp.where(w != 0, w * self.means, 0.0), axis=-1)

    @property
    def var(self) -> Array:
        """``[...]`` ``Σ w_m (Var_m + (μ_m - mean)²)`` (law of total variance); ``+inf`` if a weighted ``ν_m <= 2``."""
        w = self.weights
        on = w != 0
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
        both = student_t_mixture_quantile(self, (0.5 - 0.5 * float(level), 0.5 + 0.5 * float(level)))
        return both[..., 0], both[..., 1]

    def interval_newton(self, level: float = 0.95, steps: int = 8) -> tuple[Array, Array]:
        """The central ``level`` interval by ``steps`` safeguarded Newton steps (:func:`student_t_mixture_quantile_newton`).

        Eight steps instead of :meth:`interval`'s ~90 bisections, and equal to it where they converge (a mixture
        dominated by components near one another, as a change-point run mixture is); else an approximation
        inside the exact quantile's bracket. Returns ``(lower, upper)``, each of ``mean``'s shape.
        """
        normal_quantile(level)  # validates level
        both = student_t_mixture_quantile_newton(self, (0.5 - 0.5 * float(level), 0.5 + 0.5 * float(level)), steps)
        return both[..., 0], both[..., 1]

    def cdf(self, y: Array) -> Array:
        """``Σ_m w_m F_{ν_m}((y - μ_m)/s_m)``, shape of ``mean``."""
        y = jnp.asarray(y, self.means.dtype)[..., None]
        c = StudentTPrediction(self.means, self.scales, self.dfs).cdf(y)
        w = self.weights
        return jnp.sum(jnp.where(w != 0, w * c, 0.0), axis=-1)

    def log_prob(self, y: Array) -> Array:
        """``log Σ_m w_m t_{ν_m}(y; μ_m, s_m)`` by log-sum-exp, shape of ``mean``."""
        y = jnp.asarray(y, self.means.dtype)[..., None]
        lp = StudentTPrediction(self.means, self.scales, self.dfs).log_prob(y)
        return jax.nn.logsumexp(jnp.where(self.log_weights != -jnp.inf, self.log_weights + lp, -jnp.inf), axis=-1)

    def crps(self, y: Array) -> Array:
        """CRPS at ``y`` (:func:`student_t_mixture_crps`), shape of ``mean``; ``+inf`` if a weighted ``ν_m <= 1``."""
        y = jnp.asarray(y, self.means.dtype)
        return jnp.vectorize(student_t_mixture_crps, signature="(m),(m),(m),(m),()->()")(
            self.weights, self.means, self.scales, self.dfs, y)


def student_t_mixture_quantile(pred: StudentTMixture, q) -> Array:
    """The ``q``-quantiles of a Student-t mixture, by bisection on its CDF.

    The mixture's CDF is a convex combination of its components', so its
    quantile lies between their smallest and largest quantile; the bracket
    ``μ_m ± s_m·B`` holds those, with ``B = tan(π(p - ½))`` for ``ν >= 1`` (the
    Cauchy's quantile, ``p = max(q, 1 - q)``) and ``max(tan(π(p - ½)), 1/(2(1 - p)))^{1/ν}``
    for a heavier tail (its tail ``P(T > t) ≈ ½ t^{-ν}`` as ``ν → 0``). It is bisected
    in the floats' bit order down to two adjacent floats (:func:`bisect_floats`: 32 steps in
    float32, 64 in float64). Several ``q`` share one bisection (one CDF call site in the
    compiled program).

    Args:
      pred: ``[..., M]`` components.
      q: a probability in (0, 1), or a tuple of them (static).
    Returns:
      ``[...]`` quantiles, or ``[..., len(q)]`` for a tuple.
    """
    qs, target, lo, hi, comp, w, _ = _bracket(pred, q)

    def below(x):
        return jnp.sum(jnp.where(w > 0, w * comp.cdf(x[..., None]), 0.0), axis=-1) < target

    lo, hi = bisect_floats(below, lo, hi)
    out = lo + 0.5 * (hi - lo)
    return out if isinstance(q, (tuple, list)) else out[..., 0]


def _float_keys(x: Array) -> Array:
    """Signed integers of ``x``'s bit patterns in the floats' order (``-0.0`` just below ``+0.0``); its own inverse."""
    bits = 32 if x.dtype in (jnp.float32, jnp.int32) else 64
    as_int = {32: jnp.int32, 64: jnp.int64}[bits]
    k = x if jnp.issubdtype(x.dtype, jnp.integer) else jax.lax.bitcast_convert_type(x, as_int)
    return k ^ ((k >> (bits - 1)) & (2 ** (bits - 1) - 1))


def bisect_floats(below, lo: Array, hi: Array) -> tuple[Array, Array]:
    """Where a monotone predicate turns, by bisection on the floats between ``lo`` and ``hi`` in their bit order.

    Each step halves the count of representable numbers in ``[lo, hi]`` (not
    their span), so the dtype's bit width of steps (32 in float32, 64 in
    float64) leaves two adjacent floats, however wide the bracket (a bracket
    ``±1e30`` around a quantile near ``1e-3`` needs mantissa bits + 66
    halvings of its span). ``below(x)`` is True left of the turn.

    Args:
      below: ``Array -> bool Array`` of ``lo``'s shape, False from the turn on (monotone).
      lo, hi: float32 or float64 brackets, ``lo <= hi``; a NaN in either gives NaN.
    Returns:
      ``(lo, hi)``: the last float found below and the first found not below (adjacent where the bracket held).
    Raises:
      TypeError: ``lo`` is neither float32 nor float64.
    """
    dt = lo.dtype
    if dt not in (jnp.float32, jnp.float64):
        raise TypeError(f"lo: bisect_floats needs float32 or float64, got {dt}")
    bad = jnp.isnan(lo) | jnp.isnan(hi)
    k_lo, k_hi = (_float_keys(jnp.where(bad, 0.0, e).astype(dt)) for e in (lo, hi))

    def body(_, b):
        k_lo, k_hi = b
        k_mid = (k_lo >> 1) + (k_hi >> 1) + (k_lo & k_hi & 1)  # floor((lo + hi)/2) without overflow
        is_below = below(jax.lax.bitcast_convert_type(_float_keys(k_mid), dt))
        return jnp.where(is_below, k_mid, k_lo), jnp.where(is_below, k_hi, k_mid)

    keys = jax.lax.fori_loop(0, 32 if dt == jnp.float32 else 64, body, (k_lo, k_hi))
    return tuple(jnp.where(bad, jnp.nan, jax.lax.bitcast_convert_type(_float_keys(k), dt)).astype(dt) for k in keys)


def _bracket(pred: StudentTMixture, q):
    """``(qs, target, lo, hi, comp, w, live)``: the checked levels, the bracket ``[..., len(qs)]`` of
    :func:`student_t_mixture_quantile` and the components."""
    qs = tuple(q) if isinstance(q, (tuple, list)) else (q,)
    for v in qs:
        check_in_range(v, "q", 0.0, 1.0, hi_open=True)
    dt = pred.means.dtype
    p_max = max(max(v, 1.0 - v) for v in qs)
    live = pred.log_weights > -jnp.inf
    cauchy = float(np.tan(np.pi * (p_max - 0.5)))
    heavy = jnp.minimum(max(cauchy, 0.5 / (1.0 - p_max)) ** (1.0 / pred.dfs), np.sqrt(np.finfo(dt).max))
    bound = jnp.where(pred.dfs >= 1.0, cauchy, heavy)
    reach = jnp.where(live, pred.scales * jnp.asarray(bound, dt), 0.0)
    lo = jnp.min(jnp.where(live, pred.means - reach, jnp.inf), axis=-1)[..., None]
    hi = jnp.max(jnp.where(live, pred.means + reach, -jnp.inf), axis=-1)[..., None]
    lo, hi = jnp.broadcast_to(lo, lo.shape[:-1] + (len(qs),)), jnp.broadcast_to(hi, hi.shape[:-1] + (len(qs),))
    comp = StudentTPrediction(pred.means[..., None, :], pred.scales[..., None, :], pred.dfs[..., None, :])
    w = jnp.where(live, pred.weights, 0.0)[..., None, :]
    return qs, jnp.asarray(qs, dt), lo, hi, comp, w, live


def student_t_mixture_quantile_newton(pred: StudentTMixture, q, steps: int = 8) -> Array:
    """The ``q``-quantiles of a Student-t mixture by ``steps`` safeguarded Newton steps on its CDF.

    Starts at the heaviest component's quantile in the normal approximation
    ``μ_k + s_k z_q √(ν_k/(ν_k - 2))`` (``z_q`` alone for ``ν_k <= 2``), clipped into the bracket of
    :func:`student_t_mixture_quantile`, then :func:`safeguarded_newton_quantile` (``rtsafe``). It converges
    quadratically near a simple root, so a mixture whose heaviest components lie near one another needs 3-5
    steps; a fixed count keeps the program free of data-dependent loops.

    Args:
      pred: ``[..., M]`` components.
      q: a probability in (0, 1), or a tuple of them (static).
      steps: the number of steps (static, >= 1).
    Returns:
      ``[...]`` quantiles, or ``[..., len(q)]`` for a tuple.
    """
    qs, target, lo, hi, comp, w, live = _bracket(pred, q)
    dt = pred.means.dtype
    k = jnp.argmax(jnp.where(live, pred.log_weights, -jnp.inf), axis=-1)[..., None]
    take = lambda a: jnp.take_along_axis(a, k, axis=-1)  # noqa: E731
    nu = take(pred.dfs)
    z = jnp.asarray([statistics.NormalDist().inv_cdf(v) for v in qs], dt)
    inflate = jnp.where(nu > 2.0, jnp.sqrt(nu / jnp.maximum(nu - 2.0, 1e-30)), 1.0)
    x = take(pred.means) + take(pred.scales) * inflate * z

    def cdf_and_density(x):
        xe = x[..., None]
        return (jnp.sum(jnp.where(w > 0, w * comp.cdf(xe), 0.0), axis=-1),
                jnp.sum(jnp.where(w > 0, w * jnp.exp(comp.log_prob(xe)), 0.0), axis=-1))

    x = safeguarded_newton_quantile(cdf_and_density, target, x, lo, hi, steps)
    return x if isinstance(q, (tuple, list)) else x[..., 0]


def safeguarded_newton_quantile(cdf_and_density, q: Array, start: Array, lo: Array, hi: Array, steps: int) -> Array:
    """The ``q``-quantile of a distribution by ``steps`` safeguarded Newton steps on its CDF, inside a bracket.

    ``rtsafe`` (Press et al., *Numerical Recipes*, 3rd ed., §9.4) with a fixed step count: each step
    evaluates the CDF ``F`` and density ``f`` at ``x`` once, narrows the bracket ``[lo, hi]`` by the sign of
    ``F(x) - q`` and takes the Newton step ``x - (F(x) - q)/f(x)`` where it stays inside the bracket
    (inclusive, so that a root hit exactly stays), else the bracket's midpoint. Quadratic near a simple
    root; never outside the bracket.

    Args:
      cdf_and_density: ``x -> (F(x), f(x))``, each of ``x``'s shape.
      q: ``[...]`` probabilities (broadcast against ``start``).
      start: ``[...]`` the first guess (clipped into the bracket).
      lo, hi: ``[...]`` a bracket of the quantile: ``F(lo) <= q <= F(hi)``.
      steps: the number of steps (static, >= 1).
    Returns:
      ``[...]`` the quantiles.
    """
    steps = check_int(steps, "steps", 1)

    def body(_, c):
        x, lo, hi = c
        cdf, dens = cdf_and_density(x)
        f_x = cdf - q
        lo, hi = jnp.where(f_x < 0, x, lo), jnp.where(f_x < 0, hi, x)
        newton = x - f_x / jnp.where(dens > 0, dens, 1.0)
        ok = (dens > 0) & (newton >= lo) & (newton <= hi)
        return jnp.where(ok, newton, 0.5 * (lo + hi)), lo, hi

    return jax.lax.fori_loop(0, steps, body, (jnp.clip(start, lo, hi), lo, hi))[0]


def _quadrature(dt, df):
    """Nodes ``u = tan θ`` and weights of ``E f(T_ν)`` by Gauss-Legendre in ``θ ∈ (-π/2, π/2)``, ``[..., N]``.

    The density of ``tan θ`` times ``sec² θ`` is bounded for ``ν >= 1``, and
    ``E|X - t|`` grows like ``|tan θ|``, so the integrand is smooth for ``ν >= 2``;
    the weights are renormalised to integrate the density to 1.
    """
    x, w = np.polynomial.legendre.leggauss(_QUADRATURE_NODES)
    theta = jnp.asarray(0.5 * np.pi * x, dt)
    u = jnp.tan(theta)
    unit = StudentTPrediction(jnp.zeros((), dt), jnp.ones((), dt), df[..., None])
    wq = jnp.asarray(w, dt) * jnp.exp(unit.log_prob(u)) / jnp.cos(theta) ** 2
    return u, wq / jnp.sum(wq, axis=-1, keepdims=True)


def student_t_mixture_crps(weights: Array, means: Array, scales: Array, dfs: Array, y: Array) -> Array:
    """CRPS of one Student-t mixture at ``y``: ``Σ_m w_m E|X_m - y| - ½ Σ_jk w_j w_k E|X_j - X_k|``.

    The kernel form of the CRPS (Gneiting & Raftery 2007, eq. 21); the same-
    component terms are closed forms, the cross terms
    ``E|X_j - X_k| = E_{X_k} E[|X_j - X_k| | X_k]`` are integrated by Gauss-Legendre
    quadrature (:func:`_quadrature`) over the narrower component (the wider one if
    only it has ``ν >= 2``): relative error below 1e-6 for ``ν >= 2``, about 1e-4
    for two components of ``ν < 2``. ``+inf`` where a component of positive
    weight has ``ν <= 1`` (no mean). Every ``E|X - t|`` is taken in one call.

    Args:
      weights, means, scales, dfs: ``[M]``; y: ``[]``.
    Returns:
      ``[]`` the CRPS (units of ``y``).
    """
    dt = means.dtype
    s = jnp.maximum(scales, jnp.sqrt(jnp.finfo(dt).tiny))
    on = weights != 0
    M = means.shape[-1]
    j, k = np.triu_indices(M, 1)
    # integrate over the narrower of the two (the other's E|X - t| is smooth on its scale), unless only
    # the wider one has tails light enough (ν >= 2) for a smooth integrand
    key = jnp.where(dfs >= 2.0, jnp.log(s), jnp.inf)
    a = jnp.where(key[k] <= key[j], j, k)  # the component whose E|X_a - t| is integrated
    b = jnp.where(key[k] <= key[j], k, j)  # the one integrated over
    u, wq = _quadrature(dt, jnp.maximum(dfs[b], 1.0 + 1e-3))
    points = jnp.concatenate([jnp.broadcast_to(y, (M,)), (means[b][:, None] + s[b][:, None] * u).ravel()])
    owner = np.concatenate([np.arange(M), np.repeat(np.arange(len(j)), _QUADRATURE_NODES)])
    who = jnp.concatenate([jnp.arange(M), a[owner[M:]]])
    nu = jnp.maximum(dfs[who], 1.0 + 1e-3)
    e_abs, half_pair = student_t_abs_moments(means[who], s[who], nu, points, (points - means[who]) / s[who])
    cross = jnp.sum(wq * e_abs[M:].reshape(len(j), _QUADRATURE_NODES), axis=-1)
    pair = jnp.diag(2.0 * half_pair[:M]).at[j, k].set(cross).at[k, j].set(cross)
    w = jnp.where(on, weights, 0.0)
    out = jnp.sum(w * jnp.where(on, e_abs[:M], 0.0)) - 0.5 * w @ jnp.where(on[:, None] & on[None, :], pair, 0.0) @ w
    return jnp.where(jnp.any(on & (dfs <= 1.0)), jnp.inf, jnp.maximum(out, 0.0))

"""The mixture predictive distribution of a combination: moments, exact quantiles, log density and CRPS.

A combination predicts the finite Gaussian mixture ``p(y|x) = Σ_m w_m N(y; μ_m, σ²_m)``
of its members' predictive distributions. :class:`MixturePrediction` holds it
with its exact first two moments (law of total variance) and scores itself:

* ``interval(level)`` — the mixture's exact central quantiles, by bisection
  on its CDF (the moment-matched ``mean ± z·std`` with ``exact=False``; one
  wide member with a small weight can make that one arbitrarily wide);
* ``log_prob(y)`` — ``log Σ_m w_m N(y; μ_m, σ²_m)`` by log-sum-exp;
* ``crps(y)`` — the closed-form CRPS of a Gaussian mixture (Grimit et al. 2006).

The metrics of :mod:`onlinejax.evaluation` call these methods, as they do
those of any other non-Gaussian prediction.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr, ndtri

from ...core.base import check_in_range, normal_quantile
from ...core.student_mixture import bisect_floats, safeguarded_newton_quantile
from ..calibration import is_informative

Array = jax.Array

__all__ = ["MixturePrediction", "mixture_prediction", "mixture_quantile", "mixture_quantile_newton", "mixture_crps",
           "gaussian_log_density"]


class MixturePrediction(NamedTuple):
    """A finite Gaussian mixture ``Σ_m w_m N(means_m, vars_m)`` with its moments.

    Duck-types :class:`~onlinejax.core.base.Prediction` (``mean``, ``var``,
    ``std``, ``interval``, ``cdf``, ``log_prob``, ``crps``), so every
    evaluation tool accepts it.

    Attributes:
      mean: ``[...]`` mixture mean ``Σ w_m μ_m``.
      var: ``[...]`` mixture variance ``Σ w_m (σ²_m + (μ_m - mean)²)`` (law of
        total variance; noise included as in the members').
      log_weights: ``[..., M]`` normalised log-weights (``logsumexp = 0``).
      means: ``[..., M]`` component means: the members' predictive means, all
        moved by the same shift when a :func:`~onlinejax.wrappers.combination.mean_correction` is on.
      vars: ``[..., M]`` member predictive variances.
    """

    mean: Array
    var: Array
    log_weights: Array
    means: Array
    vars: Array

    @property
    def std(self) -> Array:
        """Moment-matched standard deviation ``sqrt(var)``."""
        return jnp.sqrt(self.var)

    def affine(self, shift: Array, scale: Array) -> "MixturePrediction":
        """The law of ``shift + scale·Y`` (``scale > 0``): the moments and every component moved and scaled."""
        sh, s = jnp.asarray(shift), jnp.asarray(scale)
        return MixturePrediction(sh + s * self.mean, s * s * self.var, self.log_weights,
                                 sh[..., None] + s[..., None] * self.means, (s * s)[..., None] * self.vars)

    @property
    def weights(self) -> Array:
        """``[..., M]`` member weights ``exp(log_weights)``."""
        return jnp.exp(self.log_weights)

    def interval(self, level: float = 0.95, exact: bool = True) -> tuple[Array, Array]:
        """Central ``level`` interval.

        Args:
          level: coverage probability in (0, 1) (static).
          exact: ``True`` (default): the mixture's own ``(1 ∓ level)/2``
            quantiles (:func:`mixture_quantile`), the interval the library's
            metrics score for a mixture; asymmetric when members disagree.
            ``False``: the moment-matched Gaussian's ``mean ± z·std``, which a
            wide member with a small weight can make arbitrarily wide.
        Returns:
          ``(lower, upper)``, each of the shape of ``mean``.
        """
        if not exact:
            half = normal_quantile(level) * self.std
            return self.mean - half, self.mean + half
        normal_quantile(level)  # validates level
        lo = mixture_quantile(self, 0.5 - 0.5 * float(level))
        hi = mixture_quantile(self, 0.5 + 0.5 * float(level))
        return lo, hi

    def interval_newton(self, level: float = 0.95, steps: int = 8) -> tuple[Array, Array]:
        """The central ``level`` interval by ``steps`` safeguarded Newton steps (:func:`mixture_quantile_newton`).

        Eight steps instead of :meth:`interval`'s ~90 bisections, equal to it where they converge; else an
        approximation inside the exact quantile's bracket. Returns ``(lower, upper)``, each of ``mean``'s shape.
        """
        normal_quantile(level)  # validates level
        both = mixture_quantile_newton(self, (0.5 - 0.5 * float(level), 0.5 + 0.5 * float(level)), steps)
        return both[..., 0], both[..., 1]

    def cdf(self, y: Array) -> Array:
        """Mixture CDF ``Σ_m w_m Φ((y - μ_m)/σ_m)``, shape of ``mean`` (members of weight 0 left out)."""
        y = jnp.asarray(y, self.mean.dtype)[..., None]
        on = self.log_weights > -jnp.inf
        z = (y - self.means) / jnp.sqrt(jnp.where(on, self.vars, 1.0))
        return jnp.sum(jnp.where(on, jnp.exp(self.log_weights) * ndtr(z), 0.0), axis=-1)

    def log_prob(self, y: Array) -> Array:
        """Exact mixture log density ``log Σ_m w_m N(y; μ_m, σ²_m)``, shape of ``mean``."""
        y = jnp.asarray(y, self.mean.dtype)[..., None]
        # members left out (weight 0) may hold NaN predictions: mask them, do not add -inf + NaN
        terms = jnp.where(self.log_weights > -jnp.inf,
                          self.log_weights + gaussian_log_density(y, self.means, self.vars), -jnp.inf)
        return jax.nn.logsumexp(terms, axis=-1)

    def crps(self, y: Array) -> Array:
        """Exact mixture CRPS (:func:`mixture_crps`, Grimit et al. 2006), shape of ``mean``.

        ``y`` broadcasts against ``mean``; every leading axis is vectorised
        (one ``[M]`` mixture per item).
        """
        y = jnp.asarray(y, self.mean.dtype)
        return jnp.vectorize(mixture_crps, signature="(m),(m),(m),()->()")(
            jnp.exp(self.log_weights), self.means, self.vars, y)


def gaussian_log_density(y: Array, mean: Array, var: Array) -> Array:
    """``log N(y; mean, var)``, broadcast."""
    return -0.5 * (jnp.log(2.0 * jnp.pi * var) + (y - mean) ** 2 / var)


def mixture_prediction(log_weights: Array, means: Array, vars: Array) -> MixturePrediction:
    """The mixture of members' Gaussians, moment-matched.

    Members whose mean or variance is not finite, whose variance is not
    positive, or who abstain (variance >= ``sqrt(finfo.max)``, the library's
    "no information" value) get weight 0 for this prediction, so one broken
    or clueless member cannot turn the mixture into NaN or an interval of
    width 1e9 (when every usable member abstains, they are mixed as they
    are); if no member is usable the result is NaN.

    Args:
      log_weights: ``[..., M]`` log-weights (need not be normalised).
      means, vars: ``[..., M]`` member predictive means and variances.
    Returns:
      :class:`MixturePrediction` with ``[...]`` moments and ``[..., M]`` members.
    """
    usable = jnp.isfinite(means) & jnp.isfinite(vars) & (vars > 0)
    inf_ = is_informative(means, vars)
    # abstainers are left out while someone informs; if nobody does, every usable member counts
    ok = jnp.where(jnp.any(inf_, axis=-1, keepdims=True), inf_, usable)
    any_ok = jnp.any(ok, axis=-1)
    lw = jnp.where(ok, log_weights, -jnp.inf)
    lw = jnp.where(any_ok[..., None], jax.nn.log_softmax(jnp.where(any_ok[..., None], lw, 0.0), axis=-1), jnp.nan)
    w = jnp.exp(lw)
    mu = jnp.where(ok, means, 0.0)
    mean = jnp.sum(w * mu, axis=-1)
    var = jnp.sum(w * (jnp.where(ok, vars, 0.0) + (mu - mean[..., None]) ** 2), axis=-1)
    nan = jnp.asarray(jnp.nan, mean.dtype)
    return MixturePrediction(jnp.where(any_ok, mean, nan), jnp.where(any_ok, var, nan), lw, means, vars)


def mixture_quantile(pred: MixturePrediction, q: float) -> Array:
    """The ``q``-quantile of a Gaussian mixture, by bisection on its CDF.

    The quantile lies between the smallest and largest member quantile
    (the mixture CDF is a convex combination of the members' CDFs), so
    bisection on that bracket converges. It bisects in the floats' bit
    order down to two adjacent floats
    (:func:`~onlinejax.core.student_mixture.bisect_floats`: 32 steps in
    float32, 64 in float64, however wide the bracket: one wide member,
    variance 1e12 say, makes it many orders of magnitude wider than the
    quantile).

    Args:
      pred: a :class:`MixturePrediction` with ``[..., M]`` members.
      q: probability in (0, 1) (static).
    Returns:
      ``[...]`` quantiles.
    """
    qs, w, live, lo, hi, _ = _member_quantiles(pred, (q,))

    def below(x):
        return _live_cdf(pred, w, live, x) < qs

    lo, hi = bisect_floats(below, lo, hi)
    return (lo + 0.5 * (hi - lo))[..., 0]


def _member_quantiles(pred: MixturePrediction, q: tuple):
    """``(qs [len(q)], w, live [..., 1, M], lo, hi [..., len(q)], qm [..., len(q), M])``: the checked levels, the
    members' weights, which are live, the members' ``q``-quantiles ``qm`` and their smallest and largest over
    the live members (the mixture's quantile lies between: its CDF is a convex combination of theirs)."""
    for v in q:
        check_in_range(v, "q", 0.0, 1.0, hi_open=True)
    qs = jnp.asarray(q, pred.means.dtype)
    w = jnp.exp(pred.log_weights)[..., None, :]
    live = w > 0
    qm = pred.means[..., None, :] + jnp.sqrt(pred.vars)[..., None, :] * ndtri(qs)[:, None]
    lo = jnp.min(jnp.where(live, qm, jnp.inf), axis=-1)
    hi = jnp.max(jnp.where(live, qm, -jnp.inf), axis=-1)
    return qs, w, live, lo, hi, qm


def _live_cdf(pred: MixturePrediction, w: Array, live: Array, t: Array) -> Array:
    """``[..., len(q)]`` the mixture's CDF at ``t: [..., len(q)]`` over the live members (``w, live`` of
    :func:`_member_quantiles`)."""
    z = (t[..., None] - pred.means[..., None, :]) / jnp.sqrt(pred.vars)[..., None, :]
    return jnp.sum(jnp.where(live, w * ndtr(z), 0.0), axis=-1)


def mixture_quantile_newton(pred: MixturePrediction, q: tuple, steps: int = 8) -> Array:
    """The ``q``-quantiles of a Gaussian mixture by ``steps`` safeguarded Newton steps on its CDF.

    Starts at the heaviest member's quantile, inside :func:`mixture_quantile`'s bracket (the smallest and
    largest member quantile), then :func:`~onlinejax.core.student_mixture.safeguarded_newton_quantile`.

    Args:
      pred: a :class:`MixturePrediction` with ``[..., M]`` members.
      q: a tuple of probabilities in (0, 1) (static).
      steps: the number of steps (static, >= 1).
    Returns:
      ``[..., len(q)]`` quantiles.
    """
    qs, w, live, lo, hi, qm = _member_quantiles(pred, tuple(q))
    k = jnp.argmax(jnp.where(live, w, -1.0), axis=-1)[..., None]
    start = jnp.take_along_axis(qm, k, axis=-1)[..., 0]
    means, var = pred.means[..., None, :], pred.vars[..., None, :]

    def cdf_and_density(t):
        dens = jnp.exp(gaussian_log_density(t[..., None], means, var))
        return _live_cdf(pred, w, live, t), jnp.sum(jnp.where(live, w * dens, 0.0), axis=-1)

    return safeguarded_newton_quantile(cdf_and_density, qs, start, lo, hi, steps)


def _abs_moment(u: Array, s: Array) -> Array:
    """``E|u + s Z|`` for ``Z ~ N(0, 1)``: ``s·2φ(u/s) + u·(2Φ(u/s) - 1)`` (the folded-normal mean)."""
    ok = (s > 0) & jnp.isfinite(s)
    t = u / jnp.where(ok, s, 1.0)
    moment = s * jnp.sqrt(2.0 / jnp.pi) * jnp.exp(-0.5 * t * t) + u * (2.0 * ndtr(t) - 1.0)
    # a point mass (s = 0) has E|u| = |u|; an infinite spread an infinite moment (not 0/0 = NaN)
    return jnp.where(ok, moment, jnp.where(s > 0, jnp.inf, jnp.abs(u)))


def mixture_crps(weights: Array, means: Array, vars: Array, y: Array) -> Array:
    """CRPS of a Gaussian mixture at ``y`` (Grimit et al. 2006, eq. 5).

    ``CRPS = Σ_i w_i E|X_i - y| - ½ Σ_ij w_i w_j E|X_i - X_j|`` (the kernel
    form ``E|X - y| - ½ E|X - X'|`` of the CRPS, Gneiting & Raftery 2007) with
    ``X_i - X_j ~ N(μ_i - μ_j, σ²_i + σ²_j)``: a quadratic in the weights, so
    :func:`~onlinejax.wrappers.combination.stacking` can descend its gradient.

    Args:
      weights, means, vars: ``[M]``; y: ``[]``.
    Returns:
      ``[]`` the CRPS (lower is better; units of ``y``).
    """
    a = _abs_moment(y - means, jnp.sqrt(vars))
    b = _abs_moment(means[:, None] - means[None, :], jnp.sqrt(vars[:, None] + vars[None, :]))
    # members of weight 0 leave the score (0·inf would make it NaN)
    on = weights > 0
    a = jnp.where(on, a, 0.0)
    b = jnp.where(on[:, None] & on[None, :], b, 0.0)
    return weights @ a - 0.5 * weights @ b @ weights

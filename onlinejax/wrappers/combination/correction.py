"""Stacked mean correction: an online ridge regression of the mixture's residual on the members' deviations.

The weight rules choose convex weights and can at best track the best
member; where members err in different directions a linear combination of
their means beats all of them (linear stacking, Breiman 1996). The
correction learns that combination online and shifts the whole predictive
mixture by it (:func:`mean_correction`).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ...core.base import check_in_range, check_positive, keep_if
from .distribution import MixturePrediction

Array = jax.Array

__all__ = ["MeanCorrection", "MeanCorrectionState", "mean_correction", "correction_init", "deviations",
           "correction_shift", "correction_update", "shifted"]


class MeanCorrection(NamedTuple):
    """Configuration of the stacked mean correction (:func:`mean_correction`); static floats."""

    forgetting: float
    ridge: float
    max_shift: float


class MeanCorrectionState(NamedTuple):
    """Discounted sufficient statistics of the mean correction's ridge regression.

    Attributes:
      gram: ``[M, M]`` ``Σ_s λ^{t-s} z_s z_sᵀ``; cross: ``[M]`` ``Σ_s λ^{t-s} z_s r_s``.
      sq_dev: ``[]`` ``Σ_s λ^{t-s} ‖z_s‖²/M``; count: ``[]`` ``Σ_s λ^{t-s}``.
      forgetting, ridge, max_shift: ``[]`` ``λ``, ``τ`` and ``κ`` (arrays, so they can be vmapped over).
    """

    gram: Array
    cross: Array
    sq_dev: Array
    count: Array
    forgetting: Array
    ridge: Array
    max_shift: Array


def mean_correction(forgetting: float = 0.99, ridge: float = 100.0, max_shift: float = 0.25) -> MeanCorrection:
    """Stacked mean correction: a ridge regression of the mixture's residual on the members' deviations.

    With the rule's mixture mean ``μ̄ = Σ_m w_m μ_m`` and the deviations
    ``z_m = μ_m - μ̄`` (0 for members left out of the mixture), the combination
    predicts ``μ̄ + vᵀz``, where

        v = argmin_v Σ_s λ^{t-s} (y_s - μ̄_s - vᵀz_s)² + τ · ŝ · ‖v‖²,
        ŝ = (Σ_s λ^{t-s} ‖z_s‖²/M) / (Σ_s λ^{t-s})

    — online linear stacking (Breiman 1996, "stacked regressions") of the
    members' means, discounted by ``λ`` (about ``1/(1-λ)`` items) and shrunk
    towards the weight rule's mixture with a ridge ``τ`` measured in items
    (scale-free through ``ŝ``). The shift is clipped to ``±κ`` standard
    deviations of the rule's mixture, and the whole predictive mixture moves
    by it (its variance and weights are the rule's), so intervals move with
    the mean. ``M × M`` statistics, one ``M × M`` solve per prediction
    (``O(M³)``, small next to any member). With one member ``z = 0`` and
    nothing changes; ``ŝ·τ`` bounds the condition number of the solve by
    about ``1 + M/((1-λ)τ)``.

    Why the clip: on noise-free streams the rule soon sits on an exact member
    and the mixture's standard deviation collapses, while the regression still
    remembers the large residuals of the first items; an unclipped shift of a
    few units then moves the narrow intervals off the targets. The clip keeps
    the shift within the mixture's own uncertainty, so coverage stays that of
    the rule's mixture while the mean still gains where members' errors
    cancel. For the same reason the regression learns each residual clipped
    to 25 standard deviations of the rule's mixture
    (:func:`~onlinejax.wrappers.combination.mix_step`): one spike in the targets is
    not a pattern of the members' errors.

    Args:
      forgetting: ``λ`` in (0, 1]; ridge: ``τ > 0`` (prior weight, in items, of
        "no correction"); max_shift: ``κ > 0``, the largest shift in standard
        deviations of the rule's mixture.
    Returns:
      a :class:`MeanCorrection` for ``combine(..., correct=...)`` / ``replay``.
    """
    check_in_range(forgetting, "forgetting", 0.0, 1.0)
    check_positive(ridge, "ridge")
    check_positive(max_shift, "max_shift")
    return MeanCorrection(float(forgetting), float(ridge), float(max_shift))


def correction_init(c: MeanCorrection, M: int, dtype) -> MeanCorrectionState:
    """Empty statistics for ``M`` members, the configuration's constants as ``dtype`` arrays."""
    z = jnp.zeros((), dtype)
    return MeanCorrectionState(jnp.zeros((M, M), dtype), jnp.zeros((M,), dtype), z, z,
                               jnp.asarray(c.forgetting, dtype), jnp.asarray(c.ridge, dtype),
                               jnp.asarray(c.max_shift, dtype))


def deviations(pred: MixturePrediction) -> Array:
    """``[M]`` members' deviations from the mixture mean; 0 for members left out or a NaN mixture."""
    z = pred.means - pred.mean
    return jnp.where((pred.log_weights > -jnp.inf) & jnp.isfinite(z), z, 0.0)


def correction_shift(c: MeanCorrectionState, z: Array) -> Array:
    """The ridge regression's unclipped shift ``vᵀz`` (0 where the solve is not finite)."""
    dt = z.dtype
    M = z.shape[-1]
    s_hat = c.sq_dev / jnp.maximum(c.count, 1.0)
    A = c.gram + (c.ridge * s_hat + jnp.finfo(dt).tiny) * jnp.eye(M, dtype=dt)
    v = jnp.linalg.solve(A, c.cross)
    shift = v @ z
    return jnp.where(jnp.isfinite(shift), shift, 0.0)


def correction_update(c: MeanCorrectionState, z: Array, resid: Array) -> MeanCorrectionState:
    """Discount the statistics by ``λ`` and add ``(z, resid)``; a non-finite item leaves them unchanged."""
    # unweighted: the regression aims at the squared error of the mean, which weighs every item alike
    lam = c.forgetting
    new = c._replace(gram=lam * c.gram + jnp.outer(z, z), cross=lam * c.cross + z * resid,
                     sq_dev=lam * c.sq_dev + jnp.sum(z * z) / z.shape[-1], count=lam * c.count + 1.0)
    ok = jnp.isfinite(resid) & jnp.all(jnp.isfinite(new.gram)) & jnp.all(jnp.isfinite(new.cross))
    return keep_if(ok, new, c)


def shifted(c: MeanCorrectionState, pred0: MixturePrediction) -> MixturePrediction:
    """The rule's mixture ``pred0`` moved by the correction's shift, clipped to ``±κ`` of its standard deviation."""
    shift = correction_shift(c, deviations(pred0))
    # bounded by a fraction of the rule's mixture's predictive sd (see mean_correction: "Why the clip")
    lim = c.max_shift * jnp.sqrt(pred0.var)
    shift = jnp.where(jnp.isfinite(lim), jnp.clip(shift, -lim, lim), 0.0)
    # a common shift moves the mean and every component and leaves weights and variance as they are
    return pred0._replace(mean=pred0.mean + shift, means=pred0.means + shift)

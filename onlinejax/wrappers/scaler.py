"""Running statistics of a stream's inputs and targets, and the coordinates they define.

The statistics of :func:`~onlinejax.wrappers.standardize.standardize`: a
:class:`ScalerState` of running means and variances (a weighted Welford
update, :func:`~onlinejax.core.base.welford_update`), started by
:func:`scaler_init`, updated by :func:`scaler_update` and optionally fixed
after ``freeze_after`` items; :func:`scales` reads the standard deviations off
them (1 for an input without a spread yet) and :func:`to_inner`
maps raw items into the standardised coordinates (a target with no spread yet in
:func:`provisional_target_scale`'s unit). :class:`SpreadState`
(:func:`spread_init`, :func:`spread_update`) keeps only whether the targets so
far differ: what a wrapper above standardised learners needs to know whether
their predictions had the targets' scale.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

import numpy as np

from ..core.base import check_in_range, check_int, default_float_dtype, keep_if, learnable, welford_update

Array = jax.Array

__all__ = ["ScalerState", "NEVER", "scaler_init", "scaler_update", "target_scale_known", "scales",
           "provisional_target_scale", "to_inner", "SpreadState", "spread_init", "spread_update"]


class ScalerState(NamedTuple):
    """Running statistics of the inputs and targets.

    Attributes:
      n: ``[]`` (decayed) number of items, saturating at
        :func:`~onlinejax.core.base.welford_update`'s ``n_max`` (beyond it the
        statistics are exponentially weighted).
      x_mean: ``[d]``; x_var: ``[d]`` mean and mean squared deviation
        (population variance) of the inputs.
      y_mean: ``[]``; y_var: ``[]`` the same for the targets.
      decay: ``[]`` weight of the past per item (1: equal weights).
      seen: ``[]`` int32, finite items the statistics were updated with.
      freeze_after: ``[]`` int32, the statistics stop changing once ``seen``
        reaches it (``2³¹ - 1``: never).
    """

    n: Array
    x_mean: Array
    x_var: Array
    y_mean: Array
    y_var: Array
    decay: Array
    seen: Array
    freeze_after: Array


#: ``freeze_after`` of statistics that never stop changing.
NEVER = int(np.iinfo(np.int32).max)


def scaler_init(n_features: int, decay=1.0, dtype=None, freeze_after=None) -> ScalerState:
    """No items seen: zero means, unit scales.

    Args:
      n_features: ``d``.
      decay: weight of the past per item, in ``(0, 1]``.
      dtype: float dtype of the statistics (default: JAX's default float).
      freeze_after: ``None`` (the statistics never stop changing) or an int
        ``>= 1``: the number of items after which they stay fixed.
    """
    check_in_range(decay, "decay", 0.0, 1.0)
    freeze_after = NEVER if freeze_after is None else check_int(freeze_after, "freeze_after", 1)
    dt = dtype or jnp.zeros(()).dtype
    z = jnp.zeros((), dt)
    return ScalerState(z, jnp.zeros((n_features,), dt), jnp.zeros((n_features,), dt), z, z, jnp.asarray(decay, dt),
                       jnp.zeros((), jnp.int32), jnp.asarray(freeze_after, jnp.int32))


def scaler_update(s: ScalerState, x: Array, y: Array) -> ScalerState:
    """Weighted Welford update with the past faded by ``decay`` (:func:`~onlinejax.core.base.welford_update`).

    ``n ← min(δn + 1, n_max)``, ``m ← m + (v - m_old)/n``,
    ``σ² ← σ² + ((v - m_old)(v - m) - σ²)/n`` for the inputs (element-wise)
    and the target: the variance form, which stays accurate in float32 past
    10⁸ items. A non-finite item, or any item once ``seen`` has reached
    ``freeze_after``, changes nothing.
    """
    ok = learnable(x, y) & (s.seen < s.freeze_after)
    n, xm, xv = welford_update(s.n, s.x_mean, s.x_var, x, s.decay)
    _, ym, yv = welford_update(s.n, s.y_mean, s.y_var, y, s.decay)
    return keep_if(ok, ScalerState(n, xm, xv, ym, yv, s.decay, s.seen + 1, s.freeze_after), s)


def _has_spread(var: Array, mean: Array) -> Array:
    # a spread at the dtype's resolution of the mean is no spread: centre, don't scale
    return var > (10.0 * jnp.finfo(var.dtype).eps * mean) ** 2 + jnp.finfo(var.dtype).tiny


def _scale(var: Array, mean: Array, without_spread=1.0) -> Array:
    informative = _has_spread(var, mean)
    return jnp.where(informative, jnp.sqrt(jnp.where(informative, var, 1.0)), without_spread)


def target_scale_known(s: ScalerState) -> Array:
    """``[]`` bool: the statistics have the targets' scale (two targets or more, with spread)."""
    return (s.seen >= 2) & _has_spread(s.y_var, s.y_mean)


class SpreadState(NamedTuple):
    """Whether the finite targets so far differ (the condition of :func:`target_scale_known` on a stream's start).

    Attributes:
      first: ``[]`` the first finite target (NaN before it).
      spread: ``[]`` bool, a later finite target differed from ``first`` beyond the dtype's resolution.
    """

    first: Array
    spread: Array


def spread_init(dtype=None) -> SpreadState:
    """No target seen."""
    dt = dtype or default_float_dtype()
    return SpreadState(jnp.full((), jnp.nan, dt), jnp.zeros((), bool))


def spread_update(s: SpreadState, y: Array, ok=True) -> SpreadState:
    """``s`` after the target ``y`` (``[]``); a non-finite ``y``, or ``ok = False``, leaves it unchanged.

    Two targets "differ" as :func:`target_scale_known`'s statistics of the
    two have a spread (the same test of their population variance, the
    squared half-difference, against their mean). ``ok``: ``[]`` bool, the
    item counts (pass :func:`~onlinejax.core.base.learnable` ``(x, y)``, the
    items a scaler is updated with).
    """
    y = jnp.asarray(y, s.first.dtype)
    use = jnp.isfinite(y) & ok
    first = jnp.where(jnp.isnan(s.first) & use, y, s.first)
    half = 0.5 * (y - first)
    differs = use & _has_spread(half * half, 0.5 * y + 0.5 * first)
    return SpreadState(first, s.spread | differs)


def scales(s: ScalerState) -> tuple[Array, Array]:
    """``(s_x [d], s_y [])``: the standard deviations used; where there is no spread yet, 1 for an input and
    :func:`provisional_target_scale` for the target."""
    return _scale(s.x_var, s.x_mean), _scale(s.y_var, s.y_mean, provisional_target_scale(s.y_mean))


def provisional_target_scale(y_mean: Array) -> Array:
    """The targets' unit before they have a spread: ``max(|ȳ|, 1)``, at most ``finfo.max^(1/4)``.

    The magnitude of the targets seen is the only scale the stream has given
    yet; a unit below it would read the next target's distance from a level far
    from zero as many prior standard deviations. No target seen (``ȳ = 0``), or
    targets near zero, keep the unit prior's scale 1. The cap leaves room for the
    inner learner's variance in ``s_y²σ̃²``.

    Args:
      y_mean: ``[...]`` float, the targets' running mean (:class:`ScalerState`'s ``y_mean``).
    Returns:
      ``[...]`` the unit, in ``y_mean``'s dtype.
    Raises:
      ValueError: ``y_mean`` is not a float array.
    """
    y_mean = jnp.asarray(y_mean)
    if not jnp.issubdtype(y_mean.dtype, jnp.floating):
        raise ValueError(f"y_mean: must be a float array, got dtype {y_mean.dtype}")
    cap = float(jnp.finfo(y_mean.dtype).max) ** 0.25
    return jnp.minimum(jnp.maximum(jnp.abs(y_mean), 1.0), cap)


def to_inner(s: ScalerState, x: Array, y: Array | None = None, clip: float | None = None):
    """The inner learner's coordinates: ``x̃ = (x - x̄)/s_x`` (clipped to ``[-clip, clip]``), ``ỹ = (y - ȳ)/s_y``.

    Args:
      s: the statistics; x: ``[d]`` or ``[b, d]``; y: ``None``, ``[]`` or ``[b]``;
      clip: ``None`` or the clip of the standardised inputs (static).
    Returns:
      ``x̃``, or ``(x̃, ỹ)`` when ``y`` is given.
    """
    sx, sy = scales(s)
    xt = _clipped((x - s.x_mean) / sx, clip)
    return xt if y is None else (xt, (y - s.y_mean) / sy)


def _clipped(xt: Array, clip: float | None) -> Array:
    """Standardised inputs clipped to ``[-clip, clip]`` (``None``: as they are)."""
    if clip is None:
        return xt
    # a missing (non-finite) input stays missing: clipped, an inf would predict a number
    return jnp.where(jnp.isfinite(xt), jnp.clip(xt, -clip, clip), xt)


def _cleared(sc: ScalerState) -> ScalerState:
    """No item counted; ``decay``, ``freeze_after`` and the targets' mean kept.

    The targets' mean is what :func:`~onlinejax.wrappers.standardize_state.restart` centres the next prediction on.
    """
    return jax.tree_util.tree_map(jnp.zeros_like, sc)._replace(decay=sc.decay, freeze_after=sc.freeze_after,
                                                               y_mean=sc.y_mean)

"""Online standardisation: any learner on raw features and targets of any scale.

A learner's priors and floors are written for data of unit scale: a prior
precision ``alpha = 1``, a GP lengthscale of 1, a kernel bandwidth, a noise
floor relative to the dtype's ``eps``. Raw data breaks them: ordinal dates
(~7·10⁵) as features, targets in the thousands, inputs from 10⁻⁴ to 10⁴. In
float32 an offset also costs precision (``x = 10⁴ + u`` keeps only ~3 digits
of ``u``). :func:`standardize` wraps a learner so that it only ever sees

    x̃ = (x - x̄) / s_x,        ỹ = (y - ȳ) / s_y

with running means and standard deviations of the items seen so far
(Welford 1962, one pass, stable in float32), and maps its prediction back:

    μ = ȳ + s_y μ̃,            σ² = s_y² σ̃².

The statistics include the item being learned, so the first item is learned
as ``x̃ = 0, ỹ = 0``; a prediction uses the statistics before the item.
A feature whose standard deviation is at the dtype's resolution of its mean
(a constant column, or a single item so far) is centred but not scaled; the
target likewise (``s_y = 1`` until two distinct targets were seen).

The statistics keep changing, so an item learned early was standardised with
slightly different statistics than one learned late: with ``decay = 1`` (the
default) the change after ``n`` items is ``O(1/n)``, and a learner that
learns every item with forgetting follows it. ``decay < 1`` gives
exponentially weighted statistics (memory ``1/(1 - decay)`` items) for
streams whose scale keeps moving. This is what River's
``preprocessing.StandardScaler`` in front of a model does, for the target
too.

A learner that stops learning (the state machine of
:func:`~onlinejax.adaptive.adaptive` keeps a window's fit while the stream is
stable) is hurt by moving statistics: its model stays in the coordinates of
its time while predictions are mapped back with today's, and after a drift
the targets' running mean moves for hundreds of items. ``warmup=F`` takes
the statistics of the first ``F`` items, then fixes them and refits the
learner once on those items, so every item it holds shares one coordinate
system. Centred targets also need an intercept in a linear model.

Statistics must survive what real streams do. A single outlying target
(more than :data:`OUTLIER_Z` standard deviations out) is withheld from the
statistics and the learner, which would otherwise carry it for good (a
scale inflated by orders of magnitude, a fitted spike). The statistics and
the inner learner start again (statistics cleared, the initial inner state;
with a warm-up, the next ``F`` items collected and refitted on) after a run
of :data:`OUTLIER_RUN` such targets (a level shift: moving statistics would
take thousands of items to describe the new level, fixed ones never), when
a warm-up ended on targets without spread (a stuck sensor: a scale of 1 would be a
guess, and the learner would take the constant for the stream), and after
a covariate shift that the clipped learner could not follow (without a
warm-up; with one, see below): one input beyond the clip
(:data:`SHIFT_Z` standard deviations without one) on :data:`SHIFT_RUN`
items in a row. These items are held out of the input's
statistics, which they would stretch until the shift looked in range. Only
items on which the input moved count (a repeated value loses nothing to
the clip), and only for an input that has had a spread for
:data:`SHIFT_RUN` items (one that has just appeared, a new sensor or a
one-hot category, is far from its short-lived spread for a while and is
learned as it comes). With a warm-up the statistics are fixed, and a
covariate shift is ``F`` such items in a row (with any input's history);
then :func:`rebase` takes the statistics of the last ``F`` items, all of
them in the new range, and refits and tunes the inner learner on them
(like a restart, but on items already seen instead of the next ``F``).
A trending input leaves the fixed range step by step instead, each item
within :data:`DRIFT_STEP` standard deviations of the one before: after
:data:`DRIFT_RUN` such items the statistics are rebased on every item kept
(``keep=K``: a window learner's whole window), and the inner learner is
refitted on the kept items within the new range.

The module's anatomy: the statistics (:class:`ScalerState`,
:func:`scaler_init`, :func:`scaler_update`, :func:`scales`,
:func:`to_inner`, :func:`inner_coordinates`), the wrapper's :class:`StandardizeState` and static
:class:`StandardizeOptions`, and its :func:`init`, :func:`learn_one`,
:func:`predict_one`, :func:`refit`, :func:`downdate_item` /
:func:`downdate_oldest` and :func:`tune_inner`, each taking the inner learner
(and the options) as leading arguments that :func:`standardize` binds.
"""
from __future__ import annotations

import inspect
from functools import partial
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

import numpy as np

from .batching import cond_if_any
from .base import (Learner, Prediction, check_in_range, check_int, check_positive, describe_factory, keep_if,
                   learnable, make_learner, state_dtype, welford_update)

from .window import ring_init, ring_push

Array = jax.Array

__all__ = [
    "ScalerState",
    "StandardizeState",
    "StandardizeOptions",
    "scaler_init",
    "scaler_update",
    "scales",
    "to_inner",
    "inner_coordinates",
    "init",
    "predict_one",
    "learn_one",
    "update_one",
    "standardize",
]


class ScalerState(NamedTuple):
    """Running statistics of the inputs and targets.

    Attributes:
      n: ``[]`` (decayed) number of items, saturating at
        :func:`~onlinejax.base.welford_update`'s ``n_max`` (beyond it the
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


class StandardizeState(NamedTuple):
    """State of :func:`standardize`.

    Attributes:
      inner: the wrapped learner's state.
      scaler: the running statistics (:class:`ScalerState`).
      initial: the inner learner's initial state (refitted from at the end
        of the warm-up and by :func:`rebase`; restarted from, module doc).
      kept: with ``warmup=F``: a :class:`~onlinejax.window.RingBuffer` of
        capacity ``K`` (``keep``, default ``F``), the raw items of the warm-up,
        then the last ``K`` items stored; else ``None``.
      outside: ``[d]`` int32 per input, items in a row on which it was
        outside the statistics' range (with ``warmup``: since they were
        fixed), counting only those on which it moved (a repeated value adds nothing).
      far_run: ``[]`` int32 targets in a row far from the targets' mean.
      n_withheld: ``[]`` int32 outlying targets withheld from the statistics and the learner.
      spread_items: ``[d]`` int32 per input, items in a row on which its
        statistics had a spread (at most :data:`SHIFT_RUN`).
      shifting: ``[d]`` bool per input, its current run outside the range
        began once it had had a spread for :data:`SHIFT_RUN` items: a covariate
        shift (without a warm-up, its items are held out of its statistics
        and the run can start them again), not an input that has just appeared.
      last_x: ``[d]`` the last finite item's input.
      drifting: ``[d]`` bool per input, with ``warmup``: its current run
        outside the statistics' range is a drift, every item of it within
        :data:`DRIFT_STEP` standard deviations of the item before (a trending
        input), not a jump.
    """

    inner: Any
    scaler: ScalerState
    initial: Any
    kept: Any
    outside: Array
    far_run: Array
    n_withheld: Array
    spread_items: Array
    shifting: Array
    last_x: Array
    drifting: Array


#: ``freeze_after`` of statistics that never stop changing.
NEVER = int(np.iinfo(np.int32).max)

#: Without a clip, an input this many standard deviations from the statistics' mean is outside their range (with
#: a clip, the range ends at the clip: beyond it an input's variation is lost).
SHIFT_Z = 50.0
#: Without a warm-up: this many items in a row with one input outside the range start the statistics and the
#: learner again; an input counts once it has had a spread for as many items (module doc).
SHIFT_RUN = 32
#: A target this many standard deviations from the targets' mean is an outlier (module doc) ...
OUTLIER_Z = 10.0
#: ... and the ``OUTLIER_RUN``-th such target in a row a level shift: the statistics start again.
OUTLIER_RUN = 3
#: With a warm-up: an input whose run outside the statistics' range moved by at most this many of its
#: standard deviations per item, from the item before the run on, is drifting ...
DRIFT_STEP = 1.0
#: ... and its statistics are rebased after this many such items (a jump waits for ``F``).
DRIFT_RUN = 4
#: Items the statistics need before they judge a target an outlier.
GATE_MIN = 8


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
    """Weighted Welford update with the past faded by ``decay`` (:func:`~onlinejax.base.welford_update`).

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


def _scale(var: Array, mean: Array) -> Array:
    informative = _has_spread(var, mean)
    return jnp.where(informative, jnp.sqrt(jnp.where(informative, var, 1.0)), 1.0)


def target_scale_known(s: ScalerState) -> Array:
    """``[]`` bool: the statistics have the targets' scale (two targets or more, with spread)."""
    return (s.seen >= 2) & _has_spread(s.y_var, s.y_mean)


def scales(s: ScalerState) -> tuple[Array, Array]:
    """``(s_x [d], s_y [])``: the standard deviations used, 1 where there is no spread yet."""
    return _scale(s.x_var, s.x_mean), _scale(s.y_var, s.y_mean)


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


class StandardizeOptions(NamedTuple):
    """The static options of :func:`standardize` (see its Args).

    Attributes:
      decay: the default weight of the past (``init(decay=)`` overrides it).
      clip: ``None`` or the clip of the standardised inputs.
      warmup: ``None`` or the number ``F`` of items whose statistics are kept.
      scale_inputs: whether the inputs are standardised (``False``: given standardised already).
      keep: with ``warmup``: the number ``K >= F`` of last items kept for a rebase's refit (``None``: ``F``).
    """

    decay: float = 1.0
    clip: Optional[float] = None
    warmup: Optional[int] = None
    scale_inputs: bool = True
    keep: Optional[int] = None


def inner_coordinates(options: StandardizeOptions, s: ScalerState, x: Array, y: Array | None = None):
    """:func:`to_inner` under ``options``: with ``scale_inputs=False`` only the target is standardised.

    The inputs then reach the inner learner as given, clipped at ``options.clip``.

    Args:
      options: :class:`StandardizeOptions` (static); s: the statistics; x: ``[d]`` or ``[b, d]``; y: ``None``,
        ``[]`` or ``[b]``.
    """
    if options.scale_inputs:
        return to_inner(s, x, y, options.clip)
    xt = _clipped(x, options.clip)
    return xt if y is None else (xt, to_inner(s, x, y)[1])


def init(learner: Learner, options: StandardizeOptions, /, decay=None, **inner_kwargs) -> StandardizeState:
    """No item seen: ``learner.init(**inner_kwargs)`` and :func:`scaler_init`.

    Args:
      learner: the inner learner; options: :class:`StandardizeOptions` (static).
      decay: ``None`` (``options.decay``) or the statistics' weight of the past in ``(0, 1]``.
      **inner_kwargs: passed on to ``learner.init``.
    Returns:
      the state; with ``warmup=F`` it also holds the initial inner state and
      zeroed ``[K, d]`` / ``[K]`` buffers for the items kept (``K = keep``, default ``F``).
    """
    decay = options.decay if decay is None else decay
    d, warmup = learner.n_features, options.warmup
    inner = learner.init(**inner_kwargs)
    dt = state_dtype(inner)
    i0, id_ = jnp.zeros((), jnp.int32), jnp.zeros((d,), jnp.int32)
    runs = (id_, i0, i0, id_, jnp.zeros((d,), bool), jnp.zeros((d,), dt), jnp.zeros((d,), bool))
    if warmup is None:
        return StandardizeState(inner, scaler_init(d, decay, dt), inner, None, *runs)
    return StandardizeState(inner, scaler_init(d, decay, dt, warmup), inner, ring_init(options.keep or warmup, d, dt), *runs)


def predict_one(learner: Learner, options: StandardizeOptions, s: StandardizeState, x: Array) -> Prediction:
    """The inner prediction ``N(μ̃, σ̃²)`` of ``x̃`` mapped back: ``N(ȳ + s_y μ̃, s_y² σ̃²)``; ``x: [d]``."""
    p = learner.predict(s.inner, inner_coordinates(options, s.scaler, x))
    sy = scales(s.scaler)[1]
    return Prediction(s.scaler.y_mean + sy * p.mean, sy * sy * p.var)


def refit(learner: Learner, options: StandardizeOptions, s: StandardizeState, use: Array) -> StandardizeState:
    """The inner learner refitted from its initial state on the items ``kept`` (oldest first) where ``use`` (``[K]``)."""
    xt, yt = inner_coordinates(options, s.scaler, s.kept.x, s.kept.y)

    def learn(st, item):
        x, y, u = item
        return keep_if(u, learner.learn(st, x, y), st), None

    return s._replace(inner=jax.lax.scan(learn, s.initial, (xt, yt, use))[0])


def _cleared(sc: ScalerState) -> ScalerState:
    """No item counted; ``decay``, ``freeze_after`` and the targets' mean (:func:`restart`) kept."""
    return jax.tree_util.tree_map(jnp.zeros_like, sc)._replace(decay=sc.decay, freeze_after=sc.freeze_after,
                                                               y_mean=sc.y_mean)


def restart(s: StandardizeState) -> StandardizeState:
    """Start again: statistics cleared (``decay``, ``freeze_after`` kept), the initial inner state, an empty warm-up.

    The counters (``n_withheld``) are kept, and so is the targets' mean: with
    no item counted it is what the next prediction is centred on (the last
    level rather than 0; after a level shift :func:`update_one` sets it to
    the shift's latest target), and the next item replaces it.
    """
    sc = _cleared(s.scaler)
    kept = None if s.kept is None else jax.tree_util.tree_map(jnp.zeros_like, s.kept)
    return s._replace(inner=s.initial, scaler=sc, kept=kept,
                      outside=jnp.zeros_like(s.outside), far_run=jnp.zeros_like(s.far_run),
                      spread_items=jnp.zeros_like(s.spread_items), shifting=jnp.zeros_like(s.shifting),
                      drifting=jnp.zeros_like(s.drifting))


def rebase(learner: Learner, options: StandardizeOptions, s: StandardizeState, moved: Array,
           drifted: Array) -> StandardizeState:
    """With ``warmup=F``: the statistics fixed, and the inner learner refitted on the items kept.

    At the end of the warm-up (``moved`` false) the items kept are the
    warm-up's, and the statistics stay those accumulated while they came.
    After an input left the fixed statistics' range (``moved``) the
    statistics are computed again: after a jump (``F`` items in a row beyond
    the range, a covariate shift) from the last ``F`` items, all of them
    after it (:func:`_after_jump`); after a drift (``drifted``: an input that
    left the range step by step, a trend) from every item kept. The inner learner is then
    :func:`refit` from its initial state on the kept items within the new
    range (those before a jump lie beyond it), and also tuned, as its
    hyperparameters were those of the old coordinates. An inner state with a
    ``tune_pending`` flag (the state machine of
    :func:`~onlinejax.adaptive.adaptive`) tunes on its next item (its own
    tune: a program holds one copy of it), another inner learner with a
    ``tune`` is tuned now. One function for every case, so that a program
    holds one copy of the refit.

    Args:
      learner: the inner learner; options: :class:`StandardizeOptions` (static).
      s: :class:`StandardizeState`; moved, drifted: ``[]`` bool.
    """
    k = s.kept
    K = k.y.shape[0]
    order = (jnp.arange(K) + k.head) % K  # oldest first; a buffer not yet full has its empty slots first
    last_f = jnp.arange(K) >= K - options.warmup
    # after a jump only its last F items are kept: a later drift must not count those before it
    valid = k.valid[order] & (last_f | ~moved | drifted)
    valid = jnp.where(moved & ~drifted, _after_jump(options, s.outside, k.x[order], valid), valid)
    k = k._replace(x=k.x[order], y=k.y[order], valid=valid, head=jnp.zeros_like(k.head),
                   count=jnp.sum(valid).astype(k.count.dtype))
    recent = k.valid & (last_f | drifted)

    def count(c, item):
        x, y, u = item
        return keep_if(u, scaler_update(c, x, y), c), None

    # every recent item counts (a drift's may be more than F, a jump's fewer once those before it are left
    # out); fixed again afterwards (seen >= freeze_after)
    again = jax.lax.scan(count, _cleared(s.scaler)._replace(freeze_after=jnp.full_like(s.scaler.seen, NEVER)),
                         (k.x, k.y, recent))[0]
    again = again._replace(freeze_after=s.scaler.freeze_after, seen=jnp.maximum(again.seen, s.scaler.freeze_after))
    zero = jnp.zeros_like
    s = s._replace(scaler=keep_if(moved, again, s.scaler), kept=k, outside=zero(s.outside),
                   shifting=zero(s.shifting), drifting=zero(s.drifting), far_run=jnp.where(moved, 0, s.far_run))
    s = refit(learner, options, s, k.valid & ~(moved & jnp.any(_beyond_range(options, s.scaler, k.x), axis=-1)))
    if hasattr(s.inner, "tune_pending"):  # AdaptiveState (not imported: adaptive imports the combination's types)
        # a refit of a whole phase ended in the machine's own tune already
        tuned = s.inner.n_tunes > s.initial.n_tunes
        return s._replace(inner=s.inner._replace(tune_pending=s.inner.tune_pending | (moved & ~tuned)))
    if learner.tune is None:
        return s
    return s._replace(inner=cond_if_any(learner.tune, max_batch=1)(moved, s.inner))


def learn_one(learner: Learner, options: StandardizeOptions, s: StandardizeState, x: Array,
              y: Array) -> StandardizeState:
    """:func:`update_one` with the prediction of now (:func:`predict_one`)."""
    return update_one(learner, options, s, x, y, predict_one(learner, options, s, x))


def update_one(learner: Learner, options: StandardizeOptions, s: StandardizeState, x: Array,
               y: Array, pred: Prediction) -> StandardizeState:
    """Update the statistics with ``(x, y)`` (:func:`scaler_update`), then learn ``(x̃, ỹ)`` in the new coordinates.

    The inner learner's ``update`` receives ``pred``, the prediction issued
    for the item, in the same new coordinates (``N((μ - ȳ)/s_y, σ²/s_y²)``),
    so a wrapped state machine judges the prediction the caller received.

    A target more than :data:`OUTLIER_Z` standard deviations from the
    targets' mean (once :data:`GATE_MIN` items were seen, or a shorter
    warm-up's ``F``) is withheld from
    the statistics and the inner learner (one outlier would otherwise
    inflate the targets' scale and be fitted for good); the
    :data:`OUTLIER_RUN`-th such target in a row is a level shift, and the
    statistics and the learner start again (:func:`restart`) from the next
    item. With ``warmup=F`` the item is also stored (while the statistics
    take it, then every item not withheld, in a ring buffer of the last
    ``K``, ``keep``), and on the ``F``-th item the inner learner is :func:`refit`
    (through :func:`~onlinejax.batching.cond_if_any`: lazily under
    ``vmap``), or the warm-up starts again (:func:`restart`, module doc)
    when its targets had no spread. A run of items with one input outside
    the statistics' range (:func:`_input_runs`) starts the statistics and
    the inner learner again after :data:`SHIFT_RUN` items, or with a
    warm-up rebases them (:func:`rebase`): on the last ``F`` items after a
    jump, on every kept item after a drift (a trending input, :data:`DRIFT_RUN`).

    Args:
      learner: the inner learner; options: :class:`StandardizeOptions` (static).
      s: :class:`StandardizeState`; x: ``[d]``; y: ``[]``; pred: the issued
        prediction of ``y`` (:func:`predict_one`'s, in ``y``'s units).
    """
    # not skip_nonfinite: a non-finite item leaves the scaler as it was and reaches the learner as it came,
    # to be skipped (and counted) there; the warm-up counts only the items the statistics took
    ok = learnable(x, y)
    sy = scales(s.scaler)[1]
    warmup = options.warmup
    # fixed statistics of fewer than GATE_MIN items are known once fixed
    known = s.scaler.seen >= (GATE_MIN if warmup is None else min(GATE_MIN, warmup))
    far_y = ok & known & (jnp.abs(y - s.scaler.y_mean) > OUTLIER_Z * sy)
    far_run = jnp.where(ok, jnp.where(far_y, s.far_run + 1, 0), s.far_run)
    withhold = far_y  # the OUTLIER_RUN-th in a row is withheld too: the statistics start again
    # with a warm-up: once its statistics are fixed; a withheld item is neither stored nor counted
    counting = ok & ~withhold & known & (s.scaler.seen >= (warmup or 0))
    outside, shifting, hold, drifting = _input_runs(options, s, x, counting)
    new_sc = scaler_update(s.scaler, x, y)
    new_sc = new_sc._replace(x_mean=jnp.where(hold, s.scaler.x_mean, new_sc.x_mean),
                             x_var=jnp.where(hold, s.scaler.x_var, new_sc.x_var))
    sc = keep_if(withhold, s.scaler, new_sc)
    xt, yt = inner_coordinates(options, sc, x, y)
    sy_new = scales(sc)[1]
    pred_t = Prediction((pred.mean - sc.y_mean) / sy_new, pred.var / (sy_new * sy_new))
    inner = learner.update(s.inner, jnp.where(ok, xt, x), jnp.where(ok, yt, y), pred_t)
    spread = _has_spread(sc.x_var, sc.x_mean)
    spread_items = jnp.where(ok, jnp.where(spread, jnp.minimum(s.spread_items + 1, SHIFT_RUN), 0), s.spread_items)
    out = s._replace(inner=keep_if(withhold, s.inner, inner), scaler=sc, outside=outside, far_run=far_run,
                     n_withheld=s.n_withheld + withhold, spread_items=spread_items, shifting=shifting,
                     drifting=drifting,
                     last_x=jnp.where(ok, x, s.last_x))
    shifted = far_run >= OUTLIER_RUN
    if warmup is None:
        moved = jnp.any(shifting & (outside >= SHIFT_RUN))
        return _centre_on_shift(cond_if_any(restart)(moved | shifted, out), shifted, y)
    new = sc.seen > s.scaler.seen  # the item entered the statistics: keep it for the refit
    store = jnp.where(s.scaler.seen < warmup, new, ok & ~withhold)  # then keep the last F items
    out = out._replace(kept=keep_if(store, ring_push(s.kept, x, y), s.kept))
    done = new & (sc.seen == warmup)
    spread = _has_spread(sc.y_var, sc.y_mean)
    jumped = jnp.any(outside >= warmup)
    moved = jumped | jnp.any(drifting & (outside >= DRIFT_RUN))
    out = cond_if_any(lambda sma: (rebase(learner, options, *sma), *sma[1:]))((done & spread) | moved,
                                                                            (out, moved, moved & ~jumped))[0]
    stuck = (done & ~spread) | (moved & ~_has_spread(out.scaler.y_var, out.scaler.y_mean))  # no scale: start again
    return _centre_on_shift(cond_if_any(restart)(stuck | shifted, out), shifted, y)


def _after_jump(options: StandardizeOptions, outside: Array, x: Array, last_f: Array) -> Array:
    """``[K]`` bool: the last ``F`` kept items (``last_f``) less those from before a jump, kept and counted.

    A jump's run may begin with a few items beyond the range that are not at
    the new level (an excursion, a drift's first steps): an item on which an
    input that jumped (a run of ``F``, ``outside``: ``[d]``) lies more than the
    clip (else :data:`SHIFT_Z`) robust standard deviations (1.4826 times the
    median absolute deviation over the ``F`` items) from their median is left
    out of the new statistics. An input whose ``F`` values mostly coincide
    (zero deviation) leaves every item in.

    Args:
      x: ``[K, d]`` the kept inputs, oldest first.
    """
    limit = SHIFT_Z if options.clip is None else options.clip
    xs = jnp.where(last_f[:, None], x, jnp.nan)
    med = jnp.nanmedian(xs, axis=0)
    mad = jnp.nanmedian(jnp.abs(xs - med), axis=0)
    far = (outside >= options.warmup) & (mad > 0) & (jnp.abs(x - med) > limit * 1.4826 * mad)
    return last_f & ~jnp.any(far, axis=-1)


def _beyond_range(options: StandardizeOptions, sc: ScalerState, x: Array) -> Array:
    """``[..., d]`` bool: each input beyond the statistics' range, the clip (else :data:`SHIFT_Z` sd) from their mean.

    Inputs given standardised already (``scale_inputs=False``) are never beyond it: not this wrapper's to follow.
    """
    limit = SHIFT_Z if options.clip is None else options.clip
    return (jnp.abs(x - sc.x_mean) > limit * scales(sc)[0]) & options.scale_inputs


def _input_runs(options: StandardizeOptions, s: StandardizeState, x: Array, counting: Array):
    """Per input, whether it is outside the statistics' range and what its run of such items means.

    The range ends at the clip (between it and :data:`SHIFT_Z` a clipped
    input loses its variation while moving statistics catch up slowly, and
    fixed ones never do); without a clip at :data:`SHIFT_Z` standard
    deviations of the statistics' mean. A run counts the items on which the
    input moved (a value repeated far out, a stuck sensor or duplicated
    rows, loses nothing to the clip and would be learned again from few
    items after a restart). A run that begins once the input has had a
    spread for :data:`SHIFT_RUN` items is a shift: without a warm-up the
    items it counts, from the second on, are held out of the input's
    statistics (they would stretch its scale until the shift looks in
    range; the first is taken, so the ones of a rare binary input, each
    alone beyond the clip, stay in its statistics).
    An input that has just appeared (a new sensor, a one-hot category seen
    for the first time) is outside the range of its short-lived spread for a
    while and is learned as it comes.

    Returns:
      ``(outside [d] int32, shifting [d] bool, hold [d] bool, drifting [d] bool)``:
      the runs' lengths after ``x``, whether each is a shift, which inputs'
      items are held out of their statistics, and (with a warm-up) whether
      each run is a drift (:data:`DRIFT_STEP`).
    """
    no_warmup = options.warmup is None
    far = counting & _beyond_range(options, s.scaler, x)
    begins = far & (s.outside == 0)
    shifting = jnp.where(counting, jnp.where(begins, s.spread_items >= SHIFT_RUN, s.shifting & far), s.shifting)
    # a far input repeated (a stuck sensor, duplicated rows) loses nothing to the clip: it extends no run
    moved = begins | (x != s.last_x)
    outside = jnp.where(counting, jnp.where(far, s.outside + moved, 0), s.outside)
    hold = far & shifting & moved & (s.outside > 0)  # a run's first item is taken: a rare binary's ones are no shift
    step_ok = jnp.abs(x - s.last_x) <= DRIFT_STEP * scales(s.scaler)[0]
    drifting = jnp.where(counting, far & step_ok & (begins | s.drifting), s.drifting)
    return outside, shifting, hold if no_warmup else jnp.zeros_like(far), drifting


def _centre_on_shift(s: StandardizeState, shifted: Array, y: Array) -> StandardizeState:
    """After a level shift's restart, the next prediction is centred on its latest target (the new level)."""
    return s._replace(scaler=s.scaler._replace(y_mean=jnp.where(shifted, y, s.scaler.y_mean)))


def downdate_item(learner: Learner, options: StandardizeOptions, s: StandardizeState, x: Array,
                  y: Array) -> StandardizeState:
    """``learner.downdate`` of the raw item ``(x, y)`` in the current coordinates."""
    return s._replace(inner=learner.downdate(s.inner, *inner_coordinates(options, s.scaler, x, y)))


def downdate_oldest(learner: Learner, s: StandardizeState) -> StandardizeState:
    """``learner.downdate(inner)``: a windowed inner learner evicts its oldest item."""
    return s._replace(inner=learner.downdate(s.inner))


def tune_inner(learner: Learner, s: StandardizeState, **options) -> StandardizeState:
    """``learner.tune`` on the inner state, in the current coordinates."""
    return s._replace(inner=learner.tune(s.inner, **options))


@describe_factory
def standardize(learner: Learner, *, decay: float = 1.0, clip: float | None = None,
                warmup: int | None = None, scale_inputs: bool = True, keep: int | None = None) -> Learner:
    """Run ``learner`` on online-standardised inputs and targets, predicting on the raw scale.

    Args:
      learner: any learner (its ``n_features`` is kept).
      decay: default weight of the past in the running statistics, in
        ``(0, 1]`` (1: all items equally); an array in the state, so it vmaps.
      clip: ``None``, or clip each standardised input to ``[-clip, clip]``
        (static, > 0): an input far outside the range seen so far (a
        feature constant for a while, then moving) then acts like one at the
        edge. Useful in front of feature maps with squares, which turn an
        input 10³ standard deviations out into a feature of 10⁶.
      warmup: ``None`` (statistics of every item so far), or ``F >= 1``
        (static): the statistics of the first ``F`` finite items, then fixed;
        at the ``F``-th item the inner learner is refitted from its initial
        state on those ``F`` items in the fixed coordinates (under ``vmap``
        only on items where some stream ends its warm-up; again on the last
        ``F`` items after a covariate shift, on the ``keep`` items after a
        drift, module doc). Every
        item the inner learner holds is then in the same coordinates. Use it
        for a learner that stops learning for long stretches (the state
        machine of :func:`~onlinejax.adaptive.adaptive` while stable, a batch
        learner) or keeps a window: with moving statistics its model, fitted
        in the coordinates of its time, would be read in today's (after a
        drift the targets' running mean moves for hundreds of items, and so
        would every prediction of a frozen model). The state then also holds
        the initial inner state and the last ``keep`` raw items; the refitted learner
        counts only what the refit replays (a skipped non-finite item is not
        stored, so its skip count starts again).
      scale_inputs: ``True`` (default); ``False``: the inputs come standardised
        already by statistics that move (River's ``preprocessing.StandardScaler``
        in front) and reach the inner learner as given (clipped at ``clip``),
        only the targets are standardised, and no input run starts a restart or
        a rebase. Standardising such inputs again amplifies what is left of their
        variation (a trending input the scaler holds near 1.7 sd), so that the
        inputs and the targets are no longer in the same coordinates
        (``benchmarks/RESULTS.md``, "Why River's scaler costs the default").
      keep: ``None`` (``F``), or ``K >= F`` (static, needs ``warmup``): the
        last ``K`` items are kept, and a rebase refits the inner learner on
        those of them within the new range (a window learner's whole window
        when ``K`` is its window). A trending input leaves the fixed range
        step by step (module doc): its statistics are rebased after
        :data:`DRIFT_RUN` such items, computed from all ``K``.
    Returns:
      A learner with state :class:`StandardizeState`. ``init(decay=, **kw)``
      passes ``kw`` to ``learner.init``; ``tune`` and ``downdate`` (the
      window's oldest item, or an item given on the raw scale) pass through.

    Example::

        lrn = standardize(bayes_linreg(5, intercept=True))
        state = lrn.init()
        state, pred = lrn.step(state, [7.3e5, 1e-4, 3.0, 1e4, 2.0], 1234.5)
    """
    check_in_range(decay, "decay", 0.0, 1.0)
    if clip is not None:
        check_positive(clip, "clip")
        clip = float(clip)
    if warmup is not None:
        warmup = check_int(warmup, "warmup", 1)
    if not isinstance(scale_inputs, (bool, np.bool_)):
        raise TypeError(f"scale_inputs: expected a bool, got {type(scale_inputs).__name__}")
    if keep is not None:
        if warmup is None:
            raise ValueError("keep: needs a warmup")
        keep = check_int(keep, "keep", warmup)
    opts = StandardizeOptions(decay, clip, warmup, bool(scale_inputs), warmup if keep is None else keep)
    dd, takes_item = None, True
    if learner.downdate is not None:
        takes_item = len(inspect.signature(learner.downdate).parameters) == 3
        dd = partial(downdate_item, learner, opts) if takes_item else partial(downdate_oldest, learner)
    return make_learner(init=partial(init, learner, opts), learn_one=partial(learn_one, learner, opts),
                        predict_one=partial(predict_one, learner, opts),
                        update_one=partial(update_one, learner, opts), n_features=learner.n_features, downdate=dd,
                        downdate_takes_item=takes_item,
                        tune=None if learner.tune is None else partial(tune_inner, learner))

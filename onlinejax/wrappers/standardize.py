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
target is read in the unit of its magnitude until two distinct targets were
seen (``s_y = max(|ȳ|, 1)``, :func:`~onlinejax.wrappers.scaler.provisional_target_scale`;
1 before the first), so the second item's interval is as wide as the level
the first set.

The statistics keep changing, so an item learned early was standardised with
slightly different statistics than one learned late: with ``decay = 1`` (the
default) the change after ``n`` items is ``O(1/n)``, and a learner that
learns every item with forgetting follows it. A learner that never forgets
keeps its coefficients in a blend of past coordinates, which a trending
input (its running mean and scale growing with it) makes ever further from
today's; given ``reexpress``, the learner's change of coordinates (an affine
map for a linear model with an intercept,
:func:`onlinejax.learners.linear.bayes.reexpress`), its state is carried into the new
coordinates whenever the statistics move, exactly. ``decay < 1`` gives
exponentially weighted statistics (memory ``1/(1 - decay)`` items) for
streams whose scale keeps moving. This is what River's
``preprocessing.StandardScaler`` in front of a model does, for the target
too.

A learner that stops learning (the state machine of
:func:`~onlinejax.wrappers.adaptive.adaptive` keeps a window's fit while the stream is
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

An input whose first :data:`~onlinejax.wrappers.standardize_state.LOG_ITEMS` values are all positive and
span decades (``StandardizeOptions.log_spread``: a robust standard deviation of their log of at least 3) is
taken in log scale from then on (:func:`~onlinejax.wrappers.standardize_state.log_scaled`; the statistics
and the inner learner, which saw it raw, start again): standardised raw, such an input is a few huge
values among many near 0.

The module's anatomy: the statistics are in :mod:`onlinejax.wrappers.scaler`
(:class:`~onlinejax.wrappers.scaler.ScalerState`, :func:`~onlinejax.wrappers.scaler.scaler_init`,
:func:`~onlinejax.wrappers.scaler.scaler_update`, :func:`~onlinejax.wrappers.scaler.scales`,
:func:`~onlinejax.wrappers.scaler.to_inner`); the wrapper's
:class:`~onlinejax.wrappers.standardize_state.StandardizeState`, its static
:class:`~onlinejax.wrappers.standardize_state.StandardizeOptions` and its plain steps
(:func:`~onlinejax.wrappers.standardize_state.inner_coordinates`,
:func:`~onlinejax.wrappers.standardize_state.init`,
:func:`~onlinejax.wrappers.standardize_state.predict_one`,
:func:`~onlinejax.wrappers.standardize_state.refit`,
:func:`~onlinejax.wrappers.standardize_state.restart`) in
:mod:`onlinejax.wrappers.standardize_state`; here the thresholds (:data:`SHIFT_Z`,
:data:`SHIFT_RUN`, :data:`OUTLIER_Z`, :data:`OUTLIER_RUN`, :data:`DRIFT_STEP`,
:data:`DRIFT_RUN`, :data:`GATE_MIN`, :data:`WARMUP_TUNE_MIN`), :func:`learn_one`, :func:`update_one`
with its input runs, :func:`rebase` and :func:`standardize`. Each step
takes the inner learner (and the options) as leading arguments that
:func:`standardize` binds; every name is importable from this module.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from ..core.checks import check_record
from ..core.batching import cond_if_any
from ..core.base import Learner, LearnerCores, Prediction, describe_factory, keep_if, learnable, make_learner, pass_through
# the statistics and the wrapper's state and plain steps, re-exported: every name is importable from here
from .scaler import (NEVER, ScalerState, _cleared, _clipped, _has_spread, _scale, scaler_init, scaler_update, scales,
                     target_scale_known, to_inner)
from .standardize_state import (StandardizeOptions, StandardizeState, init, inner_coordinates, log_scaled,
                                log_track_update, predict_one, refit, rescaled, restart)
from ..core.window import ring_push

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
#: A refit within the warm-up or at its end on at least this many items also tunes the inner learner, whose
#: hyperparameters would otherwise stay its init's until its first tune (a state machine's: after a whole window).
WARMUP_TUNE_MIN = 16


def rebase(learner: Learner, options: StandardizeOptions, s: StandardizeState, moved: Array,
           drifted: Array) -> StandardizeState:
    """With ``warmup=F``: the statistics fixed, and the inner learner refitted on the items kept.

    At the end of the warm-up (``moved`` false) the items kept are the
    warm-up's, and the statistics stay those accumulated while they came.
    After an input left the fixed statistics' range (``moved``) the
    statistics are computed again: after a jump (``F`` items in a row beyond
    the range, a covariate shift) from the last ``F`` items, all of them
    after it (:func:`_after_jump`); after a drift (``drifted``: an input that
    left the range step by step, a trend) from every item kept. The inner
    learner is then :func:`~onlinejax.wrappers.standardize_state.refit` from its
    initial state on the kept items within the new range (those before a
    jump lie beyond it), and also tuned, as its
    hyperparameters were those of the old coordinates; a refit within the
    warm-up or at its end on :data:`WARMUP_TUNE_MIN` or more items is tuned too
    (the hyperparameters of the inner learner's init are a guess, kept until
    its own first tune: a state machine's after a whole window). An inner state with a
    ``tune_pending`` flag (the state machine of
    :func:`~onlinejax.wrappers.adaptive.adaptive`) tunes on its next item (its own
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
    x = k.x[order]
    valid = k.valid[order] & (last_f | ~moved | drifted)
    valid = jnp.where(moved & ~drifted, _after_jump(options, s.outside, x, valid), valid)
    k = k._replace(x=x, y=k.y[order], valid=valid, head=jnp.zeros_like(k.head),
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
    tune = moved | (k.count >= WARMUP_TUNE_MIN)
    if hasattr(s.inner, "tune_pending"):  # AdaptiveState (not imported: adaptive imports the combination's types)
        # a refit of a whole phase ended in the machine's own tune already
        tuned = s.inner.n_tunes > s.initial.n_tunes
        return s._replace(inner=s.inner._replace(tune_pending=s.inner.tune_pending | (tune & ~tuned)))
    if learner.tune is None:
        return s
    return s._replace(inner=cond_if_any(learner.tune, max_batch=1)(tune, s.inner))


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
    statistics and the learner start again
    (:func:`~onlinejax.wrappers.standardize_state.restart`) from the next item. With
    ``warmup=F`` the item is also stored (while the statistics take it, then
    every item not withheld, in a ring buffer of the last ``K``, ``keep``),
    on the 2nd, 4th, 8th, ... item before the ``F``-th refitted in the
    coordinates of then (:func:`_refit_in_warmup`; from :data:`WARMUP_TUNE_MIN`
    items on also tuned), and on the ``F``-th item the inner learner is
    :func:`~onlinejax.wrappers.standardize_state.refit` (through
    :func:`~onlinejax.core.batching.cond_if_any`: lazily under ``vmap``), or the
    warm-up starts again (:func:`~onlinejax.wrappers.standardize_state.restart`,
    module doc) when its targets had no spread. A run of items with one input outside
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
    log_track, log_scale, logged = log_track_update(options, s, x, ok)
    x = log_scaled(s, x)  # the inputs of the scale decided before this item (one that decides starts again)
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
    pred_t = rescaled(pred, -sc.y_mean / sy_new, 1.0 / sy_new)
    inner = s.inner if options.reexpress is None else _reexpressed(options, s.inner, s.scaler, sc)
    inner = learner.update(inner, jnp.where(ok, xt, x), jnp.where(ok, yt, y), pred_t)
    spread = _has_spread(sc.x_var, sc.x_mean)
    spread_items = jnp.where(ok, jnp.where(spread, jnp.minimum(s.spread_items + 1, SHIFT_RUN), 0), s.spread_items)
    out = s._replace(inner=keep_if(withhold, s.inner, inner), scaler=sc, outside=outside, far_run=far_run,
                     n_withheld=s.n_withheld + withhold, spread_items=spread_items, shifting=shifting,
                     drifting=drifting, last_x=jnp.where(ok, x, s.last_x), log_track=log_track, log_scale=log_scale)
    shifted = far_run >= OUTLIER_RUN
    if warmup is None:
        moved = jnp.any(shifting & (outside >= SHIFT_RUN))
        return _centre_on_shift(cond_if_any(restart)(moved | shifted | logged, out), shifted, y)
    new = sc.seen > s.scaler.seen  # the item entered the statistics: keep it for the refit
    store = jnp.where(s.scaler.seen < warmup, new, ok & ~withhold)  # then keep the last F items
    out = out._replace(kept=keep_if(store, ring_push(s.kept, x, y), s.kept))
    done = new & (sc.seen == warmup)
    spread = _has_spread(sc.y_var, sc.y_mean)
    jumped = jnp.any(outside >= warmup)
    moved = jumped | jnp.any(drifting & (outside >= DRIFT_RUN))
    out = cond_if_any(lambda sma: (rebase(learner, options, *sma), *sma[1:]))(
        (done & spread) | moved | _refit_in_warmup(options, sc.seen, new), (out, moved, moved & ~jumped))[0]
    stuck = (done & ~spread) | (moved & ~_has_spread(out.scaler.y_var, out.scaler.y_mean))  # no scale: start again
    return _centre_on_shift(cond_if_any(restart)(stuck | shifted | logged, out), shifted, y)


def _refit_in_warmup(options: StandardizeOptions, seen: Array, new: Array) -> Array:
    """``[]`` bool: refit now, in the warm-up's current coordinates, on the items kept so far.

    The inner learner learns each warm-up item in the coordinates of its own time, and over the first
    items the statistics move by whole standard deviations, so a window would hold items in units that
    no longer agree (the predictions of items 2-30 then follow noise in the units rather than the data).
    On the 2nd, 4th, 8th, ... item (a power of two, below ``F``) the learner is refitted on the items kept
    (:func:`rebase` without a move: the same refit as at the warm-up's end, from :data:`WARMUP_TUNE_MIN`
    items on with a tune). A learner whose change of
    coordinates is exact (``reexpress``) needs none.
    """
    if options.reexpress is not None:
        return jnp.zeros((), bool)
    return new & (seen >= 2) & (seen < options.warmup) & ((seen & (seen - 1)) == 0)


def _reexpressed(options: StandardizeOptions, inner, old: ScalerState, new: ScalerState):
    """The inner state in the coordinates of the statistics ``new`` (``options.reexpress``, module doc).

    Once the statistics have taken :data:`GATE_MIN` items: an input ``z' = (s/s')z + (μ - μ')/s'``, the
    target likewise; an input (or the target) whose spread appears or vanishes between the two keeps its
    coordinate (a scale of 1 becoming a first tiny spread would shrink its weight's prior with it).
    """
    on = old.seen >= GATE_MIN
    (sx0, sy0), (sx1, sy1) = scales(old), scales(new)
    same = on & (_has_spread(old.x_var, old.x_mean) == _has_spread(new.x_var, new.x_mean))
    r = jnp.where(same, sx0 / sx1, 1.0)
    c = jnp.where(same, (old.x_mean - new.x_mean) / sx1, 0.0)
    known = on & target_scale_known(old) & target_scale_known(new)
    g = jnp.where(known, sy0 / sy1, 1.0)
    h = jnp.where(known, (old.y_mean - new.y_mean) / sy1, 0.0)
    return options.reexpress(inner, r, c, g, h)


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


@describe_factory
def standardize(learner: Learner, *, options: StandardizeOptions = StandardizeOptions()) -> Learner:
    """Run ``learner`` on online-standardised inputs and targets, predicting on the raw scale.

    Args:
      learner: any learner (its ``n_features`` is kept).
      options: the standardisation's options, a :class:`StandardizeOptions` (default: moving
        statistics of every item, weighted equally, no clip), checked here. Its fields:

        * ``decay``: default weight of the past in the running statistics, in
          ``(0, 1]`` (1: all items equally); an array in the state, so it vmaps.
        * ``clip``: ``None``, or clip each standardised input to ``[-clip, clip]``
          (static, > 0): an input far outside the range seen so far (a
          feature constant for a while, then moving) then acts like one at the
          edge. Useful in front of feature maps with squares, which turn an
          input 10³ standard deviations out into a feature of 10⁶.
        * ``warmup``: ``None`` (statistics of every item so far), or ``F >= 1``
          (static): the statistics of the first ``F`` finite items, then fixed;
          at the ``F``-th item the inner learner is refitted from its initial
          state on those ``F`` items in the fixed coordinates (under ``vmap``
          only on items where some stream ends its warm-up; again on the last
          ``F`` items after a covariate shift, on the ``keep`` items after a
          drift, module doc). Every
          item the inner learner holds is then in the same coordinates. Use it
          for a learner that stops learning for long stretches (the state
          machine of :func:`~onlinejax.wrappers.adaptive.adaptive` while stable, a batch
          learner) or keeps a window: with moving statistics its model, fitted
          in the coordinates of its time, would be read in today's (after a
          drift the targets' running mean moves for hundreds of items, and so
          would every prediction of a frozen model). The state then also holds
          the initial inner state and the last ``keep`` raw items; the refitted learner
          counts only what the refit replays (a skipped non-finite item is not
          stored, so its skip count starts again).
        * ``scale_inputs``: ``True`` (default); ``False``: the inputs come standardised
          already by statistics that move (River's ``preprocessing.StandardScaler``
          in front) and reach the inner learner as given (clipped at ``clip``),
          only the targets are standardised, and no input run starts a restart or
          a rebase. Standardising such inputs again amplifies what is left of their
          variation (a trending input the scaler holds near 1.7 sd), so that the
          inputs and the targets are no longer in the same coordinates
          (``benchmarks/RESULTS.md``, "Why River's scaler costs the default").
        * ``keep``: ``None`` (``F``), or ``K >= F`` (static, needs ``warmup``): the
          last ``K`` items are kept, and a rebase refits the inner learner on
          those of them within the new range (a window learner's whole window
          when ``K`` is its window). A trending input leaves the fixed range
          step by step (module doc): its statistics are rebased after
          :data:`DRIFT_RUN` such items, computed from all ``K``.
        * ``reexpress``: ``None``, or (without ``warmup``, with ``scale_inputs``) the inner learner's
          change of coordinates ``reexpress(state, r [d], c [d], g [], h []) -> state`` for inputs
          ``z' = r ⊙ z + c`` and targets ``ỹ' = gỹ + h`` (e.g. :func:`onlinejax.learners.linear.bayes.reexpress`):
          applied whenever the statistics move, before the item is learned, so a learner that keeps
          what it learned holds every item in today's coordinates (module doc). Not behind a scaler
          that moves the inputs' coordinates upstream: the target must then move with them.
        * ``log_spread``: ``3.0``, or ``None``: the robust standard deviation of an input's first 16
          logs from which it is taken in log scale (module doc); never with ``scale_inputs=False``;
          ``log_first``: only the first ``k`` inputs may be (a feature map's raw inputs, not their squares).
    Returns:
      A learner with state :class:`StandardizeState`. ``init(decay=, **kw)``
      passes ``kw`` to ``learner.init``; ``tune``, ``downdate`` (of an item
      given on the raw scale) and ``evict`` pass through.
    Raises:
      ValueError: naming the field (``options.clip: ...``, ``options.keep: needs a warmup``, ...).
      TypeError: ``options`` not a :class:`StandardizeOptions`, or ``options.scale_inputs`` not a bool.

    Example::

        lrn = standardize(bayes_linreg(5, intercept=True), options=StandardizeOptions(clip=5.0))
        state = lrn.init()
        state, pred = lrn.step(state, [7.3e5, 1e-4, 3.0, 1e4, 2.0], 1234.5)
    """
    opts = check_record(options, StandardizeOptions, "options").checked()
    # a given item is downdated in the current coordinates, like the inner learner learned it
    ops = pass_through(learner, map_item=lambda s, x, y: inner_coordinates(opts, s.scaler, log_scaled(s, x), y))
    return make_learner(init=partial(init, learner, opts), learn_one=partial(learn_one, learner, opts),
                        predict_one=partial(predict_one, learner, opts), n_features=learner.n_features,
                        cores=LearnerCores(update_one=partial(update_one, learner, opts), **ops))

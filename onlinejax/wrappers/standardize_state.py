"""The state, options and plain steps of :func:`~onlinejax.wrappers.standardize.standardize`.

:class:`StandardizeState` and the static :class:`StandardizeOptions`; the
steps that only move between the raw and the inner learner's coordinates:
:func:`inner_coordinates`, :func:`init` and :func:`predict_one`; and
the inner learner's two fresh starts, :func:`refit` on the items kept and
:func:`restart`. The steps take the inner learner (and the options) as leading
arguments that :func:`~onlinejax.wrappers.standardize.standardize` binds. The update,
with its outlier gate, shift and drift runs and rebase, is in
:mod:`onlinejax.wrappers.standardize`.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from ..core.batching import cond_if_any
from ..core.checks import changed_fields, check_bool
from ..core.base import (Learner, Prediction, check_in_range, check_int, check_positive, keep_if,
                         state_dtype)
from .scaler import ScalerState, _cleared, _clipped, scaler_init, scales, to_inner
from ..core.window import ring_init

Array = jax.Array

__all__ = ["StandardizeState", "StandardizeOptions", "inner_coordinates", "init", "predict_one", "refit", "restart",
           "LogTrack", "LOG_ITEMS", "LOG_FLOOR", "log_track_update", "log_scaled"]


class StandardizeState(NamedTuple):
    """State of :func:`~onlinejax.wrappers.standardize.standardize`.

    Attributes:
      inner: the wrapped learner's state.
      scaler: the running statistics (:class:`~onlinejax.wrappers.standardize.ScalerState`).
      initial: the inner learner's initial state (refitted from at the end
        of the warm-up and by :func:`~onlinejax.wrappers.standardize.rebase`;
        restarted from, :mod:`onlinejax.wrappers.standardize`'s module doc).
      kept: with ``warmup=F``: a :class:`~onlinejax.core.window.RingBuffer` of
        capacity ``K`` (``keep``, default ``F``), the raw items of the warm-up,
        then the last ``K`` items stored; else ``None``.
      outside: ``[d]`` int32 per input, items in a row on which it was
        outside the statistics' range (with ``warmup``: since they were
        fixed), counting only those on which it moved (a repeated value adds nothing).
      far_run: ``[]`` int32 targets in a row far from the targets' mean.
      n_withheld: ``[]`` int32 outlying targets withheld from the statistics and the learner.
      spread_items: ``[d]`` int32 per input, items in a row on which its
        statistics had a spread (at most :data:`~onlinejax.wrappers.standardize.SHIFT_RUN`).
      shifting: ``[d]`` bool per input, its current run outside the range
        began once it had had a spread for
        :data:`~onlinejax.wrappers.standardize.SHIFT_RUN` items: a covariate shift
        (without a warm-up, its items are held out of its statistics and
        the run can start them again), not an input that has just appeared.
      last_x: ``[d]`` the last finite item's input.
      drifting: ``[d]`` bool per input, with ``warmup``: its current run
        outside the statistics' range is a drift, every item of it within
        :data:`~onlinejax.wrappers.standardize.DRIFT_STEP` standard deviations of the
        item before (a trending input), not a jump.
      log_track: the first :data:`LOG_ITEMS` finite inputs' log spread (:class:`LogTrack`).
      log_scale: ``[d]`` per input, ``c > 0`` where it is taken in log scale, ``sign(x)·log(1 + |x|/c)``
        (:func:`log_scaled`), else 0.
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
    log_track: Any
    log_scale: Array


#: The number of finite items whose inputs decide which inputs are taken in log scale
#: (``StandardizeOptions.log_spread``).
LOG_ITEMS = 16
#: An input taken in log scale is ``sign(x)·log(1 + |x|/c)`` with ``c`` this times its smallest first value: the
#: log (up to a shift) down to well below the values that decided it, finite and monotone at 0 and below.
LOG_FLOOR = 1e-3


class LogTrack(NamedTuple):
    """The first :data:`LOG_ITEMS` finite inputs: their natural logarithms, smallest value and signs.

    Attributes:
      count: ``[]`` int32 items counted (at most :data:`LOG_ITEMS`).
      logs: ``[LOG_ITEMS, d]`` ``ln x`` of each input counted (0 where it was not positive).
      lo: ``[d]`` the smallest input.
      positive: ``[d]`` bool, every input counted was > 0.
    """

    count: Array
    logs: Array
    lo: Array
    positive: Array


def log_track_update(options: "StandardizeOptions", s: "StandardizeState", x: Array, ok: Array):
    """Count the raw input ``x: [d]`` (when ``ok``), and on the :data:`LOG_ITEMS`-th decide the log scales.

    An input whose first :data:`LOG_ITEMS` values were all positive with a robust standard deviation of their
    natural logarithm (interquartile range / 1.349) of at least ``options.log_spread`` (values spanning
    several decades, as sizes, counts and prices can, which standardisation would leave as a few huge values
    among many near 0) is taken in log scale from then on, with ``c`` :data:`LOG_FLOOR` times its smallest value
    (values below ``c`` are squashed towards 0; later values somewhat below the deciding ones keep their log).
    The quartiles, not the standard deviation: one tiny value among uniform inputs moves the latter by several
    units of log.

    Returns:
      ``(log_track, log_scale [d], decided [])``: ``decided`` true on the item that set a log scale (the
      statistics and the inner learner, which saw the raw inputs, then start again).
    """
    t = s.log_track
    if options.log_spread is None or not options.scale_inputs:
        return t, s.log_scale, jnp.zeros((), bool)
    on = ok & (t.count < LOG_ITEMS)
    lx = jnp.log(jnp.where(x > 0, x, 1.0))
    slot = jnp.minimum(t.count, LOG_ITEMS - 1)
    logs = t.logs.at[slot].set(jnp.where(on, lx, t.logs[slot]))
    t = LogTrack(t.count + on, logs, jnp.where(on, jnp.minimum(t.lo, x), t.lo), t.positive & ~(on & ~(x > 0)))

    def decide(tc):  # once per stream: the quantiles' sort is not paid on every item
        t, c = tc
        q1, q3 = jnp.quantile(t.logs, jnp.asarray([0.25, 0.75], t.logs.dtype), axis=0)
        floor = jnp.maximum(LOG_FLOOR * t.lo, jnp.finfo(t.lo.dtype).tiny)  # a normal number: its log is finite
        may = True if options.log_first is None else jnp.arange(t.lo.shape[-1]) < options.log_first
        return t, jnp.where(may & t.positive & (q3 - q1 >= 1.349 * options.log_spread), floor, c)

    log_scale = cond_if_any(decide)(on & (t.count == LOG_ITEMS), (t, s.log_scale))[1]
    return t, log_scale, jnp.any(log_scale != s.log_scale)


def log_scaled(s: "StandardizeState", x: Array) -> Array:
    """``x: [..., d]`` with each input in log scale where ``s.log_scale`` says so: ``sign(x)·log(1 + |x|/c)``.

    Above ``c`` as ``log|x| - log c + log(1 + c/|x|)``: ``|x|/c`` itself overflows for a large ``x`` over a
    tiny ``c`` (``10³⁰/10⁻³²`` in float32).
    """
    c = s.log_scale
    on = c > 0
    c = jnp.where(on, c, 1.0)
    a = jnp.abs(x)
    below = a <= c
    r = jnp.where(below, jnp.log1p(jnp.where(below, a, 0.0) / c),
                  jnp.log(jnp.where(below, 1.0, a)) - jnp.log(c) + jnp.log1p(c / jnp.where(below, 1.0, a)))
    return jnp.where(on, jnp.sign(x) * r, x)


class StandardizeOptions(NamedTuple):
    """The standardisation's options as one value (:func:`~onlinejax.wrappers.standardize.standardize`'s ``options=``).

    An immutable record: equal records compare and hash equal, so wrappers built with equal options are
    the same learner; the ``repr`` shows the fields that differ from the defaults.
    :func:`~onlinejax.wrappers.calibration.calibrated` passes its ``standardization=`` record on as it is (its
    default clips at 5). :meth:`checked` gives the form the wrapper runs with (``keep`` resolved).

    Attributes:
      decay: ``1.0`` (default: all items weigh equally), or the weight of the past in the running
        statistics in ``(0, 1]`` (memory ``1/(1 - decay)`` items); ``init(decay=)`` overrides it (an
        array in the state, so it vmaps).
      clip: ``None`` (default: no clip), or clip each standardised input to ``[-clip, clip]``
        (static, > 0): an input far outside the range seen so far acts like one at the edge. Useful
        in front of feature maps with squares, which turn an input 10³ standard deviations out into a
        feature of 10⁶.
      warmup: ``None`` (default: the statistics of every item so far), or ``F >= 1`` (static): the
        statistics of the first ``F`` finite items, then fixed, and the inner learner refitted on
        those items in the fixed coordinates (:func:`~onlinejax.wrappers.standardize.standardize`).
      scale_inputs: ``True`` (default); ``False``: the inputs come standardised already by
        statistics that move (River's ``preprocessing.StandardScaler`` in front) and reach the inner
        learner as given (clipped at ``clip``); only the target is standardised.
      keep: ``None`` (default: ``F``), or ``K >= F`` (static, needs ``warmup``): the last ``K``
        items kept, on which a rebase refits the inner learner (a window learner's window).
      reexpress: ``None`` (default), or (without ``warmup``, with ``scale_inputs``) the inner
        learner's change of coordinates ``reexpress(state, r [d], c [d], g [], h []) -> state``
        (e.g. :func:`onlinejax.learners.linear.bayes.reexpress`), applied whenever the statistics move.
      log_spread: ``3.0`` (default), or ``None`` (never): an input whose first :data:`LOG_ITEMS` finite
        values are all positive with a robust standard deviation (interquartile range / 1.349) of their
        natural log of at least this (> 0) is taken in log scale from then on (:func:`log_track_update`;
        the statistics and the inner learner start again on that item). Not with ``scale_inputs=False``.
      log_first: ``None`` (default: any input), or ``k >= 1`` (static): only the first ``k`` inputs may be
        taken in log scale, for a feature map that puts the raw inputs first (the thesis's features): the
        square of a Gaussian input spans decades as often as 3 % of the time.

    Example:
      >>> StandardizeOptions(clip=5.0, warmup=32)
      StandardizeOptions(clip=5.0, warmup=32)
    """

    decay: float = 1.0
    clip: Optional[float] = None
    warmup: Optional[int] = None
    scale_inputs: bool = True
    keep: Optional[int] = None
    reexpress: Optional[Callable] = None
    log_spread: Optional[float] = 3.0
    log_first: Optional[int] = None

    def checked(self, name: str = "options") -> "StandardizeOptions":
        """The options checked, as the wrapper reads them (``clip`` a float, ``keep`` resolved to ``K``).

        Args:
          name: the argument the record was given as, for the messages (``options.clip: ...``).
        Raises:
          ValueError: naming the field (``options.warmup: ...``) for a value out of its range, a
            ``keep`` without ``warmup`` or a ``reexpress`` with one;
          TypeError: for a ``scale_inputs`` that is not a bool.
        """
        check_in_range(self.decay, f"{name}.decay", 0.0, 1.0)
        clip = self.clip
        if clip is not None:
            check_positive(clip, f"{name}.clip")
            clip = float(clip)
        warmup = None if self.warmup is None else check_int(self.warmup, f"{name}.warmup", 1)
        check_bool(self.scale_inputs, f"{name}.scale_inputs")
        keep = self.keep
        if keep is not None:
            if warmup is None:
                raise ValueError(f"{name}.keep: needs a warmup")
            keep = check_int(keep, f"{name}.keep", warmup)
        if self.reexpress is not None and (warmup is not None or not self.scale_inputs):
            raise ValueError(f"{name}.reexpress: only for moving statistics of the inputs and the target "
                             "(warmup=None, scale_inputs=True)")
        log_spread = self.log_spread
        if log_spread is not None:
            check_positive(log_spread, f"{name}.log_spread")
            log_spread = float(log_spread)
        log_first = None if self.log_first is None else check_int(self.log_first, f"{name}.log_first", 1)
        return StandardizeOptions(self.decay, clip, warmup, bool(self.scale_inputs),
                                  warmup if keep is None else keep, self.reexpress, log_spread, log_first)

    def __repr__(self) -> str:
        return changed_fields(self)


def inner_coordinates(options: StandardizeOptions, s: ScalerState, x: Array, y: Array | None = None):
    """:func:`~onlinejax.wrappers.standardize.to_inner` under ``options``: ``scale_inputs=False`` standardises only the target.

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
    """No item seen: ``learner.init(**inner_kwargs)`` and :func:`~onlinejax.wrappers.standardize.scaler_init`.

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
    zd = jnp.zeros((d,), dt)
    logs = (LogTrack(i0, jnp.zeros((LOG_ITEMS, d), dt), jnp.full((d,), jnp.inf, dt), jnp.ones((d,), bool)), zd)
    runs = (id_, i0, i0, id_, jnp.zeros((d,), bool), zd, jnp.zeros((d,), bool)) + logs
    if warmup is None:
        return StandardizeState(inner, scaler_init(d, decay, dt), inner, None, *runs)
    return StandardizeState(inner, scaler_init(d, decay, dt, warmup), inner, ring_init(options.keep or warmup, d, dt), *runs)


def predict_one(learner: Learner, options: StandardizeOptions, s: StandardizeState, x: Array):
    """The inner prediction of ``x̃`` mapped back to the raw scale, ``x: [d]``.

    The law of ``ȳ + s_y Ỹ``: ``N(ȳ + s_y μ̃, s_y² σ̃²)`` for a Gaussian, and a Student-t or a mixture
    stays one (its ``affine``), so a wrapper outside judges the inner learner's own distribution; a
    prediction without ``affine`` is mapped back as the Gaussian of its moments.
    """
    p = learner.predict(s.inner, inner_coordinates(options, s.scaler, log_scaled(s, x)))
    return rescaled(p, s.scaler.y_mean, scales(s.scaler)[1])


def rescaled(pred, shift: Array, scale: Array):
    """The law of ``shift + scale·Y`` for ``Y ~ pred`` (``scale > 0``): ``pred.affine``, or the Gaussian of its moments."""
    if hasattr(pred, "affine"):
        return pred.affine(shift, scale)
    return Prediction(shift + scale * pred.mean, scale * scale * pred.var)


def refit(learner: Learner, options: StandardizeOptions, s: StandardizeState, use: Array) -> StandardizeState:
    """The inner learner refitted from its initial state on the items ``kept`` (oldest first) where ``use`` (``[K]``)."""
    xt, yt = inner_coordinates(options, s.scaler, s.kept.x, s.kept.y)

    def learn(st, item):
        x, y, u = item
        return keep_if(u, learner.learn(st, x, y), st), None

    return s._replace(inner=jax.lax.scan(learn, s.initial, (xt, yt, use))[0])


def restart(s: StandardizeState) -> StandardizeState:
    """Start again: statistics cleared (``decay``, ``freeze_after`` kept), the initial inner state, an empty warm-up.

    The counters (``n_withheld``) are kept, and so is the targets' mean: with
    no item counted it is what the next prediction is centred on (the last
    level rather than 0; after a level shift :func:`~onlinejax.wrappers.standardize.update_one` sets it to
    the shift's latest target), and the next item replaces it.
    """
    sc = _cleared(s.scaler)
    kept = None if s.kept is None else jax.tree_util.tree_map(jnp.zeros_like, s.kept)
    return s._replace(inner=s.initial, scaler=sc, kept=kept,
                      outside=jnp.zeros_like(s.outside), far_run=jnp.zeros_like(s.far_run),
                      spread_items=jnp.zeros_like(s.spread_items), shifting=jnp.zeros_like(s.shifting),
                      drifting=jnp.zeros_like(s.drifting))

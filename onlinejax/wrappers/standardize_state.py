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

from ..core.checks import changed_fields, check_bool
from ..core.base import (Learner, Prediction, check_in_range, check_int, check_positive, keep_if,
                         state_dtype)
from .scaler import ScalerState, _cleared, _clipped, scaler_init, scales, to_inner
from ..core.window import ring_init

Array = jax.Array

__all__ = ["StandardizeState", "StandardizeOptions", "inner_coordinates", "init", "predict_one", "refit", "restart"]


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
        return StandardizeOptions(self.decay, clip, warmup, bool(self.scale_inputs),
                                  warmup if keep is None else keep, self.reexpress)

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
    runs = (id_, i0, i0, id_, jnp.zeros((d,), bool), jnp.zeros((d,), dt), jnp.zeros((d,), bool))
    if warmup is None:
        return StandardizeState(inner, scaler_init(d, decay, dt), inner, None, *runs)
    return StandardizeState(inner, scaler_init(d, decay, dt, warmup), inner, ring_init(options.keep or warmup, d, dt), *runs)


def predict_one(learner: Learner, options: StandardizeOptions, s: StandardizeState, x: Array):
    """The inner prediction of ``x̃`` mapped back to the raw scale, ``x: [d]``.

    The law of ``ȳ + s_y Ỹ``: ``N(ȳ + s_y μ̃, s_y² σ̃²)`` for a Gaussian, and a Student-t or a mixture
    stays one (its ``affine``), so a wrapper outside judges the inner learner's own distribution; a
    prediction without ``affine`` is mapped back as the Gaussian of its moments.
    """
    p = learner.predict(s.inner, inner_coordinates(options, s.scaler, x))
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

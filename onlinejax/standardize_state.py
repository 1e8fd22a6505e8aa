"""The state, options and plain steps of :func:`~onlinejax.standardize.standardize`.

:class:`StandardizeState` and the static :class:`StandardizeOptions`; the
steps that only move between the raw and the inner learner's coordinates:
:func:`inner_coordinates`, :func:`init` and :func:`predict_one`; and
the inner learner's two fresh starts, :func:`refit` on the items kept and
:func:`restart`. The steps take the inner learner (and the options) as leading
arguments that :func:`~onlinejax.standardize.standardize` binds. The update,
with its outlier gate, shift and drift runs and rebase, is in
:mod:`onlinejax.standardize`.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from .base import Learner, Prediction, keep_if, state_dtype
from .scaler import ScalerState, _cleared, _clipped, scaler_init, scales, to_inner
from .window import ring_init

Array = jax.Array

__all__ = ["StandardizeState", "StandardizeOptions", "inner_coordinates", "init", "predict_one", "refit", "restart"]


class StandardizeState(NamedTuple):
    """State of :func:`~onlinejax.standardize.standardize`.

    Attributes:
      inner: the wrapped learner's state.
      scaler: the running statistics (:class:`~onlinejax.standardize.ScalerState`).
      initial: the inner learner's initial state (refitted from at the end
        of the warm-up and by :func:`~onlinejax.standardize.rebase`;
        restarted from, :mod:`onlinejax.standardize`'s module doc).
      kept: with ``warmup=F``: a :class:`~onlinejax.window.RingBuffer` of
        capacity ``K`` (``keep``, default ``F``), the raw items of the warm-up,
        then the last ``K`` items stored; else ``None``.
      outside: ``[d]`` int32 per input, items in a row on which it was
        outside the statistics' range (with ``warmup``: since they were
        fixed), counting only those on which it moved (a repeated value adds nothing).
      far_run: ``[]`` int32 targets in a row far from the targets' mean.
      n_withheld: ``[]`` int32 outlying targets withheld from the statistics and the learner.
      spread_items: ``[d]`` int32 per input, items in a row on which its
        statistics had a spread (at most :data:`~onlinejax.standardize.SHIFT_RUN`).
      shifting: ``[d]`` bool per input, its current run outside the range
        began once it had had a spread for
        :data:`~onlinejax.standardize.SHIFT_RUN` items: a covariate shift
        (without a warm-up, its items are held out of its statistics and
        the run can start them again), not an input that has just appeared.
      last_x: ``[d]`` the last finite item's input.
      drifting: ``[d]`` bool per input, with ``warmup``: its current run
        outside the statistics' range is a drift, every item of it within
        :data:`~onlinejax.standardize.DRIFT_STEP` standard deviations of the
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
    """The static options of :func:`~onlinejax.standardize.standardize` (see its Args).

    Attributes:
      decay: the default weight of the past (``init(decay=)`` overrides it).
      clip: ``None`` or the clip of the standardised inputs.
      warmup: ``None`` or the number ``F`` of items whose statistics are kept.
      scale_inputs: whether the inputs are standardised (``False``: given standardised already).
      keep: with ``warmup``: the number ``K >= F`` of last items kept for a rebase's refit (``None``: ``F``).
      reexpress: ``None`` or the inner learner's change of coordinates (without ``warmup``).
    """

    decay: float = 1.0
    clip: Optional[float] = None
    warmup: Optional[int] = None
    scale_inputs: bool = True
    keep: Optional[int] = None
    reexpress: Optional[Callable] = None


def inner_coordinates(options: StandardizeOptions, s: ScalerState, x: Array, y: Array | None = None):
    """:func:`~onlinejax.standardize.to_inner` under ``options``: ``scale_inputs=False`` standardises only the target.

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
    """No item seen: ``learner.init(**inner_kwargs)`` and :func:`~onlinejax.standardize.scaler_init`.

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


def restart(s: StandardizeState) -> StandardizeState:
    """Start again: statistics cleared (``decay``, ``freeze_after`` kept), the initial inner state, an empty warm-up.

    The counters (``n_withheld``) are kept, and so is the targets' mean: with
    no item counted it is what the next prediction is centred on (the last
    level rather than 0; after a level shift :func:`~onlinejax.standardize.update_one` sets it to
    the shift's latest target), and the next item replaces it.
    """
    sc = _cleared(s.scaler)
    kept = None if s.kept is None else jax.tree_util.tree_map(jnp.zeros_like, s.kept)
    return s._replace(inner=s.initial, scaler=sc, kept=kept,
                      outside=jnp.zeros_like(s.outside), far_run=jnp.zeros_like(s.far_run),
                      spread_items=jnp.zeros_like(s.spread_items), shifting=jnp.zeros_like(s.shifting),
                      drifting=jnp.zeros_like(s.drifting))

"""The state machine's types (:func:`~onlinejax.wrappers.adaptive.adaptive`): its phases, state and options.

This module holds the phase codes (``COLD_START``, ``STABLE``, ``HIGH_ERROR``,
``TUNE``; :data:`MODES` names them), the machine's state
(:class:`AdaptiveState`, with the drift detector's
:class:`~onlinejax.wrappers.detectors.DetectorState`), its behavioural switches as
one value (:class:`MachineOptions`, the factory's ``options=``), the static
options it runs with (:class:`AdaptiveOptions`: those switches checked, with
the drift detector, a :class:`~onlinejax.wrappers.detectors.Detector` value, and the
tunes' schedule), and the fresh cold-start state (:func:`init`,
:func:`wrap_state`); :func:`record_mode` reads an item's phase.
:mod:`onlinejax.wrappers.adaptive` runs the machine and re-exports these names.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from ..core.checks import changed_fields, check_bool
from ..core.base import Learner, check_in_range, check_int, state_dtype
from .detectors import CusumDetector, Detector, DetectorState

Array = jax.Array

__all__ = ["AdaptiveState", "MachineOptions", "AdaptiveOptions", "init", "wrap_state", "record_mode", "COLD_START",
           "STABLE", "HIGH_ERROR", "TUNE", "MODES"]

COLD_START, STABLE, HIGH_ERROR, TUNE = 0, 1, 2, 3
MODES = ("cold_start", "stable", "high_error", "tune")


class AdaptiveState(NamedTuple):
    """State of :func:`~onlinejax.wrappers.adaptive.adaptive`.

    Attributes:
      inner: the wrapped learner's state.
      mode: ``[]`` int32 mode for the next item (``COLD_START``, ``STABLE`` or ``HIGH_ERROR``).
      last: ``[]`` int32 what happened on the last item (one of the four ``MODES``).
      n_phase: ``[]`` int32 items learned in the current cold-start / high-error phase.
      phase_length: ``[]`` int32 the length of those phases (the window ``W``).
      detector: :class:`~onlinejax.wrappers.detectors.DetectorState`.
      phase_abs_err, phase_n: ``[]`` sum of ``|e|`` and count over the current learning phase.
      reference: ``[]`` mean ``|e|`` of the last learning phase (the thesis rule's frozen reference).
      n_learned, n_tunes, n_alarms, n_seen, n_skipped: ``[]`` int32 counters.
      tune_pending: ``[]`` bool: a tune waits for the next item whose count
        ``n_seen`` is a multiple of ``tune_every`` (a learning phase ended
        between two; a wrapper that refitted the inner learner may set it,
        see :func:`~onlinejax.wrappers.standardize.rebase`; without ``tune_unmoved``
        such a tune also waits until the window moved on ``min_moves`` items
        of its phase or settled).
      naive_mean, last_y: ``[]`` the naive forecasts of the next target (the
        targets' exponentially weighted mean, the last target), updated on
        every item (unused before the first).
      last_x: ``[d]`` the last item's input (with ``last_y``: what a repeat equals).
      phase_moves: ``[]`` int32 items learned in the current learning phase whose input differed from the
        item's before (``min_moves``).
      x_lo, x_hi: ``[d]`` the smallest and largest input learned since the last alarm (``±inf`` before the first).
      was_beyond: ``[d]`` bool per input, whether on the item before it lay more than ``follow_inputs``
        outside ``[x_lo, x_hi]``.
    """

    inner: Any
    mode: Array
    last: Array
    n_phase: Array
    phase_length: Array
    detector: DetectorState
    phase_abs_err: Array
    phase_n: Array
    reference: Array
    n_learned: Array
    n_tunes: Array
    n_alarms: Array
    n_seen: Array
    n_skipped: Array
    tune_pending: Array
    naive_mean: Array
    last_y: Array
    last_x: Array
    phase_moves: Array
    x_lo: Array
    x_hi: Array
    was_beyond: Array


class MachineOptions(NamedTuple):
    """The state machine's behavioural switches as one value (:func:`~onlinejax.wrappers.adaptive.adaptive`'s ``options=``).

    An immutable record; the defaults are the thesis's machine.

    The zoo's recommended windowed learners set ``naive_alarm``, ``learn_shock``, ``skip_repeats``,
    ``min_moves`` and ``follow_inputs`` (:func:`onlinejax.zoo.recommended_learners`). Equal records
    compare and hash equal, so machines built with equal options are the same learner; the ``repr`` shows
    the fields that differ from the defaults.

    Attributes:
      always_learn: ``False`` (default); ``True``: learn on every item, stable ones included (the detector
        still schedules the tunes).
      naive_alarm: ``None`` (default: the thesis's machine), or a share in (0, 1): also alarm when, over
        the recent stable items, the share on which the learner's squared error exceeds both naive
        forecasts' (the targets' running mean and the last target) exceeds it (:mod:`onlinejax.wrappers.adaptive`'s
        module doc). A scale-free test that replaces a window that is wrong from its start, which the
        relative detectors cannot see.
      learn_shock: ``True`` (default, the thesis's rule): the item that raised an alarm is the first item
        learned in the new phase; ``False``: an item that alarmed on its own (the detector's ``shock``) is
        not learned, so that a single outlier is not fitted into the new window and kept there through
        the next stable phase (a drift's next items fill the window instead).
      skip_repeats: ``False`` (default: the thesis's machine); ``True``: a learning phase leaves out
        (neither learns nor counts) an item equal in ``x`` and ``y`` to the item before it, so a stuck
        sensor's run is not frozen into the window.
      min_moves: ``0`` (default: the thesis's machine), or an int ``m >= 0``: a learning phase in which
        the input moved (differed from the item's before) on fewer than ``m`` of its learned items ends
        in its tune but then learns on, as another learning phase, instead of settling into a stable
        one. A window of one or two distinct inputs (rows duplicated in blocks) is a point, not a model:
        frozen, it predicts every new input from that point until a detector alarms (tens of items per
        block); learning on, it takes each new input in as it comes.
      tune_unmoved: ``True`` (default): a phase that learns on (``min_moves``) still ends in a tune;
        ``False``: it does not, and the inner learner keeps the hyperparameters it has (a GP's marginal
        likelihood cannot place a lengthscale on a window of one or two distinct inputs).
      follow_inputs: ``None`` (default: the thesis's machine), or a margin ``m >= 0`` in the inner
        learner's input units (standard deviations behind :func:`~onlinejax.wrappers.calibration.calibrated`): a
        stable machine learns an item on which an input lies more than ``m`` outside the range of the
        values of that input it learned, as it did on the item before. A trending input leaves a frozen
        window's range a little more with every item, so the window would extrapolate ever further until
        a detector alarms; learning on, it slides along. Inputs that stay within the range, a creep by
        less than ``m`` and a new extreme that lagged inputs pass on (one input per item) learn nothing.

    Example:
      >>> MachineOptions(naive_alarm=0.7, learn_shock=False)
      MachineOptions(naive_alarm=0.7, learn_shock=False)
    """

    always_learn: bool = False
    naive_alarm: Optional[float] = None
    learn_shock: bool = True
    skip_repeats: bool = False
    min_moves: int = 0
    tune_unmoved: bool = True
    follow_inputs: Optional[float] = None

    def checked(self) -> "MachineOptions":
        """The options with their values checked and as the machine reads them (floats, bools).

        Raises:
          ValueError: naming the field (``options.min_moves: ...``) for a value out of its range;
          TypeError: for a ``tune_unmoved`` that is not a bool.
        """
        min_moves = check_int(self.min_moves, "options.min_moves", 0)
        check_bool(self.tune_unmoved, "options.tune_unmoved")
        naive = self.naive_alarm
        if naive is not None:
            check_in_range(naive, "options.naive_alarm", 0.0, 1.0, hi_open=True)
            naive = float(naive)
        margin = self.follow_inputs
        if margin is not None:
            if not float(margin) >= 0.0:
                raise ValueError(f"options.follow_inputs: must be None or >= 0, got {margin!r}")
            margin = float(margin)
        # always_learn is kept as given: the machine ORs it into a traced mask
        return MachineOptions(self.always_learn, naive, bool(self.learn_shock), bool(self.skip_repeats), min_moves,
                              self.tune_unmoved, margin)

    def __repr__(self) -> str:
        return changed_fields(self)


class AdaptiveOptions(NamedTuple):
    """The static options :func:`~onlinejax.wrappers.adaptive.adaptive`'s machine runs with (Python values).

    The factory builds them from its arguments: the detector, ``tune``, the
    :class:`~onlinejax.core.schedule.TunePlan` resolved (``tune_batch``, ``tune_every``) and the checked
    :class:`MachineOptions`, whose fields read as this record's own (``options.naive_alarm``).

    Attributes:
      detector: the drift detector (:class:`~onlinejax.wrappers.detectors.Detector`, a value with its own options:
        :func:`~onlinejax.wrappers.detectors.cusum`, :func:`~onlinejax.wrappers.detectors.frozen` or
        :func:`~onlinejax.wrappers.detectors.bocpd_detector`).
      tune: call the inner learner's ``tune`` at the end of each learning phase.
      tune_batch: under ``vmap``, tune this many streams at a time (``None``: all).
      defer_tune: count the tune at a phase's end but leave it to the caller
        (the learner's :class:`~onlinejax.core.base.DeferredStep`).
      tune_every: run a due tune only on items whose count ``n_seen`` is a
        multiple of this (1: at the phase's end).
      machine: the checked :class:`MachineOptions` (``always_learn``, ``naive_alarm``, ``learn_shock``,
        ``skip_repeats``, ``min_moves``, ``tune_unmoved``, ``follow_inputs``; see there).
    """

    detector: Detector = CusumDetector()
    tune: bool = True
    tune_batch: Optional[int] = 1
    defer_tune: bool = False
    tune_every: int = 1
    machine: MachineOptions = MachineOptions()

    # the machine's switches read as the options' own
    always_learn = property(lambda self: self.machine.always_learn)
    naive_alarm = property(lambda self: self.machine.naive_alarm)
    learn_shock = property(lambda self: self.machine.learn_shock)
    skip_repeats = property(lambda self: self.machine.skip_repeats)
    min_moves = property(lambda self: self.machine.min_moves)
    tune_unmoved = property(lambda self: self.machine.tune_unmoved)
    follow_inputs = property(lambda self: self.machine.follow_inputs)


def wrap_state(inner_state, phase_length, detector: Detector = CusumDetector(), *,
               n_features: int) -> AdaptiveState:
    """A fresh :class:`AdaptiveState` (cold start) around an inner learner's state.

    ``phase_length``: the cold-start / high-error phase length (the window ``W``; ``[]`` int).
    ``detector``: the drift detector (:class:`~onlinejax.wrappers.detectors.Detector`, static), whose ``init`` gives the
    detector's state.
    ``n_features``: the input width ``d`` (static).
    """
    dt = state_dtype(inner_state)
    i0 = jnp.zeros((), jnp.int32)
    return AdaptiveState(
        inner=inner_state, mode=i0 + COLD_START, last=i0 + COLD_START, n_phase=i0,
        phase_length=jnp.asarray(phase_length, jnp.int32), detector=detector.init(dt),
        phase_abs_err=jnp.zeros((), dt), phase_n=i0, reference=jnp.full((), jnp.inf, dt), n_learned=i0,
        n_tunes=i0, n_alarms=i0, n_seen=i0, n_skipped=i0, tune_pending=jnp.zeros((), bool),
        naive_mean=jnp.zeros((), dt), last_y=jnp.zeros((), dt), last_x=jnp.zeros((n_features,), dt),
        phase_moves=i0, x_lo=jnp.full((n_features,), jnp.inf, dt), x_hi=jnp.full((n_features,), -jnp.inf, dt),
        was_beyond=jnp.zeros((n_features,), bool),
    )


def init(learner: Learner, phase_length: int, /, window=None, *, detector: Detector = CusumDetector(),
         **inner_kwargs) -> AdaptiveState:
    """The cold-start state around ``learner.init(**inner_kwargs)``.

    Args:
      learner: the wrapped (windowed) learner.
      phase_length: the default phase length ``W`` (the factory's ``window``).
      window: ``None``, or a window that is passed on to ``learner.init``
        (learners whose window is an init value) and becomes the phase length.
      detector: the drift detector, see :func:`wrap_state` (the factory passes its own).
      **inner_kwargs: passed on to ``learner.init``.
    """
    d = learner.n_features
    if window is None:
        return wrap_state(learner.init(**inner_kwargs), phase_length, detector, n_features=d)
    return wrap_state(learner.init(window=window, **inner_kwargs), window, detector, n_features=d)


def record_mode(state: AdaptiveState) -> Array:
    """``state.last``: pass as ``progressive_validation(..., record=record_mode)`` to get the per-item phases."""
    return state.last

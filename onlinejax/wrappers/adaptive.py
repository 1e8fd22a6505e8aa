"""The windowed learners' state machine (thesis 5.3, Fig. 5.3), drift-aware.

A wrapper around any windowed learner (sliding-window Bayesian linear
regression, GP, kernel regression) that decides per item whether to learn
and when to tune:

* **cold start** — predict and learn until ``W`` items have been learned,
  then **tune** (one call of the learner's ``tune``) → **stable**;
* **stable** — predict only (learning is skipped: for the windowed learners
  it is the costly operation) while a drift detector watches the errors;
* on an alarm → **high error** — predict and learn until the window has been
  recycled (``W`` items learned since the alarm, the alarming item included),
  then **tune** → **stable**.

Every item's outcome is kept in ``state.last`` (``COLD_START``, ``STABLE``,
``HIGH_ERROR``, or ``TUNE`` on the item that ended a learning phase, after
which its tune runs) so plots can shade the phases:
``progressive_validation(..., record=record_mode)``.

The module's anatomy: the machine's types are in :mod:`onlinejax.wrappers.adaptive_state`
(:class:`AdaptiveState`, the static :class:`AdaptiveOptions`, :func:`init` /
:func:`~onlinejax.wrappers.adaptive_state.wrap_state`) and its drift detectors in
:mod:`onlinejax.wrappers.detectors` (:class:`DetectorState`, and the detectors as
values: :func:`~onlinejax.wrappers.detectors.cusum`, :func:`~onlinejax.wrappers.detectors.frozen`,
:func:`~onlinejax.wrappers.detectors.bocpd_detector`); this module re-exports the state
types and runs the machine: :func:`update_one` and :func:`step_one` (one item
through the machine); :func:`learn_one` and
:func:`predict_one`; the factory :func:`adaptive` binds
the inner learner and the options to them (the inner learner's ``tune``
passes through, :func:`~onlinejax.core.base.pass_through`). Its options are values:
the detector, the tunes' schedule (``tune_plan=``, a
:class:`~onlinejax.core.schedule.TunePlan`) and the behavioural switches
(``options=``, a :class:`MachineOptions`; the ``naive_alarm``, ``skip_repeats``,
... below are its fields).

Drift detection
---------------
``detector=`` takes the detector that watches a stable phase's errors, a
value that carries its own options and its own ``init`` and ``update``:
``cusum()`` (the default, a relative CUSUM on the standardised squared
residuals), ``frozen()`` (the thesis's frozen-reference rule) or
``bocpd_detector()`` (Bayesian online changepoint detection on the
residuals' scale), all of :mod:`onlinejax.wrappers.detectors`, which describes each.

The CUSUM and BOCPD detectors are relative to the phase's own errors, so a window that is
wrong from the start (learned on a stuck sensor's constant run, or around an
outlier) is never replaced by them. ``MachineOptions(naive_alarm=ρ)`` adds a scale-free
reference outside the learner: two naive forecasts of the same item, the
running mean of the targets (an exponentially weighted mean over about
:data:`NAIVE_MEMORY` items) and the last target (a random walk). The machine
alarms when, over its recent stable items (the same weighting), the share of
items on which the learner's squared error exceeds *both* naive forecasts'
exceeds ``ρ``. A learner that beats the running mean on most items (any
useful model) stays far below it (a pure-noise stream gives about a third);
a frozen window that is worse than predicting the recent mean reaches it
within tens of items. Each item counts once, so no outlier dominates.

A stuck sensor repeats one item; a window that holds mostly its repeats is
one point, not a model, and a phase that ends on it keeps that point through
the next stable phase (whose errors are then no worse than the running
mean's, so neither test replaces it); a few exact repeats already pull a
GP's tuned noise towards 0. With ``skip_repeats`` a learning phase does not
learn an item equal in ``x`` and ``y`` to the item before it, nor count it
towards the phase's length: the run adds its first item to the window, and
the phase ends ``W`` learned items after it.

Under ``vmap`` the learning step and the tune run through
:func:`onlinejax.core.batching.cond_if_any`: the learning step runs for the batch
only on items where some stream learns, and a tune runs only for the streams
that tune on that item (the plan's ``batch`` at a time), not for every stream on
every item, which is what a vmapped ``lax.cond`` would do (it becomes a
``select`` that evaluates both branches). With thousands of streams on an
accelerator some stream ends a phase on almost every item, so the batch
still runs its tune program almost every item; ``adaptive(tune_plan=TunePlan(every=k))``
lets each finished phase's tune wait for the next item whose count is a
multiple of ``k``, so that the streams share their tune items.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from ..core.checks import check_record
from .adaptive_state import (COLD_START, HIGH_ERROR, MODES, STABLE, TUNE, AdaptiveOptions, AdaptiveState,
                             MachineOptions, init, record_mode, wrap_state)
from ..core.base import (DeferredStep, Learner, LearnerCores, Prediction, check_int, describe_factory, keep_if,
                         make_learner, pass_through)
from ..core.batching import cond_if_any
from .detectors import PERSIST_ITEMS, RECENT_ITEMS, CusumDetector, Detector, DetectorState
from ..core.schedule import TunePlan

Array = jax.Array

__all__ = [
    "AdaptiveState",
    "DetectorState",
    "MachineOptions",
    "AdaptiveOptions",
    "adaptive",
    "init",
    "step_one",
    "update_one",
    "learn_one",
    "predict_one",
    "record_mode",
    "COLD_START",
    "STABLE",
    "HIGH_ERROR",
    "TUNE",
    "MODES",
]

#: ``naive_alarm``: the memory (items) of the targets' running mean and of the learner's losing share.
NAIVE_MEMORY = 32


def _default_tune_batch() -> int | None:
    """``tune_batch="auto"``: 1 on JAX's CPU backend, ``None`` (the whole batch) on accelerators."""
    return 1 if jax.default_backend() == "cpu" else None


def _learn_item(learner: Learner, args):
    s, x, y, pred = args
    return learner.update(s, x, y, pred), x, y, pred


def _naive_check(options: AdaptiveOptions, s: AdaptiveState, det: DetectorState, e: Array, y: Array):
    """``naive_alarm``'s test on one item (module doc): ``(det, alarm, the naive mean after y)``."""
    first = s.n_seen == 0
    naive_mean = jnp.where(first, y, s.naive_mean)
    alarm = jnp.zeros((), bool)
    if options.naive_alarm is not None:
        last_y = jnp.where(first, y, s.last_y)
        lost = ~first & (e * e > jnp.maximum((y - naive_mean) ** 2, (y - last_y) ** 2))
        det = det._replace(losing=det.losing + (lost.astype(e.dtype) - det.losing) / NAIVE_MEMORY)
        # the share starts at 0: at least ln(1 - ρ)/ln(1 - 1/NAIVE_MEMORY) stable items before it can alarm
        alarm = det.losing > options.naive_alarm
    return det, alarm, naive_mean + (y - naive_mean) / NAIVE_MEMORY


def _left_out(options: AdaptiveOptions, s: AdaptiveState, x: Array, y: Array, z2: Array, stable: Array) -> Array:
    """``[]`` bool: the item is neither learned nor counted in a learning phase.

    With ``learn_shock=False`` an item that alarmed on its own (the detector's
    ``shock``; it stays out of the new window); with ``skip_repeats`` an item equal in ``x``
    and ``y`` to the one before (a stuck sensor's run adds one point to the
    window, not ``W`` copies of it).
    """
    out = jnp.zeros((), bool)
    shocked = None if options.learn_shock else options.detector.shock_test(s.detector, z2)
    if shocked is not None:
        out = stable & shocked
    if options.skip_repeats:
        out = out | ((s.n_seen > 0) & jnp.all(x == s.last_x) & (y == s.last_y))
    return out


def _phase_counts(s: AdaptiveState, alarm: Array, in_phase: Array, left_out: Array, x: Array, abs_err: Array):
    """The learning phase's counts after the item (an alarm starts a new phase): ``(n_phase, phase_moves,
    phase_abs_err, phase_n)``."""
    counted = in_phase & ~left_out
    n_phase = jnp.where(alarm, 0, s.n_phase) + counted
    moved = (s.n_seen == 0) | jnp.any(x != s.last_x)
    phase_moves = jnp.where(alarm, 0, s.phase_moves) + (counted & moved)
    phase_abs = jnp.where(alarm, 0.0, s.phase_abs_err) + jnp.where(in_phase, abs_err, 0.0)
    return n_phase, phase_moves, phase_abs, jnp.where(alarm, 0, s.phase_n) + in_phase


def _follows(options: AdaptiveOptions, s: AdaptiveState, x: Array, in_phase: Array):
    """``(follow [] bool, beyond [d] bool)``: a stable item to learn (``follow_inputs``), and the inputs beyond the
    learned range by more than the margin on this item.

    A stable window would extrapolate a trending input further with every item: it learns on. Per input:
    lagged values take turns at a new extreme, one item each, and are no trend.
    """
    if options.follow_inputs is None:
        return jnp.zeros((), bool), jnp.zeros((), bool)
    beyond = (x < s.x_lo - options.follow_inputs) | (x > s.x_hi + options.follow_inputs)
    return ~in_phase & jnp.any(beyond & s.was_beyond), beyond


def _learned_range(s: AdaptiveState, x: Array, learning: Array, alarm: Array, beyond: Array) -> dict:
    """``x_lo``, ``x_hi`` and ``was_beyond`` after the item; an alarm starts a window of new items, and their range."""
    lo, hi = jnp.where(alarm, jnp.inf, s.x_lo), jnp.where(alarm, -jnp.inf, s.x_hi)
    return dict(x_lo=jnp.where(learning, jnp.minimum(lo, x), lo), x_hi=jnp.where(learning, jnp.maximum(hi, x), hi),
                was_beyond=jnp.broadcast_to(beyond, s.was_beyond.shape))


def update_one(learner: Learner, options: AdaptiveOptions, s: AdaptiveState, x: Array, y: Array,
               pred: Prediction) -> AdaptiveState:
    """Run the state machine on the item, judging ``pred``, the prediction issued for it (thesis 5.3, Fig. 5.3).

    Stable: the detector (``options.detector.update``) sees the residual; an alarm switches
    to high error. Cold start / high error (and ``always_learn``, and with
    ``follow_inputs`` a stable item whose input trends out of the learned
    range): the inner learner learns the item; after ``phase_length`` items learned in the
    phase, the inner learner is tuned and the machine becomes stable with a
    fresh detector and the phase's mean ``|e|`` as the frozen reference
    (with ``min_moves``, a phase whose input moved on fewer items is followed
    by another learning phase instead).
    Learning and tuning run through :func:`~onlinejax.core.batching.cond_if_any`
    (lazy under ``vmap``). The item is assumed finite (the factory's
    boundary skips non-finite items, :func:`~onlinejax.core.base.skip_nonfinite`).

    Args:
      learner: the inner learner; options: :class:`AdaptiveOptions` (both static).
      s: :class:`AdaptiveState`; x: ``[d]``; y: ``[]``;
      pred: :func:`predict_one`'s prediction of ``y`` (the inner learner's),
        passed on to the inner learner's ``update`` when the item is learned.
    """
    inner_tune = learner.tune if (options.tune and learner.tune is not None) else None
    dt, e = pred.mean.dtype, y - pred.mean
    big = jnp.finfo(dt).max
    # a zero, tiny or non-finite predictive variance makes z² overflow or NaN: read it as the largest
    # surprise (it alarms), never as a NaN that would silence the detector for good
    z2 = jnp.nan_to_num(e * e / jnp.maximum(pred.var, jnp.finfo(dt).tiny), nan=big, posinf=big)
    abs_err, stable = jnp.abs(e), s.mode == STABLE
    det, alarm = options.detector.update(s.detector, z2, abs_err, s.reference)
    det, naive_alarm, naive_mean = _naive_check(options, s, det, e, y)
    alarm = stable & (alarm | naive_alarm)
    left_out = _left_out(options, s, x, y, z2, stable)
    det = keep_if(stable, det, s.detector)
    mode = jnp.where(alarm, HIGH_ERROR, s.mode)
    in_phase = mode != STABLE
    follow, beyond = _follows(options, s, x, in_phase)
    learning = (in_phase | options.always_learn | follow) & ~left_out
    inner = cond_if_any(partial(_learn_item, learner))(learning, (s.inner, x, y, pred))[0]
    n_phase, phase_moves, phase_abs, phase_n = _phase_counts(s, alarm, in_phase, left_out, x, abs_err)
    end = in_phase & (n_phase >= s.phase_length)
    # a window of a few distinct inputs (duplicated rows) is no model to freeze: the machine learns on
    # (a phase shorter than min_moves settles once every item moved)
    settle = end & (phase_moves >= jnp.minimum(options.min_moves, s.phase_length))
    due, pending = _tune_due(options, s, end if options.tune_unmoved else settle, in_phase, phase_moves,
                             inner_tune is not None)
    if inner_tune is not None and not options.defer_tune:
        inner = cond_if_any(inner_tune, max_batch=options.tune_batch)(due, inner)
    return AdaptiveState(
        inner=inner,
        mode=jnp.where(settle, STABLE, mode).astype(jnp.int32),
        last=jnp.where(end, TUNE, mode).astype(jnp.int32),
        n_phase=jnp.where(end, 0, n_phase),
        phase_length=s.phase_length,
        detector=keep_if(end, options.detector.init(dt), det),
        phase_abs_err=jnp.where(end, 0.0, phase_abs),
        phase_n=jnp.where(end, 0, phase_n),
        reference=jnp.where(end, phase_abs / jnp.maximum(phase_n, 1).astype(dt), s.reference),
        n_learned=s.n_learned + learning,
        n_tunes=s.n_tunes + (due & (inner_tune is not None)),
        n_alarms=s.n_alarms + alarm,
        n_seen=s.n_seen + 1,
        n_skipped=s.n_skipped,
        tune_pending=pending,
        naive_mean=naive_mean,
        last_y=y,
        last_x=x,
        phase_moves=jnp.where(end, 0, phase_moves),
        **_learned_range(s, x, learning, alarm, beyond),
    )


def _tune_due(options: AdaptiveOptions, s: AdaptiveState, tuned_end: Array, in_phase: Array, phase_moves: Array,
              tunes: bool) -> tuple[Array, Array]:
    """``(due, pending)``: whether the inner learner tunes on this item, and whether a tune waits after it.

    A phase's end tunes (``tuned_end``); a tune asked for from outside (a
    standardiser's rebase sets ``tune_pending``) runs on the next item, or
    without ``tune_unmoved`` once the window moved as a settled one does (a
    stable window did). With ``tune_every = k`` a tune waits for an item
    whose count is a multiple of ``k``.
    """
    ready = options.tune_unmoved | ~in_phase | (phase_moves >= jnp.minimum(options.min_moves, s.phase_length))
    want = tuned_end | (s.tune_pending & ready)
    if not tunes or options.tune_every == 1:
        return want, s.tune_pending & ~want
    # the phase's window stays as it is while the tune waits (stable items are not learned unless
    # follow_inputs follows one), unless an alarm starts a new phase first (or min_moves keeps the
    # machine learning); under vmap the streams' tunes then share items
    due = want & ((s.n_seen + 1) % options.tune_every == 0)
    return due, (want & ~due) | (s.tune_pending & ~ready)


def step_one(learner: Learner, options: AdaptiveOptions, s: AdaptiveState, x: Array,
             y: Array) -> tuple[AdaptiveState, Prediction]:
    """:func:`predict_one`, then :func:`update_one` with that prediction: ``(state, prediction)``."""
    pred = predict_one(learner, s, x)
    return update_one(learner, options, s, x, y, pred), pred


def learn_one(learner: Learner, options: AdaptiveOptions, s: AdaptiveState, x: Array, y: Array) -> AdaptiveState:
    """:func:`step_one` without the prediction."""
    return step_one(learner, options, s, x, y)[0]


def predict_one(learner: Learner, s: AdaptiveState, x: Array) -> Prediction:
    """The inner learner's prediction (the machine changes only what is learned)."""
    return learner.predict(s.inner, x)


def _check_detector(detector) -> None:
    """A TypeError unless ``detector`` is a :class:`~onlinejax.wrappers.detectors.Detector` (a name such as ``"cusum"``
    says which factory to call)."""
    if not isinstance(detector, Detector):
        raise TypeError(f"detector: expected a detector value, e.g. onlinejax.wrappers.detectors.cusum(...), "
                        f"onlinejax.wrappers.detectors.frozen(...) or "
                        f"onlinejax.wrappers.detectors.bocpd_detector(...), got {detector!r}")


#: The machine's own schedule (a :class:`~onlinejax.core.schedule.TunePlan` field left at ``None`` reads it): the
#: tune on the phase's last item, ``batch="auto"`` (:func:`_default_tune_batch`), the split step offered.
MACHINE_PLAN = TunePlan(every=1, batch="auto", split=True)


def _schedule(tune_plan) -> tuple[int, int | None, bool]:
    """``(tune_every, tune_batch, split)`` of ``tune_plan`` (``None`` fields: :data:`MACHINE_PLAN`'s);
    ``tune_batch`` ``None`` is the whole batch. A ``ValueError`` names the bad field (``tune_plan.every``)."""
    if tune_plan is None:
        tune_plan = MACHINE_PLAN
    if not isinstance(tune_plan, TunePlan):
        raise TypeError(f"tune_plan: expected a TunePlan or None, got {type(tune_plan).__name__}")
    every, batch, split = (own if v is None else v for v, own in zip(tune_plan.checked(), MACHINE_PLAN))
    if isinstance(batch, str):
        batch = _default_tune_batch() if batch == "auto" else None  # "all"
    return every, batch, split


def _checked_options(options) -> MachineOptions:
    """``options`` checked (:meth:`MachineOptions.checked`); a TypeError unless it is a :class:`MachineOptions`."""
    if options is None:
        return MachineOptions()
    return check_record(options, MachineOptions, "options").checked()


@describe_factory
def adaptive(learner: Learner, window: int, *, detector: Detector = CusumDetector(), tune: bool = True,
             tune_plan: TunePlan | None = MACHINE_PLAN, options: MachineOptions | None = MachineOptions()) -> Learner:
    """Wrap a windowed learner in the cold-start / stable / high-error / tune state machine.

    Args:
      learner: the windowed learner (``tune`` is used when it has one).
      window: its window ``W``: the default length of the cold-start and
        high-error phases (``init(window=)`` overrides it; it lives in the state).
      detector: the drift detector, a value of :mod:`onlinejax.wrappers.detectors` that
        carries its options: :func:`~onlinejax.wrappers.detectors.cusum` (default
        ``cusum()``: standardised, relative CUSUM, with a one-item ``shock``
        alarm), :func:`~onlinejax.wrappers.detectors.frozen` (the thesis's
        frozen-reference rule) or :func:`~onlinejax.wrappers.detectors.bocpd_detector`
        (Bayesian online changepoint detection on the residuals' scale); see the module doc.
      tune: call the learner's ``tune`` at the end of each learning phase.
      tune_plan: when the tunes run, a :class:`~onlinejax.core.schedule.TunePlan`
        (``None``, or a field left at ``None``: the machine's own,
        :data:`MACHINE_PLAN`). This is the schedule, not the model: the
        results do not depend on ``batch`` or ``split``, and the runners set
        it with their own ``tune_plan=`` (:func:`~onlinejax.core.schedule.with_tune_plan`).

        * ``every`` (default 1: on the phase's last item, the thesis's rule):
          run the tune that ends a learning phase only on the next item whose
          count (``n_seen``, from 1) is a multiple of ``every``. Meant for many
          vmapped streams on an accelerator, where the batch runs one tune
          program on every item on which any stream tunes: with ``every=k`` at
          most one item in ``k`` pays for it. While its tune waits a stream
          predicts with the previous hyperparameters; its window does not
          change (stable items are not learned, unless ``always_learn`` or
          ``follow_inputs``) unless an alarm starts a new phase first.
        * ``batch``: under ``vmap``, tune the streams that need it this many
          at a time (``"all"``: the whole batch whenever any stream tunes);
          see :func:`onlinejax.core.batching.cond_if_any`. Default ``"auto"``: 1
          when JAX's default backend is the CPU (there a vmapped tune of ``k``
          windows costs about ``k`` single tunes, and streams alarm at
          different items, so a tune event with ``k > 1`` mostly pays for
          streams that do not need it), ``"all"`` on accelerators (a GPU
          tunes the whole batch in about the time of one tune, while tuning
          the streams one after another would serialise thousands of tunes).
        * ``split`` (default ``True``): also give the learner a
          :class:`~onlinejax.core.base.DeferredStep` (``Learner.deferred``), so that
          progressive validation of one stream tunes between item loops
          instead of carrying the tune's branch in every step. Which is faster
          depends on the learner and the device (``benchmarks/state_machine.py``
          measures both); the results are the same to rounding.
      options: the machine's behavioural switches, a :class:`MachineOptions`
        (``always_learn``, ``naive_alarm``, ``learn_shock``, ``skip_repeats``,
        ``min_moves``, ``tune_unmoved``, ``follow_inputs``; ``None`` or the
        default ``MachineOptions()``: the thesis's machine), checked here.
    Returns:
      A learner with ``init(window=None, **inner_hyperparameters)`` (forwarded to
      ``learner.init``; a ``window`` given there is also forwarded and becomes the
      phase length, for learners whose window is an init value, e.g.
      :func:`~onlinejax.learners.linear.windowed_bayes_linreg` with ``capacity``), ``predict`` =
      the inner learner's, and ``learn`` / ``step`` running the state machine (:func:`step_one`; a non-finite item
      only counts in ``n_skipped``); see :func:`~onlinejax.wrappers.adaptive_state.wrap_state`, :func:`record_mode`.
    Raises:
      ValueError: naming the bad value (``window``, ``tune_plan.every``, ``options.min_moves``, ...).
      TypeError: ``detector``, ``tune_plan`` or ``options`` of the wrong type, or
        ``options.tune_unmoved`` not a bool.

    Example:
      >>> from onlinejax.learners.kernel_regression import kernel_regression
      >>> adaptive(kernel_regression(2, 32), 32, options=MachineOptions(naive_alarm=0.7)).description
      'adaptive(kernel_regression(2, 32), 32, options=MachineOptions(naive_alarm=0.7))'
    """
    W = check_int(window, "window", 1)
    _check_detector(detector)
    o = _checked_options(options)
    tune_every, tune_batch, split_tune = _schedule(tune_plan)
    opts = AdaptiveOptions(detector, tune, tune_batch, tune_every=tune_every, machine=o)

    # only tune passes through: the machine's phase counts and detector would still hold an item the inner
    # learner lost. The machine always has a tune (the identity without an inner one), of the state alone:
    # keyword options given to it would reach jit as traced values instead of raising a TypeError
    inner_tune = pass_through(learner)["tune"]
    tune_now = jax.jit((lambda s: inner_tune(s)) if inner_tune is not None else (lambda s: s))

    def build(o):
        return make_learner(init=partial(init, learner, W, detector=detector),
                            learn_one=partial(learn_one, learner, o),
                            predict_one=partial(predict_one, learner), n_features=learner.n_features,
                            cores=LearnerCores(step_one=partial(step_one, learner, o),
                                               update_one=partial(update_one, learner, o), tune=tune_now),
                            skip_nonfinite=True)

    out = build(opts)
    if not (split_tune and tune and learner.tune is not None):
        return out
    # the same machine with its tunes left to the caller: a runner's per-item loop then has no tune branch
    return out._replace(deferred=DeferredStep(build(opts._replace(defer_tune=True)).step, tune_due, out.tune))


#: :func:`~onlinejax.core.schedule.with_tune_plan` passes a runner's plan to this factory's ``tune_plan``
#: (the plan's fields that are set, over the machine's own).
adaptive.takes_tune_plan = True


def tune_due(before: AdaptiveState, after: AdaptiveState) -> Array:
    """Whether the item that took ``before`` to ``after`` is due a tune (a phase's end; see ``tune_every``)."""
    return after.n_tunes > before.n_tunes

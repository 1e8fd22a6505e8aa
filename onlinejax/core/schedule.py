"""When a learner's tunes run: a plan that belongs to the runner, not to the learner.

A state machine (:func:`~onlinejax.wrappers.adaptive.adaptive`) decides *that* its
inner learner needs a tune (a learning phase ended); a :class:`TunePlan`
decides *when* and *how* it runs:

* ``every``: the tune waits for the next item whose count is a multiple of
  ``every``, so that many vmapped streams share their tune items (on an
  accelerator the batch runs one tune program on every item on which any
  stream tunes);
* ``batch``: under ``vmap``, how many of the streams that need a tune are
  tuned together (``"auto"``: one at a time on a CPU, the whole batch on an
  accelerator; this changes the cost, not the results);
* ``split``: whether a runner that steps one stream may take the tune out of
  the per-item loop (``Learner.deferred``; also the same results).

The runners (:func:`~onlinejax.evaluation.progressive_validation`,
:func:`~onlinejax.evaluation.delayed_progressive_validation`,
:func:`~onlinejax.evaluation.evaluate_streams`,
:func:`~onlinejax.runner.run_grid`) take ``tune_plan=`` and apply it to
every state machine inside the learners they run, through
:func:`with_tune_plan`; a configuration therefore keeps its name and its
results whatever the device, and a runner chooses the schedule without
rebuilding learners by hand. A field left at ``None`` keeps what the learner
was built with (the thesis's rule by default: the tune on the phase's last
item); the factory itself takes the same record as its ``tune_plan=``.
"""
from __future__ import annotations

import inspect
import warnings
from typing import NamedTuple, Optional, Union

from .base import FactoryCall, Learner, check_int, map_nested
from .learner import _built_fields

__all__ = ["TunePlan", "with_tune_plan"]

#: ``TunePlan.batch`` values besides a positive int.
BATCH_WORDS = ("auto", "all")


class TunePlan(NamedTuple):
    """A runner's schedule for the state machines' tunes; a field left at ``None`` keeps the learner's own.

    Attributes:
      every: int >= 1: a due tune runs on the next item whose count (from 1)
        is a multiple of ``every`` (1: at the learning phase's end, the
        thesis's rule); while it waits the stream predicts with the previous
        hyperparameters.
      batch: int >= 1, ``"all"`` or ``"auto"``: under ``vmap``, the streams
        that need a tune are tuned this many at a time (``"all"``: the
        whole batch whenever any stream tunes; ``"auto"``: 1 on a CPU, ``"all"``
        on accelerators, read from JAX's default backend, or by
        :func:`~onlinejax.runner.run_grid` from its devices). The results do not depend on it.
      split: bool: offer the runner the machine's step with the tune taken
        out of the per-item loop (``Learner.deferred``); used by progressive
        validation of one stream. The results do not depend on it.

    Example:
      >>> TunePlan(every=32)
      TunePlan(every=32, batch=None, split=None)
    """

    every: Optional[int] = None
    batch: Union[int, str, None] = None
    split: Optional[bool] = None

    def checked(self) -> "TunePlan":
        """The plan with its values checked (``ValueError`` naming the field)."""
        every = None if self.every is None else check_int(self.every, "tune_plan.every", 1)
        batch = self.batch
        if isinstance(batch, str):
            if batch not in BATCH_WORDS:
                raise ValueError(f"tune_plan.batch: must be an int >= 1, 'all', 'auto' or None, got {batch!r}")
        elif batch is not None:
            batch = check_int(batch, "tune_plan.batch", 1)
        if self.split is not None and not isinstance(self.split, bool):
            raise ValueError(f"tune_plan.split: must be a bool or None, got {self.split!r}")
        return TunePlan(every, batch, self.split)

    def over(self, own: "TunePlan") -> "TunePlan":
        """``own`` with this plan's fields that are set: a runner's plan over a machine's own schedule.

        Example:
          >>> TunePlan(every=8).over(TunePlan(every=1, batch="auto", split=True))
          TunePlan(every=8, batch='auto', split=True)
        """
        return own._replace(**{k: v for k, v in self._asdict().items() if v is not None})


def _plans_tunes(factory) -> bool:
    """Whether a factory's learners are state machines that take a :class:`TunePlan` (its ``tune_plan=``)."""
    return bool(getattr(factory, "takes_tune_plan", False))


def _is_as_built(learner: Learner, call: FactoryCall) -> bool:
    """Whether ``learner`` is what ``call`` returned, not a record changed after it was built."""
    return call.built is not None and all(a is b for a, b in zip(_built_fields(learner), call.built))


def _planned(factory, args: tuple, kwargs: dict, plan: TunePlan) -> Optional[dict]:
    """The call's keyword arguments with ``plan`` over its ``tune_plan``, or ``None`` when it already follows
    ``plan`` (a field it leaves at ``None`` is the factory's default plan's)."""
    sig = inspect.signature(factory)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    default, given = sig.parameters["tune_plan"].default, bound.arguments["tune_plan"]
    own = given.over(default) if given is not None else default
    if plan.over(own) == own:
        return None
    return {**kwargs, "tune_plan": plan.over(own)}


def _rebuild(learner: Learner, plan: TunePlan) -> Learner:
    call = learner.factory_call
    if call is None or not _is_as_built(learner, call):
        # built by hand (make_learner) or changed after it was built: nothing to rebuild from
        if learner.tune is not None or learner.deferred is not None:
            warnings.warn(f"tune_plan: {learner!r} was not built by a public factory (or was changed after), "
                          "so a state machine inside it keeps its own schedule", RuntimeWarning, stacklevel=4)
        return learner
    changed = []

    def rebuilt(v):  # every learner inside the call's arguments (lists, tuples and dicts too)
        if not isinstance(v, Learner):
            return v
        new = _rebuild(v, plan)
        changed.append(new is not v)
        return new

    args, kwargs = map_nested(rebuilt, call.args), map_nested(rebuilt, call.kwargs)
    unchanged = not any(changed)
    planned = _planned(call.factory, args, kwargs, plan) if _plans_tunes(call.factory) else None
    if planned is not None:
        return call.factory(*args, **planned)
    return learner if unchanged else call.factory(*args, **kwargs)


def checked_plan(plan: Optional[TunePlan]) -> Optional[TunePlan]:
    """``plan`` with its values checked, or ``None`` when it is ``None`` or sets nothing.

    Raises:
      ValueError: naming ``tune_plan`` (not a :class:`TunePlan`) or the bad field.
    """
    if plan is None:
        return None
    if not isinstance(plan, TunePlan):
        raise ValueError(f"tune_plan: expected a TunePlan or None, got {type(plan).__name__}")
    plan = plan.checked()
    return None if plan == TunePlan() else plan


def with_tune_plan(learner: Learner, plan: Optional[TunePlan]) -> Learner:
    """``learner`` built again with ``plan``'s options in every state machine inside it.

    Every learner built by a public factory records its call
    (``Learner.factory_call``); the learners inside it (a wrapper's inner
    learner, a combination's members) are rebuilt first, and every
    :func:`~onlinejax.wrappers.adaptive.adaptive` call gets the plan's fields that are
    set over its own ``tune_plan`` (:meth:`TunePlan.over`). Learners without
    a state machine, machines that already follow the plan, and everything
    when ``plan`` is ``None`` or sets nothing come back unchanged; so do
    learners built by hand (:func:`~onlinejax.core.base.make_learner`) and records
    changed after they were built, with a ``RuntimeWarning`` when they have a
    ``tune`` (a state machine inside them cannot be reached). Equal calls return the same learner, so the runners' compiled
    programs are reused where every factory on the way had hashable
    arguments (one given an array builds a new learner, which compiles
    again). A learner given to a factory inside a generator is not reached
    (the factory used the generator up): pass lists.

    Args:
      learner: any :class:`~onlinejax.core.base.Learner`.
      plan: a :class:`TunePlan`, or ``None``.
    Returns:
      The rebuilt learner (its states are those of ``learner``: a plan
      changes no shape).

    Example:
      >>> from onlinejax import standardize
      >>> from onlinejax.wrappers.adaptive import adaptive
      >>> from onlinejax.learners.kernel_regression import kernel_regression
      >>> lrn = standardize(adaptive(kernel_regression(2, 32), 32))
      >>> with_tune_plan(lrn, TunePlan(every=8)).description
      "standardize(adaptive(kernel_regression(2, 32), 32, tune_plan=TunePlan(every=8, batch='auto', split=True)))"
      >>> with_tune_plan(lrn, None) is lrn
      True
    """
    plan = checked_plan(plan)
    return learner if plan is None else _rebuild(learner, plan)

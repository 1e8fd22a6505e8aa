"""Delayed progressive validation: labels arrive after a delay.

Blog ``000_1463b71a5ad3192a.txt`` ("Delayed progressive validation") and its
draft ``001_620d7686824b4ae0.txt``: each item is a *question* (``x`` arrives,
the learner predicts) at its question time and an *answer* (``y`` arrives, the
learner learns and the prediction made at question time is scored) at its
answer time. Delay 0 is plain progressive validation.

The schedule is built once on the host (NumPy), then one ``lax.scan`` runs
over the ``2n`` events. Tie rule (stable, and the blog's own): events are
ordered by time; at equal times **questions come before answers** (the blog
releases an answer only if it arrived *strictly* before the next departure),
and events of one kind at equal times keep item order. Predictions waiting
for their answer sit in a fixed-size buffer of ``n_slots`` slots (the largest
number ever pending), each item's slot assigned on the host.
"""
from __future__ import annotations

import heapq
from functools import partial
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..core.base import Learner, coerce_x, state_dtype, tree_repr
from ..core.schedule import TunePlan, with_tune_plan
from .metrics import Accumulator, score
from .progressive import missing_items

Array = jax.Array

__all__ = ["EventSchedule", "schedule_from_times", "schedule_from_delays", "DelayedResult", "delayed_progressive_validation"]

QUESTION, ANSWER = 0, 1


class EventSchedule(NamedTuple):
    """A merged question/answer timeline (host NumPy arrays).

    Attributes:
      kind: ``[2n]`` int32, 0 = question, 1 = answer.
      item: ``[2n]`` int32 item index.
      slot: ``[2n]`` int32 pending-buffer slot of the item.
      time: ``[2n]`` float64 event time.
      n_slots: largest number of simultaneously pending items.
    """

    kind: np.ndarray
    item: np.ndarray
    slot: np.ndarray
    time: np.ndarray
    n_slots: int

    @property
    def n_items(self) -> int:
        return len(self.kind) // 2

    def answer_order(self) -> np.ndarray:
        """``[n]`` items in the order their answers arrive (the order metrics are scored in)."""
        return self.item[self.kind == ANSWER]


def _seconds(v: np.ndarray, name: str) -> np.ndarray:
    """Datetimes as float seconds since the epoch; ``ValueError`` naming ``name`` for a NaT.

    NaT is the int64 minimum once cast, a finite number, so it is refused here, before the cast.
    """
    v = v.astype("datetime64[ns]")
    if np.any(np.isnat(v)):
        raise ValueError(f"{name}: contains NaT (not a time)")
    return v.astype(np.int64).astype(np.float64) / 1e9


def schedule_from_times(question_times, answer_times) -> EventSchedule:
    """Schedule from per-item question and answer times (e.g. taxi departure and arrival).

    Args:
      question_times: ``[n]`` numbers (or ``numpy.datetime64``).
      answer_times: ``[n]``, each ``>= `` its question time.
    Raises:
      ValueError: naming the argument, for mismatched lengths, non-finite
        times (NaN, inf, NaT) or an answer before its question.
    """
    q = np.asarray(question_times)
    a = np.asarray(answer_times)
    if np.issubdtype(q.dtype, np.datetime64) or np.issubdtype(a.dtype, np.datetime64):
        q, a = _seconds(q, "question_times"), _seconds(a, "answer_times")
    q = q.astype(np.float64)
    a = a.astype(np.float64)
    if q.ndim != 1 or q.shape != a.shape:
        raise ValueError(f"answer_times: expected shape {q.shape} like question_times, got {a.shape}")
    for v, name in ((q, "question_times"), (a, "answer_times")):
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{name}: must be finite (no NaN, inf or NaT)")
    if np.any(a < q):
        i = int(np.argmax(a < q))
        raise ValueError(f"answer_times: item {i} is answered ({a[i]}) before it is asked ({q[i]})")
    n = len(q)
    time = np.concatenate([q, a])
    kind = np.concatenate([np.zeros(n, np.int32), np.ones(n, np.int32)])
    item = np.concatenate([np.arange(n, dtype=np.int32)] * 2)
    order = np.lexsort((item, kind, time))  # last key is primary: time, then kind, then item
    kind, item, time = kind[order], item[order], time[order]
    slot = np.empty(2 * n, np.int32)
    free: list[int] = []
    where = np.empty(n, np.int32)
    n_slots = 0
    for e in range(2 * n):
        i = item[e]
        if kind[e] == QUESTION:
            if free:
                s = heapq.heappop(free)
            else:
                s = n_slots
                n_slots += 1
            where[i] = s
        else:
            s = where[i]
            heapq.heappush(free, s)
        slot[e] = s
    return EventSchedule(kind, item, slot, time, max(n_slots, 1))


def schedule_from_delays(delays) -> EventSchedule:
    """Schedule where item ``i`` is asked at time ``i`` and answered at ``i + delays[i]``.

    Args:
      delays: ``[n]`` non-negative delays in items (a constant delay ``d`` is
        ``np.full(n, d)``); ``0`` everywhere gives plain progressive validation.
    """
    d = np.asarray(delays, np.float64)
    if d.ndim != 1:
        raise ValueError(f"delays: expected a 1-d array, got shape {d.shape}")
    if np.any(~np.isfinite(d)) or np.any(d < 0):
        raise ValueError("delays: must be finite and >= 0")
    t = np.arange(len(d), dtype=np.float64)
    return schedule_from_times(t, t + d)


class DelayedResult(NamedTuple):
    """Attributes:
      state: final learner state (every label learned).
      predictions: the learner's prediction type (a ``Prediction``,
        ``StudentTPrediction``, ``MixturePrediction`` or ``StudentTMixture``) with ``[n]``-leading
        leaves, in item order, each made at the item's question time.
      metrics: final values of the accumulator (scored in answer order), or None.
    """

    state: Any
    predictions: Any
    metrics: Optional[dict]

    def __repr__(self) -> str:  # shapes and scalar values, not every element
        return tree_repr(self)


def _take(preds, idx):
    """Every leaf of a prediction pytree indexed along its leading (event or slot) axis."""
    return jax.tree_util.tree_map(lambda a: a[idx], preds)


@partial(jax.jit, static_argnums=(0, 1, 9))
def _run(learner: Learner, acc: Optional[Accumulator], state, X, Y, kind, item, slot, answer_idx, n_slots: int):
    # The pending buffer holds the whole prediction pytree (a Gaussian's mean and variance, a
    # Student-t's location, scale and degrees of freedom, a mixture's members), so each item is
    # scored at its answer by its own distribution, as progressive validation scores it.
    shapes = jax.eval_shape(learner.predict, state, X[0])
    pend = jax.tree_util.tree_map(lambda a: jnp.zeros((n_slots,) + a.shape, a.dtype), shapes)

    def question(c, i, s):
        st, pend = c
        p = learner.predict(st, X[i])
        pend = jax.tree_util.tree_map(lambda buf, v: buf.at[s].set(v), pend, p)
        return (st, pend), p

    def answer(c, i, s):
        st, pend = c
        issued = _take(pend, s)
        # learned with the prediction issued at its question: wrappers judge what was returned then
        return (learner.update(st, X[i], Y[i], issued), pend), issued

    def body(c, ev):
        k, i, s = ev
        return jax.lax.cond(k == QUESTION, question, answer, c, i, s)

    # unroll=2: a question/answer pair per loop iteration halves the loop overhead
    (state, _), preds = jax.lax.scan(body, (state, pend), (kind, item, slot), unroll=2)
    mvals = None
    if acc is not None:
        # score in answer order, outside the branchy loop (same result, far cheaper than
        # carrying the accumulator through the cond)
        answered = item[answer_idx]
        mvals = score(acc, Y[answered], _take(preds, answer_idx), ~missing_items(X[answered], Y[answered]))
    return state, preds, mvals


def delayed_progressive_validation(learner: Learner, state, X, Y, schedule: EventSchedule,
                                   metrics: Optional[Accumulator] = None, *,
                                   tune_plan: Optional[TunePlan] = None) -> DelayedResult:
    """Predict at question events, learn and score at answer events, in one ``lax.scan``.

    Args:
      learner: any :class:`~onlinejax.Learner` (static).
      state: initial learner state.
      X: ``[n, d]``; Y: ``[n]``.
      schedule: an :class:`EventSchedule` for ``n`` items.
      metrics: optional accumulator (e.g. :func:`~onlinejax.evaluation.metrics.prequential`)
        updated at each answer with the prediction made at its question.
      tune_plan: optional :class:`~onlinejax.core.schedule.TunePlan`: when the
        state machines inside ``learner`` run their tunes (:func:`~onlinejax.core.schedule.with_tune_plan`;
        ``None``: as the learner was built).
    Returns:
      :class:`DelayedResult`.

    Under ``vmap`` over streams, pass the schedule's arrays unbatched (one
    schedule shared by all streams) so the question/answer branch stays a real
    branch; per-stream schedules make ``vmap`` evaluate both branches.
    """
    learner = with_tune_plan(learner, tune_plan)
    dtype = state_dtype(state)
    X, _ = coerce_x(X, learner.n_features, dtype, "X", finite=False)
    Y = jnp.asarray(Y, dtype)
    n = schedule.n_items
    if X.ndim != 2 or X.shape[0] != n or Y.shape != (n,):
        raise ValueError(f"X, Y: expected shapes [{n}, {learner.n_features}] and [{n}] for a {n}-item schedule, "
                         f"got {tuple(X.shape)} and {tuple(Y.shape)}")
    answer_idx = np.nonzero(schedule.kind == ANSWER)[0].astype(np.int32)
    state, preds, mvals = _run(learner, metrics, state, X, Y, jnp.asarray(schedule.kind), jnp.asarray(schedule.item),
                               jnp.asarray(schedule.slot), jnp.asarray(answer_idx), int(schedule.n_slots))
    q = np.nonzero(schedule.kind == QUESTION)[0]
    order = np.argsort(schedule.item[q], kind="stable")
    idx = q[order]  # static host indices: event positions of questions, in item order
    return DelayedResult(state, _take(preds, idx), mvals)

"""Progressive validation: predict each item before learning it, in one ``lax.scan``.

Blog ``000_1463b71a5ad3192a.txt`` ("progressive validation") and thesis 6.1
(prequential evaluation): every item is first a test item, then a training
item, so the whole stream is used for both without leakage.
"""
from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

from ..core.base import Learner, Prediction, coerce_x, is_concrete, state_dtype, tree_nbytes, tree_repr
from ..core.batching import broadcast_unbatched
from ..core.schedule import TunePlan, with_tune_plan
from .metrics import score

Array = jax.Array

__all__ = [
    "ProgressiveResult",
    "progressive_validation",
    "running_metrics",
    "summarize",
]


class ProgressiveResult(NamedTuple):
    """Attributes: ``state`` (final learner state), ``predictions`` (``Prediction`` with ``[n]`` leaves),
    ``metrics`` (final values of the accumulator passed in, or None), ``records``
    (``record(state)`` after every item, leaves ``[n, ...]``, or None), ``n_skipped``
    (``[]`` int32: items whose ``x`` or ``y`` is not finite, e.g. missing values: neither
    learned nor scored)."""

    state: Any
    predictions: Prediction
    metrics: Optional[dict] = None
    records: Any = None
    n_skipped: Any = 0

    def __repr__(self) -> str:  # shapes and scalar values, not every element
        return tree_repr(self)


#: States up to this many bytes are stepped two items per loop iteration (``lax.scan(unroll=2)``): for a
#: small learner the loop's own overhead is a large share of an item's cost (``benchmarks/bayes_linreg.py``);
#: bigger states gain nothing and would only compile a body twice as long.
UNROLL_STATE_BYTES = 4096


def missing_items(X, Y) -> Array:
    """``[n]`` bool: items whose ``x`` (``X [n, d]``) or ``y`` (``Y [n]``) has a non-finite value.

    The learners skip such an item (:func:`~onlinejax.core.base.skip_nonfinite`) and the metrics leave it out
    (a non-finite ``x`` is predicted as NaN; a missing ``y`` after a finite ``x`` still has its prediction).
    """
    return ~(jnp.isfinite(Y) & jnp.all(jnp.isfinite(X), axis=-1))


@partial(jax.jit, static_argnums=(0, 1, 2))
def _scan(learner: Learner, acc, record, state, X, Y):
    present = ~missing_items(X, Y)
    n_skipped = jnp.sum(~present, dtype=jnp.int32)
    # a missing item is left out of every learner's score alike, also where its prediction is finite
    # (a climatology, or an abstaining kernel regression), so learners are compared on the same items
    scored = lambda preds: None if acc is None else score(acc, Y, preds, present)  # noqa: E731
    if learner.deferred is not None and record is None and X.shape[0] > 0:
        state, preds = _segments_or_scan(learner)(state, X, Y)
        return state, preds, scored(preds), None, n_skipped

    def body(s, xy):
        s, p = learner.step(s, *xy)
        return s, (p, record(s) if record is not None else None)

    unroll = 2 if tree_nbytes(state) <= UNROLL_STATE_BYTES else 1
    state, (preds, recs) = jax.lax.scan(body, state, (X, Y), unroll=unroll)
    return state, preds, scored(preds), recs, n_skipped


def _plain_scan(learner: Learner, state, X, Y):
    return jax.lax.scan(lambda s, xy: learner.step(s, *xy), state, (X, Y))


def _segments(learner: Learner, state, X, Y):
    """:func:`_plain_scan` with the learner's rare part (:class:`~onlinejax.core.base.DeferredStep`) between loops.

    An inner ``while_loop`` steps items with ``deferred.step`` until one
    leaves the rare part due (or the stream ends); the outer loop applies it
    and goes on. The per-item loop then carries no branch for the rare part.
    """
    d, n = learner.deferred, X.shape[0]
    shapes = jax.eval_shape(learner.step, state, X[0], Y[0])[1]
    preds = jax.tree_util.tree_map(lambda a: jnp.zeros((n,) + a.shape, a.dtype), shapes)
    not_due = jnp.zeros((), bool)

    def item(c):
        s, i, preds, _ = c
        t, p = d.step(s, X[i], Y[i])
        preds = jax.tree_util.tree_map(lambda buf, v: buf.at[i].set(v), preds, p)
        return t, i + 1, preds, jnp.asarray(d.due(s, t), bool)

    def segment(c):
        s, i, preds, due = jax.lax.while_loop(lambda c: (c[1] < n) & ~c[3], item, c)
        return jax.lax.cond(due, d.apply, lambda v: v, s), i, preds, not_due

    state, _, preds, _ = jax.lax.while_loop(lambda c: c[1] < n, segment,
                                            (state, jnp.zeros((), jnp.int32), preds, not_due))
    return state, preds


def _segments_or_scan(learner: Learner):
    """``run(state, X, Y) -> (state, predictions)``: :func:`_segments` for one stream, the plain scan under ``vmap``.

    Under ``vmap`` a ``while_loop`` runs until every stream's loop is done,
    so the streams would wait for each other's rare parts; there the plain
    scan (whose rare branch is a lazy :func:`~onlinejax.core.batching.cond_if_any`) is cheaper.
    """

    @custom_vmap
    def run(state, X, Y):
        return _segments(learner, state, X, Y)

    @run.def_vmap
    def _rule(axis_size, in_batched, state, X, Y):
        args = [broadcast_unbatched(a, b, axis_size) for a, b in zip((state, X, Y), in_batched)]
        out = jax.vmap(partial(_plain_scan, learner))(*args)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return run


def progressive_validation(learner: Learner, state, X, Y, metrics=None, record=None, *,
                           tune_plan: Optional[TunePlan] = None) -> ProgressiveResult:
    """Run predict-then-learn over a stream.

    Args:
      learner: any :class:`Learner` (a static argument: one compile per learner
        and shape; array hyperparameters live in ``state``).
      state: the learner's initial state.
      X: ``[n, d]`` inputs; Y: ``[n]`` targets. Missing values (NaN, or any
        non-finite value) are allowed: such an item is not learned (the
        learners skip it, :func:`~onlinejax.core.base.skip_nonfinite`) and not
        scored; ``n_skipped`` counts them. Its prediction is kept (NaN where
        ``x`` is missing; a forecast across a gap in ``y`` where it is not).
      metrics: optional accumulator from :mod:`onlinejax.evaluation.metrics`
        (static), scored in item order over the items not skipped (``metrics["n_nonfinite"]``
        counts the others whose prediction was not finite).
      record: optional static function ``record(state) -> pytree`` evaluated on
        the state after each item (e.g. ``lambda s: s.mode`` for
        :func:`onlinejax.wrappers.adaptive.adaptive`, or a combination's weights); pass
        the same function object to avoid recompiling.
      tune_plan: optional :class:`~onlinejax.core.schedule.TunePlan`: when the
        state machines inside ``learner`` run their tunes (:func:`~onlinejax.core.schedule.with_tune_plan`;
        ``None``: as the learner was built).
    Returns:
      :class:`ProgressiveResult` with the final state, the ``n`` predictions
      made *before* each item was learned, the metric values, the records and
      the number of items skipped.

    Example:
      >>> import numpy as np
      >>> from onlinejax.learners.linear import bayes_linreg
      >>> from onlinejax.evaluation import metrics
      >>> X = np.ones((100, 1)); Y = np.sin(np.arange(100.0)); Y[[10, 50]] = np.nan   # two gaps
      >>> res = progressive_validation(bayes_linreg(1), bayes_linreg(1).init(), X, Y, metrics.prequential())
      >>> int(res.n_skipped), bool(np.isfinite(res.metrics["mlpd"]))
      (2, True)

    A learner with a :class:`~onlinejax.core.base.DeferredStep` (``learner.deferred``,
    e.g. :func:`~onlinejax.wrappers.adaptive.adaptive`'s tunes) runs, when no
    ``record`` is asked for and the call is not vmapped, as item loops with
    the rare part applied between them: the same results as scanning
    ``learner.step``, without the rare part's branch in the per-item loop.

    Many streams and many hyperparameter values run as one program with
    :func:`~onlinejax.evaluation.evaluate_streams` (one flat ``vmap`` over the
    (stream, setting) pairs; a nested ``vmap`` would make every pair pay for
    every other pair's lazy branches)::

        res = evaluate_streams(learner, Xs, Ys, hyper={"alpha": alphas}, keep_predictions=True)
        res.metrics["smse"], res.predictions.mean, res.predictions.interval(0.9)    # [H, S], [H, S, n]
    """
    learner = with_tune_plan(learner, tune_plan)
    dtype = state_dtype(state)
    X, _ = coerce_x(X, learner.n_features, dtype, "X", finite=False)
    if X.ndim != 2:
        raise ValueError(f"X: expected shape [n, {learner.n_features}], got {tuple(X.shape)}")
    Y = jnp.asarray(Y, dtype)
    if Y.shape != X.shape[:1]:
        raise ValueError(f"Y: expected shape {X.shape[:1]}, got {tuple(Y.shape)}")
    return ProgressiveResult(*_scan(learner, metrics, record, state, X, Y))


def running_metrics(Y, predictions: Prediction, level: float = 0.95) -> dict:
    """Cumulative (running) MAE, RMSE and interval coverage after each item.

    Items whose target or prediction is not finite (missing values) are left
    out: the values after such an item are those before it.

    Args:
      Y: ``[..., n]`` targets; predictions: leaves ``[..., n]``.
      level: interval level for the coverage.
    Returns:
      dict of ``[..., n]`` arrays: ``mae``, ``rmse``, ``coverage`` (NaN until the first item scored).
    """
    Y = jnp.asarray(Y, predictions.mean.dtype)
    lo, hi = predictions.interval(level)
    ok = jnp.isfinite(Y) & jnp.isfinite(predictions.mean) & jnp.isfinite(lo) & jnp.isfinite(hi)
    err = jnp.where(ok, Y - predictions.mean, 0.0)
    k = jnp.cumsum(ok.astype(Y.dtype), -1)
    k = jnp.where(k > 0, k, jnp.nan)
    cover = (ok & (Y >= lo) & (Y <= hi)).astype(Y.dtype)
    return {
        "mae": jnp.cumsum(jnp.abs(err), -1) / k,
        "rmse": jnp.sqrt(jnp.cumsum(err * err, -1) / k),
        "coverage": jnp.cumsum(cover, -1) / k,
    }


def summarize(Y, predictions: Prediction, level: float = 0.95) -> dict:
    """Whole-stream MAE, RMSE, coverage and mean width of each prediction's own central ``level`` interval.

    Args:
      Y: ``[n]`` targets; predictions: leaves ``[n]`` (a Gaussian, Student-t or
        mixture prediction: its ``interval(level)`` is used).
      level: interval level in (0, 1).
    Returns:
      dict of Python floats: ``mae``, ``rmse``, ``coverage``, ``width`` over the items whose
      target and prediction are finite, and ``n_skipped`` (the others: missing values).
    """
    Y = np.asarray(Y, np.float64)
    mean = np.asarray(predictions.mean, np.float64)
    lo, hi = (np.asarray(a, np.float64) for a in predictions.interval(level))
    ok = np.isfinite(Y) & np.isfinite(mean) & np.isfinite(lo) & np.isfinite(hi)
    Y, mean, lo, hi = Y[ok], mean[ok], lo[ok], hi[ok]
    err = Y - mean
    nan = float("nan")
    return {
        "mae": float(np.mean(np.abs(err))) if ok.any() else nan,
        "rmse": float(np.sqrt(np.mean(err ** 2))) if ok.any() else nan,
        "coverage": float(np.mean((lo <= Y) & (Y <= hi))) if ok.any() else nan,
        "width": float(np.mean(hi - lo)) if ok.any() else nan,
        "n_skipped": int(np.size(ok) - np.count_nonzero(ok)),
    }

"""Combination rows from a grid's kept predictions: :func:`replay_combination`, without running the members again."""
from __future__ import annotations

import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..core.base import learnable
from ..wrappers.baseline import recorded
from ..wrappers.combination import replay
from .grid_plan import streams_sharding
from .grid_result import ROW_METRICS, GridResult
from ..evaluation.metrics import stable_mask
from ..evaluation.options import ReplayOptions, Scoring, checked_record
from ..evaluation.progressive import progressive_validation
from ..evaluation.streams import KEPT, compiled_scores

__all__ = ["replay_combination"]


def _stream_sharding(S: int):
    """The streams axis over this process's devices, as ``run_grid`` places it by default (or ``None``).

    Scored with that placement, a replay reuses the executable ``run_grid`` compiled for its members'
    predictions of the same shapes (:func:`~onlinejax.evaluation.streams.compiled_scores`).
    """
    devs = jax.local_devices()
    if jax.process_count() > 1 or S % len(devs):
        return None
    return streams_sharding(devs)


def _group_arrays(result: GridResult, members: Sequence[str], grp, stable_window: int):
    """A group's replay inputs placed as ``run_grid`` places streams: ``(arrays, sharding, place)``.

    ``arrays``: the members' kept means and variances ``[S, n, M]``, the targets and which items were learned
    ``[S, n]``, and the item weights (all, stable) ``[S, n]``.
    """
    S, n, _ = grp.X.shape
    missing = [m for m in members if (m, grp.names[0]) not in result.predictions]
    if missing:
        raise ValueError(f"members: no kept predictions for {missing}")
    # the members' own moments: a hedged member's learner, not its hedge (combine mixes the learners)
    means = np.stack([[result.predictions[(m, s)][3] for m in members] for s in grp.names]).transpose(0, 2, 1)
    vars = np.stack([[result.predictions[(m, s)][4] for m in members] for s in grp.names]).transpose(0, 2, 1)
    w_st = np.stack([stable_mask(n, stable_window, [c]) for c in grp.change_points]).astype(means.dtype)
    learned = np.asarray(learnable(np.asarray(grp.X, means.dtype), np.asarray(grp.Y, means.dtype)))
    shard = _stream_sharding(S)
    place = (lambda t: t) if shard is None else (lambda t: jax.device_put(t, shard))  # noqa: E731
    arrays = (means, vars, np.asarray(grp.Y, means.dtype), learned, np.ones((S, n), means.dtype), w_st)
    return place(arrays), shard, place


def replay_combination(result: GridResult, streams, name: str, members: Sequence[str], rule, *,
                       options: ReplayOptions = ReplayOptions(), scoring: Scoring = Scoring(),
                       family: str = "Combination") -> GridResult:
    """Add rows for a combination of already-evaluated members, from their kept predictions.

    The members of :func:`onlinejax.wrappers.combination.combine` learn the same
    whatever the weights, so the combination's predictions follow from the
    members' (:func:`onlinejax.wrappers.combination.replay`, tested equal to the
    learner) without compiling or running the members again. Rows get the
    same metrics as :func:`~onlinejax.runner.run_grid`'s; ``atpi`` is the members' summed
    ``atpi`` plus the replay's own time per item.

    Args:
      result: a :class:`GridResult` from ``run_grid(..., keep_predictions=True)``
        that has rows for every name in ``members``.
      streams: the stream groups ``result`` was computed on.
      name: row label; members: member row labels (order = weight order);
      rule: a :class:`onlinejax.wrappers.combination.WeightRule`.
      options: :class:`~onlinejax.evaluation.options.ReplayOptions`: the rest of the combination
        (``recalibrate``, ``correct``, ``after_spread`` as in :func:`~onlinejax.wrappers.combination.combine`)
        and an optional ``wrap`` of it (default: ``combine``'s defaults, unwrapped).
      scoring: :class:`~onlinejax.evaluation.options.Scoring` as in :func:`~onlinejax.runner.run_grid`
        (use the same ``level`` and ``stable_window``; a replay is progressive: ``delay`` must be ``None``).
      family: the rows' family label (default ``"Combination"``).
    Returns:
      A new :class:`GridResult` with the combination's rows (and predictions) appended.
    """
    options, scoring = checked_record(options, ReplayOptions, "options"), checked_record(scoring, Scoring, "scoring")
    if scoring.delay is not None:
        raise ValueError(f"scoring.delay: a replay learns every label at once, so it must be None, got {scoring.delay}")
    recalibrate, correct, after_spread = options.recalibrate, options.correct, options.after_spread
    wrapped = options.wrap(recorded(1)) if options.wrap is not None else None
    if result.predictions is None:
        raise ValueError("result: has no predictions; run run_grid(..., keep_predictions=True)")
    groups = [streams] if hasattr(streams, "names") else list(streams)
    atpis = {(r["learner"], r["stream"]): r["atpi"] for r in result.rows}
    rows, kept = list(result.rows), dict(result.predictions)

    @jax.jit
    def combined(means, vars, Y, learned):  # [S, n, M] -> predictions with leaves [S, 1, n]
        def one(mu, v, y, ok):
            p = replay(rule, mu, v, y, recalibrate=recalibrate, correct=correct, after_spread=after_spread,
                       learned=ok)[0]
            if wrapped is not None:
                st = wrapped.init(mean=p.mean, var=p.var, dtype=y.dtype)
                # the wrapper learns the items the combination learned: an input of 0 there, NaN elsewhere
                x = jnp.where(ok, 0.0, jnp.nan).astype(y.dtype)[:, None]
                p = progressive_validation(wrapped, st, x, y).predictions
            return jax.tree_util.tree_map(lambda a: a[None], p)

        return jax.vmap(one)(means, vars, Y, learned)

    for grp in groups:
        S, n, _ = grp.X.shape
        (means, vars, Y, learned, w_all, w_st), shard, place = _group_arrays(result, members, grp,
                                                                            scoring.stable_window)
        preds = place(combined(means, vars, Y, learned))  # compile outside the timing
        args = (Y, preds, learned, w_all, w_st)
        scores = compiled_scores(args, level=scoring.level, keep_moments=True, sharding=shard)[0]
        t0 = time.perf_counter()
        out = jax.block_until_ready(scores(Y, place(combined(means, vars, Y, learned)), *args[2:]))
        own = (time.perf_counter() - t0) / (S * n)
        out = {k: np.asarray(v)[:, 0] for k, v in out.items()}
        for i, s in enumerate(grp.names):
            atpi = own + sum(atpis[(m, s)] for m in members)
            row = {"learner": name, "family": family, **grp.properties[i]}
            row.update({m: float(out[m][i]) for m in ROW_METRICS})
            row.update(atpi=atpi, drmax=1.0 / atpi, compile_s=0.0)
            rows.append(row)
            kept[(name, s)] = tuple(out[k][i] for k in KEPT)
    return GridResult(rows, result.compile_seconds, kept, result.compile_stages, result.tune_plan)

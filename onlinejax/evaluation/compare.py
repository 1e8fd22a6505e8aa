"""One worked comparison: how the error estimate depends on the evaluation scheme.

Blog ``000_1463b71a5ad3192a.txt``: a temporal split and K-fold CV evaluate one
frozen model; progressive validation lets the model learn from every label
immediately (optimistic when labels arrive late); delayed progressive
validation lets it learn only when the label would really be known.
"""
from __future__ import annotations

import numpy as np

from ..core.base import Learner
from .crossval import kfold, temporal_split
from .delayed import delayed_progressive_validation, schedule_from_times
from .options import SplitOptions, checked_record
from .progressive import progressive_validation

__all__ = ["compare_evaluations"]


def _mae(a, b):
    return float(np.mean(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def _batch(learner, X, Y, tr, te):
    s = learner.learn(learner.init(), X[tr], Y[tr])  # mini-batch learning = the batch fit
    return _mae(Y[te], learner.predict(s, X[te]).mean)


def compare_evaluations(learner: Learner, X, Y, times=None, delay: float = 1.0, *,
                        splits: SplitOptions = SplitOptions(), verbose: bool = True) -> dict:
    """MAE of one learner under four evaluation schemes.

    Args:
      learner: any learner (used as a batch model for the split and K-fold).
      X: ``[n, d]``; Y: ``[n]`` in time order.
      times: ``[n]`` question times (default ``0..n-1``); the label of item
        ``i`` arrives at ``times[i] + delay`` for delayed validation.
      delay: label delay in the units of ``times``.
      splits: :class:`~onlinejax.evaluation.options.SplitOptions`: the K-fold's ``k`` folds
        (shuffled with ``seed``) and the temporal split's ``test_size`` (default 5, 0.25, 0).
      verbose: print the table.
    Returns:
      dict ``{scheme: MAE}``.
    """
    k, test_size, seed = checked_record(splits, SplitOptions, "splits")
    X = np.asarray(X)
    Y = np.asarray(Y)
    n = len(Y)
    t = np.arange(n, dtype=np.float64) if times is None else np.asarray(times, np.float64)
    (tr, te), = temporal_split(n, test_size)
    out = {"temporal split": _batch(learner, X, Y, tr, te)}
    out[f"{k}-fold CV (shuffled)"] = float(np.mean([_batch(learner, X, Y, a, b) for a, b in kfold(n, k, shuffle=True, seed=seed)]))
    out["progressive validation"] = _mae(Y, progressive_validation(learner, learner.init(), X, Y).predictions.mean)
    sch = schedule_from_times(t, t + delay)
    out[f"delayed progressive (delay {delay:g})"] = _mae(
        Y, delayed_progressive_validation(learner, learner.init(), X, Y, sch).predictions.mean)
    if verbose:
        w = max(len(s) for s in out)
        for s, v in out.items():
            print(f"  {s:{w}s}  MAE {v:.4f}")
    return out

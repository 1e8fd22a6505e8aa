"""The grid runner's inputs: the learner configurations and stream groups checked, configurations folded into programs.

:func:`~onlinejax.runner.run_grid` takes :class:`~onlinejax.core.registry.GridLearner` s
(or a mapping of makers) and :class:`~onlinejax.data.StreamGroup` s; configurations
that share a ``GridLearner.program`` (or differ only in ``init_kwargs``) become one
hyper-grid learner, compiled once, whose rows keep their own labels.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from ..data.grid import check_change_points
from ..core.registry import GridLearner


def _checked_learners(learners) -> list:
    if isinstance(learners, Mapping):
        learners = [GridLearner(k, k, v) for k, v in learners.items()]
    learners = list(learners)
    if not learners:
        raise ValueError("learners: none given")
    for g in learners:
        if not isinstance(g, GridLearner):
            raise TypeError(f"learners: expected GridLearner entries, got {type(g).__name__}")
    return learners


def _checked_streams(streams) -> list:
    """The stream groups of ``run_grid``'s ``streams``: one group or a non-empty list of non-empty groups.

    Raises:
      TypeError: naming ``streams``, for an entry that is not a stream group (e.g. a string).
      ValueError: naming ``streams``, for no groups, a group of no streams, streams of no items or a
        change point outside ``[-1, n)``.
    """
    if hasattr(streams, "names"):
        groups = [streams]
    elif isinstance(streams, (str, bytes)) or not isinstance(streams, Iterable):
        raise TypeError(f"streams: expected a StreamGroup or a list of them, got {type(streams).__name__}")
    else:
        groups = list(streams)
    if not groups:
        raise ValueError("streams: none given")
    for i, grp in enumerate(groups):
        if not (hasattr(grp, "names") and hasattr(grp, "X")):
            raise TypeError(f"streams: entry {i} is not a StreamGroup, got {type(grp).__name__}")
        if np.shape(grp.X)[0] == 0:
            raise ValueError(f"streams: group {i} has no streams")
        if np.shape(grp.X)[1] == 0:
            raise ValueError(f"streams: group {i} has streams of no items")
        try:
            check_change_points(grp.change_points, np.shape(grp.X)[0], np.shape(grp.X)[1])
        except ValueError as e:
            raise ValueError(f"streams: group {i}'s {e}") from None
    return groups


def _merge_programs(learners: list) -> tuple[list, dict]:
    """Fold ``init_kwargs`` / ``program`` configurations into hyper-grid learners (one program each).

    Returns the learners to compile and run (each with ``hyper`` and
    ``labels`` set where it stands for several rows) and ``{row label: index
    of its configuration in learners}`` for the table's row order.
    """
    out, groups, order = [], {}, {}
    for i, g in enumerate(learners):
        if g.hyper is not None and (g.init_kwargs is not None or g.program is not None):
            raise ValueError(f"{g.name}: give either hyper or init_kwargs/program, not both")
        if g.hyper:
            shapes = {np.shape(v) for v in g.hyper.values()}
            if len(shapes) != 1 or len(next(iter(shapes))) != 1:
                raise ValueError(f"hyper: every value must be a 1-d sequence of one length, got shapes {sorted(shapes)}")
            if g.labels is not None and len(g.labels) != next(iter(shapes))[0]:
                raise ValueError(f"{g.name}: labels must have one entry per hyper value")
        if g.program is None and g.init_kwargs is None:
            out.append(g)
            for h in range(len(next(iter(g.hyper.values()))) if g.hyper else 1):
                order[_label(g, h)] = i
            continue
        key = (g.program if g.program is not None else ("", g.name), g.family, g.score_from)
        if key not in groups:
            groups[key] = []
            out.append(key)
        groups[key].append(g)
        order[g.name] = i
    merged = []
    for item in out:
        if isinstance(item, GridLearner):
            merged.append(item)
            continue
        members = groups[item]
        keys = set(members[0].init_kwargs or {})
        for g in members:
            if set(g.init_kwargs or {}) != keys:
                raise ValueError(f"program {item[0]!r}: {g.name} has init_kwargs {sorted(g.init_kwargs or {})}, "
                                 f"{members[0].name} {sorted(keys)}")
        hyper = {k: [g.init_kwargs[k] for g in members] for k in sorted(keys)} or None
        if hyper is None and len(members) > 1:
            raise ValueError(f"program {item[0]!r}: its configurations need init_kwargs to tell them apart")
        merged.append(members[0]._replace(hyper=hyper, labels=[g.name for g in members], init_kwargs=None,
                                          program=None))
    return merged, order


def _label(gl: GridLearner, h: int) -> str:
    if gl.labels is not None:
        return gl.labels[h]
    if not gl.hyper:
        return gl.name
    return gl.name + "[" + ",".join(f"{k}={np.asarray(v)[h]:g}" for k, v in gl.hyper.items()) + "]"


"""Named features -> slots of the learner's fixed-width input vector (see :mod:`onlinejax.adapters._core`)."""
from __future__ import annotations

import warnings
from typing import Mapping, NamedTuple

import numpy as np


class _Plan(NamedTuple):
    """Slots for the names of one item or batch, not yet taken (:meth:`FeatureSlots.plan`)."""

    assign: dict  # new name -> slot
    ignored: tuple  # new names left without a slot
    width: int  # the input width the item needs


class FeatureSlots:
    """Names -> slots of a fixed-width input vector (see :mod:`onlinejax.adapters._core`).

    Slots are planned for an item (:meth:`plan`) and taken only once it was learned
    (:meth:`commit`); a prediction or a rejected item plans and takes nothing.

    Args:
      capacity: the width ``d``; ``None`` takes the number of features of the first item learned.
    """

    def __init__(self, capacity: int | None = None):
        if capacity is not None and (not isinstance(capacity, (int, np.integer)) or capacity < 1):
            raise ValueError(f"n_features: expected a positive int or None, got {capacity!r}")
        self.capacity = None if capacity is None else int(capacity)
        self.index: dict = {}
        self.ignored: set = set()
        self._warned = False

    @property
    def n_ignored(self) -> int:
        """How many distinct names arrived after every slot was taken (and the learner could not grow)."""
        return len(self.ignored)

    @staticmethod
    def _sorted(keys):
        try:
            return sorted(keys)
        except TypeError:  # mixed key types
            return sorted(keys, key=lambda k: (type(k).__name__, repr(k)))

    def plan(self, keys, grow: bool = False) -> _Plan:
        """Slots for the new names among ``keys``, in sorted order (the key order of a dict does not matter).

        A new name takes the next free slot; with every slot taken it widens the input (doubling
        the width) if ``grow``, else it is left without one. Nothing is changed here.
        """
        index, ignored_before = self.index, self.ignored
        new = [k for k in keys if k not in index and k not in ignored_before]
        if not new and self.capacity is not None:  # the common case: every name known
            return _Plan({}, (), self.capacity)
        new = list(dict.fromkeys(new))
        width = max(1, len(new)) if self.capacity is None else self.capacity
        assign, ignored, used = {}, [], len(self.index)
        for k in self._sorted(new):
            if used == width and grow:
                width *= 2
            if used < width:
                assign[k] = used
                used += 1
            else:
                ignored.append(k)
        return _Plan(assign, tuple(ignored), width)

    def commit(self, plan: _Plan) -> None:
        """Take the planned slots (once the item was learned); warn once about names left without one."""
        self.capacity = plan.width
        self.index.update(plan.assign)
        self.ignored.update(plan.ignored)
        if plan.ignored and not self._warned:
            self._warned = True
            warnings.warn(f"feature {plan.ignored[0]!r} arrived after all {self.capacity} input slots were taken; "
                          "it is ignored (pass n_features to reserve slots)", stacklevel=6)

    def _lookup(self, plan: _Plan | None):
        """``name -> slot or None``: the slots taken, and those ``plan`` would take."""
        if plan is None or not plan.assign:
            return self.index.get
        return lambda k: self.index.get(k, plan.assign.get(k))

    def vector(self, x: Mapping, dtype, plan: _Plan | None = None) -> np.ndarray:
        """``x`` (a dict of numbers) -> ``[width]``; a missing feature (absent, ``None``, NaN) is 0."""
        v = np.zeros(self.capacity if plan is None else plan.width, dtype)
        slot = self._lookup(plan)
        for k, val in x.items():
            i = slot(k)
            if i is not None and val is not None and val == val:  # val != val: NaN
                v[i] = val
        return v

    def matrix(self, columns, values: np.ndarray, dtype, plan: _Plan | None = None) -> np.ndarray:
        """Columns named ``columns`` of ``values: [b, len(columns)]`` -> ``[b, width]``; NaN is 0."""
        out = np.zeros((values.shape[0], self.capacity if plan is None else plan.width), dtype)
        slot = self._lookup(plan)
        for j, k in enumerate(columns):
            i = slot(k)
            if i is not None:
                out[:, i] = np.where(np.isnan(values[:, j]), 0.0, values[:, j])  # missing -> 0
        return out

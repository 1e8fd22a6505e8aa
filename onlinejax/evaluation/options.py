"""The evaluation entry points' options as values: small immutable records, each checked once.

:class:`Scoring` and :class:`GridLayout` (:func:`~onlinejax.runner.run_grid`),
:class:`StreamsOptions` and :class:`ItemWeights` (:func:`~onlinejax.evaluation.evaluate_streams`),
:class:`ReplayOptions` (:func:`~onlinejax.runner.replay_combination`) and :class:`SplitOptions`
(:func:`~onlinejax.evaluation.compare_evaluations`). In the style of optax and blackjax, each is passed as
one value (``run_grid(learners, streams, layout=GridLayout(chunk_size=64))``),
checked once by its ``checked`` method (a ``ValueError`` naming
``<argument>.<field>``), and equal records compare and hash equal.
:class:`ItemWeights` holds arrays (the items' weights), so it is a record but
not a hashable one.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import numpy as np

from ..core.checks import check_bool, check_int, check_record

__all__ = ["Scoring", "GridLayout", "StreamsOptions", "ItemWeights", "ReplayOptions", "SplitOptions",
           "checked_record"]


def checked_record(value, cls, name: str):
    """``value.checked(name)``; a ``TypeError`` naming ``name`` unless ``value`` is a ``cls``."""
    return check_record(value, cls, name).checked(name)


def _level(value, name: str) -> float:
    """``value`` as a float in (0, 1) (a level, a fraction); ``ValueError`` naming ``name`` otherwise."""
    try:
        ok = 0.0 < float(value) < 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok or isinstance(value, bool):
        raise ValueError(f"{name}: must be a number in (0, 1), got {value!r}")
    return float(value)


class Scoring(NamedTuple):
    """How a grid's rows are scored (:func:`~onlinejax.runner.run_grid`'s ``scoring=``): Python values.

    The defaults are progressive validation scored at a 95 % central interval,
    with the ``*_st`` metrics leaving out 128 items after the start and after each drift.

    Attributes:
      level: central interval level of ``icr`` / ``aiw`` (in (0, 1); default 0.95).
      stable_window: items after the start and after each drift left out of the ``*_st``
        metrics (an int >= 0, default 128; the same for every learner, so rows compare;
        thesis 6.1.2's SMSE-ST).
      delay: ``None`` (default) for progressive validation; an int ``k >= 1`` for delayed
        progressive validation with every label arriving ``k`` items late (0 is ``None``).
    """

    level: float = 0.95
    stable_window: int = 128
    delay: Optional[int] = None

    def checked(self, name: str = "scoring") -> "Scoring":
        """The record with its values checked and as Python numbers (``ValueError`` naming the field)."""
        delay = None if self.delay is None else (check_int(self.delay, f"{name}.delay", 0) or None)
        return Scoring(_level(self.level, f"{name}.level"),
                       check_int(self.stable_window, f"{name}.stable_window", 0), delay)


class GridLayout(NamedTuple):
    """How :func:`~onlinejax.runner.run_grid` places its work (``layout=``): not what it computes.

    Every field changes how the streams are cut, vmapped, sharded and compiled;
    the table is the same to rounding whatever the layout (with the same
    ``chunk_size``, sharded and unsharded tables agree to a few ulps). The
    defaults suit one host's CPU cores or accelerators.

    Attributes:
      chunk_size: streams *per device* per compiled call (an int >= 1; default ``None``: as many
        as fit in ``chunk_bytes`` of learner state). Each device runs the same program whatever
        the device count.
      chunk_bytes: bytes of learner states per device in one chunk when ``chunk_size`` is
        ``None`` (an int >= 1; default ``None``: 8 MiB on CPU devices, a core's last-level
        cache; 1 GiB on accelerators).
      vmap_bytes: inside a chunk, at most this many bytes of learner states are vmapped
        together; larger groups run one after another (``lax.map``). An int >= 1; default
        ``None``: 32 KiB on CPU devices, where ``GridLearner.vmap_bytes`` overrides it per
        configuration; no limit on accelerators, where the per-configuration values are ignored.
      devices: the devices to shard chunks over (default ``None``: ``jax.devices()``; one
        device means no sharding). After ``jax.distributed.initialize`` the default spans
        every process (each must then call ``run_grid`` with the same arguments);
        ``jax.local_devices()`` runs the whole grid in this process alone. Kept as a tuple.
      compile_workers: programs compiled at once in threads (an int >= 1; default ``None``:
        the CPU count). ``compile_s`` is then each program's own wall time, which overlaps others'.
      compile_batch: programs (learner × stream shape) compiled before they run (an int >= 1,
        default 32); then their executables are released and the next learners' are compiled
        (a learner is never split). Every compiled XLA:CPU program keeps its kernels in memory
        mappings, of which Linux allows a process 65,530 (``vm.max_map_count``).
    """

    chunk_size: Optional[int] = None
    chunk_bytes: Optional[int] = None
    vmap_bytes: Optional[int] = None
    devices: Optional[Sequence[Any]] = None
    compile_workers: Optional[int] = None
    compile_batch: int = 32

    def checked(self, name: str = "layout") -> "GridLayout":
        """The record with its values checked, its ints as Python ints and ``devices`` a tuple."""
        opt = lambda v, f, lo: None if v is None else check_int(v, f"{name}.{f}", lo)  # noqa: E731
        devices = self.devices
        if devices is not None:
            if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
                raise ValueError(f"{name}.devices: expected a sequence of devices, got {devices!r}")
            devices = tuple(devices)
            if not devices:
                raise ValueError(f"{name}.devices: no devices")
        return GridLayout(opt(self.chunk_size, "chunk_size", 1), opt(self.chunk_bytes, "chunk_bytes", 1),
                          opt(self.vmap_bytes, "vmap_bytes", 1), devices,
                          opt(self.compile_workers, "compile_workers", 1),
                          check_int(self.compile_batch, f"{name}.compile_batch", 1))


class StreamsOptions(NamedTuple):
    """How :func:`~onlinejax.evaluation.evaluate_streams` runs and scores (``options=``): Python values.

    Attributes:
      level: central interval level of ``icr`` / ``aiw`` (in (0, 1); default 0.95).
      delay: ``None`` (default: progressive validation) or an int ``k >= 1``: each item is
        learned ``k`` items after it is predicted.
      vmap_width: (stream, setting) pairs vmapped together (default ``None``: all of them;
        ``1``: one pair after another, so a learner's rare branches, e.g. a GP's tune, stay
        branches; ``k``: groups of about ``k``). Which is faster depends on the learner, the
        batch and the device; the results do not depend on it.
    """

    level: float = 0.95
    delay: Optional[int] = None
    vmap_width: Optional[int] = None

    def checked(self, name: str = "options") -> "StreamsOptions":
        """The record with its values checked and as Python numbers (``ValueError`` naming the field)."""
        return StreamsOptions(_level(self.level, f"{name}.level"),
                              None if self.delay is None else check_int(self.delay, f"{name}.delay", 1),
                              None if self.vmap_width is None else check_int(self.vmap_width,
                                                                             f"{name}.vmap_width", 1))


class ItemWeights(NamedTuple):
    """The items' weights in :func:`~onlinejax.evaluation.evaluate_streams`'s metrics (``weights=``).

    A record of arrays (not hashable): finite weights ``>= 0``, 0 leaving an item out.

    Attributes:
      all: ``[S, n]`` or ``[n]`` weights of the metrics (default ``None``: every item 1).
      stable: the same for the ``*_st`` metrics (default ``None``: ``all``), e.g.
        :func:`~onlinejax.evaluation.stable_mask`.
    """

    all: Optional[Any] = None
    stable: Optional[Any] = None



class ReplayOptions(NamedTuple):
    """The combination that :func:`~onlinejax.runner.replay_combination` replays (``options=``), besides its rule.

    The defaults are :func:`~onlinejax.wrappers.combination.combine`'s.

    Attributes:
      recalibrate: ``None`` (default) or the decay of the members' running variance
        recalibration, as :func:`~onlinejax.wrappers.combination.combine`'s ``recalibrate``.
      correct: ``None`` (default) or a :class:`~onlinejax.wrappers.combination.MeanCorrection`, as
        :func:`~onlinejax.wrappers.combination.combine`'s ``correct``.
      after_spread: as :func:`~onlinejax.wrappers.combination.combine`'s ``after_spread`` (default False).
      wrap: ``None`` (default) or a wrapper of the combination learner, e.g.
        ``lambda l: conformal(l, df=4.0)``: it is replayed over the combination's replayed
        predictions (:func:`onlinejax.wrappers.baseline.recorded`).
    """

    recalibrate: Optional[float] = None
    correct: Optional[Any] = None
    after_spread: bool = False
    wrap: Optional[Callable] = None

    def checked(self, name: str = "options") -> "ReplayOptions":
        """The record with its values checked (``ValueError`` naming the field)."""
        check_bool(self.after_spread, f"{name}.after_spread")
        if self.wrap is not None and not callable(self.wrap):
            raise ValueError(f"{name}.wrap: must be callable or None, got {self.wrap!r}")
        return self._replace(after_spread=bool(self.after_spread))


class SplitOptions(NamedTuple):
    """The batch schemes' splits in :func:`~onlinejax.evaluation.compare_evaluations` (``splits=``).

    An immutable, hashable record; the defaults are 5 shuffled folds and the last quarter held out.

    Attributes:
      k: folds of the shuffled K-fold cross-validation (an int >= 2, default 5;
        :func:`~onlinejax.evaluation.crossval.kfold`).
      test_size: the temporal split's test items, the last ones: a fraction in (0, 1) (default 0.25)
        or a count >= 1 (:func:`~onlinejax.evaluation.crossval.temporal_split`).
      seed: the K-fold shuffle's seed (an int >= 0, default 0).
    """

    k: int = 5
    test_size: Union[float, int] = 0.25
    seed: int = 0

    def checked(self, name: str = "splits") -> "SplitOptions":
        """The record with its values checked and as Python numbers (``ValueError`` naming the field)."""
        size = self.test_size
        if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
            size = check_int(size, f"{name}.test_size", 1)
        else:
            size = _level(size, f"{name}.test_size")
        return SplitOptions(check_int(self.k, f"{name}.k", 2), size, check_int(self.seed, f"{name}.seed", 0))

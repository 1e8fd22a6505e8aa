"""The grid runner: every learner on every stream, one compiled program per learner and stream shape.

:func:`run_grid` evaluates ``L`` learners on ``S`` streams with progressive
(or constant-delay progressive) validation and returns a tidy table, one row
per (learner, stream): the stream's properties, the prequential metrics of
:mod:`~onlinejax.evaluation.metrics` over all scored items, the same metrics
over the *stable* items (``*_st``: outside the first ``stable_window`` items
after the start and after a drift, thesis 6.1.2's SMSE-ST), and the time per
item.

How the work is laid out (``benchmarks/grid.py`` measures it):

* **One compile per learner and stream shape** — or per ``GridLearner.program``:
  configurations that differ only in their ``init_kwargs`` share one
  program and are vmapped like a hyperparameter grid. Compiling a program
  costs far more than running a stream through it. Streams are grouped by
  ``(n, d)`` (:class:`~onlinejax.data.StreamGroup`), a group is cut into
  fixed-size chunks (the last one padded by repeating its last stream, the
  padding dropped from the table), and each chunk calls the same
  ahead-of-time compiled executable.
* **vmap over streams** (and over an optional grid of array
  hyperparameters, ``GridLearner.hyper``) inside the chunk, through
  :func:`~onlinejax.evaluation.streams.streams_program`: one
  ``lax.scan`` over items whose body handles every stream at once — for
  learners whose states are small. At most ``vmap_bytes`` of states are
  vmapped together; larger groups run one after another (``lax.map``),
  because a vmapped step touches every state of the group and, once they
  outgrow the core's caches, streams them from memory on every item. The
  groups are made even (the last padded with copies of one pair):
  ``lax.map`` compiles a remainder group as a second copy of the program.
* **Chunk size from the state size.** A vmapped batch of states that
  outgrows the last-level cache runs slower per item, so by default a chunk
  holds at most ``chunk_bytes`` (8 MiB) of learner states per device.
* **Accelerators.** On GPUs (any non-CPU devices) the byte limits above,
  which are CPU cache sizes, give way: a chunk holds a whole group (up to
  1 GiB of states per device) and every stream in it is vmapped, since a
  GPU runs the batch's arithmetic in parallel and pays mostly per kernel
  launch, once per item whatever the batch.
* **Devices.** With several devices (GPUs, or CPU host devices via
  ``XLA_FLAGS=--xla_force_host_platform_device_count=N``) each chunk is split
  across a 1-d :class:`jax.sharding.Mesh` with :func:`jax.shard_map`: every
  device runs its share of the streams and nothing is communicated.
* **Several processes** (hosts, after ``jax.distributed.initialize``, e.g.
  :func:`~onlinejax.evaluation.runtime.initialize_distributed`;
  ``docs/multihost.md``). ``jax.devices()`` then lists every process's
  devices and the mesh spans them all: every process runs the same
  program on the same chunks, reads and places only its own devices' streams
  (:func:`jax.make_array_from_callback`); after each chunk a small compiled
  all-gather gives every process the chunk's per-stream metrics, so every
  process builds the whole table (the same on each; a chunk's time is the
  slowest process's, the gather left out).

Timing: ``atpi`` (average time per item, thesis eq. 6.4) is the wall time of
the chunk's compiled call divided by the items it processed (streams ×
items) — the amortised cost per item when streams are batched, compile time
excluded (reported separately as ``compile_s``); ``drmax = 1/atpi``.
"""
from __future__ import annotations

import csv
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tqdm import tqdm

from ..base import Learner, check_int, default_float_dtype, tree_nbytes
from ..baseline import recorded
from ..combination import replay
from ..hedge import inner_prediction
from ..data.grid import check_change_points
from ..registry import GridLearner
from ..schedule import TunePlan, checked_plan, with_tune_plan
from .metrics import METRICS, prequential, stable_mask
from .progressive import progressive_validation
from .runtime import one_blas_thread
from .streams import KEPT, hyper_states, stream_scores, streams_program

__all__ = ["GridResult", "run_grid", "replay_combination"]

#: Metrics of every row (``*_st`` are the same over stable items).
ROW_METRICS = METRICS + ("skill", "mlpd_clim", "mlpd_from", "n_nonfinite") + tuple(
    f"{m}_st" for m in METRICS + ("skill", "mlpd_clim", "mlpd_from", "n_nonfinite"))


class GridResult(NamedTuple):
    """The table: ``rows`` (one dict per learner × stream), plus per-compile timings.

    ``compile_seconds``: ``{(configuration, n, d): seconds}`` from tracing to a compiled program;
    ``compile_stages``: the same keys, ``(trace, lower, XLA compile)`` seconds of this process
    (programs compile several at a time in threads, so a stage's wall time includes waiting for
    the interpreter while another program traces).
    ``predictions`` (only with ``run_grid(keep_predictions=True)``):
    ``{(row learner label, stream name): (mean [n], var [n], pit [n], inner mean [n], inner var [n])}``
    NumPy arrays (:data:`KEPT`); ``pit`` is the prediction's own CDF at the target (Gaussian, Student-t
    or mixture); the inner moments are those of the learner inside a climatology hedge
    (:func:`~onlinejax.hedge.inner_prediction`), which :func:`replay_combination` mixes, else the
    prediction's own.
    ``tune_plan``: the :class:`~onlinejax.schedule.TunePlan` the rows ran under (checked, ``batch="auto"``
    read from the devices), or ``None`` (each configuration as it was built).
    """

    rows: list
    compile_seconds: dict
    predictions: dict | None = None
    compile_stages: dict | None = None
    tune_plan: TunePlan | None = None

    def __repr__(self) -> str:
        learners = len({r["learner"] for r in self.rows})
        streams = len({r.get("stream") for r in self.rows})
        kept = "" if self.predictions is None else f", predictions of {len(self.predictions)} rows"
        return (f"GridResult({len(self.rows)} rows: {learners} learners x {streams} streams, "
                f"{len(self.columns())} columns{kept}; .summary(), .to_pandas(), .to_csv(path))")

    def columns(self) -> list:
        """Column names of the table, in first-seen order over the rows."""
        cols: list = []
        for r in self.rows:
            cols += [k for k in r if k not in cols]
        return cols

    def to_pandas(self):
        """A ``pandas.DataFrame`` (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=self.columns())

    def to_csv(self, path) -> str:
        """Write the table as CSV and return the path."""
        cols = self.columns()
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(self.rows)
        return str(path)

    def summary(self, by: str = "family", metrics: Sequence[str] = ("smse", "smse_st", "icr", "saiw", "atpi"),
                how: str = "mean", as_frame: bool | None = None):
        """Aggregate the metrics per ``by`` value (thesis Fig. 6.4: mean over streams).

        Non-finite values are left out of the aggregate; ``nonfinite_rows`` counts the rows left out.

        Args:
          by: the row key to group by (``"family"``, ``"learner"``, ``"d"``, ...).
          metrics: the columns to aggregate (:data:`ROW_METRICS`, ``"atpi"``, ...).
          how: ``"mean"`` or ``"median"``.
          as_frame: ``None``: a ``pandas.DataFrame`` when pandas is installed, else a list of
            dicts; ``True``: a DataFrame (``ImportError`` without pandas); ``False``: the list.
        Returns:
          One row per group: ``by``, ``rows`` (rows in the group), the metrics, ``nonfinite_rows``.
        """
        if how not in ("mean", "median"):
            raise ValueError(f"how: must be 'mean' or 'median', got {how!r}")
        out = self._summary_rows(by, tuple(metrics), how)
        if as_frame is False:
            return out
        try:
            import pandas as pd
        except ImportError:
            if as_frame:
                raise
            return out
        return pd.DataFrame(out, columns=[by, "rows", *metrics, "nonfinite_rows"])

    def relative_to(self, reference: str, metrics: Sequence[str] = ("crps", "crps_st")) -> "GridResult":
        """The table with ``<metric>_rel`` columns: each row's metric over the ``reference`` learner's on its stream.

        E.g. ``relative_to("Climatology")`` gives ``crps_rel``, the CRPS as a fraction
        of the Student-t climatology's on the same stream and items (1 is no better
        than the climatology; scale-free, so medians over streams of any scale
        compare). Rows of streams the reference did not run get NaN.

        Raises:
          ValueError: naming ``reference`` when no row has that learner, or ``metrics`` for a missing column.
        """
        base = {r.get("stream"): r for r in self.rows if r["learner"] == reference}
        if not base:
            raise ValueError(f"reference: no rows of learner {reference!r}; the learners are "
                             f"{sorted({r['learner'] for r in self.rows})}")
        missing = [m for m in metrics if m not in self.rows[0]]
        if missing:
            raise ValueError(f"metrics: {missing} are not columns")
        rows = []
        for r in self.rows:
            ref = base.get(r.get("stream"))
            rel = {f"{m}_rel": (r[m] / ref[m] if ref is not None and ref[m] > 0 else float("nan")) for m in metrics}
            rows.append({**r, **rel})
        return self._replace(rows=rows)

    def _summary_rows(self, by: str, metrics: tuple, how: str) -> list:
        if self.rows and by not in self.rows[0]:
            raise ValueError(f"by: {by!r} is not a column; the columns are {self.columns()}")
        agg = {"mean": np.mean, "median": np.median}[how]
        groups: dict = {}
        for r in self.rows:
            groups.setdefault(r[by], []).append(r)
        out = []
        for k, rs in groups.items():
            row = {by: k, "rows": len(rs)}
            bad = 0
            for m in metrics:
                v = np.asarray([r[m] for r in rs], np.float64)
                ok = np.isfinite(v)
                bad = max(bad, int((~ok).sum()))
                row[m] = float(agg(v[ok])) if ok.any() else float("nan")
            row["nonfinite_rows"] = bad
            out.append(row)
        return out


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


def _state_bytes(learner: Learner, dtype) -> int:
    return tree_nbytes(jax.eval_shape(lambda: learner.init(dtype=dtype)))


#: run_grid's defaults on CPU devices: states vmapped together, and states per chunk (last-level cache).
_CPU_VMAP_BYTES, _CPU_CHUNK_BYTES = 32 << 10, 8 << 20
#: states per chunk on accelerators (every stream of a chunk vmapped): a whole grid group at once.
_ACCELERATOR_CHUNK_BYTES = 1 << 30


def _all_cpu(devices) -> bool:
    """Whether every device is a CPU (the byte limits of :func:`run_grid` then apply)."""
    return all(dv.platform == "cpu" for dv in devices)


def _vmap_width(state_bytes: int, vmap_bytes: int) -> int:
    """(stream, hyperparameter) pairs vmapped together: ``vmap_bytes`` of states, at least one."""
    return max(1, vmap_bytes // max(state_bytes, 1))


def _default_chunk(state_bytes: int, n_streams: int, n_dev: int, chunk_bytes: int) -> int:
    """Streams per device per call: at most ``chunk_bytes`` of states, the calls evened out.

    The last call is padded with copies of the last stream, which cost as
    much as real ones; evening the calls out keeps the padding below one
    stream per device and call (216 streams over two devices, at most 41 per
    device: 41, 41, 41 → 246 slots; evened 36, 36, 36 → 216).
    """
    need = -(-n_streams // n_dev)
    cap = max(1, chunk_bytes // max(state_bytes, 1))
    calls = -(-need // cap)
    return -(-need // calls)


class _Program(NamedTuple):
    """One compiled (configuration, stream shape) program and what its rows need."""

    learner: Learner
    states: object
    labels: list
    chunk: int
    executable: object
    compile_s: float
    stages: tuple = ()  # this process's (trace, lower, XLA compile) seconds


def _spans_processes(devices: list) -> bool:
    """Whether ``devices`` belong to several processes (after ``jax.distributed.initialize``).

    Raises:
      ValueError: they leave out some process (every process runs the same
        program), or all belong to another process.
    """
    procs = {dv.process_index for dv in devices}
    if len(procs) == 1:
        if procs != {jax.process_index()}:
            raise ValueError(f"devices: all belong to process {procs.pop()}, not this one ({jax.process_index()})")
        return False
    if procs != set(range(jax.process_count())):
        raise ValueError(f"devices: span processes {sorted(procs)}; a multi-process grid needs devices of "
                         f"all {jax.process_count()}")
    return True


def _tune_plan_for(tune_plan: TunePlan | None, on_cpu: bool) -> TunePlan | None:
    """The plan checked, with ``batch="auto"`` read from the grid's devices (not JAX's default backend)."""
    tune_plan = checked_plan(tune_plan)
    if tune_plan is None:
        return None
    return tune_plan._replace(batch=1 if on_cpu else "all") if tune_plan.batch == "auto" else tune_plan


class _Plan:
    """The grid's fixed options and the host-side data every program shares (converted once)."""

    def __init__(self, groups, *, level, stable_window, delay, chunk_size, chunk_bytes, devices, dtype,
                 keep_predictions, vmap_bytes, tune_plan):
        self.groups, self.level, self.stable_window, self.delay = groups, level, stable_window, delay
        # 0 is refused, not read as "the default" (None)
        self.chunk_size = None if chunk_size is None else check_int(chunk_size, "chunk_size", 1)
        self.dtype = np.dtype(dtype)
        self.devices = list(devices) if devices is not None else jax.devices()
        # a GPU runs a whole group's steps in parallel and launches each kernel once per item, so there
        # every stream of a chunk is vmapped; the per-configuration byte limits are CPU cache sizes
        self.on_cpu = _all_cpu(self.devices)
        self.keep = keep_predictions
        self.tune_plan = _tune_plan_for(tune_plan, self.on_cpu)
        self.vmap_bytes = vmap_bytes if vmap_bytes is not None else (_CPU_VMAP_BYTES if self.on_cpu else None)
        self.chunk_bytes = chunk_bytes if chunk_bytes is not None else (
            _CPU_CHUNK_BYTES if self.on_cpu else _ACCELERATOR_CHUNK_BYTES)
        self.multi = _spans_processes(self.devices)
        self.mesh = Mesh(np.asarray(self.devices), ("streams",)) if len(self.devices) > 1 else None
        self.shard = NamedSharding(self.mesh, P("streams")) if self.mesh is not None else None
        self.replicated = NamedSharding(self.mesh, P()) if self.multi else None
        self._all_gather = jax.jit(lambda t: t, out_shardings=self.replicated) if self.multi else None
        self._host, self._stable = {}, {}

    def weights(self, gl: GridLearner, grp) -> tuple[np.ndarray, np.ndarray]:
        """``[S, n]`` metric weights: the scored items, and the scored stable items."""
        S, n, _ = grp.X.shape
        if id(grp) not in self._stable:
            self._stable[id(grp)] = np.stack([stable_mask(n, self.stable_window, [c])
                                              for c in grp.change_points])
        w_all = np.zeros((S, n), self.dtype)
        w_all[:, min(gl.score_from, n):] = 1
        return w_all, w_all * self._stable[id(grp)]

    def chunk_args(self, grp, chunk: int, lo: int, w_all, w_st) -> tuple:
        """Streams ``lo .. lo + chunk`` (padded by repeating the last), placed on the devices."""
        if self.multi:
            return self._global_args(grp, chunk, lo, w_all, w_st)
        # numpy converts and indexes: a jnp conversion per chunk compiles a conversion program per call
        if id(grp) not in self._host:
            self._host[id(grp)] = (np.asarray(grp.X, self.dtype), np.asarray(grp.Y, self.dtype))
        X, Y = self._host[id(grp)]
        idx = np.minimum(np.arange(lo, lo + chunk), X.shape[0] - 1)
        args = (X[idx], Y[idx], w_all[idx], w_st[idx])
        if self.shard is not None:
            return tuple(jax.device_put(a, self.shard) for a in args)
        return tuple(map(jnp.asarray, args))

    def _global_args(self, grp, chunk: int, lo: int, w_all, w_st) -> tuple:
        """:meth:`chunk_args` over several processes: global ``[chunk, ...]`` arrays sharded over the mesh.

        This process reads, converts and places only the rows of its own
        devices (one contiguous slice of ``grp.X`` / ``grp.Y`` per device), so
        ``X``, ``Y`` may be any array-like with ``shape`` and slicing along the
        streams, e.g. a ``np.memmap`` or an HDF5 dataset, read in part.
        """
        if id(grp) not in self._host:  # a jax.Array is copied to the host once; other arrays are sliced
            self._host[id(grp)] = tuple(np.asarray(a) if isinstance(a, jax.Array) else a for a in (grp.X, grp.Y))
        S = grp.X.shape[0]

        def place(src):
            def rows(index):  # one local device's block of the chunk: index[0] slices the chunk's streams
                a, b, _ = index[0].indices(chunk)
                idx = np.minimum(np.arange(lo + a, lo + b), S - 1)  # past the end: the last stream again
                return np.asarray(src[idx[0]: idx[-1] + 1], self.dtype)[idx - idx[0]]

            return jax.make_array_from_callback((chunk,) + tuple(src.shape[1:]), self.shard, rows)

        return tuple(place(a) for a in (*self._host[id(grp)], w_all, w_st))

    def replicate(self, tree):
        """``tree``'s arrays (the same on every process) as global arrays replicated over the mesh's devices."""
        def one(a):
            return jax.make_array_from_single_device_arrays(
                a.shape, self.replicated, [jax.device_put(a, dv) for dv in self.replicated.addressable_devices])

        return jax.tree_util.tree_map(one, tree)

    def gather(self, out: dict) -> dict:
        """A chunk's outputs ``{name: [chunk, H, ...]}`` as NumPy arrays; over several processes all-gathered first.

        The all-gather is one small compiled program per output shape (after
        the timed call): every process then holds every stream's metrics.
        """
        if self.multi:
            out = self._all_gather(out)
        return jax.tree_util.tree_map(np.asarray, out)

    def slowest(self, seconds: Sequence[float]) -> np.ndarray:
        """Per entry, the largest of the processes' ``seconds`` (its own with one process), float64."""
        secs = np.asarray(seconds, np.float64)
        if not self.multi:
            return secs
        # one row per mesh device, each device's the seconds of its process, gathered like the metrics
        # (as uint32 pairs: without x64 JAX would round float64 to float32)
        bits, D = secs.view(np.uint32), len(self.devices)
        rows = jax.make_array_from_callback((D, bits.size), self.shard,
                                            lambda index: np.tile(bits, (len(range(D)[index[0]]), 1)))
        return np.asarray(self._all_gather(rows)).view(np.float64).max(0)

    def build(self, gl: GridLearner, grp) -> _Program:
        """Trace, lower and compile one configuration for one stream shape."""
        S, n, d = grp.X.shape
        learner = with_tune_plan(gl.make(d), self.tune_plan)
        if learner.n_features != d:
            raise ValueError(f"{gl.name}: make({d}) returned a learner for {learner.n_features} inputs")
        states = hyper_states(learner, gl.hyper, self.dtype)
        H = jax.tree_util.tree_leaves(states)[0].shape[0]
        n_dev = len(self.devices)
        one = _state_bytes(learner, self.dtype)
        per_dev = self.chunk_size or _default_chunk(one * H, S, n_dev, self.chunk_bytes)
        chunk = check_int(per_dev, "chunk_size", 1) * n_dev
        vb = self.vmap_bytes
        if gl.vmap_bytes is not None:
            vb = check_int(gl.vmap_bytes, f"{gl.name}: vmap_bytes", 1) if self.on_cpu else vb
        fn = streams_program(learner, level=self.level, delay=self.delay, keep_predictions=self.keep,
                             width=None if vb is None else _vmap_width(one, vb))
        if self.mesh is not None:  # per-device work is independent: nothing to communicate
            fn = jax.shard_map(fn, mesh=self.mesh, in_specs=(P(),) + (P("streams"),) * 4, out_specs=P("streams"),
                               check_vma=False)
        states = self.replicate(states) if self.multi else states
        t0 = time.perf_counter()
        traced = jax.jit(fn).trace(states, *self.chunk_args(grp, chunk, 0, *self.weights(gl, grp)))
        t1 = time.perf_counter()
        lowered = traced.lower()
        t2 = time.perf_counter()
        exe = lowered.compile()
        t3 = time.perf_counter()
        return _Program(learner, states, [_label(gl, h) for h in range(H)], chunk, exe, t3 - t0,
                        (t1 - t0, t2 - t1, t3 - t2))


def _program_keys(learners: list, groups: list) -> dict:
    """``{configuration name: [(name, n, d), ...]}``: one program per configuration and stream shape."""
    keys_of, seen = {}, set()
    for gl in learners:
        keys_of[gl.name] = []
        for grp in groups:
            key = (gl.name, *grp.X.shape[1:])
            if key not in seen:
                seen.add(key)
                keys_of[gl.name].append(key)
    return keys_of


def _compile_batches(learners: list, keys_of: dict, compile_batch: int) -> list:
    """Consecutive configurations whose programs together stay within ``compile_batch`` (one may exceed it alone)."""
    batches, cur = [], []
    for gl in learners:
        if cur and sum(len(keys_of[g.name]) for g in cur) + len(keys_of[gl.name]) > compile_batch:
            batches.append(cur)
            cur = []
        cur.append(gl)
    batches.append(cur)
    return batches


def _bar(total: int, desc: str, progress: bool) -> tqdm:
    """A progress bar on stderr over ``total`` programs (silent when ``progress`` is false)."""
    return tqdm(total=total, desc=desc, unit="program", file=sys.stderr, disable=not progress, leave=True)


def _compile(plan: _Plan, batch: list, keys_of: dict, workers: int | None, progress: bool) -> dict:
    """Compile a batch's programs, several at once in threads (XLA compiles outside the GIL)."""
    by_key = {}
    for gl in batch:
        for key in keys_of[gl.name]:
            by_key[key] = (gl, next(g for g in plan.groups if tuple(g.X.shape[1:]) == key[1:]))
    workers = workers or min(len(by_key), max(1, os.cpu_count() or 1))
    built = {}
    with _bar(len(by_key), f"compiling ({workers} at a time)", progress) as bar:
        if workers > 1 and len(by_key) > 1:
            ex = ThreadPoolExecutor(max_workers=workers)
            try:
                futures = {ex.submit(plan.build, *v): k for k, v in by_key.items()}
                for f in as_completed(futures):
                    built[futures[f]] = f.result()
                    bar.update()
            finally:  # after Ctrl-C or a failed compile, return at once: queued programs are dropped
                ex.shutdown(wait=False, cancel_futures=True)
        else:
            for k, v in by_key.items():
                built[k] = plan.build(*v)
                bar.update()
    secs = plan.slowest([built[k].compile_s for k in by_key])  # several processes: the slowest one's
    return {k: built[k]._replace(compile_s=float(s)) for k, s in zip(by_key, secs)}


def _rows(gl: GridLearner, grp, prog: _Program, out: dict, lo: int, atpi: float, kept: dict | None) -> list:
    """Table rows of one chunk's outputs ``{metric: [chunk, H]}`` (padding dropped)."""
    rows = []
    for i in range(lo, min(lo + prog.chunk, grp.X.shape[0])):
        for h, label in enumerate(prog.labels):
            row = {"learner": label, "family": gl.family, **grp.properties[i]}
            row.update({m: float(out[m][i - lo, h]) for m in ROW_METRICS})
            row.update(atpi=atpi, drmax=1.0 / atpi, compile_s=prog.compile_s)
            rows.append(row)
            if kept is not None:
                kept[(label, grp.names[i])] = tuple(out[k][i - lo, h] for k in KEPT)
    return rows


def _run_program(plan: _Plan, gl: GridLearner, grp, prog: _Program, kept: dict | None) -> list:
    """Run one compiled program over a stream group, chunk by chunk; its rows with the time per item."""
    S, n, d = grp.X.shape
    w_all, w_st = plan.weights(gl, grp)
    outs, secs = [], []
    for lo in range(0, S, prog.chunk):
        args = plan.chunk_args(grp, prog.chunk, lo, w_all, w_st)
        t0 = time.perf_counter()
        out = jax.block_until_ready(prog.executable(prog.states, *args))
        secs.append(time.perf_counter() - t0)
        outs.append(plan.gather(out))
    rows = []
    for lo, out, s in zip(range(0, S, prog.chunk), outs, plan.slowest(secs)):
        rows += _rows(gl, grp, prog, out, lo, float(s) / (prog.chunk * len(prog.labels) * n), kept)
    return rows


def _run_batch(plan: _Plan, batch: list, built: dict, kept: dict | None, progress: bool) -> list:
    """Run a batch's compiled programs on every stream group; their rows."""
    rows = []
    with _bar(len(batch) * len(plan.groups), "running", progress) as bar:
        for gl in batch:
            for grp in plan.groups:
                bar.set_postfix_str(f"{gl.name} n={grp.X.shape[1]} d={grp.X.shape[2]}", refresh=False)
                rows += _run_program(plan, gl, grp, built[(gl.name, *grp.X.shape[1:])], kept)
                bar.update()
    return rows


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


def run_grid(learners: Sequence[GridLearner] | Mapping[str, Callable], streams, *, level: float = 0.95,
             stable_window: int = 128, delay: int | None = None, chunk_size: int | None = None,
             chunk_bytes: int | None = None, devices: Sequence | None = None, progress: bool = True, dtype=None,
             compile_workers: int | None = None, keep_predictions: bool = False,
             vmap_bytes: int | None = None, compile_batch: int = 32,
             tune_plan: TunePlan | None = None) -> GridResult:
    """Evaluate every learner on every stream.

    Args:
      learners: :class:`GridLearner` s, or ``{name: make(n_features) -> Learner}``.
      streams: a :class:`~onlinejax.data.StreamGroup` or a list of them (e.g.
        :func:`~onlinejax.data.thesis_grid`). Over several processes a
        group's ``X`` ``[S, n, d]`` and ``Y`` ``[S, n]`` may be any array-like
        with ``shape`` and slicing along the streams (``np.memmap``, an HDF5
        dataset): each process reads only the slices its devices run.
      level: central interval level for ``icr`` / ``aiw``.
      stable_window: items after the start and after each drift left out of
        the ``*_st`` metrics (the same for every learner, so rows compare).
      delay: ``None`` for progressive validation; an int ``k >= 1`` for
        delayed progressive validation with every label arriving ``k`` items late.
      chunk_size: streams *per device* per compiled call (default: as many
        as fit in ``chunk_bytes`` of learner state: 8 MiB on CPU devices,
        a core's last-level cache; 1 GiB on accelerators). Each device then runs the
        same program whatever the device count, so sharded and unsharded
        tables agree to rounding (a few ulps) as long as ``chunk_size`` is the same.
      devices: devices to shard chunks over (default ``jax.devices()``; one
        device means no sharding). After ``jax.distributed.initialize`` the
        default spans every process (each process must then call ``run_grid``
        with the same arguments); ``jax.local_devices()`` runs the whole grid
        in this process alone. Devices of only some of the processes are refused.
      progress: progress bars (tqdm, on stderr) over the programs compiled and run.
      dtype: learner state dtype (default float32, or float64 under x64).
      compile_workers: programs compiled at once in threads (default: the CPU
        count; 1 compiles one after the other). ``compile_s`` is then each
        program's own wall time, which overlaps others'.
      vmap_bytes: inside a chunk, at most this many bytes of learner states
        are vmapped together; larger groups run one after another
        (``lax.map``). A vmapped step touches every state in the group, so
        once they outgrow a CPU core's private caches each item streams them
        from memory, while small learners (linear, kernel regression) gain
        from wide vmaps. Default on CPU devices: 32 KiB, and
        ``GridLearner.vmap_bytes`` overrides it per configuration (the zoo's
        GPs run one stream at a time). On accelerators the per-configuration
        values are ignored and the default is no limit (every stream of a
        chunk in one vmap): a GPU pays per kernel launch, not per byte of a
        small state.
      keep_predictions: also return every row's predictions
        (``GridResult.predictions``; ``5 × n`` floats per row), e.g. for
        plots or :func:`replay_combination`.
      compile_batch: programs (learner × stream shape) compiled before they
        run; after running, their executables are released and the next
        learners' programs are compiled (a learner is never split, so it may
        exceed the batch alone). Every compiled XLA:CPU program keeps its
        kernels in memory mappings (about a thousand for a GP state
        machine) and Linux allows a process 65,530 (``vm.max_map_count``):
        compiling every program of a large grid first exhausts them.
      tune_plan: optional :class:`~onlinejax.schedule.TunePlan`: when the
        state machines inside every configuration run their tunes
        (:func:`~onlinejax.schedule.with_tune_plan`; ``batch="auto"`` reads
        these ``devices``). The rows keep their configurations' names. ``None``: as each was built.
    Returns:
      :class:`GridResult`; row order: learners, then streams in group order.
      Over several processes every process returns the same table (``atpi``,
      ``compile_s``: the slowest process's time); write it from process 0 only.
    """
    dtype = dtype or default_float_dtype()
    if delay is not None:
        delay = check_int(delay, "delay", 0) or None
    learners, row_order = _merge_programs(_checked_learners(learners))
    groups = _checked_streams(streams)
    plan = _Plan(groups, level=float(level), stable_window=check_int(stable_window, "stable_window", 0),
                 delay=delay, chunk_size=chunk_size, devices=devices, dtype=dtype,
                 chunk_bytes=None if chunk_bytes is None else check_int(chunk_bytes, "chunk_bytes", 1),
                 keep_predictions=keep_predictions,
                 vmap_bytes=None if vmap_bytes is None else check_int(vmap_bytes, "vmap_bytes", 1),
                 tune_plan=tune_plan)
    if compile_workers is not None:
        compile_workers = check_int(compile_workers, "compile_workers", 1)
    keys_of = _program_keys(learners, groups)
    compile_s, stages, rows, kept = {}, {}, [], ({} if keep_predictions else None)
    # compile a batch of programs, run them, release them: compiling and running never overlap,
    # so the timings stay clean, and the compiled programs' memory mappings stay bounded
    for batch in _compile_batches(learners, keys_of, check_int(compile_batch, "compile_batch", 1)):
        built = _compile(plan, batch, keys_of, compile_workers, progress)
        compile_s.update({k: p.compile_s for k, p in built.items()})
        stages.update({k: p.stages for k, p in built.items()})
        with one_blas_thread(len(plan.devices) > 1 and plan.devices[0].platform == "cpu"):
            rows += _run_batch(plan, batch, built, kept, progress)
        del built
    rows.sort(key=lambda r: row_order[r["learner"]])  # stable: streams keep their order within a learner
    return GridResult(rows, compile_s, kept, stages, plan.tune_plan)


def replay_combination(result: GridResult, streams, name: str, members: Sequence[str], rule, *,
                       recalibrate: float | None = None, correct=None, family: str = "Combination", level: float = 0.95,
                       stable_window: int = 128, wrap: Callable[[Learner], Learner] | None = None) -> GridResult:
    """Add rows for a combination of already-evaluated members, from their kept predictions.

    The members of :func:`onlinejax.combination.combine` learn the same
    whatever the weights, so the combination's predictions follow from the
    members' (:func:`onlinejax.combination.replay`, tested equal to the
    learner) without compiling or running the members again. Rows get the
    same metrics as :func:`run_grid`'s; ``atpi`` is the members' summed
    ``atpi`` plus the replay's own time per item.

    Args:
      result: a :class:`GridResult` from ``run_grid(..., keep_predictions=True)``
        that has rows for every name in ``members``.
      streams: the stream groups ``result`` was computed on.
      name: row label; members: member row labels (order = weight order);
      rule: a :class:`onlinejax.combination.WeightRule`; recalibrate, correct: as in
        :func:`~onlinejax.combination.combine`.
      level, stable_window: as in :func:`run_grid` (use the same values).
      wrap: optional wrapper of the combination learner, e.g.
        ``lambda l: conformal(l, df=4.0)``: it is replayed over the
        combination's replayed predictions (:func:`onlinejax.baseline.recorded`).
    Returns:
      A new :class:`GridResult` with the combination's rows (and predictions) appended.
    """

    wrapped = wrap(recorded(1)) if wrap is not None else None
    if result.predictions is None:
        raise ValueError("result: has no predictions; run run_grid(..., keep_predictions=True)")
    groups = [streams] if hasattr(streams, "names") else list(streams)
    acc = prequential(float(level))
    atpis = {(r["learner"], r["stream"]): r["atpi"] for r in result.rows}
    rows, kept = list(result.rows), dict(result.predictions)

    @jax.jit
    def combined(means, vars, Y, w_all, w_st):  # [S, n, M] -> metrics [S], predictions [S, n]
        def one(mu, v, y, wa, ws):
            p = replay(rule, mu, v, y, recalibrate=recalibrate, correct=correct)[0]
            if wrapped is not None:
                st = wrapped.init(mean=p.mean, var=p.var, dtype=y.dtype)
                p = progressive_validation(wrapped, st, jnp.zeros((y.shape[0], 1), y.dtype), y).predictions
            inner = inner_prediction(p)
            return stream_scores(acc, y, p, wa, ws), (p.mean, p.var, p.cdf(y), inner.mean, inner.var)

        return jax.vmap(one)(means, vars, Y, w_all, w_st)

    for grp in groups:
        S, n, _ = grp.X.shape
        missing = [m for m in members if (m, grp.names[0]) not in result.predictions]
        if missing:
            raise ValueError(f"members: no kept predictions for {missing}")
        # the members' own moments: a hedged member's learner, not its hedge (combine mixes the learners)
        means = np.stack([[result.predictions[(m, s)][3] for m in members] for s in grp.names]).transpose(0, 2, 1)
        vars = np.stack([[result.predictions[(m, s)][4] for m in members] for s in grp.names]).transpose(0, 2, 1)
        w_all = np.ones((S, n), means.dtype)
        w_st = np.stack([stable_mask(n, int(stable_window), [c]) for c in grp.change_points])
        args = (means, vars, np.asarray(grp.Y, means.dtype), w_all, w_st.astype(means.dtype))
        combined(*args)  # compile outside the timing
        t0 = time.perf_counter()
        metrics, moments = jax.block_until_ready(combined(*args))
        own = (time.perf_counter() - t0) / (S * n)
        for i, s in enumerate(grp.names):
            atpi = own + sum(atpis[(m, s)] for m in members)
            row = {"learner": name, "family": family, **grp.properties[i]}
            row.update({m: float(metrics[m][i]) for m in ROW_METRICS})
            row.update(atpi=atpi, drmax=1.0 / atpi, compile_s=0.0)
            rows.append(row)
            kept[(name, s)] = tuple(np.asarray(a[i]) for a in moments)
    return GridResult(rows, result.compile_seconds, kept, result.compile_stages, result.tune_plan)

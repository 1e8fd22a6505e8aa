"""The grid runner's plan: devices and mesh, vmap widths and chunk sizes, tune plans, and each program's build.

``_Plan`` holds :func:`~onlinejax.runner.run_grid`'s fixed options and the
host-side data every program shares (metric weights, chunks placed on the
devices, the all-gather over several processes); ``_Plan.build`` traces, lowers
and compiles one configuration for one stream shape into a ``_Program``. The
byte limits that choose vmap widths and chunk sizes (``_CPU_VMAP_BYTES``,
``_CPU_CHUNK_BYTES``, ``_ACCELERATOR_CHUNK_BYTES``) live and are read here.
``_program_keys`` and ``_compile_batches`` say which programs there are and
which compile together.
"""
from __future__ import annotations

import time
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ..core.base import Learner, check_int, tree_nbytes
from ..core.registry import GridLearner
from ..core.schedule import TunePlan, checked_plan, with_tune_plan
from .grid_inputs import _label
from ..evaluation.metrics import stable_mask
from ..evaluation.streams import compiled_scores, hyper_states, predictions_program


def streams_sharding(devices) -> NamedSharding | None:
    """The streams axis (a chunk's leading axis) split over ``devices``: ``None`` for one device."""
    if len(devices) < 2:
        return None
    return NamedSharding(Mesh(np.asarray(devices), ("streams",)), P("streams"))


def _state_bytes(learner: Learner, dtype) -> int:
    return tree_nbytes(jax.eval_shape(lambda: learner.init(dtype=dtype)))


#: run_grid's defaults on CPU devices: states vmapped together, and states per chunk (last-level cache).
_CPU_VMAP_BYTES, _CPU_CHUNK_BYTES = 32 << 10, 8 << 20
#: states per chunk on accelerators (every stream of a chunk vmapped): a whole grid group at once.
_ACCELERATOR_CHUNK_BYTES = 1 << 30


def _all_cpu(devices) -> bool:
    """Whether every device is a CPU (the byte limits of :func:`~onlinejax.runner.run_grid` then apply)."""
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
    scores: object = None  # the compiled scores, shared by programs whose predictions have one type and shape


def _spans_processes(devices: list) -> bool:
    """Whether ``devices`` belong to several processes (after ``jax.distributed.initialize``).

    Raises:
      ValueError: they leave out some process (every process runs the same
        program), or all belong to another process.
    """
    procs = {dv.process_index for dv in devices}
    if len(procs) == 1:
        if procs != {jax.process_index()}:
            raise ValueError(f"layout.devices: all belong to process {procs.pop()}, "
                             f"not this one ({jax.process_index()})")
        return False
    if procs != set(range(jax.process_count())):
        raise ValueError(f"layout.devices: span processes {sorted(procs)}; a multi-process grid needs devices of "
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
        self.shard = streams_sharding(self.devices)
        self.mesh = None if self.shard is None else self.shard.mesh
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
        fn = predictions_program(learner, delay=self.delay, width=None if vb is None else _vmap_width(one, vb))
        if self.mesh is not None:  # per-device work is independent: nothing to communicate
            fn = jax.shard_map(fn, mesh=self.mesh, in_specs=(P(),) + (P("streams"),) * 2, out_specs=P("streams"),
                               check_vma=False)
        states = self.replicate(states) if self.multi else states
        X, Y, w_all, w_st = self.chunk_args(grp, chunk, 0, *self.weights(gl, grp))
        t0 = time.perf_counter()
        traced = jax.jit(fn).trace(states, X, Y)
        t1 = time.perf_counter()
        lowered = traced.lower()
        t2 = time.perf_counter()
        exe = lowered.compile()
        t3 = time.perf_counter()
        stages = (t1 - t0, t2 - t1, t3 - t2)
        preds, present = traced.out_info
        scores, own = compiled_scores((Y, preds, present, w_all, w_st), level=self.level, keep_moments=self.keep,
                                      sharding=self.shard)
        if own is not None:  # the first program of its prediction shape pays for the shared scores program
            stages = tuple(a + b for a, b in zip(stages, own))
        return _Program(learner, states, [_label(gl, h) for h in range(H)], chunk, exe, sum(stages), stages, scores)


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

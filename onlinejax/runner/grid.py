"""The grid runner: every learner on every stream, one compiled program per learner and stream shape.

:func:`run_grid` evaluates ``L`` learners on ``S`` streams with progressive
(or constant-delay progressive) validation and returns a tidy table, one row
per (learner, stream): the stream's properties, the prequential metrics of
:mod:`~onlinejax.evaluation.metrics` over all scored items, the same metrics
over the *stable* items (``*_st``: outside the first ``scoring.stable_window`` items
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
  learners whose states are small. At most ``layout.vmap_bytes`` of states are
  vmapped together; larger groups run one after another (``lax.map``),
  because a vmapped step touches every state of the group and, once they
  outgrow the core's caches, streams them from memory on every item. The
  groups are made even (the last padded with copies of one pair):
  ``lax.map`` compiles a remainder group as a second copy of the program.
* **Chunk size from the state size.** A vmapped batch of states that
  outgrows the last-level cache runs slower per item, so by default a chunk
  holds at most ``layout.chunk_bytes`` (8 MiB) of learner states per device.
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

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable, Mapping, Sequence

import jax
from tqdm import tqdm

from ..core.base import default_float_dtype
from ..core.registry import GridLearner
from ..core.schedule import TunePlan
# the private names below that this module does not use are re-exported: tests import them from here
from .grid_inputs import _checked_learners, _checked_streams, _label, _merge_programs
from .grid_plan import (_ACCELERATOR_CHUNK_BYTES, _CPU_CHUNK_BYTES, _CPU_VMAP_BYTES, _Plan,
                        _Program, _all_cpu, _compile_batches, _default_chunk, _program_keys, _spans_processes,
                        _state_bytes, _tune_plan_for, _vmap_width)
from .grid_replay import replay_combination
from .grid_result import ROW_METRICS, GridResult
from ..evaluation.options import GridLayout, Scoring, checked_record
from ..evaluation.runtime import one_blas_thread
from ..evaluation.streams import KEPT

__all__ = ["GridResult", "run_grid", "replay_combination", "Scoring", "GridLayout"]


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
        X, Y, w_all_c, w_st_c = args
        t0 = time.perf_counter()
        preds, present = prog.executable(prog.states, X, Y)
        out = jax.block_until_ready(prog.scores(Y, preds, present, w_all_c, w_st_c))
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


def run_grid(learners: Sequence[GridLearner] | Mapping[str, Callable], streams, *, scoring: Scoring = Scoring(),
             layout: GridLayout = GridLayout(), keep_predictions: bool = False, progress: bool = True, dtype=None,
             tune_plan: TunePlan | None = None) -> GridResult:
    """Evaluate every learner on every stream.

    Args:
      learners: :class:`GridLearner` s, or ``{name: make(n_features) -> Learner}``.
      streams: a :class:`~onlinejax.data.StreamGroup` or a list of them (e.g.
        :func:`~onlinejax.data.thesis_grid`). Over several processes a
        group's ``X`` ``[S, n, d]`` and ``Y`` ``[S, n]`` may be any array-like
        with ``shape`` and slicing along the streams (``np.memmap``, an HDF5
        dataset): each process reads only the slices its devices run.
      scoring: :class:`~onlinejax.evaluation.options.Scoring`: the interval ``level``, the
        ``stable_window`` of the ``*_st`` metrics and the label ``delay`` (default: progressive
        validation, level 0.95, 128 items).
      layout: :class:`~onlinejax.evaluation.options.GridLayout`: how the streams are chunked,
        vmapped, sharded over ``devices`` and compiled (module docstring); the table does not
        depend on it beyond rounding.
      keep_predictions: also return every row's predictions
        (``GridResult.predictions``; ``5 × n`` floats per row), e.g. for
        plots or :func:`replay_combination`.
      progress: progress bars (tqdm, on stderr) over the programs compiled and run.
      dtype: learner state dtype (default float32, or float64 under x64).
      tune_plan: optional :class:`~onlinejax.core.schedule.TunePlan`: when the
        state machines inside every configuration run their tunes
        (:func:`~onlinejax.core.schedule.with_tune_plan`; ``batch="auto"`` reads
        ``layout.devices``). The rows keep their configurations' names. ``None``: as each was built.
    Returns:
      :class:`GridResult`; row order: learners, then streams in group order.
      Over several processes every process returns the same table (``atpi``,
      ``compile_s``: the slowest process's time); write it from process 0 only.
    """
    dtype = dtype or default_float_dtype()
    scoring, layout = checked_record(scoring, Scoring, "scoring"), checked_record(layout, GridLayout, "layout")
    learners, row_order = _merge_programs(_checked_learners(learners))
    groups = _checked_streams(streams)
    plan = _Plan(groups, level=scoring.level, stable_window=scoring.stable_window, delay=scoring.delay,
                 chunk_size=layout.chunk_size, devices=layout.devices, dtype=dtype, chunk_bytes=layout.chunk_bytes,
                 keep_predictions=keep_predictions, vmap_bytes=layout.vmap_bytes, tune_plan=tune_plan)
    keys_of = _program_keys(learners, groups)
    compile_s, stages, rows, kept = {}, {}, [], ({} if keep_predictions else None)
    # compile a batch of programs, run them, release them: compiling and running never overlap,
    # so the timings stay clean, and the compiled programs' memory mappings stay bounded
    for batch in _compile_batches(learners, keys_of, layout.compile_batch):
        built = _compile(plan, batch, keys_of, layout.compile_workers, progress)
        compile_s.update({k: p.compile_s for k, p in built.items()})
        stages.update({k: p.stages for k, p in built.items()})
        with one_blas_thread(len(plan.devices) > 1 and plan.devices[0].platform == "cpu"):
            rows += _run_batch(plan, batch, built, kept, progress)
        del built
    rows.sort(key=lambda r: row_order[r["learner"]])  # stable: streams keep their order within a learner
    return GridResult(rows, compile_s, kept, stages, plan.tune_plan)

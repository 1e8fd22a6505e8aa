"""The grid runner: every learner on every stream, one compiled program per learner and stream shape.

:func:`run_grid` evaluates ``L`` learners on ``S`` streams with progressive
(or constant-delay progressive) validation and returns a tidy table, one row
per (learner, stream): the stream's properties, the prequential metrics of
:mod:`~onlinejax.evaluation.metrics` over all scored items, the same metrics
over the *stable* items (``*_st``: outside the first ``stable_window`` items
after the start and after a drift, thesis 6.1.2's SMSE-ST), and the time per
item.

How the work is laid out (measured on a 2-core CPU; see ``benchmarks/grid.py``):

* **One compile per learner and stream shape** — or per ``GridLearner.program``:
  configurations that differ only in their ``init_kwargs`` share one
  program and are vmapped like a hyperparameter grid. Compiling costs 0.2–10 s;
  running a 2000-item stream costs milliseconds. Streams are grouped by
  ``(n, d)`` (:class:`~onlinejax.data.StreamGroup`), a group is cut into
  fixed-size chunks (the last one padded by repeating its last stream, the
  padding dropped from the table), and each chunk calls the same
  ahead-of-time compiled executable.
* **vmap over streams** (and over an optional grid of array
  hyperparameters, ``GridLearner.hyper``) inside the chunk: one
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
* **Devices.** With several devices (GPUs, or CPU host devices via
  ``XLA_FLAGS=--xla_force_host_platform_device_count=N``) each chunk is split
  across a 1-d :class:`jax.sharding.Mesh` with :func:`jax.shard_map`: every
  device runs its share of the streams and nothing is communicated.

Timing: ``atpi`` (average time per item, thesis eq. 6.4) is the wall time of
the chunk's compiled call divided by the items it processed (streams ×
items) — the amortised cost per item when streams are batched, compile time
excluded (reported separately as ``compile_s``); ``drmax = 1/atpi``.
"""
from __future__ import annotations

import contextlib
import csv
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from threadpoolctl import threadpool_limits

from ..base import Learner, check_int
from .delayed import delayed_progressive_validation, schedule_from_delays
from .metrics import METRICS, log_score_skill, prequential, score, stable_mask
from .progressive import progressive_validation

__all__ = ["GridLearner", "GridResult", "run_grid", "enable_compilation_cache", "default_cache_dir",
           "replay_combination", "register_learner", "registered_learners", "REGISTRY"]

#: Metrics of every row (``*_st`` are the same over stable items).
ROW_METRICS = METRICS + ("skill", "mlpd_clim", "mlpd_from", "n_nonfinite") + tuple(
    f"{m}_st" for m in METRICS + ("skill", "mlpd_clim", "mlpd_from", "n_nonfinite"))


class GridLearner(NamedTuple):
    """A learner configuration for the grid.

    Attributes:
      name: row label, e.g. ``"GPRegressionOLSMean_WS64"``.
      family: group for summaries, e.g. ``"GPRegression"``.
      make: ``make(n_features) -> Learner`` (called once per input dimension).
      score_from: items before this index are not scored (a batch baseline's
        training set; see :func:`onlinejax.baseline.train_once`).
      hyper: optional ``{init_kwarg: [H] values}``; each value becomes its own
        row (``name[kwarg=value]``, or ``labels[h]``), vmapped inside the same program.
      labels: optional row labels for the ``H`` values of ``hyper``.
      init_kwargs: optional ``{init_kwarg: value}`` this configuration's
        state is built with (``learner.init(**init_kwargs)``).
      program: optional key: configurations with the same ``program``,
        ``family`` and ``score_from`` must build the same learner up to
        their ``init_kwargs`` (the same keys for each); :func:`run_grid`
        then compiles one program per stream shape for all of them and
        vmaps over their ``init_kwargs`` (e.g. the thesis's three GP mean
        functions at one window size: 15 programs instead of 45). Their
        compile time is reported under the first one's name.
      vmap_bytes: optional override of :func:`run_grid`'s ``vmap_bytes`` for
        this configuration (``1``: one (stream, hyperparameter) pair at a
        time). The zoo gives the GPs ``1``: under ``vmap`` a stream pays for
        the costly ``O(W²)`` learning step whenever any stream of its group
        learns, so a GP ran slower vmapped even when its states fit the
        caches (576 streams at d = 2, GP state machine W = 48 vmapped 3 at a
        time: 13.5 s, alone 8.2 s; W = 32, 6 at a time: 7.0 s, alone 5.0 s;
        batch GP TS 32: 1.6 s, 0.7 s), while kernel regression gains from
        the vmap (W = 64: 1.7 s vmapped, 3.5 s alone).
    """

    name: str
    family: str
    make: Callable[[int], Learner]
    score_from: int = 0
    hyper: Mapping[str, Sequence] | None = None
    labels: Sequence[str] | None = None
    init_kwargs: Mapping[str, float] | None = None
    program: str | None = None
    vmap_bytes: int | None = None


#: Registered configurations, ``name -> GridLearner`` (see :func:`register_learner`).
REGISTRY: dict = {}


def register_learner(name: str, family: str, make: Callable[[int], Learner], *, score_from: int = 0,
                     hyper: Mapping[str, Sequence] | None = None, init_kwargs: Mapping[str, float] | None = None,
                     program: str | None = None, vmap_bytes: int | None = None) -> GridLearner:
    """Add a configuration to :data:`REGISTRY` (replacing one of the same name) and return it.

    See :class:`GridLearner` for the arguments (``program`` shares one compiled
    program between configurations that differ only in ``init_kwargs``).
    """
    if not callable(make):
        raise TypeError(f"make: expected a callable n_features -> Learner, got {type(make).__name__}")
    if hyper is not None and (init_kwargs is not None or program is not None):
        raise ValueError("register_learner: give either hyper or init_kwargs/program, not both")
    gl = GridLearner(str(name), str(family), make, check_int(score_from, "score_from", 0),
                     dict(hyper) if hyper is not None else None, None,
                     dict(init_kwargs) if init_kwargs is not None else None,
                     str(program) if program is not None else None,
                     check_int(vmap_bytes, "vmap_bytes", 1) if vmap_bytes is not None else None)
    REGISTRY[gl.name] = gl
    return gl


def registered_learners(names: Sequence[str] | str | None = None) -> list[GridLearner]:
    """Registered configurations: all, or those named, or those whose name or family contains a substring.

    Args:
      names: ``None`` (all), a list of exact names, or a comma-separated
        string of substrings (``"GP,Kernel"``).
    Raises:
      ValueError: for a name or substring that matches nothing.
    """
    from .. import zoo  # noqa: F401  (registers the thesis's configurations)

    if names is None:
        return list(REGISTRY.values())
    if isinstance(names, str):
        out = []
        for part in (p.strip() for p in names.split(",") if p.strip()):
            hit = [g for g in REGISTRY.values() if part.lower() in g.name.lower() or part.lower() == g.family.lower()]
            if not hit:
                raise ValueError(f"learners: {part!r} matches no registered learner (e.g. {next(iter(REGISTRY))})")
            out += [g for g in hit if g not in out]
        return out
    missing = [n for n in names if n not in REGISTRY]
    if missing:
        raise ValueError(f"learners: unknown {missing}")
    return [REGISTRY[n] for n in names]


class GridResult(NamedTuple):
    """The table: ``rows`` (one dict per learner × stream), plus per-compile timings.

    ``predictions`` (only with ``run_grid(keep_predictions=True)``):
    ``{(row learner label, stream name): (mean [n], var [n], pit [n])}`` NumPy arrays; ``pit`` is
    the prediction's own CDF at the target (Gaussian, Student-t or mixture).
    """

    rows: list
    compile_seconds: dict
    predictions: dict | None = None

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
                how: str = "mean") -> list:
        """Aggregate the metrics per ``by`` value (thesis Fig. 6.4: mean over streams).

        Non-finite values are left out of the aggregate; ``nonfinite_rows`` counts the rows left out.
        """
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


def default_cache_dir() -> str:
    """``$ONLINEJAX_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/onlinejax/xla`` (``~/.cache/onlinejax/xla``)."""
    env = os.environ.get("ONLINEJAX_COMPILE_CACHE")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "onlinejax", "xla")


def use_cpu_cores(n: int | None = None) -> int:
    """Expose the CPU as ``n`` host devices (default: one per core), so :func:`run_grid` shards over the cores.

    XLA:CPU runs one program on one device, and ``run_grid`` uses both cores of
    a 2-core CPU only when there are two devices (the thesis's evaluation:
    1.3–2× faster). This is what ``XLA_FLAGS=--xla_force_host_platform_device_count=n``
    does, through ``jax.config.update("jax_num_cpu_devices", n)``; the main
    command and ``benchmarks/grid.py`` call it first. It must run before JAX
    initialises its backends; afterwards, or when ``XLA_FLAGS`` already sets
    the count, it changes nothing.

    Args:
      n: host devices, an int >= 1 (default: the cores this process may use).
    Returns:
      the number of CPU devices JAX will use (``n`` when it took effect).
    Raises:
      ValueError: ``n`` is not an int >= 1.
    """
    if n is None:  # the cores this process may run on (a container's limit, not the host's count)
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = check_int(n, "n", 1)
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:  # backends already initialised: keep what they have
            pass
    return len(jax.devices("cpu"))


def enable_compilation_cache(path: str | None = None, min_compile_seconds: float = 0.5) -> str:
    """Turn on JAX's persistent compilation cache in ``path`` (default :func:`default_cache_dir`).

    Grid runs compile one program per learner and stream shape, and compiling
    costs far more than running (the GP state machine at W = 64: ~6 s to compile,
    0.7 s to run a 2000-item stream). With the cache a repeated run loads the
    executables instead: one such program compiled in 9.6 s, loaded in 2.7 s
    (tracing and lowering included). The cache key covers the program, the
    JAX/XLA version, the devices and the XLA flags, so a changed learner,
    dtype or device count compiles afresh. This sets process-wide JAX
    options, so the library never calls it on import; the command line
    (``python -m onlinejax grid``) and ``benchmarks/grid.py`` do, unless told
    ``--compile-cache none``. Keep the folder on a local disk of the machine
    that runs (the executables are compiled for its CPU).

    Args:
      path: cache folder (created if missing); ``None`` for :func:`default_cache_dir`.
      min_compile_seconds: programs that compile faster than this are not stored.

    Returns:
      The folder used.
    """
    if not float(min_compile_seconds) >= 0.0:
        raise ValueError(f"min_compile_seconds: must be >= 0, got {min_compile_seconds!r}")
    path = os.path.abspath(os.path.expanduser(path or default_cache_dir()))
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def _state_bytes(learner: Learner, dtype) -> int:
    shapes = jax.eval_shape(lambda: learner.init(dtype=dtype))
    return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in jax.tree_util.tree_leaves(shapes))


def _hyper_states(learner: Learner, hyper, dtype):
    if not hyper:
        return jax.tree_util.tree_map(lambda a: a[None], learner.init(dtype=dtype))
    vals = {k: jnp.asarray(v, dtype) for k, v in hyper.items()}
    H = {v.shape for v in vals.values()}
    if len(H) != 1 or len(next(iter(H))) != 1:
        raise ValueError(f"hyper: every value must be a 1-d sequence of one length, got shapes {sorted(H)}")
    return jax.vmap(lambda kw: learner.init(dtype=dtype, **kw))(vals)


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


def _per_stream(learner: Learner, delay: int | None, level: float, keep: bool = False, width: int | None = None):
    acc = prequential(level)

    def run(state, X, Y, w_all, w_st):
        if delay:
            sched = schedule_from_delays(np.full(X.shape[0], float(delay)))
            preds = delayed_progressive_validation(learner, state, X, Y, sched).predictions
        else:
            preds = progressive_validation(learner, state, X, Y).predictions
        out = _scores(acc, Y, preds, w_all, w_st)
        return {**out, "mean": preds.mean, "var": preds.var, "pit": preds.cdf(Y)} if keep else out

    def per_streams(states, X, Y, w_all, w_st):  # states [H], X [C, n, d] -> metrics [C, H]
        # one flat vmap over C·H (stream, hyperparameter) pairs, not vmap(vmap): the learners'
        # lazy branches (cond_if_any: learn, tune) see the whole batch only under a single vmap;
        # nested, the outer vmap batched their while loops and every stream paid for every tune
        # (GP state machine, 8 streams: 395 s nested, 29 s flat)
        H = jax.tree_util.tree_leaves(states)[0].shape[0]
        C = X.shape[0]
        st = jax.tree_util.tree_map(lambda a: jnp.tile(a, (C,) + (1,) * (a.ndim - 1)), states)
        rep = lambda a: jnp.repeat(a, H, axis=0)
        args = (st, rep(X), rep(Y), rep(w_all), rep(w_st))
        if width is None or width >= C * H:
            out = jax.vmap(run)(*args)
        elif width == 1:  # no vmap at all: a vmap of one still turns the learners' lax.cond into select
            out = jax.lax.map(lambda a: run(*a), args)
        else:  # about `width` pairs vmapped at a time, one group after another
            # lax.map compiles a remainder (C·H mod width) as a second copy of the whole program, so
            # the groups are evened out and padded with copies of the last pair (fewer than `groups`)
            N = C * H
            groups = -(-N // width)
            even = -(-N // groups)
            pad = groups * even - N
            if pad:
                args = jax.tree_util.tree_map(lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], pad, 0)]), args)
            out = jax.lax.map(lambda a: run(*a), args, batch_size=even)
            out = jax.tree_util.tree_map(lambda a: a[:N], out)
        return jax.tree_util.tree_map(lambda a: a.reshape((C, H) + a.shape[1:]), out)

    return per_streams


def _scores(acc, Y, preds, w_all, w_st) -> dict:
    a = score(acc, Y, preds, w_all)
    st = score(acc, Y, preds, w_st)
    for m, w in ((a, w_all), (st, w_st)):
        sk = log_score_skill(Y, preds, w)
        m.update(skill=sk["skill"], mlpd_clim=sk["mlpd_clim"], mlpd_from=sk["mlpd_from"])
    return {**a, **{f"{k}_st": v for k, v in st.items()}}


def _vmap_width(state_bytes: int, vmap_bytes: int) -> int:
    """(stream, hyperparameter) pairs vmapped together: ``vmap_bytes`` of states, at least one."""
    return max(1, vmap_bytes // max(state_bytes, 1))


def _default_chunk(state_bytes: int, n_streams: int, n_dev: int, chunk_bytes: int) -> int:
    """Streams per device per call: at most ``chunk_bytes`` of states, the calls evened out.

    The last call is padded with copies of the last stream, which cost as
    much as real ones; evening the calls out keeps the padding below one
    stream per device and call (216 streams over two devices at most 41 per
    device: 41, 41, 41 → 246 slots; evened 36, 36, 36 → 216; over the
    thesis's evaluation, 6.5 % of its stream-slots were padding, mostly of the
    most expensive programs, GP windows 96 and 128).
    """
    need = -(-n_streams // n_dev)
    cap = max(1, chunk_bytes // max(state_bytes, 1))
    calls = -(-need // cap)
    return -(-need // calls)


def _one_blas_thread(active: bool):
    """Limit OpenBLAS/MKL (jaxlib's LAPACK kernels on CPU) to one thread while CPU devices run in parallel.

    Each host device already runs on its own core; a LAPACK call (the GP
    tune's Cholesky and triangular solves) that spreads over every core as
    well oversubscribes them. 576 GP streams in the state machine on two
    host devices of a 2-core CPU: 26.6 s with two BLAS threads, 11.8 s with one.
    """
    return threadpool_limits(limits=1, user_api="blas") if active else contextlib.nullcontext()


def run_grid(learners: Sequence[GridLearner] | Mapping[str, Callable], streams, *, level: float = 0.95,
             stable_window: int = 128, delay: int | None = None, chunk_size: int | None = None,
             chunk_bytes: int = 8 << 20, devices: Sequence | None = None, progress: bool = True, dtype=None,
             compile_workers: int | None = None, keep_predictions: bool = False,
             vmap_bytes: int = 32 << 10, compile_batch: int = 32) -> GridResult:
    """Evaluate every learner on every stream.

    Args:
      learners: :class:`GridLearner` s, or ``{name: make(n_features) -> Learner}``.
      streams: a :class:`~onlinejax.data.StreamGroup` or a list of them (e.g.
        :func:`~onlinejax.data.thesis_grid`).
      level: central interval level for ``icr`` / ``aiw``.
      stable_window: items after the start and after each drift left out of
        the ``*_st`` metrics (the same for every learner, so rows compare).
      delay: ``None`` for progressive validation; an int ``k >= 1`` for
        delayed progressive validation with every label arriving ``k`` items late.
      chunk_size: streams *per device* per compiled call (default: as many
        as fit in ``chunk_bytes`` of learner state). Each device then runs the
        same program whatever the device count, so sharded and unsharded
        tables agree to rounding (a few ulps) as long as ``chunk_size`` is the same.
      devices: devices to shard chunks over (default ``jax.devices()``; one
        device means no sharding).
      progress: print one progress line per chunk to stderr.
      dtype: learner state dtype (default float32, or float64 under x64).
      compile_workers: programs compiled at once in threads (default: the CPU
        count; 1 compiles one after the other). ``compile_s`` is then each
        program's own wall time, which overlaps others'.
      vmap_bytes: (``GridLearner.vmap_bytes`` overrides it per configuration)
        inside a chunk, at most this many bytes of learner states
        are vmapped together; larger groups run one after another
        (``lax.map``). A vmapped step touches every state in the group, so
        once they outgrow the core's private caches each item streams them
        from memory: a W = 64 GP (then 34 KB of state, now 17 KB) ran at
        40 µs per item vmapped over 64 streams, 26 µs four at a time and
        17 µs one stream at a time, while small learners (linear, kernel
        regression: 1–3 KB) gain from wide vmaps.
      keep_predictions: also return every row's predictions
        (``GridResult.predictions``; ``2 × n`` floats per row), e.g. for
        plots or :func:`replay_combination`.
      compile_batch: programs (learner × stream shape) compiled before they
        run; after running, their executables are released and the next
        learners' programs are compiled (a learner is never split, so it may
        exceed the batch alone). Every compiled XLA:CPU program keeps its
        kernels in memory mappings — a GP state machine about 1,200, a
        windowed linear learner 400 — and Linux allows a process 65,530
        (``vm.max_map_count``): compiling all 192 programs of the thesis's
        evaluation first made LLVM fail with "Cannot allocate memory" and
        the process crash.
    Returns:
      :class:`GridResult`; row order: learners, then streams in group order.
    """
    from ..base import default_float_dtype

    dtype = dtype or default_float_dtype()
    level = float(level)
    stable_window = check_int(stable_window, "stable_window", 0)
    vmap_bytes = check_int(vmap_bytes, "vmap_bytes", 1)
    if delay is not None:
        delay = check_int(delay, "delay", 0) or None
    if isinstance(learners, Mapping):
        learners = [GridLearner(k, k, v) for k, v in learners.items()]
    learners = list(learners)
    if not learners:
        raise ValueError("learners: none given")
    for g in learners:
        if not isinstance(g, GridLearner):
            raise TypeError(f"learners: expected GridLearner entries, got {type(g).__name__}")
    learners, row_order = _merge_programs(learners)
    groups = [streams] if hasattr(streams, "names") else list(streams)
    if not groups:
        raise ValueError("streams: none given")
    devices = list(devices) if devices is not None else jax.devices()
    n_dev = len(devices)
    mesh = Mesh(np.asarray(devices), ("streams",)) if n_dev > 1 else None

    shard = NamedSharding(mesh, P("streams")) if mesh is not None else None

    np_dtype = np.dtype(dtype)
    host = {}  # id(group) -> (X, Y) in the state dtype: converted once, not once per learner and chunk

    def chunk_args(grp, chunk, lo, w_all, w_st):
        # numpy converts and indexes: jnp.asarray of each float64 [216, 2000, 4] chunk cost ~0.1 s
        # (a conversion program per call), ~25 s over the thesis's whole evaluation
        if id(grp) not in host:
            host[id(grp)] = (np.asarray(grp.X, np_dtype), np.asarray(grp.Y, np_dtype))
        X, Y = host[id(grp)]
        S = X.shape[0]
        idx = np.minimum(np.arange(lo, lo + chunk), S - 1)  # pad by repeating the last stream
        args = (X[idx], Y[idx], w_all[idx], w_st[idx])
        return tuple(jax.device_put(a, shard) for a in args) if shard is not None else tuple(map(jnp.asarray, args))

    stable = {}  # id(group) -> [S, n] stable-item mask, the same for every learner

    def weights(gl, grp):
        S, n, _ = grp.X.shape
        if id(grp) not in stable:
            stable[id(grp)] = np.stack([stable_mask(n, stable_window, [c] if c >= 0 else [])
                                        for c in grp.change_points])
        w_all = np.zeros((S, n), np_dtype)  # metric weights: scored items, and scored stable items
        w_all[:, min(gl.score_from, n):] = 1
        return w_all, w_all * stable[id(grp)]

    def build(gl, grp):
        """Trace, lower and compile one learner for one stream shape: (learner, states, labels, chunk, exe, secs)."""
        S, n, d = grp.X.shape
        learner = gl.make(d)
        if learner.n_features != d:
            raise ValueError(f"{gl.name}: make({d}) returned a learner for {learner.n_features} inputs")
        states = _hyper_states(learner, gl.hyper, dtype)
        H = jax.tree_util.tree_leaves(states)[0].shape[0]
        labels = [_label(gl, h) for h in range(H)]
        per_dev = chunk_size or _default_chunk(_state_bytes(learner, dtype) * H, S, n_dev, chunk_bytes)
        chunk = check_int(per_dev, "chunk_size", 1) * n_dev
        vb = vmap_bytes if gl.vmap_bytes is None else check_int(gl.vmap_bytes, f"{gl.name}: vmap_bytes", 1)
        fn = _per_stream(learner, delay, level, keep_predictions, _vmap_width(_state_bytes(learner, dtype), vb))
        if mesh is not None:
            fn = jax.shard_map(fn, mesh=mesh, in_specs=(P(),) + (P("streams"),) * 4, out_specs=P("streams"),
                               check_vma=False)  # per-device work is independent
        t0 = time.perf_counter()
        exe = jax.jit(fn).lower(states, *chunk_args(grp, chunk, 0, *weights(gl, grp))).compile()
        return learner, states, labels, chunk, exe, time.perf_counter() - t0

    # Compile a batch of (learner, stream shape) programs, several at a time, then run them and
    # release them: compiling costs far more than running (2-20 s against 0.01-3 s per chunk
    # on a 2-core CPU) and XLA compiles outside the GIL, so threads overlap it, while compiling
    # and running never overlap (the ATPI timings stay clean). One compile per learner and
    # shape (n, d), reused for every group and chunk of that shape.
    compile_batch = check_int(compile_batch, "compile_batch", 1)
    if compile_workers is not None:
        compile_workers = check_int(compile_workers, "compile_workers", 1)
    keys_of = {}  # learner name -> its program keys, in group order
    firsts = {}
    for gl in learners:
        keys_of[gl.name] = []
        for grp in groups:
            key = (gl.name, *grp.X.shape[1:])
            if key not in firsts:
                firsts[key] = (gl, grp)
                keys_of[gl.name].append(key)
    batches, cur = [], []
    for gl in learners:
        if cur and sum(len(keys_of[g.name]) for g in cur) + len(keys_of[gl.name]) > compile_batch:
            batches.append(cur)
            cur = []
        cur.append(gl)
    batches.append(cur)

    compile_s, rows, kept = {}, [], ({} if keep_predictions else None)
    for batch in batches:
        todo = [k for gl in batch for k in keys_of[gl.name]]
        workers = compile_workers or min(len(todo), max(1, os.cpu_count() or 1))
        t_all = time.perf_counter()
        if workers > 1 and len(todo) > 1:
            with ThreadPoolExecutor(max_workers=workers) as ex:
                futures = {k: ex.submit(build, *firsts[k]) for k in todo}
                built = {k: f.result() for k, f in futures.items()}
        else:
            built = {k: build(*firsts[k]) for k in todo}
        compile_s.update({k: v[5] for k, v in built.items()})
        if progress:
            print(f"compiled {len(todo)} programs in {time.perf_counter() - t_all:.1f} s ({workers} at a time)",
                  file=sys.stderr, flush=True)
        with _one_blas_thread(n_dev > 1 and devices[0].platform == "cpu"):
            for gl in batch:
                for grp in groups:
                    S, n, d = grp.X.shape
                    learner, states, labels, chunk, compiled, _ = built[(gl.name, n, d)]
                    H = len(labels)
                    w_all, w_st = weights(gl, grp)
                    n_chunks = -(-S // chunk)
                    for c in range(n_chunks):
                        lo = c * chunk
                        args = chunk_args(grp, chunk, lo, w_all, w_st)
                        t0 = time.perf_counter()
                        out = jax.block_until_ready(compiled(states, *args))
                        secs = time.perf_counter() - t0
                        out = jax.tree_util.tree_map(np.asarray, out)  # [chunk, H]
                        atpi = secs / (chunk * H * n)
                        for i in range(lo, min(lo + chunk, S)):
                            for h, label in enumerate(labels):
                                row = {"learner": label, "family": gl.family, **grp.properties[i]}
                                row.update({m: float(out[m][i - lo, h]) for m in ROW_METRICS})
                                row.update(atpi=atpi, drmax=1.0 / atpi, compile_s=compile_s[(gl.name, n, d)])
                                rows.append(row)
                                if kept is not None:
                                    kept[(label, grp.names[i])] = tuple(out[k][i - lo, h] for k in ("mean", "var", "pit"))
                        if progress:
                            print(f"\r{gl.name:34s} n={n} d={d}: chunk {c + 1}/{n_chunks} "
                                  f"({min(lo + chunk, S)}/{S} streams, {secs:.2f} s)",
                                  end="\n" if c + 1 == n_chunks else "", file=sys.stderr, flush=True)
        del built  # release the batch's executables (and their memory mappings) before the next
    rows.sort(key=lambda r: row_order[r["learner"]])  # stable: streams keep their order within a learner
    return GridResult(rows, compile_s, kept)


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
    from ..baseline import recorded
    from ..combination import replay

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
            return _scores(acc, y, p, wa, ws), p.mean, p.var, p.cdf(y)

        return jax.vmap(one)(means, vars, Y, w_all, w_st)

    for grp in groups:
        S, n, _ = grp.X.shape
        missing = [m for m in members if (m, grp.names[0]) not in result.predictions]
        if missing:
            raise ValueError(f"members: no kept predictions for {missing}")
        means = np.stack([[result.predictions[(m, s)][0] for m in members] for s in grp.names]).transpose(0, 2, 1)
        vars = np.stack([[result.predictions[(m, s)][1] for m in members] for s in grp.names]).transpose(0, 2, 1)
        w_all = np.ones((S, n), means.dtype)
        w_st = np.stack([stable_mask(n, int(stable_window), [c] if c >= 0 else []) for c in grp.change_points])
        args = (means, vars, np.asarray(grp.Y, means.dtype), w_all, w_st.astype(means.dtype))
        combined(*args)  # compile outside the timing
        t0 = time.perf_counter()
        metrics, pm, pv, pp = jax.block_until_ready(combined(*args))
        own = (time.perf_counter() - t0) / (S * n)
        for i, s in enumerate(grp.names):
            atpi = own + sum(atpis[(m, s)] for m in members)
            row = {"learner": name, "family": family, **grp.properties[i]}
            row.update({m: float(metrics[m][i]) for m in ROW_METRICS})
            row.update(atpi=atpi, drmax=1.0 / atpi, compile_s=0.0)
            rows.append(row)
            kept[(name, s)] = (np.asarray(pm[i]), np.asarray(pv[i]), np.asarray(pp[i]))
    return GridResult(rows, result.compile_seconds, kept)

"""Process-wide runtime settings for grid runs: host devices, several processes, the compilation cache, BLAS threads.

These change global JAX or BLAS state, so the library never calls them on
import; the command line and the benchmarks do.
"""
from __future__ import annotations

import contextlib
import os

import jax
from threadpoolctl import threadpool_limits

from ..core.base import check_int

__all__ = [
    "default_cache_dir",
    "use_cpu_cores",
    "initialize_distributed",
    "enable_compilation_cache",
    "ensure_compilation_cache",
]


def default_cache_dir() -> str:
    """``$ONLINEJAX_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/onlinejax/xla`` (``~/.cache/onlinejax/xla``).

    ``ONLINEJAX_COMPILE_CACHE=none`` turns the cache off where the library would turn it on by
    default (the command line, the adapters: :func:`ensure_compilation_cache`).
    """
    env = os.environ.get("ONLINEJAX_COMPILE_CACHE")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "onlinejax", "xla")


def use_cpu_cores(n: int | None = None) -> int:
    """Expose the CPU as ``n`` host devices (default: one per core), so :func:`run_grid` shards over the cores.

    XLA:CPU runs one program on one device, and ``run_grid`` uses several
    cores only when there are several devices. This is what ``XLA_FLAGS=--xla_force_host_platform_device_count=n``
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


def initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None, *, local_device_ids=None, cpu_devices: int | None = None,
                           cpu_collectives: str | None = "gloo", **kwargs) -> None:
    """Join a multi-process JAX run (:func:`jax.distributed.initialize`), so :func:`run_grid` spans every process.

    Afterwards ``jax.devices()`` lists the devices of every process and
    :func:`~onlinejax.runner.run_grid` shards its stream chunks over all
    of them (``docs/multihost.md``). Call it first, before anything runs on
    JAX (and instead of :func:`use_cpu_cores`, which starts the backends). On
    SLURM, Open MPI or Cloud TPU the three leading arguments may be left out:
    JAX reads them from the cluster's environment.

    Args:
      coordinator_address: ``"host:port"`` of process 0's coordinator service.
      num_processes: processes in the run; process_id: this one's, ``0 .. num_processes - 1``.
      local_device_ids: the local GPUs this process uses (default: all it sees).
      cpu_devices: host devices of this process on CPU (``jax_num_cpu_devices``; default: JAX's, 1).
      cpu_collectives: the CPU backend's cross-process collectives (``"gloo"``,
        or ``"mpi"``); ``None`` leaves JAX's setting. The GPU backends ignore it.
      **kwargs: passed to :func:`jax.distributed.initialize` (e.g. ``initialization_timeout``).
    Raises:
      ValueError: ``cpu_devices`` is not an int >= 1.
      RuntimeError: from JAX, when it is called twice or after the backends started.
    """
    if cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", check_int(cpu_devices, "cpu_devices", 1))
    if cpu_collectives is not None:
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(coordinator_address, num_processes, process_id, local_device_ids, **kwargs)


def enable_compilation_cache(path: str | None = None, min_compile_seconds: float = 0.5) -> str:
    """Turn on JAX's persistent compilation cache in ``path`` (default :func:`default_cache_dir`).

    Grid runs compile one program per learner and stream shape, and compiling
    costs far more than running a stream (``benchmarks/RESULTS.md``, grid).
    With the cache a repeated run loads the executables instead of
    compiling them. The cache key covers the program, the
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


def one_blas_thread(active: bool):
    """Limit OpenBLAS/MKL (jaxlib's LAPACK kernels on CPU) to one thread while CPU devices run in parallel.

    Each host device already runs on its own core; a LAPACK call (the GP
    tune's Cholesky and triangular solves) that spreads over every core as
    well oversubscribes them.
    """
    return threadpool_limits(limits=1, user_api="blas") if active else contextlib.nullcontext()


def ensure_compilation_cache() -> str | None:
    """Turn on the persistent compilation cache in :func:`default_cache_dir`, unless it is on already or opted out.

    The River and scikit-learn adapters call this when they first build a learner, so that a new
    process (a notebook restarted, each ``GridSearchCV`` run) loads the programs an earlier one compiled
    instead of compiling them again (``benchmarks/RESULTS.md``, "Adapters"). It does nothing when JAX
    already has a cache folder (set by you or by :func:`enable_compilation_cache`), when
    ``ONLINEJAX_COMPILE_CACHE=none``, or when the folder cannot be created.

    Returns:
      The cache folder in use, or ``None`` (off).
    """
    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    path = default_cache_dir()
    if path.lower() == "none":
        return None
    try:
        # every program: a model's calls compile many small ones (one per batch size), each well under a second
        return enable_compilation_cache(path, min_compile_seconds=0.0)
    except OSError:  # an unwritable home must not stop a model from learning
        return None

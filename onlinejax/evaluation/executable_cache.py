"""A folder of serialised grid executables, so a repeated grid run skips tracing, lowering and compiling.

JAX's persistent compilation cache (:func:`~onlinejax.evaluation.enable_compilation_cache`)
keys an executable by its lowered program, so every run still traces and
lowers each program before it can look the executable up: about 1 s of the
1.2 s a cached GP state machine took to load on a 2-core CPU, and the loading
threads share the GIL. This cache keys a program instead by everything that
determines it *before* tracing — the source of the ``onlinejax`` package, the
configuration, the shapes and dtypes, the evaluation settings, the devices,
the JAX version and the XLA flags — and stores the compiled executable
(:mod:`jax.experimental.serialize_executable`) with the initial states; a hit
costs one deserialisation (0.2–0.5 s).

Not stored while JAX's persistent compilation cache is on: an XLA:CPU
executable that JAX loaded from that cache serialises without part of its
code (jaxlib 0.12: the reloaded program fails with "Function …_fusion not
found"), and a compile cannot be told to skip that cache. :func:`run_grid`
then only loads, and warns; the command line and ``benchmarks/grid.py`` use
this cache *instead of* JAX's.

Only configurations whose ``make`` is defined inside ``onlinejax`` and that
are registered under their name (the zoo's) are cached: their code is all in
the hashed source, so a changed learner changes the key. A configuration
built from user code is compiled as before (its code could change without the
key seeing it). A file that cannot be read or loaded is recompiled and
rewritten. Executables are compiled for the machine's CPU; the key includes
its model and feature flags, so a folder copied to another machine misses
rather than crashing.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import platform
from typing import Any

import jax
import numpy as np

__all__ = ["program_key", "load_executable", "store_executable", "cacheable", "persistent_cache_on", "source_hash"]

_FORMAT = 1


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """SHA-256 over every ``.py`` file of the installed ``onlinejax`` package (path and content)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                h.update(os.path.relpath(p, root).encode())
                with open(p, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _cpu_id() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            lines = [ln for ln in fh if ln.startswith(("model name", "flags", "Features", "CPU part"))]
        return hashlib.sha256("".join(sorted(set(lines))).encode()).hexdigest()
    except OSError:
        return platform.machine() + platform.processor()


def persistent_cache_on() -> bool:
    """True when JAX's persistent compilation cache is configured and enabled."""
    return bool(jax.config.jax_compilation_cache_dir) and bool(jax.config.jax_enable_compilation_cache)


def cacheable(gl, registry) -> bool:
    """True for a registered configuration whose ``make`` is ``onlinejax`` code."""
    mod = getattr(gl.make, "__module__", None) or ""
    reg = registry.get(gl.name)
    return (mod == "onlinejax" or mod.startswith("onlinejax.")) and reg is not None and reg.make is gl.make


def _avals(tree) -> list:
    return [(tuple(a.shape), str(np.dtype(a.dtype))) for a in jax.tree_util.tree_leaves(tree)]


def program_key(gl, states, args, devices, **settings: Any) -> str:
    """Hex key of one grid program: configuration, shapes, settings, devices and software.

    Args:
      gl: the (merged) :class:`~onlinejax.evaluation.GridLearner`.
      states: the ``[H]`` initial states, or their ``jax.eval_shape`` (structure, shapes and
        dtypes enter the key).
      args: the chunk's arrays or ``jax.ShapeDtypeStruct`` s (shapes and dtypes enter the key).
      devices: the devices the program runs on.
      **settings: every other run_grid setting that changes the program
        (delay, level, vmap width, …), as plain values.
    """
    hyper = None if gl.hyper is None else sorted((k, np.asarray(v).tolist()) for k, v in gl.hyper.items())
    parts = [
        _FORMAT, source_hash(), jax.__version__, getattr(jax.lib, "__version__", ""),
        os.environ.get("XLA_FLAGS", ""), _cpu_id(), bool(jax.config.jax_enable_x64),
        str(jax.config.jax_default_matmul_precision),
        [(d.platform, d.device_kind, d.id) for d in devices],
        gl.name, gl.family, gl.score_from, hyper, list(gl.labels or []),
        str(jax.tree_util.tree_structure(states)), _avals(states), _avals(args),
        sorted((k, repr(v)) for k, v in settings.items()),
    ]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _path(folder: str, key: str) -> str:
    return os.path.join(folder, key[:2], key + ".pkl")


def load_executable(folder: str, key: str):
    """``(compiled, states)`` stored under ``key``, or ``None`` (missing, unreadable or not loadable)."""
    from jax.experimental.serialize_executable import deserialize_and_load

    try:
        with open(_path(folder, key), "rb") as fh:
            stored_key, payload, in_tree, out_tree, states = pickle.load(fh)
        if stored_key != key:
            return None
        compiled = deserialize_and_load(payload, in_tree, out_tree)
    except Exception:  # a partial, stale or foreign file: compile afresh and overwrite it
        return None
    return compiled, jax.tree_util.tree_map(jax.numpy.asarray, states)


def store_executable(folder: str, key: str, compiled, states) -> None:
    """Write ``compiled`` and ``states`` under ``key`` (atomically: a temporary file, then a rename)."""
    from jax.experimental.serialize_executable import serialize

    payload, in_tree, out_tree = serialize(compiled)
    path = _path(folder, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{id(compiled)}.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump((key, payload, in_tree, out_tree, jax.tree_util.tree_map(np.asarray, states)), fh)
    os.replace(tmp, path)

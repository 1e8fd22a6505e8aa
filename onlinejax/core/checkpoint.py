"""Save and load any state pytree (learner states, metric accumulators) as a NumPy ``.npz``.

The file holds every leaf as an array with its exact bits (``leaf_0`` …) plus
the tree's structure as text (``__treedef__``), the library version and, when
given, a JSON ``meta`` mapping for what the structure does not show. A
state is loaded *against a template* of the same structure — usually
``learner.init()`` of the same learner configuration — so no pickled code is
ever executed and a mismatch (another learner, another window size, another
dtype) raises a :class:`ValueError` instead of returning a wrong state.
Stopping a stream after item ``k``, saving, loading in a new process and
continuing gives bit-for-bit the same results as the uninterrupted run
(tested in float32 and float64).
"""
from __future__ import annotations

import json
import os
import zipfile
import zlib
from typing import Any, Mapping

import jax
import numpy as np

__all__ = ["save_checkpoint", "load_checkpoint"]


def _leaves(tree):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    for i, a in enumerate(leaves):
        if hasattr(a, "dtype") and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            raise ValueError(f"leaf {i}: PRNG key arrays are not supported; store jax.random.key_data(key)")
    return leaves, treedef


def _meta_text(meta) -> str:
    """``meta`` as canonical JSON text; ``ValueError`` naming ``meta`` unless it is a JSON-able mapping."""
    if not isinstance(meta, Mapping):
        raise ValueError(f"meta: expected a mapping (e.g. {{'bounds': 'bayes'}}), got {type(meta).__name__}")
    try:
        return json.dumps(dict(meta), sort_keys=True)
    except (TypeError, ValueError) as e:
        raise ValueError(f"meta: must be JSON-serialisable ({e})") from None


def save_checkpoint(path: str | os.PathLike, tree: Any, *, meta: Mapping[str, Any] | None = None) -> str:
    """Write ``tree`` (any pytree of arrays and scalars) to ``path`` (``.npz``) and return the path.

    Args:
      path: output file; ``.npz`` is appended by NumPy when missing.
      tree: e.g. a learner state, a metric accumulator state, or a tuple of both.
      meta: optional JSON-able mapping stored with the tree, for what the state's
        structure does not show — e.g. ``{"data": "sensor-7", "model": "v2"}``. (Static
        options of a learner that leave the arrays alike, such as the two ``bounds`` of
        :func:`~onlinejax.learners.linear.windowed_bayes_linreg`, are in the structure already:
        :class:`~onlinejax.core.base.StaticOptions`.)
        :func:`load_checkpoint` given ``meta`` refuses a file saved with another.
    """
    from .. import __version__

    extra = {} if meta is None else {"__meta__": np.asarray(_meta_text(meta))}
    leaves, treedef = _leaves(tree)
    arrays = {f"leaf_{i}": np.asarray(a) for i, a in enumerate(leaves)}
    path = os.fspath(path)
    np.savez(path, __treedef__=np.asarray(str(treedef)), __version__=np.asarray(__version__), **extra, **arrays)
    return path if path.endswith(".npz") else path + ".npz"


def _read(path: str) -> tuple[str, list, str | None]:
    """``(tree structure text, leaves, meta text or None)`` of a checkpoint file, all read now.

    Raises:
      ValueError: naming ``path``, when the file is not a checkpoint (empty, truncated,
        corrupt, not a ``.npz``, or a ``.npz`` without ``__treedef__``).
    """
    try:
        with np.load(path, allow_pickle=False) as f:
            if "__treedef__" not in f.files:
                raise ValueError("no __treedef__ entry: not written by save_checkpoint")
            n = sum(k.startswith("leaf_") for k in f.files)
            meta = str(f["__meta__"]) if "__meta__" in f.files else None
            return str(f["__treedef__"]), [f[f"leaf_{i}"] for i in range(n)], meta
    except (zipfile.BadZipFile, EOFError, ValueError, KeyError, zlib.error) as e:
        # np.load calls any file that is not an .npz/.npy "pickled data": say what it is instead
        pickled = "pickled" in str(e)
        why = "not an .npz file, or one holding pickled objects" if pickled else f"{type(e).__name__}: {e}"
        raise ValueError(f"path: {path!r} is not a readable checkpoint ({why})") from None


def load_checkpoint(path: str | os.PathLike, like: Any, *, meta: Mapping[str, Any] | None = None) -> Any:
    """Read a pytree saved by :func:`save_checkpoint`, with the structure of ``like``.

    Args:
      path: the ``.npz`` file.
      like: a template with the same tree structure, leaf shapes and dtypes
        (``learner.init()`` of the same configuration); only its structure,
        shapes and dtypes are used.
      meta: when given, must equal the ``meta`` the file was saved with
        (:func:`save_checkpoint`); ``None`` does not check it.
    Returns:
      The saved tree, leaves as JAX arrays with the saved bits.
    Raises:
      ValueError: naming ``path`` when the file is not a readable checkpoint
        or its structure differs from ``like``; naming the leaf when a shape
        or a dtype differs; naming ``meta`` when it differs from the saved one.
    """
    want = None if meta is None else _meta_text(meta)
    t_leaves, treedef = _leaves(like)
    saved_def, leaves, saved_meta = _read(os.fspath(path))
    if want is not None and saved_meta != want:
        raise ValueError(f"meta: the checkpoint was saved with {saved_meta or 'no meta'}, expected {want}")
    if saved_def != str(treedef):
        raise ValueError(f"path: the checkpoint's tree structure differs from like's:\n  saved {saved_def}\n"
                         f"  like  {treedef}")
    if len(leaves) != len(t_leaves):
        raise ValueError(f"path: {len(leaves)} leaves saved, like has {len(t_leaves)}")
    out = []
    for i, (a, t) in enumerate(zip(leaves, t_leaves)):
        shape, dtype = np.shape(t), np.asarray(t).dtype if not hasattr(t, "dtype") else np.dtype(t.dtype)
        if a.shape != tuple(shape) or a.dtype != dtype:
            raise ValueError(f"leaf {i}: saved {a.dtype}{list(a.shape)}, like has {dtype}{list(shape)}")
        out.append(jax.numpy.asarray(a))
    return jax.tree_util.tree_unflatten(treedef, out)

"""One-line summaries of pytrees (:func:`tree_repr`, what a state's or a result's ``repr`` shows; :func:`tree_nbytes`)."""
from __future__ import annotations

import jax
import numpy as np

__all__ = ["tree_repr", "tree_nbytes"]


def _leaf_repr(a) -> str:
    if not hasattr(a, "shape"):
        return repr(a)
    if a.shape == () and not isinstance(a, jax.core.Tracer):
        v = np.asarray(a).item()
        return f"{v:.4g}" if isinstance(v, float) else repr(v)
    return f"{np.dtype(a.dtype).name}{list(a.shape)}"


def tree_nbytes(tree) -> int:
    """Bytes of a pytree's array leaves (shapes and dtypes only: also for ``jax.eval_shape`` results)."""
    return sum(int(np.prod(np.shape(a))) * np.dtype(a.dtype).itemsize for a in jax.tree_util.tree_leaves(tree))


def tree_repr(tree, depth: int = 2) -> str:
    """A one-line summary of a pytree: NamedTuple fields by name, arrays by dtype and shape, scalars by value.

    ``BayesLinRegState(mean=float32[2], cov_sqrt=float32[2, 2], beta=1, ...)``: what a ``repr`` of
    a state or a result shows instead of every element.
    """
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        if depth == 0:
            return f"{type(tree).__name__}(...)"
        inner = ", ".join(f"{k}={tree_repr(getattr(tree, k), depth - 1)}" for k in tree._fields)
        return f"{type(tree).__name__}({inner})"
    if isinstance(tree, dict):
        if depth == 0:
            return "{...}"
        return "{" + ", ".join(f"{k!r}: {tree_repr(v, depth - 1)}" for k, v in tree.items()) + "}"
    if isinstance(tree, (list, tuple)):
        return f"{type(tree).__name__}[{len(tree)}]"
    return _leaf_repr(tree)

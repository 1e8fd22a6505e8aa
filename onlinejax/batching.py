"""Control flow that stays cheap under ``vmap``.

``lax.cond`` with a batched predicate becomes a ``select``: *both* branches run
for every element on every call. For a state machine whose rare branch is
expensive (a GP's hyperparameter tune costs ~10⁴ times a learning step), a
vmapped scan over 576 streams would then tune every stream on every item.

:func:`cond_if_any` is ``lax.cond(pred, f, identity, x)`` with a custom
batching rule (``jax.custom_batching.custom_vmap``): under ``vmap`` it runs
the vmapped branch *once for the whole batch, and only if any element's
predicate is true*, then keeps the branch's result where the predicate holds.
The rule calls :func:`cond_if_any` again, so nested ``vmap`` (streams ×
hyperparameters) keeps the property at every level. Results equal those of
the plain ``lax.cond`` exactly (it is the same computation, selected).

Measured (``/tmp`` prototype, 2-core CPU, 8 streams × 1000 items with one
expensive branch per stream at the same item): 0.26 s vs 14.7 s for 50 items
with a vmapped ``lax.cond``.
"""
from __future__ import annotations

from typing import Callable, TypeVar

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

T = TypeVar("T")

__all__ = ["cond_if_any"]


def _broadcast(tree, batched, size):
    return jax.tree_util.tree_map(lambda a, b: a if b else jnp.broadcast_to(a, (size,) + jnp.shape(a)), tree, batched)


def cond_if_any(f: Callable[[T], T]) -> Callable[[jax.Array, T], T]:
    """``g(pred, x) = f(x) if pred else x``, lazily evaluated even under ``vmap``.

    Args:
      f: a pure function from a pytree to a pytree of the same structure,
        shapes and dtypes. It must not close over traced values (pass them
        inside ``x``).
    Returns:
      ``g(pred: bool [], x) -> x``. Under ``vmap`` with a batched ``pred``,
      ``f`` runs (vmapped, for the whole batch) only on calls where at least
      one element's ``pred`` is true.
    """

    @custom_vmap
    def g(pred, x):
        return jax.lax.cond(pred, f, lambda v: v, x)

    @g.def_vmap
    def _rule(axis_size, in_batched, pred, x):
        pred_b, x_b = in_batched
        pred = pred if pred_b else jnp.broadcast_to(pred, (axis_size,))
        x = _broadcast(x, x_b, axis_size)

        def branch(px):
            p, v = px
            fv = jax.vmap(f)(v)
            keep = lambda a, b: jnp.where(p.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
            return p, jax.tree_util.tree_map(keep, fv, v)

        out = cond_if_any(branch)(jnp.any(pred), (pred, x))[1]
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return g

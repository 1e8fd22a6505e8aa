"""Control flow that stays cheap under ``vmap``.

``lax.cond`` with a batched predicate becomes a ``select``: *both* branches run
for every element on every call. For a state machine whose rare branch is
expensive (a GP's hyperparameter tune costs ~10⁴ times a learning step), a
vmapped scan over 576 streams would then tune every stream on every item.

:func:`cond_if_any` is ``lax.cond(pred, f, identity, x)`` with a custom
batching rule (``jax.custom_batching.custom_vmap``). Under ``vmap`` it does
nothing on calls where no element's predicate is true; otherwise

* ``max_batch=None``: runs the vmapped branch once for the whole batch and
  keeps its result where the predicate holds (best when many elements need
  the branch at once, e.g. a learning step);
* ``max_batch=k``: gathers the elements that need the branch, ``k`` at a
  time (static shapes: ``jnp.nonzero(..., size=k)``), runs the branch on
  those only and scatters the results back, in a ``while_loop`` until all
  are done — so the cost follows the number of elements that need the
  branch, not the batch size (best for a rare, expensive branch such as a
  tune, which different streams need on different items). With ``k = 1``
  the branch runs on the one element itself, not under a ``vmap`` of
  width 1, so the branch's own ``cond`` s (a converged optimiser skipping
  its remaining iterations) stay branches instead of becoming selects.

For nested ``vmap`` (streams × hyperparameters) the whole-batch rule calls
:func:`cond_if_any` again, so every level keeps the property; the compacted
rule applies at the innermost level. Results equal those of a plain
``lax.cond`` exactly (the same computation, selected).

:func:`computed_if_any` is the same for a branch that computes a new value
from ``x`` rather than a new ``x``: ``f(x)`` where the predicate holds and
zeros elsewhere, for the caller's ``jnp.where``. Its operand is only read
(``cond_if_any``'s branch not taken is the identity, whose result XLA:CPU
copies on every call: a covariance factor in the operand then costs a copy of
it on every item), and under ``vmap`` it stays out of the compacted rule's loop.
"""
from __future__ import annotations

from typing import Callable, Optional, TypeVar

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from .base import check_int

T = TypeVar("T")

__all__ = ["cond_if_any", "computed_if_any", "broadcast_unbatched"]


def broadcast_unbatched(tree, batched, size: int):
    """In a ``custom_vmap`` rule: ``tree``'s leaves that are not batched (``batched`` leaf ``False``) given
    the leading batch axis ``[size, ...]`` of the batched ones, so one ``jax.vmap`` can take them all."""
    return jax.tree_util.tree_map(lambda a, b: a if b else jnp.broadcast_to(a, (size,) + jnp.shape(a)), tree, batched)


def _rows(mask, a):
    return mask.reshape((-1,) + (1,) * (a.ndim - 1))


def _compacted(f: Callable, pred, out, k: int, axis_size: int, source=None):
    """The compacted rule's loop: ``f`` on the elements where ``pred`` (``[B]``) holds, ``k`` at a time
    (static shapes: ``jnp.nonzero(..., size=k)``), written into ``out`` (``[B, ...]`` leaves); ``f`` reads
    ``source``'s elements, or with ``source=None`` those of ``out`` itself (updated in place)."""

    def body(carry):
        todo, acc = carry
        idx = jnp.nonzero(todo, size=k, fill_value=axis_size)[0]  # out of range = unused slot
        # the barrier materialises the gathered elements: without it XLA fused the gather
        # into f's consumers and a KR tune (W = 128) ran 3x slower inside this loop
        src = acc if source is None else source
        sub = jax.lax.optimization_barrier(jax.tree_util.tree_map(lambda a: a.at[idx].get(mode="clip"), src))
        if k == 1:  # f itself, not a vmap of width 1: f's own conds stay branches, not selects
            new = jax.tree_util.tree_map(lambda a: a[None], f(jax.tree_util.tree_map(lambda a: a[0], sub)))
        else:
            new = jax.vmap(f)(sub)
        acc = jax.tree_util.tree_map(lambda a, b: a.at[idx].set(b, mode="drop"), acc, new)
        return todo.at[idx].set(False, mode="drop"), acc

    return jax.lax.while_loop(lambda c: jnp.any(c[0]), body, (pred, out))[1]


def cond_if_any(f: Callable[[T], T], max_batch: Optional[int] = None) -> Callable[[jax.Array, T], T]:
    """``g(pred, x) = f(x) if pred else x``, lazily evaluated even under ``vmap``.

    Args:
      f: a pure function from a pytree to a pytree of the same structure,
        shapes and dtypes. It must not close over traced values (pass them
        inside ``x``).
      max_batch: ``None`` to run the branch for the whole batch when any
        element needs it; an int ``k >= 1`` to run it only on the elements
        that need it, ``k`` at a time (see the module doc).
    Returns:
      ``g(pred: bool [], x) -> x``.
    """
    return _lazy(f, max_batch, computed=False)


def _zeros(tree):
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), tree)


def computed_if_any(f: Callable, max_batch: Optional[int] = None) -> Callable:
    """``h(pred, x) = f(x) if pred else zeros``, lazily evaluated even under ``vmap`` (module doc).

    Meant for ``jnp.where(pred, h(pred, x), otherwise)``: the select fuses with what computes ``otherwise``,
    and ``x`` is only read, so a large operand costs nothing on the calls that skip the branch.

    Args:
      f: a pure function of a pytree ``x``, returning a pytree of arrays (any structure). It must not close
        over traced values (pass them inside ``x``).
      max_batch: as :func:`cond_if_any`'s.
    Returns:
      ``h(pred: bool [], x) -> f(x)``'s structure, zeros where ``pred`` is false.
    """
    return _lazy(f, max_batch, computed=True)


def _lazy(f: Callable, max_batch: Optional[int], computed: bool) -> Callable:
    """:func:`cond_if_any` (``computed=False``: the branch not taken is the identity) or :func:`computed_if_any`
    (``True``: it gives zeros of ``f``'s result)."""
    if max_batch is not None:
        max_batch = check_int(max_batch, "max_batch", 1)
    skip = (lambda v: _zeros(jax.eval_shape(f, v))) if computed else (lambda v: v)

    @custom_vmap
    def g(pred, x):
        return jax.lax.cond(pred, f, skip, x)

    @g.def_vmap
    def _rule(axis_size, in_batched, pred, x):
        pred, x = broadcast_unbatched((pred, x), tuple(in_batched), axis_size)
        if max_batch is None or max_batch >= axis_size:

            def branch(px):
                p, v = px
                fv, kept = jax.vmap(f)(v), jax.vmap(skip)(v)
                out = jax.tree_util.tree_map(lambda a, b: jnp.where(_rows(p, a), a, b), fv, kept)
                return out if computed else (p, out)

            out = _lazy(branch, None, computed)(jnp.any(pred), (pred, x))
            out = out if computed else out[1]
        elif computed:  # x is read, not carried: the loop carries only the results
            out = _compacted(f, pred, _zeros(jax.eval_shape(jax.vmap(f), x)), min(int(max_batch), axis_size),
                             axis_size, source=x)
        else:
            out = _compacted(f, pred, x, min(int(max_batch), axis_size), axis_size)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return g

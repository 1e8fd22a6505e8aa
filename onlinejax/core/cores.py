"""Building blocks of a learner's pure cores, the functions that run under ``jit``, ``vmap`` and ``scan``.

The branch-free skip of an item that cannot be learned (:func:`learnable`,
:func:`keep_if`, :func:`zero_unusable`, :func:`skip_nonfinite`), Welford's
running statistics (:func:`welford_update`), the sequential lift of a
single-item core to mini-batches (:func:`sequential`) and the full matrix
product precision every learner is traced under (:func:`full_precision`).
"""
from __future__ import annotations

from typing import Any, Callable

import functools

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
State = Any

__all__ = ["welford_update", "keep_if", "learnable", "BLAS_MIN_FEATURES", "zero_unusable", "skip_nonfinite",
           "sequential", "full_precision"]


def welford_update(n: Array, mean: Array, var: Array, value: Array, decay=1.0) -> tuple[Array, Array, Array]:
    """One step of Welford's running mean and variance, in the variance form, the past faded by ``decay``.

    ``n ← min(δn + 1, n_max)``, ``m ← m + (v - m_old)/n``,
    ``σ² ← σ² + ((v - m_old)(v - m) - σ²)/n`` (Welford 1962; West 1979 for
    weights; the variance form as in Finch 2009, "Incremental calculation of
    weighted mean and variance"). ``σ²`` is the (weighted) mean squared
    deviation ``M2/n``, not the growing sum ``M2``: where the count stops,
    the estimates stop moving instead of drifting (a float32 count stops
    at ``2²⁴``, while ``M2`` would keep growing).

    The count saturates at ``n_max = 1/(32ε)`` of the dtype (``2¹⁸`` in
    float32, ``2⁴⁷`` in float64): up to there a new item moves the estimates
    by tens of units in their last place, so their rounding errors average
    out; with a larger count the increments shrink to a few units in the
    last place and their rounding, which does not average out, biases the
    variance. Beyond ``n_max`` items the statistics are exponentially
    weighted with a memory of ``n_max`` items. Element-wise: ``mean``, ``var`` and ``value``
    share a shape (``[]`` or ``[d]``), ``n`` is ``[]``.

    Args:
      n: ``[]`` (decayed) count of the items so far (0 before the first).
      mean: running mean; var: running mean squared deviation (any finite values before the first item: the
        first sets the mean to itself and the variance to 0 exactly).
      value: the new item; decay: weight of the past per item, in ``(0, 1]``.
    Returns:
      ``(n, mean, var)`` after ``value``.
    """
    n_max = 1.0 / (32.0 * jnp.finfo(jnp.result_type(n, mean)).eps)
    first = n == 0  # the first item is the mean exactly (from a kept nonzero mean, m + (v - m) can miss v by an ulp
    n = jnp.minimum(decay * n + 1.0, n_max)  # and its variance would read that ulp times |v - m| as a spread)
    delta = value - mean
    mean = jnp.where(first, value, mean + delta / n)
    return n, mean, jnp.where(first, 0.0, var + (delta * (value - mean) - var) / n)


def keep_if(ok: Array, new: State, old: State) -> State:
    """Per-leaf ``where(ok, new, old)``: a branch-free conditional state update."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, old)


def learnable(x: Array, y: Array) -> Array:
    """Whether items can be learned: ``x`` and ``y`` finite and small enough to square.

    A finite value beyond ``sqrt(max / d)`` of its dtype (``|v| ≳ 1.8e19 / √d`` in float32)
    overflows ``xᵀx`` or ``y²`` in the learners' updates and would leave a non-finite state
    for good, so it counts as unusable like NaN or ±inf.

    Args:
      x: ``[..., d]`` inputs; y: ``[...]`` targets.
    Returns:
      ``[...]`` bool, ``True`` for the items a learner may absorb.
    """
    x = jnp.asarray(x)
    y = jnp.asarray(y)
    dtype = jnp.result_type(x, y, jnp.float32)
    limit = np.sqrt(np.finfo(dtype).max / max(1, x.shape[-1] + 1)) / 2
    return jnp.all(jnp.abs(x) <= limit, axis=-1) & (jnp.abs(y) <= limit)


#: Input widths from which XLA:CPU computes a learner's matrix-vector products with BLAS calls rather than
#: inline loops: there a fused producer of ``x`` costs more than materialising it (:func:`zero_unusable`),
#: and a step that shares ``Wᵀx`` between prediction and update pays off
#: (:func:`onlinejax.learners.linear.bayes.step_one`); below it the fused, separate forms are faster.
BLAS_MIN_FEATURES = 12


def zero_unusable(x: Array, x_ok: Array, y: Array, y_ok: Array) -> tuple[Array, Array]:
    """``(x, y)`` with the rows of ``x`` where ``x_ok`` is false and the ``y`` where ``y_ok`` is false set to 0.

    Shapes: ``x: [..., d]``, ``x_ok, y, y_ok: [...]``. From ``d >=``
    :data:`BLAS_MIN_FEATURES` the result passes through an optimisation barrier:
    left to itself XLA:CPU fuses the ``where`` into the matrix-vector products
    that consume ``x``, and a dot with a fused operand is emitted as a plain
    loop instead of a call to the BLAS kernel, several times slower at the
    widths where BLAS is used (``benchmarks/bayes_linreg.py``).
    """
    xz = jnp.where(x_ok[..., None], x, jnp.zeros_like(x))
    yz = jnp.where(y_ok, y, jnp.zeros_like(y))
    if x.shape[-1] < BLAS_MIN_FEATURES:  # narrower products are emitted inline, and fusing them is cheaper
        return xz, yz
    return jax.lax.optimization_barrier((xz, yz))


def skip_nonfinite(fn: Callable, returns_prediction: bool = False) -> Callable:
    """Make a single-item ``fn(state, x, y)`` leave the state unchanged when ``x`` or ``y`` is not
    finite (or too large to square, see :func:`learnable`).

    The skipped state has its ``n_skipped`` counter (a ``[]`` int32 field every
    learner state that uses this carries) incremented; ``fn`` still runs, so
    under ``vmap`` every stream executes the same program (a branch-free
    :func:`keep_if`). With ``returns_prediction`` (a ``step_one``), ``fn``
    returns ``(state, prediction)`` and the prediction is passed through.
    :func:`~onlinejax.core.learner.make_learner` applies it (``skip_nonfinite=True``); it is exported
    for wrappers that build their step from other learners' cores.

    ``fn`` never sees a non-finite value: a skipped item reaches it with
    ``y = 0`` and, where ``x`` has a non-finite element, ``x = 0`` (the
    prediction of such an ``x`` is then NaN, as before; a finite ``x`` too
    large to square reaches ``fn`` as it is, so its prediction is kept). Without this,
    ``jax.grad`` of anything computed through the learner is NaN as soon as
    one item was skipped: the ``where`` sends a zero cotangent into ``fn``'s
    unused branch, and zero times the NaN partials of ``fn`` at a NaN
    ``x`` is NaN (the "double where" rule of JAX's FAQ).
    """

    def wrapped(state, x, y):
        ok = learnable(x, y)
        x_finite = jnp.all(jnp.isfinite(x), axis=-1)
        out = fn(state, *zero_unusable(x, x_finite, y, ok))
        new = out[0] if returns_prediction else out
        kept = keep_if(ok, new, state._replace(n_skipped=state.n_skipped + 1))
        if not returns_prediction:
            return kept
        nan_if_bad = lambda a: jnp.where(x_finite, a, jnp.nan) if jnp.issubdtype(a.dtype, jnp.floating) else a  # noqa: E731
        return kept, jax.tree_util.tree_map(nan_if_bad, out[1])

    return wrapped


def _skip_with_prediction(update_one: Callable) -> Callable:
    """:func:`skip_nonfinite` for an ``update_one(state, x, y, pred)``: a skipped item's prediction reaches it as ones."""

    def wrapped(state, x, y, pred):
        ok = learnable(x, y)
        pred = jax.tree_util.tree_map(
            lambda a: jnp.where(ok, a, jnp.ones_like(a)) if jnp.issubdtype(a.dtype, jnp.floating) else a, pred)
        return skip_nonfinite(lambda s, x_, y_: update_one(s, x_, y_, pred))(state, x, y)

    return wrapped


def sequential(learn_one: Callable[[State, Array, Array], State]):
    """Lift a single-item ``learn_one`` to mini-batches by scanning over rows."""

    def learn_many(state, X, Y):
        def body(s, xy):
            return learn_one(s, *xy), None

        return jax.lax.scan(body, state, (X, Y))[0]

    return learn_many


def full_precision(fn: Callable) -> Callable:
    """``fn`` traced with its matrix products in the full precision of their dtype, on every backend.

    Without it JAX's default precision lets a float32 matrix product run in
    TensorFloat-32 on NVIDIA GPUs (10-bit mantissas: relative errors of
    about 1e-3 per product instead of 1e-7), which moves a GP's or a
    posterior's predictive variance by far more than its float32 rounding.
    The precision is fixed when ``fn`` is traced or differentiated
    (``jax.default_matmul_precision("highest")`` around the call), so it
    holds inside a user's ``jit``, ``vmap`` and ``jvp``/``grad`` too; on a
    CPU, and for float64, every precision computes the same products.
    :func:`~onlinejax.core.learner.make_learner` applies it to every function of the
    :class:`~onlinejax.core.learner.Learner` it returns.
    """

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return wrapped

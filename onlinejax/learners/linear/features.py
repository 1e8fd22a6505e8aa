"""Feature-space mapping as a composable wrapper around any linear learner.

Thesis 4.2.0.1 and 5.4.1.1: every monomial ``x_i^a x_j^b`` with
``1 <= a + b <= 2`` (the inputs, their squares and pairwise products) plus the
logarithm and the square root of each input, ``d + d(d+1)/2 + 2d`` features.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

import numpy as np

from ...core.base import Learner, LearnerCores, describe_factory, make_learner, pass_through

Array = jax.Array

__all__ = ["FeatureMap", "thesis_features", "square_limit", "odd_features", "intercept_features", "compose", "map_features"]


class FeatureMap(NamedTuple):
    """A static map ``φ: R^{n_in} -> R^{n_out}`` written for one point.

    Attributes:
      n_in: input width ``d``.
      n_out: feature width ``m``.
      fn: ``fn(x: [n_in]) -> [n_out]``; lifted to batches with ``vmap``.
      names: ``n_out`` human-readable feature names.
    """

    n_in: int
    n_out: int
    fn: Callable[[Array], Array]
    names: tuple

    def __call__(self, x: Array) -> Array:
        """Apply to ``x: [n_in]`` or ``[b, n_in]``."""
        return jax.vmap(self.fn)(x) if x.ndim == 2 else self.fn(x)


def _odd_log_root(v: Array) -> list:
    """``[sign(v)·log(1 + |v|), sign(v)·√|v|]``: the odd, finite extensions of log and square root."""
    return [jnp.sign(v) * jnp.log1p(jnp.abs(v)), jnp.sign(v) * jnp.sqrt(jnp.abs(v))]


def square_limit(dtype) -> float:
    """``(max / 4096)^(1/4)`` of ``dtype`` (5.4e8 in float32): the inputs' magnitude beyond which
    :func:`thesis_features` saturates the squares and products, so that a feature's square, which a
    standardiser's variance and a linear learner's update hold, stays representable for up to about
    a thousand features (:func:`~onlinejax.core.cores.learnable` refuses an item otherwise)."""
    return float(np.finfo(dtype).max / 4096) ** 0.25


@functools.lru_cache(maxsize=None)
def thesis_features(n_inputs: int) -> FeatureMap:
    """The thesis's mapping: monomials of degree 1 and 2, plus log and sqrt of each input.

    Non-positive inputs: the thesis applies ``log`` and ``sqrt`` to positive
    inputs only (its synthetic inputs are ``U(0,1)·scale``), where ``log(0)``
    is ``-inf`` and negatives give NaN. We use the odd, finite extensions
    ``sign(x)·log(1 + |x|)`` and ``sign(x)·sqrt(|x|)`` instead, which agree in
    shape with ``log``/``sqrt`` for positive inputs, are finite everywhere and
    never produce NaN. The squares and products are those of the inputs
    clipped at :func:`square_limit` (5.4e8 in float32: beyond it the square
    of a timestamp in seconds would be refused as unusable, and the item with it).
    Equal calls return the same map (so the learners built on it are equal too).

    Args:
      n_inputs: ``d``.
    Returns:
      A :class:`FeatureMap` with ``n_out = d + d(d+1)/2 + 2d``.
    """
    d = int(n_inputs)
    if d < 1:
        raise ValueError(f"n_inputs: must be >= 1, got {n_inputs!r}")
    iu, ju = np.triu_indices(d)
    names = [f"x{i}" for i in range(d)]
    names += [f"x{i}^2" if i == j else f"x{i}*x{j}" for i, j in zip(iu, ju)]
    names += [f"slog1p(x{i})" for i in range(d)] + [f"ssqrt(x{i})" for i in range(d)]

    def fn(x):
        lim = square_limit(x.dtype)
        xs = jnp.clip(x, -lim, lim)
        quad = (xs[:, None] * xs[None, :])[iu, ju]
        return jnp.concatenate([x, quad, *_odd_log_root(x)])

    return FeatureMap(d, len(names), fn, tuple(names))


@functools.lru_cache(maxsize=None)
def odd_features(n_in: int, n_inputs: int) -> FeatureMap:
    """Append ``sign(z)·log(1 + |z|)`` and ``sign(z)·√|z|`` of the first ``n_inputs`` of ``n_in`` features.

    Meant behind a standardiser over :func:`thesis_features` of the raw
    inputs, whose first ``d`` features are then the standardised inputs
    ``z``. The two maps hold different shapes: the raw inputs' log and
    square root follow log-linear and square-root growth of positive inputs
    (the thesis's intent), while these odd features of the centred ``z`` turn
    sharply at the inputs' centre, like a step there. (The quadratics of raw
    and of standardised inputs span the same space.)

    Args:
      n_in: width of the features given (``>= n_inputs``).
      n_inputs: ``d``, how many leading features are the inputs.
    Returns:
      A :class:`FeatureMap` ``[n_in] -> [n_in + 2d]``: the features, then the ``d`` odd logs and ``d`` odd roots
      (equal calls return the same map).
    """
    n, d = int(n_in), int(n_inputs)
    if not 1 <= d <= n:
        raise ValueError(f"n_inputs: must be in [1, n_in = {n}], got {n_inputs!r}")
    names = tuple(f"f{i}" for i in range(n)) + tuple(f"slog1p(z{i})" for i in range(d)) + tuple(
        f"ssqrt(z{i})" for i in range(d))

    def fn(v):
        return jnp.concatenate([v, *_odd_log_root(v[:d])])

    return FeatureMap(n, n + 2 * d, fn, names)


def intercept_features(n_inputs: int) -> FeatureMap:
    """Append a constant 1 (the thesis code had no intercept)."""
    d = int(n_inputs)
    return FeatureMap(d, d + 1, lambda x: jnp.concatenate([x, jnp.ones((1,), x.dtype)]),
                      tuple(f"x{i}" for i in range(d)) + ("1",))


def compose(first: FeatureMap, second: FeatureMap) -> FeatureMap:
    """``second ∘ first``."""
    if second.n_in != first.n_out:
        raise ValueError(f"second: expects {second.n_in} inputs, first produces {first.n_out}")
    return FeatureMap(first.n_in, second.n_out, lambda x: second.fn(first.fn(x)), second.names)


@describe_factory
def map_features(fmap: FeatureMap, learner: Learner) -> Learner:
    """A learner on raw inputs ``[n_in]`` that runs ``learner`` on ``fmap(x)``.

    Args:
      fmap: the map; ``fmap.n_out`` must equal ``learner.n_features``.
      learner: any learner (linear, SGD, windowed, ...).
    Returns:
      A :class:`Learner` with ``n_features = fmap.n_in`` and the same state;
      ``tune``, ``downdate`` (of a raw item, mapped) and ``evict`` pass through.
    """
    if learner.n_features != fmap.n_out:
        raise ValueError(f"learner: has {learner.n_features} features, fmap produces {fmap.n_out}")
    # the state is the inner learner's own; a given item is downdated in its features
    ops = pass_through(learner, get=lambda s: s, put=lambda s, inner: inner, map_item=lambda s, x, y: (fmap.fn(x), y))
    out = make_learner(
        init=learner.init,
        learn_one=lambda s, x, y: learner.learn(s, fmap.fn(x), y),
        predict_one=lambda s, x: learner.predict(s, fmap.fn(x)),
        n_features=fmap.n_in,
        cores=LearnerCores(
            learn_batch=lambda s, X, Y: learner.learn(s, jax.vmap(fmap.fn)(X), Y),
            predict_batch=lambda s, X: learner.predict(s, jax.vmap(fmap.fn)(X)),
            step_one=lambda s, x, y: learner.step(s, fmap.fn(x), y),  # the inner learner's fused step, if it has one
            update_one=lambda s, x, y, pred: learner.update(s, fmap.fn(x), y, pred),
            **ops,
        ),
    )
    return out


"""Synthetic streams.

``drifting_linear_stream`` is the blog's concept-drift benchmark
(``002_c70c839f662b534f.txt``, "Handling concept drift"): features
``x = [1, u]``, ``u ~ U(-1, 1)``; the weights are ``[-0.3, 0.5]`` for
``first_period`` items, move linearly to ``[1, -0.7]`` over
``transition_period`` items and stay there; noise ``N(0, noise_std²)``.
(The blog's code computes ``ratio·start + (1-ratio)·end`` during the
transition, which jumps to the end weights and drifts back; we implement the
linear transition its text and figure describe.)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..base import default_float_dtype

__all__ = ["drifting_linear_stream", "BLOG_START_WEIGHTS", "BLOG_END_WEIGHTS"]

BLOG_START_WEIGHTS = (-0.3, 0.5)
BLOG_END_WEIGHTS = (1.0, -0.7)


def drifting_linear_stream(key, first_period: int = 100, transition_period: int = 50, second_period: int = 100,
                           noise_std: float = 0.2, dtype=None):
    """The blog's drifting two-weight stream.

    Args:
      key: a ``jax.random`` key (vmap over keys for many streams).
      first_period, transition_period, second_period: lengths (static ints >= 0).
      noise_std: standard deviation of the additive Gaussian noise.
      dtype: floating dtype.
    Returns:
      ``(X [n, 2], Y [n], weights [n, 2])`` with ``n`` the total length;
      ``weights`` are the true generating weights per item.
    """
    for name, v in (("first_period", first_period), ("transition_period", transition_period),
                    ("second_period", second_period)):
        if int(v) != v or v < 0:
            raise ValueError(f"{name}: must be an integer >= 0, got {v!r}")
    dtype = dtype or default_float_dtype()
    n = first_period + transition_period + second_period
    if n == 0:
        raise ValueError("first_period + transition_period + second_period: must be > 0")
    ku, ke = jax.random.split(key)
    u = jax.random.uniform(ku, (n,), dtype, -1.0, 1.0)
    X = jnp.stack([jnp.ones((n,), dtype), u], axis=1)
    i = jnp.arange(n, dtype=dtype)
    ratio = jnp.clip((i - first_period) / max(transition_period, 1), 0.0, 1.0)
    if transition_period == 0:
        ratio = (i >= first_period).astype(dtype)
    w0 = jnp.asarray(BLOG_START_WEIGHTS, dtype)
    w1 = jnp.asarray(BLOG_END_WEIGHTS, dtype)
    weights = (1 - ratio)[:, None] * w0 + ratio[:, None] * w1
    Y = jnp.sum(X * weights, axis=1) + noise_std * jax.random.normal(ke, (n,), dtype)
    return X, Y, weights

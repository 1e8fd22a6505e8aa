"""A fixed-capacity ring buffer with a validity mask.

Shapes never change as items arrive, so a windowed learner never recompiles:
the buffer is always ``[W, d]``/``[W]`` and ``valid`` says which slots hold a
live item (thesis 5.2.2 uses a ring buffer for the same reason).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array

__all__ = ["RingBuffer", "ring_init", "ring_push", "ring_pop_oldest", "ring_oldest"]


class RingBuffer(NamedTuple):
    """Ring buffer state.

    Attributes:
      x: ``[W, d]`` stored inputs (stale slots hold old values; see ``valid``).
      y: ``[W]`` stored targets.
      valid: ``[W]`` bool, True where a slot holds an item of the window.
      head: ``[]`` int32, the slot the next item is written to.
      count: ``[]`` int32, number of items in the window (``<= W``).
    """

    x: Array
    y: Array
    valid: Array
    head: Array
    count: Array


def ring_init(capacity: int, n_features: int, dtype) -> RingBuffer:
    """An empty buffer of static ``capacity`` (``W``) for ``n_features`` inputs."""
    if int(capacity) < 1:
        raise ValueError(f"window: must be >= 1, got {capacity!r}")
    return RingBuffer(
        x=jnp.zeros((capacity, n_features), dtype),
        y=jnp.zeros((capacity,), dtype),
        valid=jnp.zeros((capacity,), bool),
        head=jnp.zeros((), jnp.int32),
        count=jnp.zeros((), jnp.int32),
    )


def _oldest_slot(buf: RingBuffer) -> Array:
    W = buf.y.shape[0]
    return (buf.head - buf.count) % W


def ring_oldest(buf: RingBuffer):
    """``(x [d], y [], present [])``: the oldest item, and whether the window is non-empty."""
    i = _oldest_slot(buf)
    return buf.x[i], buf.y[i], buf.count > 0


def ring_push(buf: RingBuffer, x: Array, y: Array, window: Array | None = None) -> RingBuffer:
    """Write ``(x, y)`` at ``head``; when full this overwrites the oldest item.

    Args:
      buf: the buffer (capacity ``W``).
      x: ``[d]``; y: ``[]``: the new item.
      window: optional ``[]`` int ``w <= W``: a window shorter than the buffer.
        When the buffer already holds ``w`` items the oldest leaves it first,
        so it never holds more than ``w`` (``w`` is an array: windows of
        different lengths share one compiled program). ``None``: ``w = W``.
    """
    W = buf.y.shape[0]
    valid, count = buf.valid, buf.count
    if window is not None:
        full = count >= window
        i = _oldest_slot(buf)
        valid = valid.at[i].set(valid[i] & ~full)
        count = count - full.astype(count.dtype)
    h = buf.head
    return RingBuffer(
        x=buf.x.at[h].set(x),
        y=buf.y.at[h].set(y),
        valid=valid.at[h].set(True),
        head=(h + 1) % W,
        count=jnp.minimum(count + 1, W),
    )


def ring_pop_oldest(buf: RingBuffer) -> RingBuffer:
    """Drop the oldest item (no-op on an empty buffer)."""
    i = _oldest_slot(buf)
    nonempty = buf.count > 0
    return buf._replace(
        valid=buf.valid.at[i].set(jnp.where(nonempty, False, buf.valid[i])),
        count=jnp.maximum(buf.count - 1, 0),
    )

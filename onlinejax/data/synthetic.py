"""Synthetic streams.

``drifting_linear_stream`` is the blog's concept-drift benchmark
(``002_c70c839f662b534f.txt``, "Handling concept drift"): features
``x = [1, u]``, ``u ~ U(-1, 1)``; the weights are ``[-0.3, 0.5]`` for
``first_period`` items, move linearly to ``[1, -0.7]`` over
``transition_period`` items and stay there; noise ``N(0, noise_std²)``.
(The blog's code computes ``ratio·start + (1-ratio)·end`` during the
transition, which jumps to the end weights and drifts back; we implement the
linear transition its text and figure describe.)

``abrupt_drift_stream`` is a thesis-style stream (thesis 6.2.2): inputs
``U(0, 1)·input_scale``, coefficients ``U(0, 10)``, one of the thesis's growth
functions, all coefficients redrawn at ``drift_at``, Gaussian noise.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core.base import check_int, default_float_dtype

__all__ = ["drifting_linear_stream", "abrupt_drift_stream", "growth", "GROWTHS", "BLOG_START_WEIGHTS", "BLOG_END_WEIGHTS"]

#: Thesis 6.2.2 growth functions of ``x [d]`` with coefficients ``b [d]``.
GROWTHS = ("linear", "loglinear", "quadratic_sum", "quadratic_dot")

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


def growth(kind: str, b, x):
    """A thesis growth function (6.2.2) of one input ``x [d]`` with coefficients ``b [d]``.

    ``linear``: ``bᵀx``; ``loglinear``: ``s·log(s)`` with ``s = bᵀx`` (0 at
    ``s = 0``); ``quadratic_sum``: ``Σ_j b_j x_j²``; ``quadratic_dot``: ``(bᵀx)²``.
    """
    s = jnp.dot(b, x)
    if kind == "linear":
        return s
    if kind == "loglinear":
        return jnp.where(s > 0, s * jnp.log(jnp.where(s > 0, s, 1.0)), 0.0)
    if kind == "quadratic_sum":
        return jnp.dot(b, x * x)
    if kind == "quadratic_dot":
        return s * s
    raise ValueError(f"kind: must be one of {GROWTHS}, got {kind!r}")


def abrupt_drift_stream(key, n_items: int = 2000, n_features: int = 2, *, drift_at: int | None = 1000,
                        kind: str = "linear", input_scale: float = 10.0, noise_std: float = 1.0,
                        redraw: str = "uniform", dtype=None):
    """A stream whose generating function changes abruptly (thesis 6.2.2 style).

    Args:
      key: ``jax.random`` key (vmap over keys for many streams).
      n_items, n_features: ``n`` and ``d`` (static).
      drift_at: item index where every coefficient is redrawn (None: no drift).
      redraw: ``"uniform"`` draws new coefficients ``U(0, 10)`` (the thesis);
        ``"reverse"`` reverses the coefficient vector — a different function
        of the same difficulty (the inputs are i.i.d. across dimensions), so
        a learner's error before and after the drift is directly comparable.
      kind: growth function, one of :data:`GROWTHS`.
      input_scale: inputs are ``U(0, 1)·input_scale``.
      noise_std: standard deviation of the Gaussian noise.
      dtype: floating dtype.
    Returns:
      ``(X [n, d], Y [n], F [n])``: inputs, noisy targets, noise-free function values.
    """
    if kind not in GROWTHS:
        raise ValueError(f"kind: must be one of {GROWTHS}, got {kind!r}")
    if redraw not in ("uniform", "reverse"):
        raise ValueError(f"redraw: must be 'uniform' or 'reverse', got {redraw!r}")
    n_items = check_int(n_items, "n_items", 1)
    n_features = check_int(n_features, "n_features", 1)
    dtype = dtype or default_float_dtype()
    kx, kb1, kb2, ke = jax.random.split(key, 4)
    X = jax.random.uniform(kx, (n_items, n_features), dtype) * input_scale
    b1 = jax.random.uniform(kb1, (n_features,), dtype, 0.0, 10.0)
    b2 = jax.random.uniform(kb2, (n_features,), dtype, 0.0, 10.0) if redraw == "uniform" else b1[::-1]
    f = jax.vmap(lambda b, x: growth(kind, b, x), (None, 0))
    F = f(b1, X)
    if drift_at is not None:
        F = jnp.where(jnp.arange(n_items) < drift_at, F, f(b2, X))
    Y = F + noise_std * jax.random.normal(ke, (n_items,), dtype)
    return X, Y, F

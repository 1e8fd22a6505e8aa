"""A GP's hyperparameters and the variances they imply: :class:`GPParams`, the signal, summed-term and noise variances.

The noise variance has a floor relative to the signal's (:func:`noise_floor_rel`, :func:`noise_var`), which
bounds the condition number of ``K + σ_n²I`` whatever a tune proposes (:mod:`onlinejax.learners.gp.window`).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

__all__ = ["GPParams", "noise_floor_rel", "signal_var", "summed_terms_var", "noise_var", "lengthscales",
           "SUMMED_TERMS_FLOOR_SHARE"]


class GPParams(NamedTuple):
    """Unconstrained GP hyperparameters.

    Attributes:
      log_signal_std: ``[]`` ``log σ_f``.
      log_noise_std: ``[]`` ``log σ_n`` (before the dtype's noise floor, see :func:`noise_var`).
      log_lengthscale: ``[d]`` ``log ℓ_j``.
      extra: the kernel's own unconstrained hyperparameters (:meth:`~onlinejax.learners.gp.kernels.Kernel.extra_init`; ``()`` for the
        built-in kernels), e.g. ``{"log_period": [d], "log_lengthscale": [d]}`` for :func:`~onlinejax.learners.gp.kernels.periodic`.
    """

    log_signal_std: Array
    log_noise_std: Array
    log_lengthscale: Array
    extra: Any = ()


def noise_floor_rel(dtype) -> float:
    """Smallest noise variance, relative to the signal variance: ``4e-3`` in float32, ``1e-6`` in float64.

    The signal variance is ``σ_f²`` for a single kernel; a sum's other terms count in part (:func:`noise_var`).

    The floor bounds the condition number of ``K + σ_n²I`` by ``1 + W/floor``
    whatever the optimiser proposes, and it is what keeps the sliding-window
    factor (:mod:`onlinejax.learners.gp.window`) accurate: the inverse-Cholesky
    update's error grows like ``u·κ^1.8`` (``u`` the unit roundoff), faster
    than a direct solve's ``u·κ``, and it compounds over the steps a window
    stays ill-conditioned. The worst case is a lengthscale several times the
    inputs' range, where ``K`` is close to rank one and ``κ`` reaches the
    bound on every step
    (``tests/test_gp.py::test_long_lengthscale_window_stays_accurate``): with
    floors of a few hundred or thousand ``eps`` the factor there loses all
    accuracy within a few steps — silently, with small predictive variances
    — while these floors keep ``‖RK_yRᵀ - I‖`` and the predictions' error
    small against the targets' spread, independently of ``W``.

    So the noise standard deviation is at least 6.3 % (float32) or 0.1 %
    (float64) of the signal standard deviation. On data with less noise
    than that the floor acts as a ridge on the kernel matrix; use float64
    where the difference matters.
    """
    return 1e-6 if np.dtype(dtype) == np.float64 else 4e-3


def signal_var(p: GPParams) -> Array:
    """``σ_f²``, ``[]``, from the stored ``log σ_f`` (thesis eq. 4.27's signal variance)."""
    return jnp.exp(2.0 * p.log_signal_std)


#: The share of a sum's other terms' amplitudes in the noise floor (:func:`noise_var`).
SUMMED_TERMS_FLOOR_SHARE = 0.1


def summed_terms_var(p: GPParams) -> Array:
    """``σ_f² Σ_k ρ_k²``, ``[]``: the signal variances of a sum's other terms (0 for a single kernel).

    ``ρ_k`` is each summed term's amplitude relative to ``σ_f`` (the ``log_rel_signal_std`` of a
    :class:`~onlinejax.learners.gp.kernels.Kernel` sum, ``k1 + k2``; a product's right-hand term has none).
    """
    rel = [leaf for path, leaf in jax.tree_util.tree_flatten_with_path(p.extra)[0]
           if getattr(path[-1], "key", None) == "log_rel_signal_std"]
    return signal_var(p) * sum((jnp.exp(2.0 * r) for r in rel), jnp.zeros_like(p.log_signal_std))


def noise_var(p: GPParams) -> Array:
    """``σ_n² + floor·(σ_f² + Σ_k σ_k²/10)``: the noise variance actually used (floor from :func:`noise_floor_rel`).

    ``σ_k²`` are a sum's other terms' amplitudes (:func:`summed_terms_var`), counted at
    :data:`SUMMED_TERMS_FLOOR_SHARE`: without them a tune that makes a ``linear()`` term carry the signal and
    ``σ_f`` small would leave no floor at all, and the factor would lose every digit on collinear trending
    inputs. A tenth, with the window step's check of its factor (:func:`onlinejax.learners.gp.window.step_one`),
    keeps such a window's predictions near a float64 solve in the worst case (three lags of a trend 5 sd
    out, ``σ_f`` near 0; a hundredth does not), where counting them in full acts as a ridge that costs
    noise-free streams log score (``benchmarks/RESULTS.md``, "The GP's factor on trending inputs").
    """
    return jnp.exp(2.0 * p.log_noise_std) + noise_floor_rel(p.log_noise_std.dtype) * (
        signal_var(p) + SUMMED_TERMS_FLOOR_SHARE * summed_terms_var(p))


def lengthscales(p: GPParams) -> Array:
    """ARD lengthscales ``ℓ``, ``[d]`` (or ``[]``), from the stored ``log ℓ`` (thesis eq. 4.27)."""
    return jnp.exp(p.log_lengthscale)

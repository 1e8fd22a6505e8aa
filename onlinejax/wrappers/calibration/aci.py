"""Adaptive conformal inference (ACI) and the tabulated two-sided Gaussian quantile it reads.

Pure ``init`` / ``update`` functions over a NamedTuple state, usable on their own (:func:`aci_init`,
:func:`aci_update`, :func:`aci_var_scale`), and :func:`interval_miss`, the miss ``err_t`` of a
returned interval that both conformal calibrators learn from.

Adaptive conformal inference (ACI; Gibbs & Candès 2021,
arXiv:2106.00170, eq. 2): the working miscoverage level moves as

    α_{t+1} = α_t + γ (α - err_t)

where ``err_t`` is 1 when ``y_t`` falls outside the returned ``1 - α``
interval. The interval at the working level ``1 - α_t`` of the
(possibly recalibrated) Gaussian is ``μ ± Φ⁻¹(1 - α_t/2) σ``, so
``c_t = Φ⁻¹(1 - α_t/2) / Φ⁻¹(1 - α/2)``. Theory makes the interval
infinite for ``α_t ≤ 0`` and empty for ``α_t ≥ 1``; here ``c_t²`` is
clipped to ``[1/max_scale, max_scale]`` (default ``1e4``: ``c_t`` from 0.01
to 100), a finite stand-in: at ``α_t ≤ 0`` the interval covers every residual
within ``100 Φ⁻¹(1 - α/2)`` standard deviations (196 at 95 %), at
``α_t ≥ 1`` it misses every one beyond ``0.01 Φ⁻¹(1 - α/2)``. ``α_t`` is
kept in ``[-γ, 1 + γ]``, where it stays with the infinite (empty) interval
(Lemma 4.1): with the finite stand-in a burst of residuals beyond it
would otherwise wind ``α_t`` up for as many items again. ``Φ⁻¹`` is
tabulated (:func:`upper_normal_quantile`, relative error < 5e-6).
"""
from __future__ import annotations

import functools
import statistics
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtri

from ...core.base import check_in_range, check_positive, default_float_dtype, is_concrete, normal_quantile
from .recalibration import _mask

Array = jax.Array

__all__ = ["ACIState", "aci_init", "aci_update", "aci_var_scale", "upper_normal_quantile", "interval_miss"]


def _two_sided_quantile(level, dt) -> Array:
    """``Φ⁻¹(1 - α/2)`` with ``α = 1 - level``: exactly the library's ``normal_quantile`` when concrete."""
    if is_concrete(level) and np.ndim(level) == 0:
        return jnp.asarray(normal_quantile(float(level)), dt)
    return -ndtri(0.5 * (1.0 - jnp.asarray(level, dt)))


class ACIState(NamedTuple):
    """State of adaptive conformal inference (Gibbs & Candès 2021, eq. 2).

    Attributes:
      alpha_t: ``[]`` working miscoverage level ``α_t`` (may leave [0, 1]).
      alpha: ``[]`` target miscoverage ``α = 1 - level``.
      z_alpha: ``[]`` ``Φ⁻¹(1 - α/2)``, the calibrated Gaussian's two-sided quantile.
      gamma: ``[]`` step ``γ > 0``.
      n: ``[]`` int32 labels used.
    """

    alpha_t: Array
    alpha: Array
    z_alpha: Array
    gamma: Array
    n: Array


def aci_init(level=0.95, gamma=0.005, dtype=None) -> ACIState:
    """``α_1 = α = 1 - level``.

    Args:
      level: the calibrated level ``1 - α`` in (0, 1).
      gamma: step ``γ > 0`` (Gibbs & Candès use 0.005).
      dtype: floating dtype.
    Raises:
      ValueError: naming ``level`` or ``gamma`` (concrete values only).
    """
    check_in_range(level, "level", 0.0, 1.0, hi_open=True)
    check_positive(gamma, "gamma")
    dt = dtype or default_float_dtype()
    alpha = 1.0 - jnp.asarray(level, dt)
    return ACIState(alpha_t=alpha, alpha=alpha, z_alpha=_two_sided_quantile(level, dt),
                    gamma=jnp.asarray(gamma, dt), n=jnp.zeros((), jnp.int32))


_TABLE_BITS = 7  # mantissa bits per binade of the Φ⁻¹ table: 126·2⁷ nodes


@functools.lru_cache(maxsize=None)
def _upper_quantile_table(dtype_name: str) -> np.ndarray:
    """``Φ⁻¹(1 - a/2)`` at ``a = 2^e (1 + j/2^K)`` for every normal float32 exponent ``e < 0``, then ``a = 1``."""
    k = _TABLE_BITS
    e = np.arange(-126, 0, dtype=np.float64)
    a = (2.0 ** e[:, None] * (1.0 + np.arange(2 ** k) / 2 ** k)).ravel()
    inv = statistics.NormalDist().inv_cdf  # Wichura's AS241, double precision
    q = [-inv(0.5 * v) for v in a] + [0.0, 0.0]  # a = 1, and a pad node for the interpolation
    return np.asarray(q, dtype_name)


def upper_normal_quantile(a: Array) -> Array:
    """``Φ⁻¹(1 - a/2)`` elementwise: the two-sided Gaussian quantile at miscoverage ``a``.

    Tabulated on the float32 grid (``2⁷`` nodes per binade of ``a``) and
    interpolated linearly in ``a``: relative error below 5e-6 for
    ``2⁻¹²⁶ ≤ a ≤ 0.98`` (above, where ``Φ⁻¹ < 0.025``, the absolute error is
    below 1e-6), with no transcendental function on the per-item path.
    ``a ≤ 0`` gives ``inf`` (the infinite interval), ``0 < a < 2⁻¹²⁶`` the
    value at ``2⁻¹²⁶`` (13.0), ``a ≥ 1`` zero. Non-increasing in ``a``.

    Args:
      a: ``[...]`` miscoverage levels.
    Returns:
      ``[...]`` quantiles, dtype of ``a``.
    """
    # a table, not ndtri: a rational approximation with logs and square roots per item would cost more
    # than the wrapped learner's own step
    a = jnp.asarray(a)
    dt = a.dtype
    k = _TABLE_BITS
    table = jnp.asarray(_upper_quantile_table(np.dtype(dt).name))
    ac = jnp.clip(a, 2.0 ** -126, 1.0)
    bits = jax.lax.bitcast_convert_type(ac.astype(jnp.float32), jnp.int32)
    idx = (bits >> (23 - k)) - (1 << k)  # (biased exponent - 1)·2^K + top K mantissa bits
    frac = (bits & ((1 << (23 - k)) - 1)).astype(dt) * (2.0 ** -(23 - k))
    lo, hi = table[idx], table[idx + 1]
    return jnp.where(a > 0, lo + frac * (hi - lo), jnp.inf)


def aci_var_scale(state: ACIState, max_scale: float = 1e4) -> Array:
    """Variance multiplier ``c² = (Φ⁻¹(1 - α_t/2)/Φ⁻¹(1 - α/2))²``, clipped to ``[1/max_scale, max_scale]``.

    ``α_t ≤ 0`` (an infinite interval in theory) gives ``max_scale``, ``α_t ≥ 1``
    (an empty one) ``1/max_scale``. ``Φ⁻¹`` is :func:`upper_normal_quantile`.
    """
    c = upper_normal_quantile(state.alpha_t) / state.z_alpha
    return jnp.clip(c * c, 1.0 / max_scale, max_scale)


def aci_update(state: ACIState, err: Array, ok=True) -> ACIState:
    """``α_{t+1} = α_t + γ(α - err_t)`` (Gibbs & Candès 2021, eq. 2), kept in ``[-γ, 1 + γ]``.

    Args:
      err: ``[]`` 1 (or True) when ``y_t`` fell outside the returned interval at the calibrated level.
      ok: ``[]`` bool or ``True``; ``False`` leaves the state unchanged.
    """
    err = jnp.asarray(err, state.alpha_t.dtype)
    # [-γ, 1 + γ] is where α_t stays with infinite (empty) intervals at α_t ≤ 0 (≥ 1) (Gibbs & Candès 2021,
    # Lemma 4.1); with the finite stand-in a burst of wild misses would otherwise wind it up for good
    alpha_t = jnp.clip(state.alpha_t + state.gamma * (state.alpha - err), -state.gamma, 1.0 + state.gamma)
    new = state._replace(alpha_t=alpha_t, n=state.n + 1)
    return _mask(ok, new, state)


def interval_miss(z_alpha: Array, mean: Array, var: Array, y: Array) -> Array:
    """``err = 1{|y - μ| > z·sqrt(var)}``: the complement of the metrics' coverage of ``mean ± z·sd``."""
    return ~(jnp.abs(y - mean) <= z_alpha * jnp.sqrt(var))

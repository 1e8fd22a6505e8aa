"""Quantile tracking: the "P" (and optionally "I") controller of conformal PID control.

Pure ``init`` / ``update`` functions over a NamedTuple state, usable on their own
(:func:`quantile_init`, :func:`quantile_update`, :func:`quantile_threshold`,
:func:`quantile_var_scale`), and the constants of the robust step.

Quantile tracking (the "P" controller of conformal PID control;
Angelopoulos, Candès & Tibshirani 2023, arXiv:2307.16895, Sec. 2) on the
score ``s_t = |y_t - μ_t|/σ_t`` (``σ_t`` recalibrated when recalibration is on):

    q_{t+1} = q_t + η_t (err_t - α),   err_t = 1{s_t > q_t}

with ``c_t = q_t / Φ⁻¹(1 - α/2)`` (``c_t²`` clipped as above). The step is
either constant (``η_t = lr``) or scaled by the scores' recent range. The
paper's practical step uses the largest score of a trailing window of ``W``
scores, so one outlier sets the step for ``W`` items (a score of ``10⁶``
moves ``q`` by ``lr·10⁶``, and the next ``W`` covered items take back 5 %
of that each). Here the range is robust, ``k R_t`` (``k`` =
:data:`SCORE_CLIP`), with ``R_t`` a winsorised running mean of the scores,

    R_t = (1 - 1/W) R_{t-1} + (1/W) min(s_t, k R_{t-1}),   R_0 = E|Z| = sqrt(2/π)

at least ``q_t E|Z|/Φ⁻¹(1 - α/2)`` (the calibrated Gaussian's mean score at
this threshold, so that neither intervals far too wide nor a run of zero
scores stall the tracker), and ``η_t = lr · k R_t``: one score, however
large, raises the step by at most ``1 + (k - 1)/W`` and moves ``q`` by one
step. ``q̂`` is kept in ``[z/sqrt(max_scale), z sqrt(max_scale)]``
(``z = Φ⁻¹(1 - α/2)``), the range where ``c²`` is not clipped, so no burst
of misses winds it up beyond. Optionally the integrator term (Sec. 2.2)
adds ``r_t(S_t) = K_I tan(S_t log(t) / (t C_sat))`` (saturating at ``±∞``
where the argument leaves ``(-π/2, π/2)``) with ``S_t = Σ_{i≤t}(err_i - α)``:
``q_{t+1} = q̂_{t+1} + r_t(S_t)``, ``q̂`` the "P" part above.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ...core.base import check_in_range, check_int, check_positive, default_float_dtype, is_concrete
from .aci import _two_sided_quantile
from .recalibration import _mask

Array = jax.Array

__all__ = ["QuantileState", "quantile_init", "quantile_update", "quantile_threshold", "quantile_var_scale"]

#: Quantile tracking: each score enters the running score scale clipped at this multiple of it, and the
#: range-scaled step is ``lr`` times this multiple of the scale (the robust range of the scores).
SCORE_CLIP = 4.0
#: ``E|Z| = sqrt(2/π)`` of a standard Gaussian ``Z``.
MEAN_ABS_NORMAL = float(np.sqrt(2.0 / np.pi))


class QuantileState(NamedTuple):
    """State of the quantile tracker (Angelopoulos, Candès & Tibshirani 2023, Sec. 2).

    Attributes:
      q: ``[]`` the "P" part ``q̂_t``: a threshold on the score ``|y - μ|/σ``.
      integral: ``[]`` ``S_t = Σ_{i≤t} (err_i - α)``.
      alpha: ``[]`` target miscoverage ``α``; z_alpha: ``[]`` ``Φ⁻¹(1 - α/2)``.
      lr: ``[]`` step ``η`` (constant) or factor ``lr`` of the range-scaled step.
      score_scale: ``[]`` running scale ``R_t`` of the scores (a winsorised mean; the robust range is
        ``k R_t``, ``k`` = :data:`SCORE_CLIP`).
      range_decay: ``[]`` ``1 - 1/W``, its forgetting per item (0 with a constant step).
      gain, saturation: ``[]`` the integrator's ``K_I`` and ``C_sat`` (unused without it).
      n: ``[]`` int32 labels used.
    """

    q: Array
    integral: Array
    alpha: Array
    z_alpha: Array
    lr: Array
    score_scale: Array
    range_decay: Array
    gain: Array
    saturation: Array
    n: Array


def quantile_init(level=0.95, lr=0.02, time_scale: Optional[int] = 100, gain=0.0, saturation=1.0,
                  dtype=None) -> QuantileState:
    """``q̂_1 = Φ⁻¹(1 - α/2)`` (the calibrated Gaussian's threshold, so ``c_1 = 1``).

    Args:
      level: the calibrated level ``1 - α`` in (0, 1).
      lr: ``> 0``; the constant step ``η`` (``time_scale=None``) or the factor of
        the robust range ``k R_t`` of the scores.
      time_scale: ``W >= 1``, the time scale of ``R_t``, or ``None`` for a constant step
        (pass ``scaled=time_scale is not None`` to :func:`quantile_update`).
      gain, saturation: the integrator's ``K_I >= 0`` and ``C_sat > 0`` (used only
        when :func:`quantile_update` is called with ``integrate=True``).
      dtype: floating dtype.
    Raises:
      ValueError: naming the argument.
    """
    check_in_range(level, "level", 0.0, 1.0, hi_open=True)
    check_positive(lr, "lr")
    if is_concrete(gain) and not np.all(np.asarray(gain) >= 0):
        raise ValueError(f"gain: must be >= 0, got {gain!r}")
    check_positive(saturation, "saturation")
    w = None if time_scale is None else check_int(time_scale, "time_scale", 1)
    dt = dtype or default_float_dtype()
    z = _two_sided_quantile(level, dt)
    decay = 0.0 if w is None else 1.0 - 1.0 / w
    # R_1 = E|Z|: the calibrated Gaussian's mean score
    return QuantileState(q=z, integral=jnp.zeros((), dt), alpha=1.0 - jnp.asarray(level, dt), z_alpha=z,
                         lr=jnp.asarray(lr, dt), score_scale=jnp.full((), MEAN_ABS_NORMAL, dt),
                         range_decay=jnp.asarray(decay, dt),
                         gain=jnp.asarray(gain, dt), saturation=jnp.asarray(saturation, dt),
                         n=jnp.zeros((), jnp.int32))


def _integrator(state: QuantileState) -> Array:
    """``r_t(S_t) = K_I tan(S_t log t / (t C_sat))``, ``±inf`` outside ``(-π/2, π/2)`` (ACT 2023, Sec. 2.2)."""
    t = jnp.maximum(state.n, 1).astype(state.q.dtype)
    arg = state.integral * jnp.log(t) / (t * state.saturation)
    half_pi = 0.5 * np.pi
    r = state.gain * jnp.tan(jnp.clip(arg, -half_pi, half_pi))
    return jnp.where(arg >= half_pi, jnp.inf, jnp.where(arg <= -half_pi, -jnp.inf, r))


def quantile_threshold(state: QuantileState, integrate: bool = False) -> Array:
    """The current threshold ``q_t = q̂_t (+ r_t(S_t))`` on the score ``|y - μ|/σ``."""
    return state.q + _integrator(state) if integrate else state.q


def quantile_var_scale(state: QuantileState, max_scale: float = 1e4, integrate: bool = False) -> Array:
    """Variance multiplier ``c² = (q_t/Φ⁻¹(1 - α/2))²``, clipped to ``[1/max_scale, max_scale]``."""
    c = jnp.maximum(quantile_threshold(state, integrate), 0.0) / state.z_alpha
    return jnp.clip(c * c, 1.0 / max_scale, max_scale)


def quantile_update(state: QuantileState, err: Array, score: Array, ok=True, scaled: bool = True,
                    max_scale: float = 1e4) -> QuantileState:
    """``q̂_{t+1} = q̂_t + η_t(err_t - α)``, ``S_{t+1} = S_t + err_t - α`` (ACT 2023, Sec. 2).

    With ``scaled``, ``η_t = lr · k R_t`` where ``R_t = (1 - 1/W) R_{t-1} + (1/W) min(s_t, k R_{t-1})``
    (``k`` = :data:`SCORE_CLIP`), at least ``q̂_{t+1} E|Z|/z``: one score, however large, raises the
    step by at most the factor ``1 + (k - 1)/W``, and ``q̂`` moves by at most ``lr · k R_t`` per item
    (module doc). ``q̂`` is kept in ``[z/sqrt(max_scale), z·sqrt(max_scale)]``
    (``z = Φ⁻¹(1 - α/2)``), where ``c²`` is not clipped: no burst of misses winds it up beyond.

    Args:
      state: :class:`QuantileState`.
      err: ``[]`` 1 (or True) when ``y_t`` fell outside the returned interval.
      score: ``[]`` ``|y_t - μ_t|/σ_t`` (enters the running scale ``R_t``).
      ok: ``[]`` bool or ``True``; ``False`` leaves the state unchanged.
      scaled: ``η_t = lr · k R_t`` (True) or ``η_t = lr`` (static).
      max_scale: the clip of ``c²`` (static; :func:`quantile_var_scale`).

    The integrator needs no update of its own: it reads ``S_t`` and ``t`` when
    the threshold is formed (:func:`quantile_threshold`).
    """
    dt = state.q.dtype
    err = jnp.asarray(err, dt)
    g = err - state.alpha
    r = state.score_scale
    if scaled:
        # winsorised: the paper's running maximum lets one outlier set the step for a whole window
        w = 1.0 - state.range_decay
        cap = SCORE_CLIP * state.score_scale
        r = state.score_scale + w * (jnp.where(score <= cap, score, cap) - state.score_scale)  # NaN: the cap
        eta = state.lr * SCORE_CLIP * r
    else:
        eta = state.lr
    root = float(np.sqrt(max_scale))
    q = jnp.clip(state.q + eta * g, state.z_alpha / root, state.z_alpha * root)
    if scaled:
        # at least the calibrated Gaussian's mean score at this threshold: intervals far too wide (small
        # scores) or a run of zero scores cannot stall the tracker
        r = jnp.maximum(r, q * (MEAN_ABS_NORMAL / state.z_alpha))
    new = state._replace(q=q, integral=state.integral + g, score_scale=r, n=state.n + 1)
    return _mask(ok, new, state)

"""Variance recalibration: a running variance scale, kept near robust log-scale estimates and above a floor.

Pure ``init`` / ``update`` functions over a NamedTuple state, usable on their own
(:func:`recalibration_init`, :func:`recalibration_update`, :func:`recalibrated_variance`), the
constants that tune them, and the plain step shared with :func:`onlinejax.wrappers.combination.combine`
(:func:`is_informative`, :func:`scale_update`, :func:`sq_err_update`, :func:`capped_variance`).

For ``y ~ N(μ, kσ²)`` the standardised squared residual ``z² = (y - μ)²/σ²``
has mean ``k``, so the variance scale is estimated by an exponentially
weighted mean of ``z²`` (decay ``ρ``) with one pseudo-observation
``z² = 1`` as its prior (it starts calibrated):

    n_t = ρ n_{t-1} + 1,  n_0 = 1
    s_t = (1 - 1/n_t) s_{t-1} + (1/n_t) min(z_t², clip · s_{t-1}),  s_0 = 1

i.e. ``s_t = (ρ^t + Σ_i ρ^{t-i} min(z_i², ·)) / n_t``; ``c_t² = s_{t-1}``.
One squared residual moves ``s`` by at most the factor ``clip`` (one wild
miss of a collapsed variance, ``z² ~ 1e30``, cannot set the scale for
hundreds of items). Such a mean is slow the other way: a variance ``10⁹``
times too large (a learner's running statistics blown up by one outlier)
takes ``ln 10⁹/(1 - ρ)`` labels to undo, and a run of exact fits (constant
targets) shrinks ``s`` towards 0 as ``ρ^t``. Three robust companions bound
both (all in ``O(1)`` state):

- *A floor relative to the residuals' level.* ``L_t``, a running mean of
  ``log (y - μ)²`` (decay :data:`RECALIBRATION_LEVEL_DECAY`, each term
  clipped to ``ln(clip)`` above ``L_{t-1}``; below, to
  :data:`RECALIBRATION_LOG_CLIP` in the first ``1/(1 - ρ)`` labels and
  to ``ln 2`` after, so that it halves at most once per ~1000 labels),
  sets the floor ``v_t = φ exp(L_t - E[log χ²₁])`` (``φ`` =
  :data:`RECALIBRATION_FLOOR`), a fraction of the Gaussian variance with
  that geometric mean. A residual below ``v_t`` enters every estimate as
  one at ``v_t``, and the recalibrated variance is at least ``v_t``: a
  constant run drives the scale to the floor, not to 0, and an outlier
  raises the floor by a factor of at most ``clip^{1/m_t}`` (``m_t`` the
  level's discounted count, ~1000).
- *Log-scale estimates.* A fast ``f_t`` (weight ``ω`` =
  :data:`RECALIBRATION_FAST`, at least ``1/n_t``) and a slow ``g_t``
  (weight ``1/n_t``, as ``s``) running mean of ``log z²``, each term
  clipped to ``a`` = :data:`RECALIBRATION_LOG_CLIP` around the estimate:
  one label moves them by at most ``ω a``, however large or small its
  residual, and a factor ``K`` in the variance is crossed in
  ``O(log K)`` labels (the distance shrinks geometrically), not
  ``O(K)``. ``g`` is kept in ``[f - ln b, f + ln b]`` (``b`` =
  :data:`RECALIBRATION_BAND`), and ``s`` moves with ``g`` by the same
  factor: a learner whose variance grows relative to its errors item
  after item (a model whose units drift) is followed downwards as fast as
  upwards, not left over-covering.
- *A bound by the geometric mean.* ``exp(g) ≤ s ≤ b exp(g - E[log χ²₁])``:
  the mean of ``z²`` is at least their geometric mean (Jensen), and for a
  Gaussian it is ``exp(-E[log χ²₁]) = 3.56`` times it, so this allows tails
  ``b`` times heavier and keeps a run of huge ``z²`` in the past (a scale
  falling for hundreds of labels) from holding ``s`` far above the
  present scale.

``s`` stays in ``[1/max_scale, max_scale]`` (``1e12``: a last resort that
keeps the state finite; the floor binds first).
:func:`onlinejax.wrappers.combination.combine` recalibrates its members with the
plain step (:func:`scale_update`, :func:`sq_err_update`,
:func:`capped_variance`) at a constant weight ``1 - ρ`` (the stationary
value of ``1/n_t``, i.e. a prior weight of ``1/(1-ρ)`` items), and caps each
recalibrated variance at 25 times the member's recent mean squared error.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ...core.base import check_in_range, default_float_dtype, keep_if

Array = jax.Array

__all__ = ["RecalibrationState", "recalibration_init", "recalibration_update", "recalibrated_variance",
           "is_informative", "scale_update", "sq_err_update", "capped_variance"]

#: Recalibration: one standardised squared error moves the scale ``s`` by at most this multiple of ``s``.
RECALIBRATION_CLIP = 25.0
#: Recalibration in :func:`~onlinejax.wrappers.combination.combine`: a member's variance is at most this
#: multiple of its recent mean squared error.
RECALIBRATION_VAR_CAP = 25.0
#: ``E[log χ²₁] = ψ(1/2) + log 2``: the mean log squared score of a calibrated Gaussian, converting the
#: recalibrator's log-scale estimates to and from the variance scale.
LOG_CHI2_MEAN = -1.2703628454614782
#: Recalibration: weight of the fast running mean of ``log z²`` (a memory of ~10 labels).
RECALIBRATION_FAST = 0.1
#: Recalibration: the slow scale is kept within this factor of the fast one, and
#: the mean of ``z²`` within this factor of the Gaussian value of their geometric mean.
RECALIBRATION_BAND = 2.0
#: Recalibration: one ``log z²`` enters the log-scale estimates clipped to this distance from them.
RECALIBRATION_LOG_CLIP = float(np.log(1e4))
#: Recalibration: residuals, and the recalibrated variance, are floored at this fraction of the
#: residuals' running level.
RECALIBRATION_FLOOR = 1e-2
#: Recalibration: weight of the past in that level, per label (a memory of ~1000 labels).
RECALIBRATION_LEVEL_DECAY = 0.999


def is_informative(mean: Array, var: Array) -> Array:
    """A usable prediction: finite mean, variance in ``(0, sqrt(finfo.max))``, elementwise.

    A variance of ``sqrt(finfo.max)`` or more means "no information": a
    learner's overflow guard, or a wrapper abstaining; calibrators and weight
    rules leave such predictions out.
    """
    cap = float(np.sqrt(np.finfo(var.dtype).max))
    return jnp.isfinite(mean) & jnp.isfinite(var) & (var > 0) & (var < cap)


def scale_update(scale: Array, e2: Array, var: Array, decay, clip: float = RECALIBRATION_CLIP) -> Array:
    """One exponentially weighted step of a variance scale: ``ρ s + (1 - ρ) min(e²/σ², clip·s)``.

    Args:
      scale: ``[...]`` current scale ``s``; e2: ``[...]`` squared residuals
        ``(y - μ)²``; var: ``[...]`` the *unscaled* predictive variances ``σ²``.
      decay: ``ρ`` (a Python float or an array broadcasting against ``scale``).
      clip: largest factor by which one residual can move ``s`` (static).
    Returns:
      ``[...]`` the new scale (not floored or masked: the caller decides).
    """
    z2 = jnp.minimum(e2 / var, clip * scale)
    return decay * scale + (1.0 - decay) * z2


def sq_err_update(sq_err: Array, e2: Array, decay) -> Array:
    """Exponentially weighted mean squared error ``ρ E + (1 - ρ) e²`` (``E = e²`` at the first error)."""
    return jnp.where(jnp.isfinite(sq_err), decay * sq_err + (1.0 - decay) * e2, e2)


def capped_variance(var: Array, scale: Array, sq_err: Array, var_cap: float = RECALIBRATION_VAR_CAP) -> Array:
    """``min(s σ², cap · E)``; uncapped while ``E`` is 0 (exact so far) or ``inf`` (no error seen)."""
    v = var * scale
    capped = jnp.isfinite(sq_err) & (sq_err > 0)
    return jnp.where(capped, jnp.minimum(v, var_cap * sq_err), v)


def _mask(ok, new, old):
    return new if ok is True else keep_if(ok, new, old)


class RecalibrationState(NamedTuple):
    """State of the variance recalibrator.

    Attributes:
      scale: ``[]`` variance scale ``s`` (the weighted mean of ``z²``; ``c² = s``).
      weight: ``[]`` discounted count ``n`` of the weighted mean, the prior's unit weight included.
      sq_err: ``[]`` exponentially weighted mean squared error ``E`` (``inf``
        before the first label; only tracked with an ``error_cap``).
      decay: ``[]`` ``ρ`` in (0, 1) (an array: it vmaps).
      n: ``[]`` int32 labels used.
      log_fast: ``[]`` fast running mean ``f`` of the clipped ``log z²`` (weight :data:`RECALIBRATION_FAST`).
      log_slow: ``[]`` slow running mean ``g`` of the clipped ``log z²`` (weight ``1/n_t``, as ``s``).
      log_level: ``[]`` slow running mean ``L`` of the clipped ``log (y - μ)²`` (the residuals' level, on the
        targets' scale; decay :data:`RECALIBRATION_LEVEL_DECAY`).
      level_weight: ``[]`` discounted count of ``L`` (0 before the first label).
    """

    scale: Array
    weight: Array
    sq_err: Array
    decay: Array
    n: Array
    log_fast: Array
    log_slow: Array
    log_level: Array
    level_weight: Array


def recalibration_init(decay=0.99, dtype=None) -> RecalibrationState:
    """A calibrated start: ``s = 1`` with the weight of one pseudo-observation (``f = g = E[log χ²₁]``).

    Args:
      decay: ``ρ`` in (0, 1): the scale remembers about ``1/(1 - ρ)`` labels.
      dtype: floating dtype (default float32, float64 under x64).
    Raises:
      ValueError: ``decay`` outside (0, 1) (concrete values only).
    """
    check_in_range(decay, "decay", 0.0, 1.0, hi_open=True)
    dt = dtype or default_float_dtype()
    one = jnp.ones((), dt)
    log_one = jnp.asarray(LOG_CHI2_MEAN, dt)
    return RecalibrationState(scale=one, weight=one, sq_err=jnp.full((), jnp.inf, dt),
                              decay=jnp.asarray(decay, dt), n=jnp.zeros((), jnp.int32), log_fast=log_one,
                              log_slow=log_one, log_level=jnp.zeros((), dt), level_weight=jnp.zeros((), dt))


def _level_floor(state: RecalibrationState) -> Array:
    """``φ exp(L - E[log χ²₁])``: the floor of the recalibrated variance (0 before the first label)."""
    floor = RECALIBRATION_FLOOR * jnp.exp(state.log_level - LOG_CHI2_MEAN)
    return jnp.where(state.level_weight > 0, floor, 0.0)


def recalibration_update(state: RecalibrationState, mean: Array, var: Array, y: Array, *, ok=True,
                         clip: float = RECALIBRATION_CLIP, max_scale: float = 1e12,
                         track_error: bool = False) -> RecalibrationState:
    """Absorb one label (module doc).

    Args:
      state: :class:`RecalibrationState`.
      mean, var: ``[]`` the *unscaled* prediction ``N(μ, σ²)`` of ``y`` made before seeing it.
      y: ``[]`` the label.
      ok: ``[]`` bool, or ``True``: items with ``ok = False`` leave the state
        unchanged (the wrappers pass "finite label, informative prediction").
      clip: :data:`RECALIBRATION_CLIP` (static).
      max_scale: ``s`` is kept in ``[1/max_scale, max_scale]`` (static; a last resort that keeps
        the state finite: the floor relative to the residuals' level binds long before).
      track_error: also update ``sq_err`` (needed only for
        :func:`recalibrated_variance`'s ``error_cap``; static).
    Returns:
      the new :class:`RecalibrationState`.
    """
    dt = state.scale.dtype
    weight = state.decay * state.weight + 1.0
    rho_t = state.decay * state.weight / weight  # 1 - 1/n_t: the prior's and the past's share
    e2 = (y - mean) ** 2
    # a residual below the floor counts as one at the floor: a constant run drives the estimates to the
    # floor, not to 0
    e2f = jnp.maximum(e2, _level_floor(state))
    scale = scale_update(state.scale, e2f, var, rho_t, clip)
    # log-scale estimates: one label moves them by at most weight·a, however small or large its residual
    a = RECALIBRATION_LOG_CLIP
    tiny = jnp.finfo(dt).tiny
    log_var = jnp.log(var)
    lz2 = jnp.log(jnp.maximum(e2f, tiny)) - log_var
    wf = jnp.maximum(RECALIBRATION_FAST, 1.0 - rho_t)  # never slower than the slow one (the first labels)
    f = state.log_fast + wf * (jnp.clip(lz2, state.log_fast - a, state.log_fast + a) - state.log_fast)
    g = state.log_slow + (1.0 - rho_t) * (jnp.clip(lz2, state.log_slow - a, state.log_slow + a) - state.log_slow)
    # the slow scale follows the fast one out of a band: a variance off by orders of magnitude (a learner's
    # statistics blown up by one outlier) is corrected within tens of labels, not ln(factor)/(1 - ρ), and a
    # variance growing item after item relative to the errors is followed down as fast as up
    band = float(np.log(RECALIBRATION_BAND))
    shift = jnp.clip(g, f - band, f + band) - g
    g = g + shift
    scale = scale * jnp.exp(shift)
    # the mean of z² is at least their geometric mean (Jensen) and, for the residual laws a Gaussian
    # interval can describe, at most a few times its Gaussian value: a run of huge z² in the past (a scale
    # falling for hundreds of labels) cannot keep the arithmetic mean far above the present scale
    scale = jnp.clip(scale, jnp.exp(g), RECALIBRATION_BAND * jnp.exp(g - LOG_CHI2_MEAN))
    hi = float(np.log(max_scale))
    scale = jnp.clip(scale, 1.0 / max_scale, max_scale)
    f = jnp.clip(f, LOG_CHI2_MEAN - hi, LOG_CHI2_MEAN + hi)
    g = jnp.clip(g, LOG_CHI2_MEAN - hi, LOG_CHI2_MEAN + hi)
    # the residuals' level: the first label sets it (its score clipped as above); later ones raise it by at
    # most ln(clip)/m_t and lower it by at most ln 2/m_t each (m_t ~ 1000, its discounted count), so an
    # outlier barely moves it and a constant run halves it per ~1000 labels at most; during the first
    # 1/(1 - ρ) labels it may fall as fast as the scale (an untrained learner's first residuals)
    lw = RECALIBRATION_LEVEL_DECAY * state.level_weight + 1.0
    first = log_var + jnp.clip(lz2, state.log_slow - a, state.log_slow + a)
    la = float(np.log(clip))
    down = jnp.where(state.level_weight * (1.0 - state.decay) < 1.0, a, float(np.log(2.0)))
    log_e2 = jnp.log(jnp.maximum(e2, tiny))
    le2 = jnp.where(state.level_weight > 0, jnp.clip(log_e2, state.log_level - down, state.log_level + la), first)
    level = state.log_level + (le2 - state.log_level) / lw
    sq_err = sq_err_update(state.sq_err, e2, rho_t) if track_error else state.sq_err
    new = RecalibrationState(scale, weight, sq_err, state.decay, state.n + 1, f, g, level, lw)
    return _mask(ok, new, state)


def recalibrated_variance(state: RecalibrationState, var: Array, error_cap: Optional[float] = None) -> Array:
    """``max(s σ², φ exp(L - E[log χ²₁]))``: the variance times the scale, above the floor (module doc).

    With an ``error_cap`` (static), ``s σ²`` is capped first (:func:`capped_variance`).
    """
    v = var * state.scale if error_cap is None else capped_variance(var, state.scale, state.sq_err, error_cap)
    return jnp.maximum(v, _level_floor(state))

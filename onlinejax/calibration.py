"""Calibration layer: variance recalibration and online conformal intervals around any learner.

A learner's predictive ``N(μ, σ²)`` can be over- or under-confident (a wrong
noise precision, a GP whose noise went to its floor, a drift the model has
not absorbed yet). The wrappers here keep the learner and correct the scale
of its distribution online from the labels, as a scale-corrected Gaussian

    N(μ, c_t² σ²)

with one multiplier ``c_t`` per item, so that ``interval(level)``,
``log_prob`` and the CRPS of the returned :class:`~onlinejax.base.Prediction`
describe one and the same distribution.

Calibrators (pure ``init`` / ``update`` functions over NamedTuple states,
usable on their own):

* **Variance recalibration** (:func:`recalibration_init`,
  :func:`recalibration_update`, :func:`recalibrated_variance`). For
  ``y ~ N(μ, kσ²)`` the standardised squared residual ``z² = (y - μ)²/σ²``
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
    ``O(K)``. ``g`` is kept in ``[f - ln b, f + 2 ln b]`` (``b`` =
    :data:`RECALIBRATION_BAND`; narrower above, as a miss moves a
    conformal step ``(1 - α)/α`` times as far as a cover does), and ``s``
    moves with ``g`` by the same factor.
  - *A bound by the geometric mean.* ``exp(g) ≤ s ≤ b exp(g - E[log χ²₁])``:
    the mean of ``z²`` is at least their geometric mean (Jensen), and for a
    Gaussian it is ``exp(-E[log χ²₁]) = 3.56`` times it, so this allows tails
    ``b`` times heavier and keeps a run of huge ``z²`` in the past (a scale
    falling for hundreds of labels) from holding ``s`` far above the
    present scale.

  ``s`` stays in ``[1/max_scale, max_scale]`` (``1e12``: a last resort that
  keeps the state finite; the floor binds first).
  :func:`onlinejax.combination.combine` recalibrates its members with the
  plain step (:func:`scale_update`, :func:`sq_err_update`,
  :func:`capped_variance`) at a constant weight ``1 - ρ`` (the stationary
  value of ``1/n_t``, i.e. a prior weight of ``1/(1-ρ)`` items), and caps each
  recalibrated variance at 25 times the member's recent mean squared error.
* **Adaptive conformal inference** (ACI; Gibbs & Candès 2021,
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
* **Quantile tracking** (the "P" controller of conformal PID control;
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

Guarantees. For ACI the update telescopes, ``α_{T+1} = α_1 + γ Σ_t (α - err_t)``,
so ``|mean err - α| = |α_1 - α_{T+1}|/(γT)``; while ``α_t`` stays in
``[-γ, 1 + γ]`` this gives Prop. 4.1's ``(max(α_1, 1 - α_1) + γ)/(γT)`` for
*any* sequence. With the finite clip the identity holds until a residual beyond
``sqrt(max_scale)·Φ⁻¹(1 - α/2)`` standard deviations arrives while
``α_t ≤ 0``: the clip at ``-γ`` drops (part of) such a miss from the sum, and
the bound holds for the items counted. Quantile tracking with a constant step
and scores in ``[0, B]`` has ``|mean err - α| ≤ (B + η)/(ηT)`` (Prop. 1 of
the paper) while the clip of ``q̂`` does not bind; the range-scaled step gives
up this clean bound for scale-free steps. **Only the calibrated
level (``level`` given to :func:`conformal`) carries the long-run coverage
guarantee**: the returned Gaussian's intervals at other levels, its density
and its CRPS are a Gaussian extrapolation from that one quantile.
``err_t`` is computed from the returned interval itself,
``|y - μ| > Φ⁻¹(1 - α/2)·sqrt(c_t² σ²)`` (the coverage the library's metrics
score), so the guarantee is about the intervals a user sees.

Wrappers (:func:`recalibrate`, :func:`conformal`) return a
:class:`~onlinejax.base.Learner` whose state is a :class:`CalibratedState`
(the inner learner's state and the calibrators'). ``step`` predicts once
(one inner prediction), corrects it and updates the calibrators and the
inner learner with it; ``update`` recovers the inner prediction from an
issued one (:func:`uncorrect`; where a floor or cap of the correction was
binding, so that the issued variance does not tell the inner one, the inner
learner's variance is predicted again: :func:`inverse_is_exact`), so the
calibrators judge the interval the caller received, also when the label arrives later
(:func:`onlinejax.evaluation.delayed_progressive_validation`); ``learn``
(no prediction at hand) predicts now. Labels that are not finite, and items whose prediction is not
finite or abstains (variance ``≥ sqrt(finfo.max)``, the library's "no
information" value), leave the calibrators unchanged (``n_skipped`` counts
them); an abstaining prediction is returned as it is.

The first items (:func:`calibrated`, whose inner learner is a
:func:`~onlinejax.standardize.standardize`). Until the standardisation has
the targets' scale (two distinct targets; again after it starts afresh) its
predictions are in a guessed unit, and a residual measured in that unit says
nothing about the learner's calibration: the calibrators leave such items
out (on the Nile's flows, two targets near 1000 scored against the unit
prior set the variance scale 113 times too wide, decaying over ~100 items). Such a
prediction's variance is at least the residuals' running level
``exp(L - E[log χ²₁])`` of the recalibrator, which is in the targets' units
and outlives the statistics.

The wrappers' anatomy: :class:`CalibratedState`, the static
:class:`RecalibrationOptions` / :class:`ConformalOptions`, :func:`init`,
:func:`correct` (``N(μ, c_t² σ²)``), :func:`update` (the calibrators'
step), :func:`step_one`, :func:`learn_one`, :func:`predict_one` and
:func:`output` (the Gaussian or Student-t returned), each taking the inner
learner and the options as leading arguments that the factory binds.
"""
from __future__ import annotations

import functools
import inspect
from functools import partial
import statistics
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtri

from .base import (Learner, Prediction, StudentTPrediction, check_in_range, check_int, check_positive,
                   default_float_dtype, describe_factory, is_concrete, keep_if, learnable, make_learner,
                   normal_quantile, state_dtype, student_t_quantile)

Array = jax.Array

__all__ = [
    "calibrated",
    "calibrated_bayes_linreg",
    "METHODS",
    "RecalibrationState",
    "recalibration_init",
    "recalibration_update",
    "recalibrated_variance",
    "ACIState",
    "aci_init",
    "aci_update",
    "aci_var_scale",
    "QuantileState",
    "quantile_init",
    "quantile_update",
    "quantile_threshold",
    "quantile_var_scale",
    "interval_miss",
    "CalibratedState",
    "RecalibrationOptions",
    "ConformalOptions",
    "init",
    "correct",
    "output",
    "update",
    "update_one",
    "step_one",
    "learn_one",
    "predict_one",
    "recalibrate",
    "conformal",
]

#: Recalibration: one standardised squared error moves the scale ``s`` by at most this multiple of ``s``.
RECALIBRATION_CLIP = 25.0
#: Recalibration in :func:`~onlinejax.combination.combine`: a member's variance is at most this
#: multiple of its recent mean squared error.
RECALIBRATION_VAR_CAP = 25.0
#: Conformal methods of :func:`conformal`.
METHODS = ("aci", "quantile")
#: ``E[log χ²₁] = ψ(1/2) + log 2``: the mean log squared score of a calibrated Gaussian, converting the
#: recalibrator's log-scale estimates to and from the variance scale.
LOG_CHI2_MEAN = -1.2703628454614782
#: Recalibration: weight of the fast running mean of ``log z²`` (a memory of ~10 labels).
RECALIBRATION_FAST = 0.1
#: Recalibration: the slow scale is kept within this factor below the fast one (its square above), and
#: the mean of ``z²`` within this factor of the Gaussian value of their geometric mean.
RECALIBRATION_BAND = 2.0
#: Recalibration: one ``log z²`` enters the log-scale estimates clipped to this distance from them.
RECALIBRATION_LOG_CLIP = float(np.log(1e4))
#: Recalibration: residuals, and the recalibrated variance, are floored at this fraction of the
#: residuals' running level.
RECALIBRATION_FLOOR = 1e-2
#: Recalibration: weight of the past in that level, per label (a memory of ~1000 labels).
RECALIBRATION_LEVEL_DECAY = 0.999
#: Quantile tracking: each score enters the running score scale clipped at this multiple of it, and the
#: range-scaled step is ``lr`` times this multiple of the scale (the robust range of the scores).
SCORE_CLIP = 4.0
#: ``E|Z| = sqrt(2/π)`` of a standard Gaussian ``Z``.
MEAN_ABS_NORMAL = float(np.sqrt(2.0 / np.pi))


# --------------------------------------------------------------------------
# Shared recalibration primitives (also used by onlinejax.combination)
# --------------------------------------------------------------------------
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


# --------------------------------------------------------------------------
# Variance recalibration
# --------------------------------------------------------------------------
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
    """Absorb one label (module doc, "Variance recalibration").

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
    # statistics blown up by one outlier) is corrected within tens of labels, not ln(factor)/(1 - ρ); the
    # band is narrower above, as a miss moves the conformal step (1 - α)/α times as far as a cover
    band = float(np.log(RECALIBRATION_BAND))
    shift = jnp.clip(g, f - band, f + 2.0 * band) - g
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


# --------------------------------------------------------------------------
# Adaptive conformal inference
# --------------------------------------------------------------------------
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


# --------------------------------------------------------------------------
# Quantile tracking (conformal PID control, "P" and optionally "I")
# --------------------------------------------------------------------------
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


def quantile_init(level=0.95, lr=0.02, window: Optional[int] = 100, gain=0.0, saturation=1.0,
                  dtype=None) -> QuantileState:
    """``q̂_1 = Φ⁻¹(1 - α/2)`` (the calibrated Gaussian's threshold, so ``c_1 = 1``).

    Args:
      level: the calibrated level ``1 - α`` in (0, 1).
      lr: ``> 0``; the constant step ``η`` (``window=None``) or the factor of
        the robust range ``k R_t`` of the scores.
      window: ``W >= 1``, the time scale of ``R_t``, or ``None`` for a constant step
        (pass ``scaled=window is not None`` to :func:`quantile_update`).
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
    w = None if window is None else check_int(window, "window", 1)
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
    (module doc, "Quantile tracking"). ``q̂`` is kept in ``[z/sqrt(max_scale), z·sqrt(max_scale)]``
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


def interval_miss(z_alpha: Array, mean: Array, var: Array, y: Array) -> Array:
    """``err = 1{|y - μ| > z·sqrt(var)}``: the complement of the metrics' coverage of ``mean ± z·sd``."""
    return ~(jnp.abs(y - mean) <= z_alpha * jnp.sqrt(var))


# --------------------------------------------------------------------------
# The wrappers
# --------------------------------------------------------------------------
class CalibratedState(NamedTuple):
    """State of :func:`recalibrate` / :func:`conformal`.

    Attributes:
      inner: the wrapped learner's state.
      recalibration: :class:`RecalibrationState`, or ``None`` without recalibration.
      conformal: :class:`ACIState` / :class:`QuantileState`, or ``None``.
      n_skipped: ``[]`` int32 labels the calibrators did not use (non-finite
        item or prediction, or an abstaining prediction).
      t_ratio: ``[]`` ``Φ⁻¹(1 - α/2) / t_ν(1 - α/2)``, the scale of the
        Student-t output per Gaussian standard deviation (``None`` for a
        Gaussian output).
    """

    inner: Any
    recalibration: Optional[RecalibrationState]
    conformal: Any
    n_skipped: Array
    t_ratio: Optional[Array] = None


class RecalibrationOptions(NamedTuple):
    """Static options of the variance recalibrator in a wrapper (see :func:`recalibrate`).

    Attributes:
      decay: the default ``ρ``; clip: :data:`RECALIBRATION_CLIP`'s role;
      max_scale: ``s`` stays in ``[1/max_scale, max_scale]``;
      error_cap: ``None`` or the cap's multiple of the mean squared error.
    """

    decay: float
    clip: float
    max_scale: float
    error_cap: Optional[float]


class ConformalOptions(NamedTuple):
    """Static options of the conformal calibrator in a wrapper (see :func:`conformal`).

    Attributes:
      method: ``"aci"`` or ``"quantile"``; level, gamma, lr: the defaults of
        the calibrated level and the steps; window: ``W`` of the range-scaled
        step or ``None``; gain: ``None`` (no integrator) or the default
        ``K_I``; saturation: the default ``C_sat``; max_scale: ``c²``'s clip;
        df: ``None`` (Gaussian output) or the Student-t output's ``ν``.
      standardized: the inner learner is a
        :func:`~onlinejax.standardize.standardize` whose predictions before it
        has the targets' scale the calibrators leave out (module doc, "The
        first items").
    """

    method: str
    level: float
    gamma: float
    lr: float
    window: Optional[int]
    gain: Optional[float]
    saturation: float
    max_scale: float
    df: Optional[float] = None
    standardized: bool = False


def init(learner: Learner, recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], /,
         recalibration=None, conformal=None, **inner_kwargs) -> CalibratedState:
    """The inner learner's initial state with calibrated calibrators (``c_1 = 1``).

    Args:
      learner: the wrapped learner; recal, conf: the options, or ``None`` for
        a wrapper without that calibrator (static).
      recalibration: ``None`` or a dict overriding :func:`recalibration_init`'s
        ``decay`` (arrays vmap).
      conformal: ``None`` or a dict overriding :func:`aci_init`'s ``level`` /
        ``gamma`` or :func:`quantile_init`'s ``level`` / ``lr`` / ``gain`` / ``saturation``.
      **inner_kwargs: passed on to ``learner.init``.
    Raises:
      ValueError: an override for a calibrator the wrapper does not have.
    """
    inner = learner.init(**inner_kwargs)
    dt = state_dtype(inner)
    r = c = None
    if recal is not None:
        r = recalibration_init(**{"decay": recal.decay, **(recalibration or {})}, dtype=dt)
    elif recalibration is not None:
        raise ValueError("recalibration: this learner does not recalibrate")
    if conf is not None:
        kw = dict(conformal or {})
        if conf.method == "aci":
            c = aci_init(**{"level": conf.level, "gamma": conf.gamma, **kw}, dtype=dt)
        else:
            c = quantile_init(**{"level": conf.level, "lr": conf.lr, "gain": conf.gain or 0.0,
                                 "saturation": conf.saturation, **kw}, window=conf.window, dtype=dt)
    elif conformal is not None:
        raise ValueError("conformal: this learner has no conformal calibrator")
    ratio = None
    if conf is not None and conf.df is not None:
        ratio = c.z_alpha / student_t_quantile(1.0 - 0.5 * c.alpha, jnp.asarray(conf.df, dt))
    return CalibratedState(inner, r, c, jnp.zeros((), jnp.int32), ratio)


def correct(recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], s: CalibratedState,
            pred: Prediction) -> tuple[Prediction, Array, Array]:
    """Scale the inner prediction: ``N(μ, c_t² σ²)`` (module doc).

    ``c_t²`` is the recalibrated scale ``s_{t-1}`` (:func:`recalibrated_variance`)
    times the conformal multiplier (:func:`aci_var_scale` or
    :func:`quantile_var_scale`). A prediction that is not informative
    (:func:`is_informative`) is returned as it is; an overflow is capped at
    ``finfo.max``, an underflow keeps the learner's own variance.

    Args:
      recal, conf: the options or ``None`` (static).
      s: :class:`CalibratedState`; pred: the inner prediction (``[]`` or ``[b]`` leaves).
    Returns:
      ``(corrected prediction, the recalibrated variance σ²s (before the conformal
      multiplier), informative)``.
    """
    mean, var = pred.mean, pred.var
    v0 = var if recal is None else recalibrated_variance(s.recalibration, var, recal.error_cap)
    v = v0
    if conf is not None:
        if conf.method == "aci":
            v = v0 * aci_var_scale(s.conformal, conf.max_scale)
        else:
            v = v0 * quantile_var_scale(s.conformal, conf.max_scale, conf.gain is not None)
    info = is_informative(mean, var)
    big = np.finfo(var.dtype).max
    v = jnp.where(info, jnp.minimum(v, big), var)
    v = jnp.where(v > 0, v, var)  # an underflow keeps the learner's own variance
    v = jnp.where(info, unknown_scale_floor(recal, conf, s, v), v)
    return Prediction(mean, v), v0, info


def unknown_scale_floor(recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], s: CalibratedState,
                        var: Array) -> Array:
    """``var``, or at least the residuals' level ``exp(L - E[log χ²₁])`` while the inner standardisation has no target scale.

    Module doc, "The first items": only with ``conf.standardized`` and a
    recalibrator that has seen a label; otherwise ``var`` unchanged.

    Args:
      recal, conf: the options (static); s: :class:`CalibratedState`; var: ``[]`` the calibrated variance.
    """
    if conf is None or not conf.standardized or recal is None:
        return var
    r = s.recalibration
    level = jnp.where(r.level_weight > 0, jnp.exp(r.log_level - LOG_CHI2_MEAN), 0.0).astype(var.dtype)
    return jnp.where(_scale_known(conf, s), var, jnp.maximum(var, level))


def output(conf: Optional[ConformalOptions], s: CalibratedState, pred: Prediction):
    """The corrected Gaussian, or (with ``conf.df``) the Student-t with the same central ``level`` interval.

    Scale ``σ_c · Φ⁻¹(1 - α/2)/t_ν(1 - α/2)`` (``s.t_ratio``), so the two share
    the calibrated interval.
    """
    if conf is None or conf.df is None:
        return pred
    return StudentTPrediction(pred.mean, jnp.sqrt(pred.var) * s.t_ratio, jnp.full_like(pred.mean, conf.df))


def update(recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], s: CalibratedState, inner,
           x: Array, y: Array, pred: Prediction):
    """Correct ``pred``, then update the calibrators with the label ``y``.

    Recalibration: :func:`recalibration_update` on the unscaled ``N(μ, σ²)``.
    ACI (Gibbs & Candès 2021, eq. 2): :func:`aci_update` with ``err_t`` the
    miss of the returned interval (:func:`interval_miss`). Quantile tracking
    (Angelopoulos, Candès & Tibshirani 2023, Sec. 2): :func:`quantile_update`
    with the score ``|y - μ|/σ`` (``σ`` recalibrated).

    Args:
      recal, conf: the options or ``None`` (static).
      s: :class:`CalibratedState` before the item; inner: the inner state after it.
      x: ``[d]``; y: ``[]``; pred: the inner prediction of ``y`` made before learning it.
    Returns:
      ``(state, the returned prediction)`` (:func:`output`).
    """
    out, v0, info = correct(recal, conf, s, pred)
    return _calibrate(recal, conf, s, inner, x, y, pred, out, v0, info), output(conf, s, out)


def _calibrate(recal, conf, s: CalibratedState, inner, x: Array, y: Array, pred: Prediction, out: Prediction,
               v0: Array, info: Array) -> CalibratedState:
    """The calibrators' update: ``pred`` the inner prediction, ``out`` the corrected Gaussian, ``v0`` its variance
    before the conformal multiplier, ``info`` whether ``pred`` is informative (:func:`update`)."""
    # not skip_nonfinite: the inner learner skips non-finite items itself (its own n_skipped), and this
    # n_skipped counts every label the calibrators did not use, abstaining predictions included
    ok = info & learnable(x, y) & _scale_known(conf, s)
    r, c = s.recalibration, s.conformal
    if recal is not None:
        r = recalibration_update(r, pred.mean, pred.var, y, ok=ok, clip=recal.clip, max_scale=recal.max_scale,
                                 track_error=recal.error_cap is not None)
    if conf is not None:
        err = interval_miss(c.z_alpha, out.mean, out.var, y)
        if conf.method == "aci":
            c = aci_update(c, err, ok)
        else:
            score = jnp.abs(y - pred.mean) * jax.lax.rsqrt(v0)
            c = quantile_update(c, err, jnp.where(ok, score, 0.0), ok, scaled=conf.window is not None,
                                max_scale=conf.max_scale)
    return CalibratedState(inner, r, c, s.n_skipped + (~ok), s.t_ratio)


def _scale_known(conf: Optional[ConformalOptions], s: CalibratedState):
    """Whether the inner standardisation had the targets' scale when it predicted (always, without ``conf.standardized``)."""
    if conf is None or not conf.standardized:
        return True
    from .standardize import target_scale_known

    return target_scale_known(s.inner.scaler)


def uncorrect(recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], s: CalibratedState,
              issued) -> tuple[Prediction, Prediction, Array, Array]:
    """The inverse of :func:`correct` and :func:`output` under the state ``s``: the inner prediction an issued one came from.

    An issued ``N(μ, σ_c²)`` (or the Student-t of the same interval, ``σ_c =
    scale / s.t_ratio``) came from ``N(μ, σ_c² / m / s)``, ``m`` the conformal
    multiplier and ``s`` the recalibration scale of ``s``. Exact when ``s``
    is the state the prediction was issued from and neither the variance cap
    nor the floor was active (then the recalibration's own floor is
    inverted as a scale). An issued variance of no information (not
    informative, :func:`is_informative`) is the inner one as it was.

    Returns:
      ``(inner prediction, corrected Gaussian, its variance before the
      conformal multiplier, informative)`` with ``[]`` leaves.
    """
    mean = issued.mean
    if conf is not None and conf.df is not None:
        sd = issued.scale / s.t_ratio
        v = sd * sd
    else:
        v = issued.var
    v0 = v
    if conf is not None:
        m = (aci_var_scale(s.conformal, conf.max_scale) if conf.method == "aci"
             else quantile_var_scale(s.conformal, conf.max_scale, conf.gain is not None))
        v0 = v / m
    var = v0 if recal is None else v0 / s.recalibration.scale
    info = is_informative(mean, v)
    var = jnp.where(info & (var > 0), var, v)
    return Prediction(mean, var), Prediction(mean, v), jnp.where(info, v0, v), is_informative(mean, var)


def inverse_is_exact(recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], s: CalibratedState,
                     inner: Prediction, v: Array) -> Array:
    """Whether ``inner`` (:func:`uncorrect`'s) is the inner prediction an issued variance ``v`` came from.

    :func:`correct` is a product of scales except where one of its floors
    or caps binds; there a range of inner variances gives the same issued
    one. Probed with :func:`correct` itself: a variance 0.1 % smaller comes
    out 0.1 % smaller unless a floor or cap binds (a variance within 0.1 % of
    one counts as binding: predicting it again costs time, not exactness).
    An issued variance of no information (:func:`is_informative`) may come
    from an informative one through the overflow cap: not exact either.

    Args:
      recal, conf: the options (static); s: :class:`CalibratedState`; inner: ``[]`` leaves; v: ``[]``.
    """
    probe = correct(recal, conf, s, Prediction(inner.mean, inner.var * (1.0 - 1e-3)))[0].var
    return is_informative(inner.mean, v) & (probe < v * (1.0 - 5e-4))


def update_one(learner: Learner, recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions],
               s: CalibratedState, x: Array, y: Array, issued) -> CalibratedState:
    """Learn the item given ``issued``, the prediction :func:`predict_one` returned for it.

    The inner prediction it came from (:func:`uncorrect`) goes to the inner
    learner's ``update``; the calibrators score ``issued`` itself (its
    interval's miss, its standardised residual), so a caller whose ``x``
    changed since the prediction, or who learns later, has the prediction it
    received judged. Where a floor or cap of the correction was binding
    (:func:`inverse_is_exact`), the issued variance does not tell the inner
    one: the inner learner predicts its variance again (a ``lax.cond``
    branch: taken only then on one stream, computed and selected under
    ``vmap``; differentiable), so ``update`` with the issued prediction of
    the same state learns as ``step`` does.

    Args:
      learner: the inner learner; recal, conf: the options or ``None`` (static).
      s: :class:`CalibratedState`; x: ``[d]``; y: ``[]``; issued: ``[]`` leaves.
    """
    pred, out, v0, info = uncorrect(recal, conf, s, issued)
    exact = inverse_is_exact(recal, conf, s, pred, out.var)

    def again(a):
        p, _, _, s, x = a
        # the issued mean: a caller whose x changed since has the prediction it received learned
        p = Prediction(p.mean, learner.predict(s.inner, x).var.astype(p.var.dtype))
        _, v0, info = correct(recal, conf, s, p)
        return p, v0, info, s, x

    pred, v0, info = jax.lax.cond(exact, lambda a: a, again, (pred, v0, info, s, x))[:3]
    inner = learner.update(s.inner, x, y, pred)
    return _calibrate(recal, conf, s, inner, x, y, pred, out, v0, info)


def step_one(learner: Learner, recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions],
             s: CalibratedState, x: Array, y: Array):
    """:func:`predict_one`, then :func:`update_one` with that prediction (the inner learner predicts once).

    The inner learner's own ``step`` (``predict``, then ``update`` with that prediction), so an inner
    learner whose ``update`` cannot recover what it predicted from its moments (a combination's
    members) predicts once here too.

    Args:
      learner: the inner learner; recal, conf: the options or ``None`` (static).
      s: :class:`CalibratedState`; x: ``[d]``; y: ``[]``.
    Returns:
      ``(state, corrected prediction)``.
    """
    inner, inner_pred = learner.step(s.inner, x, y)
    return update(recal, conf, s, inner, x, y, inner_pred)


def learn_one(learner: Learner, recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions],
              s: CalibratedState, x: Array, y: Array) -> CalibratedState:
    """:func:`step_one` without the prediction (with delayed labels: calibrate from the prediction of now)."""
    return step_one(learner, recal, conf, s, x, y)[0]


def predict_one(learner: Learner, recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions],
                s: CalibratedState, x: Array):
    """The corrected prediction of the inner learner's prediction for ``x: [d]`` (:func:`correct`, :func:`output`)."""
    return output(conf, s, correct(recal, conf, s, learner.predict(s.inner, x))[0])


def tune_inner(learner: Learner, s: CalibratedState, **options) -> CalibratedState:
    """``learner.tune`` on the inner state (the calibrators are not tuned)."""
    return s._replace(inner=learner.tune(s.inner, **options))


def downdate_item(learner: Learner, s: CalibratedState, x: Array, y: Array) -> CalibratedState:
    """``learner.downdate(inner, x, y)`` (the calibrators are not downdated)."""
    return s._replace(inner=learner.downdate(s.inner, x, y))


def downdate_oldest(learner: Learner, s: CalibratedState) -> CalibratedState:
    """``learner.downdate(inner)`` for a windowed inner learner (the calibrators are not downdated)."""
    return s._replace(inner=learner.downdate(s.inner))


def _calibrated(learner: Learner, rc: Optional[RecalibrationOptions], cc: Optional[ConformalOptions]) -> Learner:
    """The wrapper learner of :func:`recalibrate` / :func:`conformal`: the functions above, bound."""
    if not isinstance(learner, Learner):
        raise TypeError(f"learner: expected a Learner, got {type(learner).__name__}")
    out = make_learner(init=partial(init, learner, rc, cc), learn_one=partial(learn_one, learner, rc, cc),
                       predict_one=partial(predict_one, learner, rc, cc), step_one=partial(step_one, learner, rc, cc),
                       update_one=partial(update_one, learner, rc, cc),
                       n_features=learner.n_features,
                       tune=None if learner.tune is None else partial(tune_inner, learner))
    if learner.downdate is not None:
        takes_item = len(inspect.signature(learner.downdate).parameters) == 3
        out = out._replace(downdate=partial(downdate_item if takes_item else downdate_oldest, learner))
    return out


def _check_recal(decay, clip, max_scale, error_cap, prefix=""):
    check_in_range(decay, prefix + "decay", 0.0, 1.0, hi_open=True)
    check_positive(clip, prefix + "clip")
    if not float(clip) > 1.0:
        raise ValueError(f"{prefix}clip: must be > 1, got {clip!r}")
    check_positive(max_scale, prefix + "max_scale")
    if not float(max_scale) > 1.0:
        raise ValueError(f"{prefix}max_scale: must be > 1, got {max_scale!r}")
    if error_cap is not None:
        check_positive(error_cap, prefix + "error_cap")
    cap = None if error_cap is None else float(error_cap)
    return RecalibrationOptions(float(decay), float(clip), float(max_scale), cap)


@describe_factory
def recalibrate(learner: Learner, decay: float = 0.99, *, clip: float = RECALIBRATION_CLIP, max_scale: float = 1e12,
                error_cap: Optional[float] = None) -> Learner:
    """Wrap ``learner`` so its predictive variance is multiplied by a running mean of its ``z²``.

    The prediction is ``N(μ, s_{t-1} σ²)`` with ``s`` the exponentially weighted
    mean of ``z² = (y - μ)²/σ²`` (module doc, "Variance recalibration"), kept
    near a fast robust estimate of the scale and above a floor relative to the
    residuals' level. It makes the mean ``z²`` of the returned predictions
    about 1 over the last ``~1/(1 - decay)`` labels; it carries no coverage
    guarantee (use :func:`conformal`, optionally with ``recalibrate=``, for that).

    Args:
      learner: any :class:`~onlinejax.base.Learner` (a mixture prediction is
        replaced by its moment-matched Gaussian).
      decay: ``ρ`` in (0, 1), default; ``init(recalibration={"decay": ρ})`` overrides it (an array: it vmaps).
      clip: one ``z²`` enters clipped at ``clip · s`` (static, > 1).
      max_scale: ``s`` stays in ``[1/max_scale, max_scale]`` (static, > 1; a last resort, as the
        floor binds first, wide enough for a learner whose variance is ``10⁹`` times too large).
      error_cap: ``None``, or cap the variance at ``error_cap`` times the
        exponentially weighted mean squared error, as the combination does
        (:data:`RECALIBRATION_VAR_CAP`; static).
    Returns:
      A learner over :class:`CalibratedState` with ``init(recalibration=None,
      **inner_kwargs)`` (``inner_kwargs`` go to ``learner.init``), ``tune`` and
      ``downdate`` of the inner learner when it has them (the recalibrator
      itself is neither tuned nor downdated).
    Raises:
      ValueError: naming the argument (``decay`` outside (0, 1), ...).
    """
    return _calibrated(learner, _check_recal(decay, clip, max_scale, error_cap), None)


@describe_factory
def conformal(learner: Learner, level: float = 0.95, method: str = "aci", *, gamma: float = 0.005, lr: float = 0.02,
              window: Optional[int] = 100, integrator_gain: Optional[float] = None, saturation: float = 1.0,
              max_scale: float = 1e4, recalibrate: Optional[float] = None, df: Optional[float] = None) -> Learner:
    """Wrap ``learner`` in an online conformal calibrator: ``N(μ, c_t² σ²)``, long-run coverage at ``level``.

    Only ``level`` carries the guarantee (module doc, "Guarantees"); other
    levels of the returned Gaussian, its density and CRPS extrapolate from it.
    ``step`` corrects the inner learner's prediction made before learning ``y``
    (one inner ``step``); with delayed labels the calibrator learns when the
    label arrives, at ``learn``, from the inner prediction of that time.

    ACI alone widens the base interval at most ``Φ⁻¹(1 - 2⁻¹²⁷)/Φ⁻¹(1 - α/2)``
    times (6.6 at 95 %) while ``α_t > 0``, and jumps to the clip at ``α_t ≤ 0``:
    a learner whose ``σ`` is several times too small gets the guarantee through
    intervals alternating between too narrow and the clip. ``recalibrate=0.99``
    removes the bulk of such an error first and leaves ACI the residual.

    Args:
      learner: any :class:`~onlinejax.base.Learner`.
      level: calibrated level ``1 - α`` in (0, 1).
      method: ``"aci"`` (adaptive conformal inference, step ``gamma``) or
        ``"quantile"`` (quantile tracking on ``|z|``, step ``lr``).
      gamma: ACI step ``γ > 0``.
      lr: quantile-tracking step ``> 0`` (times the robust range ``k R_t`` of the
        scores when ``window`` is an int; constant with ``window=None``).
      window: time scale ``W`` of ``R_t`` (static; module doc).
      integrator_gain: ``None`` (no integrator) or ``K_I >= 0`` of the
        quantile tracker's integrator term (static on/off); saturation: its ``C_sat > 0``.
      max_scale: ``c²`` stays in ``[1/max_scale, max_scale]``: the finite stand-in
        for the infinite (empty) interval at ``α_t ≤ 0`` (``≥ 1``) (static, > 1).
      recalibrate: ``None``, or a decay ``ρ`` in (0, 1): recalibrate the variance
        first (:func:`recalibrate`'s defaults), so the conformal step only
        corrects what the running ``z²`` misses.
      df: ``None`` (a Gaussian output), or ``ν > 2`` (static): return a
        :class:`~onlinejax.base.StudentTPrediction` with ``ν`` degrees of
        freedom whose central ``level`` interval is the calibrated one
        (scale ``c σ Φ⁻¹(1 - α/2)/t_ν(1 - α/2)``). The guarantee is the same;
        the log density of a residual far outside the interval falls like
        ``-(ν+1) log|z|`` instead of ``-z²/2``, so one surprise (a
        discontinuity, the first items after a drift) cannot dominate a
        stream's log score.
    Returns:
      A learner over :class:`CalibratedState` with ``init(conformal=None,
      recalibration=None, **inner_kwargs)``: ``conformal`` overrides
      ``level``/``gamma`` (ACI) or ``level``/``lr``/``gain``/``saturation``
      (quantile) as arrays, so they vmap. ``tune``/``downdate`` of the inner
      learner pass through.
    Raises:
      ValueError: naming the argument (``level`` outside (0, 1), ``gamma <= 0``, ...).
    """
    return _calibrated(learner, *_conformal_options(
        level=level, method=method, gamma=gamma, lr=lr, window=window, integrator_gain=integrator_gain,
        saturation=saturation, max_scale=max_scale, recalibrate=recalibrate, df=df))


def _conformal_options(*, level, method, gamma, lr, window, integrator_gain, saturation, max_scale, recalibrate,
                       df) -> tuple[Optional[RecalibrationOptions], ConformalOptions]:
    """:func:`conformal`'s arguments checked (ValueError naming the argument) and made options."""
    check_in_range(level, "level", 0.0, 1.0, hi_open=True)
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    check_positive(gamma, "gamma")
    check_positive(lr, "lr")
    w = None if window is None else check_int(window, "window", 1)
    if integrator_gain is not None and not float(integrator_gain) >= 0.0:
        raise ValueError(f"integrator_gain: must be >= 0, got {integrator_gain!r}")
    check_positive(saturation, "saturation")
    check_positive(max_scale, "max_scale")
    if not float(max_scale) > 1.0:
        raise ValueError(f"max_scale: must be > 1, got {max_scale!r}")
    rc = None
    if recalibrate is not None:
        check_in_range(recalibrate, "recalibrate", 0.0, 1.0, hi_open=True)
        rc = _check_recal(recalibrate, RECALIBRATION_CLIP, 1e12, None)
    if df is not None:
        check_positive(df, "df")
        if not float(df) > 2.0:
            raise ValueError(f"df: must be > 2 (a finite variance), got {df!r}")
        df = float(df)
    gain = None if integrator_gain is None else float(integrator_gain)
    cc = ConformalOptions(method, float(level), float(gamma), float(lr), w, gain, float(saturation), float(max_scale),
                          df)
    return rc, cc


@describe_factory
def calibrated(learner: Learner, level: float = 0.95, *, clip: Optional[float] = 5.0, df: Optional[float] = 4.0,
               recalibrate: float = 0.99, lr: float = 0.02, warmup: Optional[int] = None,
               scale_inputs: bool = True, keep: Optional[int] = None) -> Learner:
    """The library's recipe for a learner used on raw data: standardise, then calibrate.

    ``conformal(standardize(learner, clip=clip), level, method="quantile",
    recalibrate=recalibrate, df=df)``: inputs and targets standardised online
    (:func:`onlinejax.standardize.standardize`, inputs clipped at ``clip``
    standard deviations), the variance recalibrated by its running ``z²``,
    the ``level`` interval's coverage held by quantile tracking, and a
    Student-t output with ``df`` degrees of freedom around that interval.
    The recommended configurations of :mod:`onlinejax.zoo` are built so.

    Args:
      learner: any learner.
      level: the calibrated level in (0, 1).
      clip: see :func:`~onlinejax.standardize.standardize` (``None``: no clip).
      df: see :func:`conformal` (``None``: a Gaussian output).
      recalibrate: the recalibration's decay ``ρ`` in (0, 1).
      lr: the quantile tracker's step factor (:func:`conformal`).
      warmup: see :func:`~onlinejax.standardize.standardize` (``None``:
        the statistics keep moving; give the window for a learner that
        stops learning while stable).
      scale_inputs: see :func:`~onlinejax.standardize.standardize` (``False``:
        inputs standardised upstream by statistics that move, River's scaler).
      keep: see :func:`~onlinejax.standardize.standardize` (with ``warmup``:
        the items a rebase refits on; give a window learner's window).
    """
    from .standardize import standardize

    inner = standardize(learner, clip=clip, warmup=warmup, scale_inputs=scale_inputs, keep=keep)
    # conformal's own defaults for what this recipe does not set (one place holds them: its signature)
    defaults = {k: p.default for k, p in inspect.signature(conformal).parameters.items()
                if p.default is not inspect.Parameter.empty}
    rc, cc = _conformal_options(**{**defaults, "level": level, "method": "quantile", "lr": lr,
                                   "recalibrate": recalibrate, "df": df})
    return _calibrated(inner, rc, cc._replace(standardized=True))


@describe_factory
def calibrated_bayes_linreg(n_features: int, *, forgetting: Optional[float] = None, alpha=1.0, beta=1.0,
                            level: float = 0.95, warmup: Optional[int] = None, scale_inputs: bool = True) -> Learner:
    """Bayesian linear regression with an intercept, evidence-tunable, made :func:`calibrated`.

    The default learner of the River and scikit-learn adapters: raw features
    of any scale, an intercept, ``tune`` (type-II ML of ``alpha`` and ``beta``
    on the standardised data, :func:`onlinejax.linear.bayes.tune_evidence`)
    and calibrated 95 % intervals.

    Args:
      n_features: ``d``.
      forgetting: ``None`` or ``λ`` in (0, 1] (see :func:`onlinejax.linear.bayes_linreg`).
      alpha, beta: prior and noise precision on the standardised scale.
      level: the calibrated level.
      warmup: ``None`` (statistics that keep moving) or ``F``: the first
        ``F`` items' statistics, then fixed and rebased only after a
        covariate shift (:func:`~onlinejax.standardize.standardize`). A
        learner that never forgets keeps its coefficients in the coordinates
        of the items it learned them from, so moving statistics cost it on a
        trending input; fixed ones cost it on a stream whose first items are
        not representative (time 0 for every chick in River's ChickWeights).
      scale_inputs: ``True``; ``False`` for inputs standardised upstream by
        moving statistics (:func:`calibrated`). The River adapter sets it when it
        sees a scaler in front (:class:`~onlinejax.adapters.river.RiverRegressor`).
    """
    from .linear import bayes_linreg

    return calibrated(bayes_linreg(n_features, alpha=alpha, beta=beta, forgetting=forgetting, intercept=True),
                      level, warmup=warmup, scale_inputs=scale_inputs)

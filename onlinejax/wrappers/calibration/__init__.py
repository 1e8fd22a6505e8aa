"""Calibration layer: variance recalibration and online conformal intervals around any learner.

A learner's predictive ``N(μ, σ²)`` can be over- or under-confident (a wrong
noise precision, a GP whose noise went to its floor, a drift the model has
not absorbed yet). The wrappers here keep the learner and correct the scale
of its distribution online from the labels, as a scale-corrected Gaussian

    N(μ, c_t² σ²)

with one multiplier ``c_t`` per item, so that ``interval(level)``,
``log_prob`` and the CRPS of the returned :class:`~onlinejax.core.base.Prediction`
describe one and the same distribution. A Student-t or mixture predictive is judged
by the Gaussian of its central interval (:func:`judged`) when a conformal step calibrates
that interval: the calibrators correct the interval the learner gives, not its variance.

Calibrators (pure ``init`` / ``update`` functions over NamedTuple states, usable on their own) and the
wrappers built from them, one module each, each importing only those before it:

* :mod:`onlinejax.wrappers.calibration.recalibration`: variance recalibration (:func:`recalibration_init`,
  :func:`recalibration_update`, :func:`recalibrated_variance`), a running mean of the standardised
  squared residuals kept near robust log-scale estimates and above a floor relative to the residuals'
  level, and the plain step :func:`onlinejax.wrappers.combination.combine` recalibrates its members with.
* :mod:`onlinejax.wrappers.calibration.aci`: adaptive conformal inference (:func:`aci_init`, :func:`aci_update`,
  :func:`aci_var_scale`; Gibbs & Candès 2021), the tabulated two-sided Gaussian quantile
  :func:`upper_normal_quantile` and the interval miss :func:`interval_miss`.
* :mod:`onlinejax.wrappers.calibration.quantile`: quantile tracking (:func:`quantile_init`,
  :func:`quantile_update`; the "P" and optional "I" controller of conformal PID control,
  Angelopoulos, Candès & Tibshirani 2023).
* :mod:`onlinejax.wrappers.calibration.width_cap`: the recipes' cap of the issued interval at
  :data:`WIDTH_CAP` times the climatology's width (:func:`width_cap_variance`).
* :mod:`onlinejax.wrappers.calibration.wrapper`: the wrapped learner's state :class:`CalibratedState`, its static
  :class:`RecalibrationOptions` / :class:`ConformalOptions` and per-item functions (:func:`init`,
  :func:`correct`, :func:`update`, :func:`step_one`, :func:`update_one`, ...), and how the first items
  of a standardised learner are left out.
* :mod:`onlinejax.wrappers.calibration.factories`: the wrappers :func:`recalibrate` and :func:`conformal` (the
  conformal steps' options as values: :class:`ACIOptions`, :class:`QuantileOptions`), the
  recipe :func:`calibrated` (standardise, then calibrate), :func:`calibrated_combination` (the same over
  standardised members) and :func:`calibrated_bayes_linreg` (its standardisation
  :data:`CARRIED_STANDARDIZATION`).

Every name of these modules is importable from :mod:`onlinejax.wrappers.calibration` itself.

Guarantees. For ACI the update telescopes, ``α_{T+1} = α_1 + γ Σ_t (α - err_t)``,
so ``|mean err - α| = |α_1 - α_{T+1}|/(γT)``; while ``α_t`` stays in
``[-γ, 1 + γ]`` this gives Gibbs & Candès' Prop. 4.1, ``(max(α_1, 1 - α_1) + γ)/(γT)`` for
*any* sequence. With the finite clip the identity holds until a residual beyond
``sqrt(max_scale)·Φ⁻¹(1 - α/2)`` standard deviations arrives while
``α_t ≤ 0``: the clip at ``-γ`` drops (part of) such a miss from the sum, and
the bound holds for the items counted. Quantile tracking with a constant step
and scores in ``[0, B]`` has ``|mean err - α| ≤ (B + η)/(ηT)`` (Prop. 1 of
Angelopoulos, Candès & Tibshirani 2023) while the clip of ``q̂`` does not bind; the range-scaled step gives
up this clean bound for scale-free steps. **Only the calibrated
level (``level`` given to :func:`conformal`) carries the long-run coverage
guarantee**: the returned Gaussian's intervals at other levels, its density
and its CRPS are a Gaussian extrapolation from that one quantile.
``err_t`` is computed from the returned interval itself,
``|y - μ| > Φ⁻¹(1 - α/2)·sqrt(c_t² σ²)`` (the coverage the library's metrics
score), so the guarantee is about the intervals a user sees. The recipes (:func:`calibrated`,
:func:`calibrated_combination`) then cap the issued interval at :data:`WIDTH_CAP` times the
climatology's width; the calibrators judge the interval before the cap (a run of capped misses
must not wind their scale up), so there the guarantee is about that interval, of which the
issued one is the narrower part where the cap binds.
"""
from .recalibration import RecalibrationState, recalibrated_variance, recalibration_init, recalibration_update
from .width_cap import WIDTH_CAP, width_cap_variance
from .aci import ACIState, aci_init, aci_update, aci_var_scale, interval_miss
from .quantile import QuantileState, quantile_init, quantile_threshold, quantile_update, quantile_var_scale
from .wrapper import (CalibratedState, ConformalOptions, RecalibrationOptions, correct, init, judged, learn_one,
                      output, predict_one, step_one, update, update_one)
from .factories import (CALIBRATED_STANDARDIZATION, CARRIED_STANDARDIZATION, METHODS, RECIPE_QUANTILE, ACIOptions,
                        QuantileOptions, calibrated, calibrated_bayes_linreg, calibrated_combination, conformal,
                        recalibrate)

# the rest of the modules' names, importable from here as before the split (onlinejax.wrappers.combination uses some)
from .recalibration import LOG_CHI2_MEAN, RECALIBRATION_BAND, RECALIBRATION_CLIP, RECALIBRATION_FAST  # noqa: F401
from .recalibration import RECALIBRATION_FLOOR, RECALIBRATION_LEVEL_DECAY, RECALIBRATION_LOG_CLIP  # noqa: F401
from .recalibration import RECALIBRATION_VAR_CAP, Array, _level_floor, _mask  # noqa: F401
from .recalibration import capped_variance, is_informative, scale_update, sq_err_update  # noqa: F401
from .aci import _TABLE_BITS, _two_sided_quantile, _upper_quantile_table, upper_normal_quantile  # noqa: F401
from .quantile import MEAN_ABS_NORMAL, SCORE_CLIP, _integrator  # noqa: F401
from .wrapper import _calibrate, _scale_known, inverse_is_exact, uncorrect, unknown_scale_floor  # noqa: F401
from .factories import _calibrated, _check_recal, _conformal_options  # noqa: F401

__all__ = [
    "calibrated",
    "calibrated_combination",
    "calibrated_bayes_linreg",
    "METHODS",
    "ACIOptions",
    "QuantileOptions",
    "CALIBRATED_STANDARDIZATION",
    "RECIPE_QUANTILE",
    "CARRIED_STANDARDIZATION",
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
    "WIDTH_CAP",
    "width_cap_variance",
    "CalibratedState",
    "RecalibrationOptions",
    "ConformalOptions",
    "init",
    "judged",
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

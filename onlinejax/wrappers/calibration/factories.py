"""The calibration wrappers' factories: :func:`recalibrate`, :func:`conformal` and the recipe :func:`calibrated`.

Each checks its arguments into the static
:class:`~onlinejax.wrappers.calibration.RecalibrationOptions` / :class:`~onlinejax.wrappers.calibration.ConformalOptions`
and binds them, with the inner learner, to the per-item functions of
:mod:`onlinejax.wrappers.calibration.wrapper`. :func:`calibrated_bayes_linreg` is the adapters' default learner.
"""
from __future__ import annotations

import inspect
from functools import partial
from typing import NamedTuple, Optional

from ...core.checks import check_record, changed_fields
from ...core.base import (Learner, LearnerCores, check_in_range, check_int, check_positive, describe_factory, make_learner,
                          pass_through)
from ...learners.linear.bayes import bayes_linreg, reexpress
from ..standardize_state import StandardizeOptions
from .recalibration import RECALIBRATION_CLIP
from .width_cap import WIDTH_CAP
from .wrapper import ConformalOptions, RecalibrationOptions, init, learn_one, predict_one, step_one, update_one

__all__ = ["METHODS", "ACIOptions", "QuantileOptions", "recalibrate", "conformal", "calibrated",
           "calibrated_combination", "calibrated_bayes_linreg", "CARRIED_CLIP", "CALIBRATED_STANDARDIZATION",
           "CARRIED_STANDARDIZATION", "RECIPE_QUANTILE"]

#: Conformal methods of :func:`conformal`.
METHODS = ("aci", "quantile")


class ACIOptions(NamedTuple):
    """Adaptive conformal inference's step as one value (:func:`conformal`'s ``aci=``, ``method="aci"``).

    An immutable, hashable record (:mod:`~onlinejax.wrappers.calibration.aci`); the ``repr`` shows the fields
    that differ from the defaults. ``init(conformal={"gamma": ...})`` overrides the step as an array.

    Attributes:
      gamma: ``0.005`` (default), or the step ``γ > 0`` of the miscoverage level ``α_t``.

    Example:
      >>> ACIOptions(gamma=0.05)
      ACIOptions(gamma=0.05)
    """

    gamma: float = 0.005

    def checked(self, name: str = "aci") -> "ACIOptions":
        """The step checked, as a float; ValueError naming the field (``aci.gamma: ...``)."""
        check_positive(self.gamma, f"{name}.gamma")
        return ACIOptions(float(self.gamma))

    def __repr__(self) -> str:
        return changed_fields(self)


class QuantileOptions(NamedTuple):
    """Quantile tracking's step as one value (:func:`conformal`'s and :func:`calibrated`'s ``quantile=``).

    An immutable, hashable record (:mod:`~onlinejax.wrappers.calibration.quantile`); the ``repr`` shows the fields
    that differ from the defaults. ``init(conformal={...})`` overrides ``lr``, ``gain`` and
    ``saturation`` as arrays.

    Attributes:
      lr: ``0.02`` (default), or the step factor ``> 0`` on the threshold of ``|z|``: times the robust
        range ``k R_t`` of the scores when ``time_scale`` is an int, a constant step with ``None``.
      time_scale: ``100`` (default), or ``None`` or an int ``W >= 1`` (static): the time scale of
        ``R_t`` (items).
      integrator_gain: ``None`` (default: no integrator term), or ``K_I >= 0`` of the tracker's
        integrator term (static on/off).
      saturation: ``1.0`` (default), or the integrator's ``C_sat > 0``.

    Example:
      >>> QuantileOptions(lr=0.05, time_scale=None)
      QuantileOptions(lr=0.05, time_scale=None)
    """

    lr: float = 0.02
    time_scale: Optional[int] = 100
    integrator_gain: Optional[float] = None
    saturation: float = 1.0

    def checked(self, name: str = "quantile") -> "QuantileOptions":
        """The step checked, as the tracker reads it; ValueError naming the field (``quantile.lr: ...``)."""
        check_positive(self.lr, f"{name}.lr")
        w = None if self.time_scale is None else check_int(self.time_scale, f"{name}.time_scale", 1)
        gain = self.integrator_gain
        if gain is not None:
            if not float(gain) >= 0.0:
                raise ValueError(f"{name}.integrator_gain: must be >= 0, got {gain!r}")
            gain = float(gain)
        check_positive(self.saturation, f"{name}.saturation")
        return QuantileOptions(float(self.lr), w, gain, float(self.saturation))

    def __repr__(self) -> str:
        return changed_fields(self)


def _record(value, cls, name: str):
    """``value`` checked to be a ``cls`` record (TypeError naming the argument), then its fields."""
    return check_record(value, cls, name).checked(name)


def _calibrated(learner: Learner, rc: Optional[RecalibrationOptions], cc: Optional[ConformalOptions]) -> Learner:
    """The wrapper learner of :func:`recalibrate` / :func:`conformal`: the wrapper module's functions, bound."""
    if not isinstance(learner, Learner):
        raise TypeError(f"learner: expected a Learner, got {type(learner).__name__}")
    # the calibrators are neither tuned nor downdated: they judged the predictions as they were issued
    return make_learner(init=partial(init, learner, rc, cc), learn_one=partial(learn_one, learner, rc, cc),
                        predict_one=partial(predict_one, learner, rc, cc), n_features=learner.n_features,
                        cores=LearnerCores(step_one=partial(step_one, learner, rc, cc),
                                           update_one=partial(update_one, learner, rc, cc), **pass_through(learner)))


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
    mean of ``z² = (y - μ)²/σ²`` (:mod:`~onlinejax.wrappers.calibration.recalibration`), kept
    near a fast robust estimate of the scale and above a floor relative to the
    residuals' level. It makes the mean ``z²`` of the returned predictions
    about 1 over the last ``~1/(1 - decay)`` labels; it carries no coverage
    guarantee (use :func:`conformal`, optionally with ``recalibrate=``, for that).

    Args:
      learner: any :class:`~onlinejax.core.base.Learner` (a mixture prediction is
        replaced by its moment-matched Gaussian).
      decay: ``ρ`` in (0, 1), default; ``init(recalibration={"decay": ρ})`` overrides it (an array: it vmaps).
      clip: one ``z²`` enters clipped at ``clip · s`` (static, > 1).
      max_scale: ``s`` stays in ``[1/max_scale, max_scale]`` (static, > 1; a last resort, as the
        floor binds first, wide enough for a learner whose variance is ``10⁹`` times too large).
      error_cap: ``None``, or cap the variance at ``error_cap`` times the
        exponentially weighted mean squared error, as the combination does
        (:data:`~onlinejax.wrappers.calibration.RECALIBRATION_VAR_CAP`; static).
    Returns:
      A learner over :class:`~onlinejax.wrappers.calibration.CalibratedState` with ``init(recalibration=None,
      **inner_kwargs)`` (``inner_kwargs`` go to ``learner.init``), ``tune``,
      ``downdate`` and ``evict`` of the inner learner when it has them (the
      recalibrator itself is neither tuned nor downdated).
    Raises:
      ValueError: naming the argument (``decay`` outside (0, 1), ...).
    """
    return _calibrated(learner, _check_recal(decay, clip, max_scale, error_cap), None)


@describe_factory
def conformal(learner: Learner, level: float = 0.95, method: str = "aci", *, aci: ACIOptions = ACIOptions(),
              quantile: QuantileOptions = QuantileOptions(), max_scale: float = 1e4,
              recalibrate: Optional[float] = None, df: Optional[float] = None) -> Learner:
    """Wrap ``learner`` in an online conformal calibrator: ``N(μ, c_t² σ²)``, long-run coverage at ``level``.

    Only ``level`` carries the guarantee (:mod:`onlinejax.wrappers.calibration`, "Guarantees"); other
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
      learner: any :class:`~onlinejax.core.base.Learner`.
      level: calibrated level ``1 - α`` in (0, 1).
      method: ``"aci"`` (adaptive conformal inference, its step ``aci``) or
        ``"quantile"`` (quantile tracking on ``|z|``, its step ``quantile``).
      aci: ACI's step, an :class:`ACIOptions` (``gamma``; default ``γ = 0.005``), checked here;
        used with ``method="aci"``.
      quantile: quantile tracking's step, a :class:`QuantileOptions` (``lr``, ``time_scale``,
        ``integrator_gain``, ``saturation``; default ``lr=0.02`` times the scores' robust range
        over ``W = 100`` items, no integrator), checked here; used with ``method="quantile"``.
      max_scale: ``c²`` stays in ``[1/max_scale, max_scale]``: the finite stand-in
        for the infinite (empty) interval at ``α_t ≤ 0`` (``≥ 1``) (static, > 1).
      recalibrate: ``None``, or a decay ``ρ`` in (0, 1): recalibrate the variance
        first (:func:`recalibrate`'s defaults), so the conformal step only
        corrects what the running ``z²`` misses.
      df: ``None`` (a Gaussian output), or ``ν > 2`` (static): return a
        :class:`~onlinejax.core.base.StudentTPrediction` with ``ν`` degrees of
        freedom whose central ``level`` interval is the calibrated one
        (scale ``c σ Φ⁻¹(1 - α/2)/t_ν(1 - α/2)``). The guarantee is the same;
        the log density of a residual far outside the interval falls like
        ``-(ν+1) log|z|`` instead of ``-z²/2``, so one surprise (a
        discontinuity, the first items after a drift) cannot dominate a
        stream's log score.
    Returns:
      A learner over :class:`~onlinejax.wrappers.calibration.CalibratedState` with ``init(conformal=None,
      recalibration=None, **inner_kwargs)``: ``conformal`` overrides
      ``level``/``gamma`` (ACI) or ``level``/``lr``/``gain``/``saturation``
      (quantile) as arrays, so they vmap. ``tune``, ``downdate`` and ``evict``
      of the inner learner pass through.
    Raises:
      ValueError: naming the argument or the field (``level`` outside (0, 1), ``aci.gamma <= 0``, ...).
      TypeError: ``aci`` or ``quantile`` not its record.

    Example:
      >>> from onlinejax.learners.linear import bayes_linreg
      >>> conformal(bayes_linreg(2), 0.9, "quantile", quantile=QuantileOptions(lr=0.05)).description
      "conformal(bayes_linreg(2), 0.9, 'quantile', quantile=QuantileOptions(lr=0.05))"
    """
    return _calibrated(learner, *_conformal_options(
        level=level, method=method, aci=aci, quantile=quantile, max_scale=max_scale, recalibrate=recalibrate, df=df))


def _conformal_options(*, level, method, aci, quantile, max_scale, recalibrate,
                       df) -> tuple[Optional[RecalibrationOptions], ConformalOptions]:
    """:func:`conformal`'s arguments checked (ValueError naming the argument or field) and made options."""
    check_in_range(level, "level", 0.0, 1.0, hi_open=True)
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    a, q = _record(aci, ACIOptions, "aci"), _record(quantile, QuantileOptions, "quantile")
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
    cc = ConformalOptions(method, float(level), a.gamma, q.lr, q.time_scale, q.integrator_gain, q.saturation,
                          float(max_scale), df)
    return rc, cc


def _recipe_options(level, quantile, recalibrate, df) -> tuple[RecalibrationOptions, ConformalOptions]:
    """The recipes' options: quantile tracking after recalibration, :func:`conformal`'s defaults for the rest."""
    # conformal's own defaults for what the recipes do not set (one place holds them: its signature)
    defaults = {k: p.default for k, p in inspect.signature(conformal).parameters.items()
                if p.default is not inspect.Parameter.empty}
    rc, cc = _conformal_options(**{**defaults, "level": level, "method": "quantile", "quantile": quantile,
                                   "recalibrate": recalibrate, "df": df})
    return rc, cc._replace(width_cap=WIDTH_CAP)


#: :func:`calibrated`'s standardisation: moving statistics, the standardised inputs clipped at 5 standard deviations.
CALIBRATED_STANDARDIZATION = StandardizeOptions(clip=5.0)
#: :func:`calibrated`'s quantile tracking: a step factor of 0.05, not :func:`conformal`'s 0.02, so that a short
#: series' coverage settles within its first hundred items, at a slightly less sharp interval on long streams
#: (``benchmarks/RESULTS.md``, "The recipes' quantile step"). :func:`calibrated_combination` keeps 0.02: over
#: members that settle so, its own coverage settles too, and the faster step only costs it sharpness.
RECIPE_QUANTILE = QuantileOptions(lr=0.05)


@describe_factory
def calibrated(learner: Learner, level: float = 0.95, *, df: Optional[float] = 4.0, recalibrate: float = 0.99,
               quantile: QuantileOptions = RECIPE_QUANTILE,
               standardization: StandardizeOptions = CALIBRATED_STANDARDIZATION) -> Learner:
    """The library's recipe for a learner used on raw data: standardise, then calibrate.

    ``conformal(standardize(learner, options=standardization), level, method="quantile",
    quantile=quantile, recalibrate=recalibrate, df=df)``: inputs and targets standardised online
    (:func:`onlinejax.wrappers.standardize.standardize`, by default inputs clipped at 5
    standard deviations), the variance recalibrated by its running ``z²``,
    the ``level`` interval's coverage held by quantile tracking, and a
    Student-t output with ``df`` degrees of freedom around that interval,
    at most :data:`~onlinejax.wrappers.calibration.WIDTH_CAP` times as wide as the
    climatology's at the same item (:mod:`~onlinejax.wrappers.calibration.width_cap`;
    ``conformal(standardize(learner), level, "quantile", recalibrate=, df=)`` has no cap).
    The recommended configurations of :mod:`onlinejax.zoo` are built so.

    Args:
      learner: any learner.
      level: the calibrated level in (0, 1).
      df: see :func:`conformal` (``None``: a Gaussian output).
      recalibrate: the recalibration's decay ``ρ`` in (0, 1).
      quantile: the quantile tracker's step, a :class:`QuantileOptions` (:func:`conformal`; default
        :data:`RECIPE_QUANTILE`, ``lr=0.05``).
      standardization: the standardisation's options, a
        :class:`~onlinejax.wrappers.standardize.StandardizeOptions` passed on to
        :func:`~onlinejax.wrappers.standardize.standardize` (default
        :data:`CALIBRATED_STANDARDIZATION`, ``StandardizeOptions(clip=5.0)``): ``warmup=F`` for a
        learner that stops learning while stable, ``keep=`` a window learner's window,
        ``scale_inputs=False`` behind River's scaler, ``reexpress=`` the learner's change of
        coordinates when the statistics move.
    Raises:
      ValueError: naming the argument or the field (``standardization.keep: needs a warmup``, ...).
      TypeError: ``quantile`` or ``standardization`` not its record.

    Example:
      >>> from onlinejax.learners.linear import bayes_linreg
      >>> calibrated(bayes_linreg(2), standardization=StandardizeOptions(clip=5.0, warmup=32)).description
      'calibrated(bayes_linreg(2), standardization=StandardizeOptions(clip=5.0, warmup=32))'
    """
    from ..standardize import standardize

    check_record(standardization, StandardizeOptions, "standardization")
    # checked here so that a bad field names this argument; standardize takes the record as it was given
    standardization.checked("standardization")
    inner = standardize(learner, options=standardization)
    rc, cc = _recipe_options(level, quantile, recalibrate, df)
    return _calibrated(inner, rc, cc._replace(standardized=True))


@describe_factory
def calibrated_combination(learner: Learner, level: float = 0.95, *, df: Optional[float] = 4.0,
                           recalibrate: float = 0.99, lr: float = 0.02) -> Learner:
    """:func:`calibrated` without the standardisation, for a learner whose members are each :func:`calibrated`.

    ``conformal(learner, level, method="quantile", recalibrate=recalibrate,
    df=df)`` (e.g. over :func:`onlinejax.wrappers.combination.combine` of calibrated
    members) with :func:`calibrated`'s width cap, except that the calibrators leave out the labels before the
    targets differ, as the members' own calibrators do: the members'
    predictions before had no target scale, and a residual measured in their
    guessed unit (two targets near 1000 against a unit prior) would set the
    variance scale a hundred times too wide for a hundred items
    (:mod:`onlinejax.wrappers.calibration.wrapper`, "The first items").

    Args:
      learner: the learner to calibrate (its members standardised).
      level, df, recalibrate: as in :func:`calibrated`.
      lr: the quantile tracker's step factor (:class:`QuantileOptions`'s ``lr``; 0.02, not
        :data:`RECIPE_QUANTILE`'s 0.05: its members settle on their own).
    """
    rc, cc = _recipe_options(level, QuantileOptions(lr=lr), recalibrate, df)
    return _calibrated(learner, rc, cc._replace(after_spread=True))


#: :func:`calibrated_bayes_linreg`'s clip of its standardised inputs when its posterior is carried into the
#: statistics' new coordinates. A clipped item is carried at the clip's raw value of its time for good: at 5 sd
#: the ones of a binary feature rarer than 1 in 26 (a late one-hot category) were all learned there and biased
#: its weight for good (its rows' MSE 3x the noise); with no clip the first items' volatile statistics cost
#: streams of duplicated rows up to 200 items. 20 sd keeps both (rarer than 1 in 400 is still clipped).
CARRIED_CLIP = 20.0


#: :func:`calibrated_bayes_linreg`'s standardisation: moving statistics, its posterior carried into their new
#: coordinates whenever they move (:func:`onlinejax.learners.linear.bayes.reexpress`), so a trending input costs nothing,
#: and the standardised inputs clipped at :data:`CARRIED_CLIP` standard deviations.
CARRIED_STANDARDIZATION = CALIBRATED_STANDARDIZATION._replace(clip=CARRIED_CLIP, reexpress=reexpress)


@describe_factory
def calibrated_bayes_linreg(n_features: int, *, forgetting: Optional[float] = None, alpha=1.0, beta=1.0,
                            level: float = 0.95,
                            standardization: StandardizeOptions = CARRIED_STANDARDIZATION) -> Learner:
    """Bayesian linear regression with an intercept, evidence-tunable, made :func:`calibrated`.

    The default learner of the River and scikit-learn adapters: raw features
    of any scale, an intercept, ``tune`` (type-II ML of ``alpha`` and ``beta``
    on the standardised data, :func:`onlinejax.learners.linear.bayes.tune_evidence`)
    and calibrated 95 % intervals.

    Args:
      n_features: ``d``.
      forgetting: ``None`` or ``λ`` in (0, 1] (see :func:`onlinejax.learners.linear.bayes_linreg`).
      alpha, beta: prior and noise precision on the standardised scale.
      level: the calibrated level.
      standardization: the standardisation's options, a
        :class:`~onlinejax.wrappers.standardize.StandardizeOptions` passed on to :func:`calibrated`. By default
        :data:`CARRIED_STANDARDIZATION`: statistics that keep moving, the posterior carried into
        their new coordinates. ``CALIBRATED_STANDARDIZATION._replace(warmup=F)``: the first ``F``
        items' statistics, then fixed and rebased only after a covariate shift
        (:func:`~onlinejax.wrappers.standardize.standardize`); fixed ones cost it on a stream whose first
        items are not representative (time 0 for every chick in River's ChickWeights).
        ``CALIBRATED_STANDARDIZATION._replace(scale_inputs=False)``: inputs standardised upstream by
        moving statistics; the River adapter builds it so when it sees a scaler in front
        (:class:`~onlinejax.adapters.river.RiverRegressor`).
    Raises:
      ValueError: naming the argument or the field (``standardization.warmup: ...``).
      TypeError: ``standardization`` not a :class:`~onlinejax.wrappers.standardize.StandardizeOptions`.
    """
    return calibrated(bayes_linreg(n_features, alpha=alpha, beta=beta, forgetting=forgetting, intercept=True),
                      level, standardization=standardization)

"""The calibration wrappers' factories: :func:`recalibrate`, :func:`conformal` and the recipe :func:`calibrated`.

Each checks its arguments into the static
:class:`~onlinejax.calibration.RecalibrationOptions` / :class:`~onlinejax.calibration.ConformalOptions`
and binds them, with the inner learner, to the per-item functions of
:mod:`onlinejax.calibration.wrapper`. :func:`calibrated_bayes_linreg` is the adapters' default learner.
"""
from __future__ import annotations

import inspect
from functools import partial
from typing import Callable, Optional

from ..base import Learner, check_in_range, check_int, check_positive, describe_factory, make_learner, pass_through
from .recalibration import RECALIBRATION_CLIP
from .wrapper import ConformalOptions, RecalibrationOptions, init, learn_one, predict_one, step_one, update_one

__all__ = ["METHODS", "recalibrate", "conformal", "calibrated", "calibrated_combination", "calibrated_bayes_linreg",
           "CARRIED_CLIP"]

#: Conformal methods of :func:`conformal`.
METHODS = ("aci", "quantile")


def _calibrated(learner: Learner, rc: Optional[RecalibrationOptions], cc: Optional[ConformalOptions]) -> Learner:
    """The wrapper learner of :func:`recalibrate` / :func:`conformal`: the wrapper module's functions, bound."""
    if not isinstance(learner, Learner):
        raise TypeError(f"learner: expected a Learner, got {type(learner).__name__}")
    # the calibrators are neither tuned nor downdated: they judged the predictions as they were issued
    return make_learner(init=partial(init, learner, rc, cc), learn_one=partial(learn_one, learner, rc, cc),
                        predict_one=partial(predict_one, learner, rc, cc), step_one=partial(step_one, learner, rc, cc),
                        update_one=partial(update_one, learner, rc, cc),
                        n_features=learner.n_features, **pass_through(learner))


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
    mean of ``z² = (y - μ)²/σ²`` (:mod:`~onlinejax.calibration.recalibration`), kept
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
        (:data:`~onlinejax.calibration.RECALIBRATION_VAR_CAP`; static).
    Returns:
      A learner over :class:`~onlinejax.calibration.CalibratedState` with ``init(recalibration=None,
      **inner_kwargs)`` (``inner_kwargs`` go to ``learner.init``), ``tune``,
      ``downdate`` and ``evict`` of the inner learner when it has them (the
      recalibrator itself is neither tuned nor downdated).
    Raises:
      ValueError: naming the argument (``decay`` outside (0, 1), ...).
    """
    return _calibrated(learner, _check_recal(decay, clip, max_scale, error_cap), None)


@describe_factory
def conformal(learner: Learner, level: float = 0.95, method: str = "aci", *, gamma: float = 0.005, lr: float = 0.02,
              time_scale: Optional[int] = 100, integrator_gain: Optional[float] = None, saturation: float = 1.0,
              max_scale: float = 1e4, recalibrate: Optional[float] = None, df: Optional[float] = None) -> Learner:
    """Wrap ``learner`` in an online conformal calibrator: ``N(μ, c_t² σ²)``, long-run coverage at ``level``.

    Only ``level`` carries the guarantee (:mod:`onlinejax.calibration`, "Guarantees"); other
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
        scores when ``time_scale`` is an int; constant with ``time_scale=None``).
      time_scale: time scale ``W`` of ``R_t`` (static; :mod:`~onlinejax.calibration.quantile`).
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
      A learner over :class:`~onlinejax.calibration.CalibratedState` with ``init(conformal=None,
      recalibration=None, **inner_kwargs)``: ``conformal`` overrides
      ``level``/``gamma`` (ACI) or ``level``/``lr``/``gain``/``saturation``
      (quantile) as arrays, so they vmap. ``tune``, ``downdate`` and ``evict``
      of the inner learner pass through.
    Raises:
      ValueError: naming the argument (``level`` outside (0, 1), ``gamma <= 0``, ...).
    """
    return _calibrated(learner, *_conformal_options(
        level=level, method=method, gamma=gamma, lr=lr, time_scale=time_scale, integrator_gain=integrator_gain,
        saturation=saturation, max_scale=max_scale, recalibrate=recalibrate, df=df))


def _conformal_options(*, level, method, gamma, lr, time_scale, integrator_gain, saturation, max_scale, recalibrate,
                       df) -> tuple[Optional[RecalibrationOptions], ConformalOptions]:
    """:func:`conformal`'s arguments checked (ValueError naming the argument) and made options."""
    check_in_range(level, "level", 0.0, 1.0, hi_open=True)
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    check_positive(gamma, "gamma")
    check_positive(lr, "lr")
    w = None if time_scale is None else check_int(time_scale, "time_scale", 1)
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


def _recipe_options(level, lr, recalibrate, df) -> tuple[RecalibrationOptions, ConformalOptions]:
    """The recipes' options: quantile tracking after recalibration, :func:`conformal`'s defaults for the rest."""
    # conformal's own defaults for what the recipes do not set (one place holds them: its signature)
    defaults = {k: p.default for k, p in inspect.signature(conformal).parameters.items()
                if p.default is not inspect.Parameter.empty}
    return _conformal_options(**{**defaults, "level": level, "method": "quantile", "lr": lr,
                                 "recalibrate": recalibrate, "df": df})


@describe_factory
def calibrated(learner: Learner, level: float = 0.95, *, clip: Optional[float] = 5.0, df: Optional[float] = 4.0,
               recalibrate: float = 0.99, lr: float = 0.02, warmup: Optional[int] = None,
               scale_inputs: bool = True, keep: Optional[int] = None,
               reexpress: Optional[Callable] = None) -> Learner:
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
      reexpress: see :func:`~onlinejax.standardize.standardize` (without ``warmup``: the
        learner's change of coordinates when the statistics move).
    """
    from ..standardize import standardize

    inner = standardize(learner, clip=clip, warmup=warmup, scale_inputs=scale_inputs, keep=keep,
                        reexpress=reexpress)
    rc, cc = _recipe_options(level, lr, recalibrate, df)
    return _calibrated(inner, rc, cc._replace(standardized=True))


@describe_factory
def calibrated_combination(learner: Learner, level: float = 0.95, *, df: Optional[float] = 4.0,
                           recalibrate: float = 0.99, lr: float = 0.02) -> Learner:
    """:func:`calibrated` without the standardisation, for a learner whose members are each :func:`calibrated`.

    ``conformal(learner, level, method="quantile", recalibrate=recalibrate,
    df=df)`` (e.g. over :func:`onlinejax.combination.combine` of calibrated
    members), except that the calibrators leave out the labels before the
    targets differ, as the members' own calibrators do: the members'
    predictions before had no target scale, and a residual measured in their
    guessed unit (two targets near 1000 against a unit prior) would set the
    variance scale a hundred times too wide for a hundred items
    (:mod:`onlinejax.calibration.wrapper`, "The first items").

    Args:
      learner: the learner to calibrate (its members standardised).
      level, df, recalibrate, lr: as in :func:`calibrated`.
    """
    rc, cc = _recipe_options(level, lr, recalibrate, df)
    return _calibrated(learner, rc, cc._replace(after_spread=True))


#: :func:`calibrated_bayes_linreg`'s clip of its standardised inputs when its posterior is carried into the
#: statistics' new coordinates. A clipped item is carried at the clip's raw value of its time for good: at 5 sd
#: the ones of a binary feature rarer than 1 in 26 (a late one-hot category) were all learned there and biased
#: its weight for good (its rows' MSE 3x the noise); with no clip the first items' volatile statistics cost
#: streams of duplicated rows up to 200 items. 20 sd keeps both (rarer than 1 in 400 is still clipped).
CARRIED_CLIP = 20.0


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
      warmup: ``None`` (statistics that keep moving; with ``scale_inputs`` the
        posterior is carried into the new coordinates whenever they move,
        :func:`onlinejax.linear.bayes.reexpress`, so a trending input costs
        nothing, and the inputs are clipped at :data:`CARRIED_CLIP` standard
        deviations instead of 5) or ``F``: the first ``F`` items' statistics, then fixed and
        rebased only after a covariate shift
        (:func:`~onlinejax.standardize.standardize`); fixed ones cost it on a
        stream whose first items are not representative (time 0 for every
        chick in River's ChickWeights).
      scale_inputs: ``True``; ``False`` for inputs standardised upstream by
        moving statistics (:func:`calibrated`). The River adapter sets it when it
        sees a scaler in front (:class:`~onlinejax.adapters.river.RiverRegressor`).
    """
    from ..linear import bayes_linreg
    from ..linear.bayes import reexpress

    carried = dict(clip=CARRIED_CLIP, reexpress=reexpress) if warmup is None and scale_inputs else {}
    return calibrated(bayes_linreg(n_features, alpha=alpha, beta=beta, forgetting=forgetting, intercept=True),
                      level, warmup=warmup, scale_inputs=scale_inputs, **carried)

"""The calibrated learner's parts: its state, static options and per-item functions.

Wrappers (:func:`~onlinejax.wrappers.calibration.recalibrate`, :func:`~onlinejax.wrappers.calibration.conformal`) return a
:class:`~onlinejax.core.base.Learner` whose state is a :class:`CalibratedState`
(the inner learner's state and the calibrators'). ``step`` predicts once
(one inner prediction), corrects it and updates the calibrators and the
inner learner with it; ``update`` recovers the inner prediction from an
issued one (:func:`uncorrect`; where a floor or cap of the correction was
binding, so that the issued variance does not tell the inner one, the inner
learner's variance is predicted again: :func:`inverse_is_exact`), so the
calibrators judge the interval the caller received (before the width cap, below), also when the label arrives later
(:func:`onlinejax.evaluation.delayed_progressive_validation`); ``learn``
(no prediction at hand) predicts now. Labels that are not finite, and items whose prediction is not
finite or abstains (variance ``≥ sqrt(finfo.max)``, the library's "no
information" value), leave the calibrators unchanged (``n_skipped`` counts
them); an abstaining prediction is returned as it is.

The first items (:func:`~onlinejax.wrappers.calibration.calibrated`, whose inner learner is a
:func:`~onlinejax.wrappers.standardize.standardize`). Until the standardisation has
the targets' scale (two distinct targets; again after it starts afresh) its
predictions are in a guessed unit, and a residual measured in that unit says
nothing about the learner's calibration: the calibrators leave such items
out (on the Nile's flows, two targets near 1000 scored against the unit
prior set the variance scale 113 times too wide, decaying over ~100 items). Such a
prediction's variance is at least the residuals' running level
``exp(L - E[log χ²₁])`` of the recalibrator, which is in the targets' units
and outlives the statistics. A wrapper over learners that standardise
inside (a combination of :func:`~onlinejax.wrappers.calibration.calibrated` members,
``ConformalOptions.after_spread``) leaves out the labels before the targets
differ, the same condition on a stream's start, tracked from the labels
(:class:`~onlinejax.wrappers.scaler.SpreadState`).

The width cap (``ConformalOptions.width_cap``, set by the recipes
:func:`~onlinejax.wrappers.calibration.calibrated` and
:func:`~onlinejax.wrappers.calibration.calibrated_combination`): :func:`output` narrows an
interval wider than ``k`` times the climatology's at the same item to that width
(:mod:`~onlinejax.wrappers.calibration.width_cap`); the calibrators judge the interval
before the cap, and :func:`update_one` recovers it as it recovers a floored one.

The wrappers' anatomy: :class:`CalibratedState`, the static
:class:`RecalibrationOptions` / :class:`ConformalOptions`, :func:`init`,
:func:`correct` (``N(μ, c_t² σ²)``), :func:`update` (the calibrators'
step), :func:`step_one`, :func:`learn_one`, :func:`predict_one` and
:func:`output` (the Gaussian or Student-t returned), each taking the inner
learner and the options as leading arguments that the factory binds.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ...core.base import Learner, Prediction, StudentTPrediction, learnable, normal_quantile, state_dtype, student_t_quantile
from ..scaler import SpreadState, spread_init, spread_update, target_scale_known
from .aci import aci_init, aci_update, aci_var_scale, interval_miss
from .quantile import quantile_init, quantile_update, quantile_var_scale
from .recalibration import (LOG_CHI2_MEAN, RecalibrationState, is_informative, recalibrated_variance,
                            recalibration_init, recalibration_update)
from ..baseline import ClimatologyState, climatology_init, climatology_learn
from .width_cap import capped

Array = jax.Array

__all__ = ["CalibratedState", "RecalibrationOptions", "ConformalOptions", "init", "judged", "correct", "output", "update",
           "update_one", "step_one", "learn_one", "predict_one"]


class CalibratedState(NamedTuple):
    """State of :func:`~onlinejax.wrappers.calibration.recalibrate` / :func:`~onlinejax.wrappers.calibration.conformal`.

    Attributes:
      inner: the wrapped learner's state.
      recalibration: :class:`~onlinejax.wrappers.calibration.RecalibrationState`, or ``None`` without recalibration.
      conformal: :class:`~onlinejax.wrappers.calibration.ACIState` / :class:`~onlinejax.wrappers.calibration.QuantileState`, or ``None``.
      n_skipped: ``[]`` int32 labels the calibrators did not use (non-finite
        item or prediction, or an abstaining prediction).
      t_ratio: ``[]`` ``Φ⁻¹(1 - α/2) / t_ν(1 - α/2)``, the scale of the
        Student-t output per Gaussian standard deviation (``None`` for a
        Gaussian output).
      targets: :class:`~onlinejax.wrappers.scaler.SpreadState` of the labels (``None``
        without ``ConformalOptions.after_spread``).
      width_cap: the targets' :class:`~onlinejax.wrappers.baseline.ClimatologyState`, the
        interval cap's yardstick (``None`` without ``ConformalOptions.width_cap``).
    """

    inner: Any
    recalibration: Optional[RecalibrationState]
    conformal: Any
    n_skipped: Array
    t_ratio: Optional[Array] = None
    targets: Optional[SpreadState] = None
    width_cap: Optional[ClimatologyState] = None


class RecalibrationOptions(NamedTuple):
    """Static options of the variance recalibrator in a wrapper (see :func:`~onlinejax.wrappers.calibration.recalibrate`).

    Attributes:
      decay: the default ``ρ``; clip: :data:`~onlinejax.wrappers.calibration.RECALIBRATION_CLIP`'s role;
      max_scale: ``s`` stays in ``[1/max_scale, max_scale]``;
      error_cap: ``None`` or the cap's multiple of the mean squared error.
    """

    decay: float
    clip: float
    max_scale: float
    error_cap: Optional[float]


class ConformalOptions(NamedTuple):
    """Static options of the conformal calibrator in a wrapper (see :func:`~onlinejax.wrappers.calibration.conformal`).

    Attributes:
      method: ``"aci"`` or ``"quantile"``; level, gamma, lr: the defaults of
        the calibrated level and the steps; time_scale: ``W`` of the range-scaled
        step or ``None``; gain: ``None`` (no integrator) or the default
        ``K_I``; saturation: the default ``C_sat``; max_scale: ``c²``'s clip;
        df: ``None`` (Gaussian output) or the Student-t output's ``ν``.
      standardized: the inner learner is a
        :func:`~onlinejax.wrappers.standardize.standardize` whose predictions before it
        has the targets' scale the calibrators leave out (module doc, "The
        first items").
      after_spread: the inner learner's members standardise inside: the
        calibrators leave out the labels before the targets differ (module
        doc, "The first items").
      width_cap: ``None``, or ``k``: the issued interval is at most ``k`` times as wide as the
        climatology's at the same item (:mod:`~onlinejax.wrappers.calibration.width_cap`; the
        calibrators judge the interval before the cap).
    """

    method: str
    level: float
    gamma: float
    lr: float
    time_scale: Optional[int]
    gain: Optional[float]
    saturation: float
    max_scale: float
    df: Optional[float] = None
    standardized: bool = False
    after_spread: bool = False
    width_cap: Optional[float] = None


def init(learner: Learner, recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], /,
         recalibration=None, conformal=None, **inner_kwargs) -> CalibratedState:
    """The inner learner's initial state with calibrated calibrators (``c_1 = 1``).

    Args:
      learner: the wrapped learner; recal, conf: the options, or ``None`` for
        a wrapper without that calibrator (static).
      recalibration: ``None`` or a dict overriding :func:`~onlinejax.wrappers.calibration.recalibration_init`'s
        ``decay`` (arrays vmap).
      conformal: ``None`` or a dict overriding :func:`~onlinejax.wrappers.calibration.aci_init`'s ``level`` /
        ``gamma`` or :func:`~onlinejax.wrappers.calibration.quantile_init`'s ``level`` / ``lr`` / ``gain`` / ``saturation``.
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
                                 "saturation": conf.saturation, **kw}, time_scale=conf.time_scale, dtype=dt)
    elif conformal is not None:
        raise ValueError("conformal: this learner has no conformal calibrator")
    ratio = None
    if conf is not None and conf.df is not None:
        ratio = c.z_alpha / student_t_quantile(1.0 - 0.5 * c.alpha, jnp.asarray(conf.df, dt))
    targets = spread_init(dt) if conf is not None and conf.after_spread else None
    cap = climatology_init(dtype=dt) if conf is not None and conf.width_cap is not None else None
    return CalibratedState(inner, r, c, jnp.zeros((), jnp.int32), ratio, targets, cap)


def judged(conf: Optional[ConformalOptions], pred) -> Prediction:
    """The inner prediction as the calibrators judge it: a Gaussian with its mean and its central interval's width.

    A Gaussian is itself. A Student-t or a mixture becomes ``N(μ, ((u - l)/(2 z_α))²)``, ``(l, u)`` its central
    ``conf.level`` interval and ``z_α = Φ⁻¹(1 - α/2)``, so the calibrators correct the interval the inner
    learner gives, not its variance: a mixture's variance can be many times its interval's (a change-point
    mixture's low-weight component at the prior can hold most of the variance and barely move the interval,
    ``benchmarks/RESULTS.md``, "The recalibrator's band, and BOCPD judged by its run mixture's interval").
    A mixture's interval is its ``interval_newton`` (:class:`~onlinejax.core.student_mixture.StudentTMixture`, a
    combination's :class:`~onlinejax.wrappers.combination.MixturePrediction`: 8 safeguarded Newton steps, the
    exact quantiles where they converge, as on a change-point run mixture or members near one another; the exact
    bisection evaluates the whole mixture's CDF about 90 times per item). Without a conformal step (a
    recalibrator alone matches variances), or where that interval is not finite and wider than 0, the moments.

    Args:
      conf: the options or ``None`` (static); pred: the inner prediction (``[]`` leaves).
    """
    if conf is None or isinstance(pred, Prediction):
        return pred
    # a mixture's exact quantiles take ~90 bisections of its whole CDF per item; Newton's steps converge in a few
    lo, hi = getattr(pred, "interval_newton", pred.interval)(conf.level)
    var = ((hi - lo) / (2.0 * normal_quantile(conf.level))) ** 2
    return Prediction(pred.mean, jnp.where(jnp.isfinite(var) & (var > 0), var, pred.var))


def correct(recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], s: CalibratedState,
            pred: Prediction) -> tuple[Prediction, Array, Array]:
    """Scale the inner prediction: ``N(μ, c_t² σ²)`` (:mod:`onlinejax.wrappers.calibration`).

    ``c_t²`` is the recalibrated scale ``s_{t-1}`` (:func:`~onlinejax.wrappers.calibration.recalibrated_variance`)
    times the conformal multiplier (:func:`~onlinejax.wrappers.calibration.aci_var_scale` or
    :func:`~onlinejax.wrappers.calibration.quantile_var_scale`). A prediction that is not informative
    (:func:`~onlinejax.wrappers.calibration.is_informative`) is returned as it is; an overflow is capped at
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


def output(conf: Optional[ConformalOptions], s: CalibratedState, pred: Prediction, info: Array):
    """The corrected Gaussian ``pred`` within the width cap, or (with ``conf.df``) the Student-t with its central ``level`` interval.

    The cap (``conf.width_cap``, :func:`~onlinejax.wrappers.calibration.width_cap.capped`) bounds an
    informative (``info``) prediction's variance; the Student-t's scale is ``σ_c · Φ⁻¹(1 - α/2)/t_ν(1 - α/2)``
    (``s.t_ratio``), so the two share the calibrated interval.
    """
    pred = _within_cap(conf, s, pred, info)
    if conf is None or conf.df is None:
        return pred
    return StudentTPrediction(pred.mean, jnp.sqrt(pred.var) * s.t_ratio, jnp.full_like(pred.mean, conf.df))


def update(recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], s: CalibratedState, inner,
           x: Array, y: Array, pred: Prediction):
    """Correct ``pred`` (as :func:`judged`), then update the calibrators with the label ``y``.

    Recalibration: :func:`~onlinejax.wrappers.calibration.recalibration_update` on the unscaled ``N(μ, σ²)``.
    ACI (Gibbs & Candès 2021, eq. 2): :func:`~onlinejax.wrappers.calibration.aci_update` with ``err_t`` the
    miss of the returned interval (:func:`~onlinejax.wrappers.calibration.interval_miss`). Quantile tracking
    (Angelopoulos, Candès & Tibshirani 2023, Sec. 2): :func:`~onlinejax.wrappers.calibration.quantile_update`
    with the score ``|y - μ|/σ`` (``σ`` recalibrated).

    Args:
      recal, conf: the options or ``None`` (static).
      s: :class:`CalibratedState` before the item; inner: the inner state after it.
      x: ``[d]``; y: ``[]``; pred: the inner prediction of ``y`` made before learning it.
    Returns:
      ``(state, the returned prediction)`` (:func:`output`).
    """
    pred = judged(conf, pred)
    out, v0, info = correct(recal, conf, s, pred)
    return _calibrate(recal, conf, s, inner, x, y, pred, out, v0, info), output(conf, s, out, info)


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
            c = quantile_update(c, err, jnp.where(ok, score, 0.0), ok, scaled=conf.time_scale is not None,
                                max_scale=conf.max_scale)
    # the items the members' scalers count
    targets = None if s.targets is None else spread_update(s.targets, y, learnable(x, y))
    cap = None if s.width_cap is None else climatology_learn(s.width_cap, y)
    return CalibratedState(inner, r, c, s.n_skipped + (~ok), s.t_ratio, targets, cap)


def _scale_known(conf: Optional[ConformalOptions], s: CalibratedState):
    """Whether the inner standardisation had the targets' scale when it predicted.

    With ``conf.after_spread``: whether the labels before differed; always without either option.
    """
    if conf is not None and conf.after_spread:
        return s.targets.spread
    if conf is None or not conf.standardized:
        return True
    return target_scale_known(s.inner.scaler)


def uncorrect(recal: Optional[RecalibrationOptions], conf: Optional[ConformalOptions], s: CalibratedState,
              issued) -> tuple[Prediction, Prediction, Array, Array]:
    """The inverse of :func:`correct` and :func:`output` under the state ``s``: the inner prediction an issued one came from.

    An issued ``N(μ, σ_c²)`` (or the Student-t of the same interval, ``σ_c =
    scale / s.t_ratio``) came from ``N(μ, σ_c² / m / s)``, ``m`` the conformal
    multiplier and ``s`` the recalibration scale of ``s``. Exact when ``s``
    is the state the prediction was issued from and neither a variance cap
    (the overflow's, the width cap's) nor the floor was active (then the recalibration's own floor is
    inverted as a scale). An issued variance of no information (not
    informative, :func:`~onlinejax.wrappers.calibration.is_informative`) is the inner one as it was.

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
    out 0.1 % smaller unless a floor binds, and (with the width cap) one 0.1 %
    larger comes out 0.1 % larger unless the cap binds (a variance within 0.1 % of
    either counts as binding: predicting it again costs time, not exactness).
    An issued variance of no information (:func:`~onlinejax.wrappers.calibration.is_informative`) may come
    from an informative one through the overflow cap: not exact either.

    Args:
      recal, conf: the options (static); s: :class:`CalibratedState`; inner: ``[]`` leaves; v: ``[]``.
    """
    def issued_var(factor):
        out, _, info = correct(recal, conf, s, Prediction(inner.mean, inner.var * factor))
        return _within_cap(conf, s, out, info).var

    exact = is_informative(inner.mean, v) & (issued_var(1.0 - 1e-3) < v * (1.0 - 5e-4))
    if conf is None or conf.width_cap is None:
        return exact
    # the width cap binds from above: the recovered variance maps onto the cap, and so does every larger one
    return exact & (issued_var(1.0 + 1e-3) > v * (1.0 + 5e-4))


def _within_cap(conf: Optional[ConformalOptions], s: CalibratedState, pred: Prediction, info: Array) -> Prediction:
    """The corrected Gaussian ``pred`` within the width cap (:func:`output`'s first step); as it is without one."""
    if conf is None or conf.width_cap is None:
        return pred
    c = s.conformal
    return Prediction(pred.mean, capped(s.width_cap, c.alpha, c.z_alpha, pred.var, info, conf.width_cap))


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
        p, out, _, _, s, x = a
        # the issued mean: a caller whose x changed since has the prediction it received learned
        p = Prediction(p.mean, judged(conf, learner.predict(s.inner, x)).var.astype(p.var.dtype))
        calibrated, v0, info = correct(recal, conf, s, p)
        # the calibrators judge the issued interval, but where the width cap bound the one before it (module doc)
        bound = _within_cap(conf, s, calibrated, info).var < calibrated.var
        out = Prediction(out.mean, jnp.where(bound, calibrated.var, out.var))
        return p, out, v0, info, s, x

    pred, out, v0, info = jax.lax.cond(exact, lambda a: a, again, (pred, out, v0, info, s, x))[:4]
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
    out, _, info = correct(recal, conf, s, judged(conf, learner.predict(s.inner, x)))
    return output(conf, s, out, info)

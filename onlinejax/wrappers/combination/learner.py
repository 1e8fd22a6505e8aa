"""The combination learner: members' states plus a weighting state, one item at a time.

For an item ``(x, y)``, :func:`step_one`

1. asks every member for its predictive ``N(μ_m, σ²_m)`` *before* any member
   learns ``y`` (so the weights never see a label they were fitted on),
2. returns the mixture ``p(y|x) = Σ_m w_m N(y; μ_m, σ²_m)`` as a
   :class:`~onlinejax.wrappers.combination.MixturePrediction` (shifted by the
   :func:`~onlinejax.wrappers.combination.mean_correction` when one is on),
3. scores each member by its log predictive density ``ℓ_m = log N(y; μ_m, σ²_m)``
   and updates the log-weights with the chosen weight rule (:func:`mix_step`),
4. lets every member learn ``(x, y)`` through its own ``step``.

The module's anatomy: :class:`MixState` (the weighting part) with
:func:`mix_init` / :func:`mix_step`, shared by :func:`replay` (recorded
member predictions) and the learner; :class:`CombinationState` and the
static :class:`CombinationOptions`; :func:`init`, :func:`predict_one`,
:func:`step_one`, :func:`learn_one`, :func:`tune_members`; the factory
:func:`combine` binds the members and the options to them.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ...core.base import (Learner, LearnerCores, check_in_range, check_int, describe_factory, keep_if, learnable,
                          make_learner, state_dtype)
from ..calibration import RECALIBRATION_CLIP, RECALIBRATION_VAR_CAP, capped_variance, scale_update, sq_err_update
from .correction import MeanCorrection, MeanCorrectionState, correction_init, correction_update, deviations, shifted
from ..calibration import is_informative
from ..scaler import SpreadState, spread_init, spread_update
from .distribution import MixturePrediction, gaussian_log_density, mixture_prediction
from .rules import WeightRule, ewa_squared_error

Array = jax.Array

__all__ = [
    "MixState",
    "mix_init",
    "mix_step",
    "replay",
    "CombinationState",
    "CombinationOptions",
    "combine",
    "init",
    "predict_one",
    "step_one",
    "learn_one",
]


#: The mean correction learns a residual clipped to this many standard deviations of the rule's mixture.
RESIDUAL_CLIP = 25.0


class MixState(NamedTuple):
    """The weighting part of a combination's state (everything but the members).

    Attributes:
      log_weights: ``[M]`` normalised log-weights used for the next prediction.
      rule: the weight rule's state.
      var_scale: ``[M]`` each member's variance multiplier ``c_m`` (all 1
        without recalibration).
      last_log_density: ``[M]`` members' log predictive densities (of the
        recalibrated predictions) of the last label; the input of the last
        weight update.
      sq_err: ``[M]`` each member's exponentially weighted mean squared error
        ``E_m`` (decay ``ρ``; ``inf`` before its first error and always
        without recalibration), which caps its recalibrated variance.
      correction: :class:`~onlinejax.wrappers.combination.MeanCorrectionState`, or
        ``None`` without a mean correction.
      targets: :class:`~onlinejax.wrappers.scaler.SpreadState`: whether the labels so
        far differ (the recalibration waits for it), or ``None`` (it does not wait).
    """

    log_weights: Array
    rule: Any
    var_scale: Array
    last_log_density: Array
    sq_err: Array
    correction: Optional[MeanCorrectionState] = None
    targets: Optional[SpreadState] = None


def _check_correct(correct) -> None:
    if correct is not None and not isinstance(correct, MeanCorrection):
        raise TypeError(f"correct: expected mean_correction(...) or None, got {type(correct).__name__}")


def mix_init(rule: WeightRule, n_members: int, dtype, prior=None, correct: Optional[MeanCorrection] = None,
             after_spread: bool = False, **rule_params) -> MixState:
    """Initial :class:`MixState`: uniform weights or ``prior`` (``[M]``, >= 0, positive sum).

    ``correct``: optional :func:`~onlinejax.wrappers.combination.mean_correction` configuration; ``after_spread``
    (static): the recalibration waits until the labels differ (:func:`combine`).
    """
    M = check_int(n_members, "n_members", 1)
    if prior is None:
        log_prior = jnp.full((M,), -np.log(M), dtype)
    else:
        p = jnp.asarray(prior, dtype)
        if p.shape != (M,):
            raise ValueError(f"prior: expected shape ({M},), got {tuple(p.shape)}")
        if not isinstance(p, jax.core.Tracer) and (not np.all(np.asarray(p) >= 0) or not np.sum(p) > 0):
            raise ValueError("prior: must be >= 0 with a positive sum")
        log_prior = jax.nn.log_softmax(jnp.log(p))
    _check_correct(correct)
    corr = None if correct is None else correction_init(correct, M, dtype)
    return MixState(log_prior, rule.init(log_prior, **rule_params), jnp.ones((M,), dtype), jnp.zeros((M,), dtype),
                    jnp.full((M,), jnp.inf, dtype), corr, spread_init(dtype) if after_spread else None)


def _mixture(ms: MixState, means: Array, vars: Array) -> tuple[MixturePrediction, MixturePrediction]:
    """``(the rule's mixture, the prediction)``: the same unless a mean correction shifts it."""
    pred0 = mixture_prediction(ms.log_weights, means, vars)
    if ms.correction is None:
        return pred0, pred0
    return pred0, shifted(ms.correction, pred0)


def _scaled_vars(ms: MixState, means: Array, vars: Array) -> Array:
    """Recalibrated member variances ``min(c_m σ²_m, 25 E_m)`` (:func:`onlinejax.wrappers.calibration.capped_variance`)."""
    # E_m = 0 (exact so far) or inf (no error seen, or no recalibration) leaves the variance uncapped
    v = capped_variance(vars, ms.var_scale, ms.sq_err, RECALIBRATION_VAR_CAP)
    # an abstaining member keeps its "no information" variance whatever its scale
    return jnp.where(is_informative(means, vars), v, vars)


def _log_scores(pred0: MixturePrediction, means: Array, v: Array, y: Array) -> Array:
    """``[M]`` members' log scores ``ℓ_m``: broken members very unlikely, abstainers scored as the mixture."""
    ell = gaussian_log_density(y, means, v)
    # a member that predicted NaN/inf (or var <= 0) is scored as very unlikely, not NaN,
    # so it can still earn weight back; if all are broken the weights do not move
    bad = 4.0 * np.log(np.finfo(means.dtype).tiny)
    broken = ~(jnp.isfinite(ell) & (v > 0))
    ell = jnp.where(broken, bad, ell)
    # an abstaining member (variance at the "no information" cap) is scored like the mixture of
    # the others, so abstaining neither costs nor earns weight
    abstain = ~broken & ~is_informative(means, v)
    return jnp.where(abstain & jnp.any(is_informative(means, v)), pred0.log_prob(y), ell)


def _recalibrated(ms: MixState, recalibrate: float, means: Array, vars: Array, y: Array) -> tuple[Array, Array]:
    """``(var_scale, sq_err)`` after ``y``: :mod:`onlinejax.wrappers.calibration`'s shared step at the weight ``1 - ρ``."""
    dt = means.dtype
    # the squared error enters clipped relative to c_m (RECALIBRATION_CLIP), so one wild miss of a
    # collapsed variance multiplies c_m by at most ρ + 25(1 - ρ) instead of resetting it
    e2 = (y - means) ** 2
    new = scale_update(ms.var_scale, e2, vars, recalibrate, RECALIBRATION_CLIP)
    upd = jnp.isfinite(new) & is_informative(means, vars)
    scale = jnp.where(upd, jnp.maximum(new, jnp.finfo(dt).tiny), ms.var_scale)
    sq_err = jnp.where(jnp.isfinite(e2), sq_err_update(ms.sq_err, e2, recalibrate), ms.sq_err)
    return scale, sq_err


def mix_step(rule: WeightRule, recalibrate: Optional[float], ms: MixState, means: Array, vars: Array,
             y: Array) -> tuple[MixState, MixturePrediction]:
    """Predict with the current weights, then score the members on ``y`` and update the weights.

    Args:
      rule: the weight rule (static).
      recalibrate: ``None``, or the decay ``ρ`` of each member's running
        variance scale ``c_m ← ρ c_m + (1 - ρ)(y - μ_m)²/σ²_m`` (static),
        from the first label after the labels differ if ``ms.targets`` is kept.
        Members are then mixed and scored as ``N(μ_m, min(c_m σ²_m, 25 E_m))``
        with ``c_m`` and the mean squared error ``E_m`` from *before* ``y``;
        see :func:`combine`. A mean correction, if ``ms`` holds one
        (:func:`mix_init`'s ``correct``), shifts the returned mixture and
        learns from the rule's unshifted mixture's residual.
      ms: :class:`MixState`; means, vars: ``[M]`` the members' predictions of
        ``y`` made before seeing it; y: ``[]``.
    Returns:
      ``(new MixState, the mixture prediction of y)``.
    """
    v = _scaled_vars(ms, means, vars)
    pred0, pred = _mixture(ms, means, v)
    ell = _log_scores(pred0, means, v, y)
    rule_state, log_w = rule.update(ms.rule, ms.log_weights, ell, means, v, y)
    scale, sq_err = ms.var_scale, ms.sq_err
    if recalibrate is not None:
        scale, sq_err = _recalibrated(ms, recalibrate, means, vars, y)
        if ms.targets is not None:  # members that standardise had no target scale before the labels differed
            scale, sq_err = (jnp.where(ms.targets.spread, a, b) for a, b in zip((scale, sq_err),
                                                                                 (ms.var_scale, ms.sq_err)))
    corr = ms.correction
    if corr is not None:
        # a residual beyond RESIDUAL_CLIP of the mixture's sd (a spike every member missed) enters clipped: the
        # regression is of the members' errors, not of one target's
        lim = RESIDUAL_CLIP * jnp.sqrt(pred0.var)
        corr = correction_update(corr, deviations(pred0), jnp.clip(y - pred0.mean, -lim, lim))
    targets = None if ms.targets is None else spread_update(ms.targets, y)
    return MixState(log_w, rule_state, scale, ell, sq_err, corr, targets), pred


def replay(rule: WeightRule, means: Array, vars: Array, Y: Array, *, recalibrate: Optional[float] = None,
           prior=None, correct: Optional[MeanCorrection] = None, after_spread: bool = False,
           record: Optional[Callable] = None, learned: Optional[Array] = None, **rule_params):
    """Combine recorded member predictions: what :func:`combine` would predict, without re-running the members.

    The members learn the same whatever the weights, so their predictions can
    be computed once (``progressive_validation`` per member) and every weight
    rule tried on them at the cost of the weighting alone.

    Args:
      rule: a :class:`~onlinejax.wrappers.combination.WeightRule`; means, vars:
        ``[n, M]`` members' predictions of ``Y: [n]``, each made before its
        label was learned.
      recalibrate, prior, correct, after_spread, rule_params: as in :func:`combine`.
      record: optional ``record(MixState) -> pytree`` after each item.
      learned: optional ``[n]`` bool, the items the combination learned
        (:func:`~onlinejax.core.base.learnable` of its inputs and labels); default:
        the labels' own check, as for inputs that are all finite. The others
        leave the weighting as it is, as in the learner.
    Returns:
      ``(MixturePrediction with [n] leaves, records or None)``; equal to
      the predictions of ``progressive_validation(combine(members, rule,
      recalibrate=..., correct=...), ...)``.
    """
    means, vars = jnp.asarray(means), jnp.asarray(vars)
    Y = jnp.asarray(Y, means.dtype)
    if means.ndim != 2 or vars.shape != means.shape or Y.shape != means.shape[:1]:
        raise ValueError(f"means, vars: expected [n, M] with Y [n]; got {means.shape}, {vars.shape}, {Y.shape}")
    ms = mix_init(rule, means.shape[1], means.dtype, prior, correct, after_spread, **rule_params)
    ok = learnable(jnp.zeros((Y.shape[0], 1), Y.dtype), Y) if learned is None else jnp.asarray(learned, bool)

    def body(ms, mvyk):
        new, p = mix_step(rule, recalibrate, ms, *mvyk[:3])
        ms = keep_if(mvyk[3], new, ms)  # an item not learned leaves the weighting as it is, as step_one does
        return ms, (p, record(ms) if record is not None else None)

    return jax.lax.scan(body, ms, (means, vars, Y, ok))[1]


class CombinationState(NamedTuple):
    """State of :func:`combine`.

    Attributes:
      members: tuple of the members' states (static length ``M``).
      mix: :class:`MixState` (log-weights, rule state, variance scales, last
        log densities).
      n_seen: ``[]`` int32 items learned; n_skipped: items skipped as non-finite.
    """

    members: tuple
    mix: MixState
    n_seen: Array
    n_skipped: Array

    @property
    def log_weights(self) -> Array:
        """``[M]`` normalised log-weights used for the next prediction."""
        return self.mix.log_weights

    @property
    def last_log_density(self) -> Array:
        """``[M]`` members' log predictive densities of the last label learned."""
        return self.mix.last_log_density


class CombinationOptions(NamedTuple):
    """The static configuration of :func:`combine`: weight rule, recalibration decay ``ρ`` (or ``None``), correction,
    whether the recalibration waits until the labels differ."""

    rule: WeightRule
    recalibrate: Optional[float]
    correct: Optional[MeanCorrection]
    after_spread: bool = False


def init(members: tuple, opts: CombinationOptions, member_kwargs=None, prior=None, dtype=None,
         **rule_params) -> CombinationState:
    """Every member's ``init`` (with its keyword dict from ``member_kwargs``, and ``dtype``) and :func:`mix_init`."""
    M = len(members)
    kws = [{}] * M if member_kwargs is None else [dict(k) for k in member_kwargs]
    if len(kws) != M:
        raise ValueError(f"member_kwargs: expected {M} keyword dicts, got {len(kws)}")
    if dtype is not None:
        kws = [{"dtype": dtype, **k} for k in kws]
    states = tuple(m.init(**kw) for m, kw in zip(members, kws))
    dts = {state_dtype(s) for s in states}
    if len(dts) != 1:
        raise ValueError(f"learners: members' states have different dtypes {sorted(map(str, dts))}")
    z = jnp.zeros((), jnp.int32)
    mix = mix_init(opts.rule, M, dts.pop(), prior, opts.correct, opts.after_spread, **rule_params)
    return CombinationState(states, mix, z, z)


def predict_one(members: tuple, s: CombinationState, x: Array) -> MixturePrediction:
    """The mixture of the members' predictions for ``x: [d]`` under the current weights (and correction)."""
    preds = [m.predict(ms, x) for m, ms in zip(members, s.members)]
    means = jnp.stack([p.mean for p in preds], -1)
    vars = jnp.stack([p.var for p in preds], -1)
    return _mixture(s.mix, means, _scaled_vars(s.mix, means, vars))[1]


def step_one(members: tuple, opts: CombinationOptions, s: CombinationState, x: Array,
             y: Array) -> tuple[CombinationState, MixturePrediction]:
    """Members' ``step`` (predict, then learn), then :func:`mix_step` on their predictions of ``y``."""
    ok = learnable(x, y)
    out = [m.step(ms, x, y) for m, ms in zip(members, s.members)]
    new_members = tuple(o[0] for o in out)
    means = jnp.stack([o[1].mean for o in out])
    vars = jnp.stack([o[1].var for o in out])
    mix, pred = mix_step(opts.rule, opts.recalibrate, s.mix, means, vars, y)
    new = CombinationState(new_members, mix, s.n_seen + 1, s.n_skipped)
    # not make_learner(skip_nonfinite=True), which would keep the members' old states: on a
    # non-finite item the members' own steps run their own skip (and count it), only the weights stay
    skipped = s._replace(members=new_members, n_skipped=s.n_skipped + 1)
    return keep_if(ok, new, skipped), pred


def learn_one(members: tuple, opts: CombinationOptions, s: CombinationState, x: Array, y: Array) -> CombinationState:
    """:func:`step_one` without the prediction."""
    return step_one(members, opts, s, x, y)[0]


def tune_members(members: tuple, s: CombinationState) -> CombinationState:
    """Every member's ``tune`` on its own state (members without one are left as they are)."""
    return s._replace(members=tuple(m.tune(ms) if m.tune is not None else ms
                                    for m, ms in zip(members, s.members)))


def _checked_members(learners: Sequence[Learner]) -> tuple:
    members = tuple(learners)
    if not members:
        raise ValueError("learners: need at least one member")
    for i, m in enumerate(members):
        if not isinstance(m, Learner):
            raise TypeError(f"learners[{i}]: expected a Learner, got {type(m).__name__}")
    d = members[0].n_features
    if any(m.n_features != d for m in members):
        raise ValueError(f"learners: members disagree on n_features: {[m.n_features for m in members]}")
    return members


def _checked_options(weighting, recalibrate, correct, after_spread=False) -> CombinationOptions:
    rule = weighting if weighting is not None else ewa_squared_error(0.95, 1.0)
    if not isinstance(rule, WeightRule):
        raise TypeError(f"weighting: expected a WeightRule (bma, fixed_share, stacking), got {type(rule).__name__}")
    if recalibrate is not None:
        check_in_range(recalibrate, "recalibrate", 0.0, 1.0, hi_open=True)
        recalibrate = float(recalibrate)
    _check_correct(correct)
    return CombinationOptions(rule, recalibrate, correct, bool(after_spread))


@describe_factory
def combine(learners: Sequence[Learner], weighting: Optional[WeightRule] = None, *,
            recalibrate: Optional[float] = None, correct: Optional[MeanCorrection] = None,
            after_spread: bool = False) -> Learner:
    """A learner that mixes its members' predictive distributions online.

    Args:
      learners: the members (a static tuple; they may have different state
        types, but the same ``n_features`` and floating dtype).
      weighting: a :class:`~onlinejax.wrappers.combination.WeightRule`; default
        ``ewa_squared_error(0.95, 1.0)``, which weighs the members by the
        recent squared error of their means (what SMSE scores) rather than by
        their stated variances (``benchmarks/combination.py`` compares the rules).
      recalibrate: ``None`` (default: members' distributions as they are) or
        a decay ``ρ ∈ (0, 1)``: each member's variance is multiplied by the
        exponentially weighted mean of its own standardised squared errors
        ``(y - μ_m)²/σ²_m`` (about ``1/(1-ρ)`` items), so an over- or
        under-confident member is scored (and mixed) for the accuracy of its
        mean rather than penalised for its stated variance. Each squared
        error enters clipped at ``25 c_m`` (:data:`~onlinejax.wrappers.calibration.RECALIBRATION_CLIP`),
        and the recalibrated variance is capped at 25 times the member's own
        exponentially weighted mean squared error
        (:data:`~onlinejax.wrappers.calibration.RECALIBRATION_VAR_CAP`): members whose
        stated variances are erratic (ad-hoc bounds collapsing to ~0, kernel
        regression far from its window) would otherwise blow the mixture's
        intervals up for hundreds of items after one wild miss.
      correct: ``None`` (default) or :func:`~onlinejax.wrappers.combination.mean_correction`
        ``(λ, τ, κ)``: the mixture is shifted by an online ridge regression of
        its residual on the members' deviations from its mean (linear stacking
        of the means, shrunk towards the rule's weights).
      after_spread: the members standardise their targets inside
        (:func:`~onlinejax.wrappers.calibration.calibrated`): the recalibration leaves
        out the labels before the labels differ, as the members' own
        calibrators do, since their variances had no target scale (static).
        Members in the targets' unit from the start (a prior's miss is
        information about them) keep the default ``False``.
    Returns:
      A :class:`~onlinejax.core.base.Learner`. ``init(member_kwargs=None, prior=None,
      dtype=None, **rule_params)``: ``member_kwargs`` is an optional sequence of keyword dicts
      for each member's ``init``; ``prior`` optional ``[M]`` initial weights
      (uniform by default); ``dtype`` is passed to every member; ``rule_params`` override the rule's array
      parameters (``forgetting=``, ``rate=``). ``predict`` returns a
      :class:`~onlinejax.wrappers.combination.MixturePrediction`; ``step`` predicts, scores, reweights, then
      lets every member learn (:func:`step_one`); ``tune`` tunes the members that can.
    """
    members = _checked_members(learners)
    opts = _checked_options(weighting, recalibrate, correct, after_spread)
    return make_learner(init=partial(init, members, opts), learn_one=partial(learn_one, members, opts),
                        predict_one=partial(predict_one, members), n_features=members[0].n_features,
                        cores=LearnerCores(step_one=partial(step_one, members, opts),
                                           tune=jax.jit(partial(tune_members, members))))

"""A learner's predictive hedged with the climatology's: never much worse than forgetting the inputs.

:func:`with_climatology` predicts the two-component mixture

    ``p(y | x) = w_t p_learner(y | x) + (1 - w_t) p_clim(y)``

of the wrapped learner's Student-t predictive and the climatology's
(:func:`~onlinejax.wrappers.baseline.climatology_predict`, the Student-t posterior
predictive of a Gaussian with unknown mean and variance). The weights are
Bayes' posterior over the two forecasters with a switching share ``α_t``
(Herbster & Warmuth 1998, fixed share; the decreasing rate ``α_t = 1/t`` of
Koolen & de Rooij 2013, "Universal codes from switching strategies", IEEE
Trans. Inf. Theory 59(11)):

    ``w ← w·p_learner(y) / Σ``,  then  ``w ← (1 - α_t) w + α_t (1 - π)``,

``π`` the climatology's prior weight (``climatology_prior``, 0.5 by default;
the learner's prior weight is ``1 - π``, and the weights start there).

Its cumulative log score is within about ``log(1/min(π, 1-π)) + ½ log t`` nats of the
better of the two over the whole stream, and of either over a stretch where
that one leads. So on a short or signal-free series (the first items, a
lag model of a series with no memory) the prediction falls back to the
climatology's instead of scoring far below it, and on a stream the learner
predicts well the climatology's weight decays like ``1/t`` (a cost of about
``1/(2t)`` nats at item ``t``).

``with_climatology(learner, keep_mean=True)`` centres the climatology's
component on the learner's mean, with the climatology's spread around it:
the prediction's mean (and MSE) is then the learner's and only its spread
is hedged.

The climatology joins when it has two targets, with at least 3 degrees of
freedom (its exact ``ν = n - 1`` is a Cauchy at ``n = 2``, whose CRPS and
variance are infinite); before that the prediction is the learner's alone.
The wrapped learner is not changed: it learns every item from the
prediction it issued (:func:`StudentTMixture.component` ``(0)``).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..core.base import (Learner, LearnerCores, Prediction, StudentTPrediction, describe_factory, keep_if, learnable,
                         make_learner, pass_through, state_dtype)
from .baseline import ClimatologyState, climatology_init, climatology_learn, climatology_predict
from ..core.student_mixture import StudentTMixture

Array = jax.Array

__all__ = ["HedgedState", "HedgedPrediction", "with_climatology", "CLIMATOLOGY_MIN_DF"]

#: The climatology component's degrees of freedom are at least this (finite variance and CRPS).
CLIMATOLOGY_MIN_DF = 3.0


class HedgedState(NamedTuple):
    """State of :func:`with_climatology`.

    Attributes:
      inner: the wrapped learner's state.
      clim: the climatology's running statistics (:class:`~onlinejax.wrappers.baseline.ClimatologyState`).
      log_weights: ``[2]`` normalised log-weights of (learner, climatology) for the next item.
      n_mixed: ``[]`` items scored since the climatology joined (the share is ``1/(n_mixed + 1)``).
      log_prior: ``[2]`` log prior weights ``(log(1 - π), log π)``: the start and the share's target.
    """

    inner: Any
    clim: ClimatologyState
    log_weights: Array
    n_mixed: Array
    log_prior: Array


class HedgedPrediction(StudentTMixture):
    """A :class:`~onlinejax.core.student_mixture.StudentTMixture` of ``[..., 2]`` components, (learner, climatology).

    Scored as the mixture it is; :attr:`learner` is the wrapped learner's own
    prediction (its first component), e.g. for a combination of hedged
    learners that mixes the learners, not their hedges
    (:func:`~onlinejax.runner.replay_combination`).
    """

    __slots__ = ()

    @property
    def learner(self) -> StudentTPrediction:
        """The wrapped learner's prediction (component 0; a Gaussian learner's as ``ν = 1/ε``)."""
        return self.component(0)


def inner_prediction(pred):
    """``pred.learner`` for a :class:`HedgedPrediction`, else ``pred`` itself."""
    return pred.learner if isinstance(pred, HedgedPrediction) else pred


def _as_student_t(p) -> StudentTPrediction:
    """A Student-t view of the learner's prediction (a Gaussian as ``ν = 1/ε``, equal to the dtype's resolution)."""
    if isinstance(p, StudentTPrediction):
        return p
    if not isinstance(p, Prediction):
        raise TypeError(f"learner: predicts {type(p).__name__}; with_climatology mixes a StudentTPrediction "
                        "or a Prediction")
    dt = p.mean.dtype
    return StudentTPrediction(p.mean, jnp.sqrt(p.var), jnp.full_like(p.mean, 1.0 / jnp.finfo(dt).eps))


def init(learner: Learner, /, climatology_prior=0.5, **inner_kwargs) -> HedgedState:
    """The wrapped learner's ``init(**inner_kwargs)``, an empty climatology and the prior weights.

    Args:
      climatology_prior: ``π`` in ``(0, 1)``, the climatology's prior weight (module doc).
    """
    inner = learner.init(**inner_kwargs)
    dt = state_dtype(inner)
    pi = jnp.asarray(climatology_prior, dt)
    log_prior = jnp.log(jnp.stack([1.0 - pi, pi]))
    return HedgedState(inner, climatology_init(dtype=dt), log_prior, jnp.zeros((), dt), log_prior)


def predict_one(learner: Learner, s: HedgedState, x: Array, keep_mean: bool = False) -> HedgedPrediction:
    """The :class:`HedgedPrediction` of the learner's prediction and the climatology's.

    ``keep_mean`` (static): the second component is centred on the learner's mean ``μ``
    with the climatology's spread around it, scale ``√(s_c² + (μ − μ_c)²)`` (its second
    moment about ``μ`` for ``ν → ∞``), so the mixture's mean is the learner's.
    """
    return _hedge(s, _as_student_t(learner.predict(s.inner, x)), keep_mean)


def _hedge(s: HedgedState, p: StudentTPrediction, keep_mean: bool) -> HedgedPrediction:
    """The mixture of the learner's prediction ``p`` and the climatology's under ``s`` (:func:`predict_one`)."""
    c = climatology_predict(s.clim)
    joined = s.clim.n >= 2.0
    log_w = jnp.where(joined, s.log_weights, jnp.asarray([0.0, -jnp.inf], s.log_weights.dtype))
    c_mean, c_scale = c.mean, c.scale
    if keep_mean:
        c_mean, c_scale = p.mean, jnp.hypot(c.scale, p.mean - c.mean)
    return HedgedPrediction(log_w, jnp.stack([p.mean, c_mean]), jnp.stack([p.scale, c_scale]),
                            jnp.stack([p.df, jnp.maximum(c.df, CLIMATOLOGY_MIN_DF)]))


def update_one(learner: Learner, gaussian: bool, s: HedgedState, x: Array, y: Array,
               issued: StudentTMixture) -> HedgedState:
    """Learn the item given the mixture :func:`predict_one` issued for it.

    The learner updates with its own component of ``issued``; the weights
    take Bayes' step on the two components' densities at ``y`` and then the
    share ``α = 1/(n_mixed + 1)`` (module doc); the climatology learns ``y``.
    An item that cannot be learned (non-finite) leaves the weights and the
    climatology as they were.

    Args:
      learner: the wrapped learner; gaussian: whether it predicts a :class:`~onlinejax.core.base.Prediction` (static).
      s: :class:`HedgedState`; x: ``[d]``; y: ``[]``; issued: ``[2]`` components.
    """
    mine = issued.component(0)
    # a Gaussian learner gets its variance back as scale² (equal to its own to rounding)
    own = Prediction(mine.mean, mine.scale * mine.scale) if gaussian else mine
    return _reweigh(s, learner.update(s.inner, x, y, own), x, y, issued)


def step_one(learner: Learner, keep_mean: bool, s: HedgedState, x: Array, y: Array):
    """:func:`predict_one`, then :func:`update_one`, by the learner's own ``step``: it predicts once.

    (A learner whose ``update`` cannot recover what it predicted from the issued moments, e.g. a
    calibrated combination's members, would predict again in ``update``.)

    Returns:
      ``(state, issued)``, ``issued`` the :class:`HedgedPrediction` of :func:`predict_one`.
    """
    inner, p = learner.step(s.inner, x, y)
    issued = _hedge(s, _as_student_t(p), keep_mean)
    return _reweigh(s, inner, x, y, issued), issued


def _reweigh(s: HedgedState, inner, x: Array, y: Array, issued: StudentTMixture) -> HedgedState:
    """The weights' Bayes step and share and the climatology's update (:func:`update_one`); ``inner``: the learner's
    new state."""
    dt = s.log_weights.dtype
    lp = StudentTPrediction(issued.means, issued.scales, issued.dfs).log_prob(y)
    post = issued.log_weights + jnp.where(jnp.isnan(lp), -jnp.inf, lp)
    # both densities 0 (a target beyond the dtype's range of either): nothing to learn about the weights
    post = jnp.where(jnp.isfinite(jax.nn.logsumexp(post)), jax.nn.log_softmax(post), issued.log_weights)
    share = 1.0 / (s.n_mixed + 1.0)
    shared = jnp.logaddexp(jnp.log1p(-share) + post, jnp.log(share) + s.log_prior)
    joined = s.clim.n >= 2.0
    mixed = s._replace(log_weights=jnp.where(joined, shared, s.log_weights).astype(dt),
                       n_mixed=s.n_mixed + joined.astype(dt), clim=climatology_learn(s.clim, y))
    ok = learnable(x, y)
    return keep_if(ok, mixed, s)._replace(inner=inner)


@describe_factory
def with_climatology(learner: Learner, *, keep_mean: bool = False, climatology_prior: float = 0.5) -> Learner:
    """Hedge ``learner``'s predictive with the Student-t climatology's (module doc).

    Args:
      learner: a learner whose prediction is a :class:`~onlinejax.core.base.StudentTPrediction`
        or a :class:`~onlinejax.core.base.Prediction` (e.g. :func:`~onlinejax.wrappers.calibration.calibrated`).
      keep_mean: centre the climatology's component on the learner's mean, with the
        climatology's spread around that mean (:func:`predict_one`): the prediction's mean,
        and so its MSE, is the learner's, and only its spread is hedged. The default mixes
        the means too, which is what helps where the learner's mean is worse than the
        running mean's (a series whose inputs carry no signal).
      climatology_prior: ``π`` in ``(0, 1)``, the climatology's prior weight and the share's
        target (module doc; an array in the state, :class:`HedgedState` ``.log_prior``). A small
        ``π`` costs a learner that leads little once the climatology is ahead, at most ``log(1/π)``
        nats per switch.
    Returns:
      A learner with state :class:`HedgedState` whose prediction is a :class:`HedgedPrediction`
      (a ``[2]``-component Student-t mixture: learner, climatology);
      ``init(**kw)`` passes ``kw`` to ``learner.init``; ``tune`` tunes the learner.
    Raises:
      TypeError: ``learner`` is not a :class:`~onlinejax.core.base.Learner` or predicts another distribution.
      ValueError: ``climatology_prior`` is not in ``(0, 1)``.

    Example::

        from onlinejax import calibrated, with_climatology
        from onlinejax.learners.linear import bayes_linreg
        lrn = with_climatology(calibrated(bayes_linreg(2)))
        state, pred = lrn.step(lrn.init(), [0.5, 1.0], 2.0)
        lo, hi = pred.interval(0.95)
    """
    if not isinstance(learner, Learner):
        raise TypeError(f"learner: expected a Learner, got {type(learner).__name__}")
    if not isinstance(keep_mean, bool):
        raise TypeError(f"keep_mean: expected a bool, got {type(keep_mean).__name__}")
    if not 0.0 < float(climatology_prior) < 1.0:
        raise ValueError(f"climatology_prior: expected a weight in (0, 1), got {climatology_prior}")

    def _init(**inner_kwargs):
        return init(learner, climatology_prior, **inner_kwargs)

    def _predict_one(s, x):
        return predict_one(learner, s, x, keep_mean)

    def _update_one(s, x, y, issued):
        gaussian = isinstance(jax.eval_shape(learner.predict, s.inner, x), Prediction)
        return update_one(learner, gaussian, s, x, y, issued)

    def _step_one(s, x, y):
        return step_one(learner, keep_mean, s, x, y)

    def _learn_one(s, x, y):
        return _step_one(s, x, y)[0]

    # only tune: the weights and the climatology cannot forget an item the inner learner would downdate or evict
    return make_learner(init=_init, learn_one=_learn_one, predict_one=_predict_one, n_features=learner.n_features,
                        cores=LearnerCores(update_one=_update_one, step_one=_step_one,
                                          tune=pass_through(learner)["tune"]))

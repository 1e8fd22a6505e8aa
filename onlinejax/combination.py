"""Online model combination: a learner that mixes other learners' predictive distributions.

The thesis (chapter 6) finds no single family best everywhere: parametric
learners win on smooth and drifting streams, GPs and kernel regression on
discontinuous ones, forgetting learners recover fastest after a drift. Model
combination (seed 004: "model combination and stacking") lets the data pick.

:func:`combine` builds a :class:`~onlinejax.base.Learner` whose state holds
every member's state and a normalised log-weight per member. For an item
``(x, y)``, ``step``

1. asks every member for its predictive ``N(μ_m, σ²_m)`` *before* any member
   learns ``y`` (so the weights never see a label they were fitted on),
2. returns the mixture ``p(y|x) = Σ_m w_m N(y; μ_m, σ²_m)`` as a
   :class:`MixturePrediction`,
3. scores each member by its log predictive density ``ℓ_m = log N(y; μ_m, σ²_m)``
   and updates the log-weights with the chosen :class:`WeightRule`,
4. lets every member learn ``(x, y)`` (through its own ``step``, so a member
   wrapped in the state machine keeps running it).

Weight rules (all in log space, so the weights stay finite and sum to 1 in
float32):

* :func:`bma` — Bayesian model averaging with forgetting ``γ`` on the
  accumulated log scores: ``S_m ← γ S_m + ℓ_m``, ``w = softmax(S)``. With
  ``γ = 1`` and a uniform prior ``w`` is exactly the posterior model
  probability ``p(m | y_1..t) ∝ Π_t p_m(y_t | past)`` (the prequential
  marginal likelihood, Dawid 1984); ``γ < 1`` remembers about ``1/(1-γ)``
  items, so weight can move back to a member after a drift.
* :func:`fixed_share` — Herbster & Warmuth (1998): a Bayes step
  ``v ∝ w · exp(ℓ)`` then ``w ← (1 - α) v + α/M``.
* :func:`stacking` — online stacking: convex weights moved by projected
  gradient steps (an optax optimiser followed by Euclidean projection on the
  simplex, ``optax.projections.projection_simplex``) on the mixture's CRPS
  (closed form for Gaussian mixtures, Grimit et al. 2006) or log score of
  each new item; a constant step size tracks the recent items.

Optionally (``combine(..., correct=mean_correction())``, the default
combination of :mod:`onlinejax.zoo`), the mixture is shifted by an online
ridge regression of its residual on the members' deviations from its mean —
linear stacking of the means, which can beat every member where their errors
cancel, while the weight rules can at best follow the best one.

Cost per item: the members' own costs plus ``O(M)`` (``bma``, ``fixed_share``),
``O(steps · M²)`` (CRPS stacking) and ``O(M³)`` (the mean correction's solve);
measured in ``benchmarks/combination.py``.

Intervals and scores. ``MixturePrediction.interval(level)`` returns the
mixture's exact central quantiles (bisection on the mixture CDF);
``interval(level, exact=False)`` the moment-matched Gaussian ``mean ± z·std``.
``mean`` and ``var`` are the mixture's exact first two moments. The metrics
of :mod:`onlinejax.evaluation` score a mixture exactly (coverage and width of
the exact interval, mixture log density, mixture CRPS), except delayed
validation, which stores only the moments of pending predictions. A member
that reports a huge variance (kernel regression far from its window's
points reports up to ``sqrt(finfo.max)``) keeps the exact interval sensible
but dominates the moment-matched one: on the thesis grid the moment-matched
95 % width of the default combination reached 1e16 on a stream whose exact
interval covered 95 %.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr, ndtri

from .base import Learner, check_in_range, check_int, check_positive, keep_if, make_learner, normal_quantile, state_dtype
from .calibration import (RECALIBRATION_CLIP, RECALIBRATION_VAR_CAP, capped_variance, is_informative, scale_update,
                          sq_err_update)

Array = jax.Array

__all__ = ["MixturePrediction", "mixture_prediction", "mixture_quantile", "mixture_crps",
           "CombinationState", "MixState", "WeightRule", "bma", "fixed_share", "stacking", "ewa_squared_error", "combine",
           "mix_init", "mix_step", "replay", "gaussian_log_density", "mean_correction", "MeanCorrection",
           "MeanCorrectionState", "RECALIBRATION_CLIP", "RECALIBRATION_VAR_CAP"]


# --------------------------------------------------------------------------
# The mixture predictive distribution
# --------------------------------------------------------------------------
class MixturePrediction(NamedTuple):
    """A finite Gaussian mixture ``Σ_m w_m N(means_m, vars_m)`` with its moments.

    Duck-types :class:`~onlinejax.base.Prediction` (``mean``, ``var``,
    ``std``, ``interval``, ``log_prob``), so every evaluation tool accepts it.

    Attributes:
      mean: ``[...]`` mixture mean ``Σ w_m μ_m``.
      var: ``[...]`` mixture variance ``Σ w_m (σ²_m + (μ_m - mean)²)`` (law of
        total variance; noise included as in the members').
      log_weights: ``[..., M]`` normalised log-weights (``logsumexp = 0``).
      means: ``[..., M]`` component means: the members' predictive means, all
        moved by the same shift when a :func:`mean_correction` is on.
      vars: ``[..., M]`` member predictive variances.
    """

    mean: Array
    var: Array
    log_weights: Array
    means: Array
    vars: Array

    @property
    def std(self) -> Array:
        """Moment-matched standard deviation ``sqrt(var)``."""
        return jnp.sqrt(self.var)

    @property
    def weights(self) -> Array:
        """``[..., M]`` member weights ``exp(log_weights)``."""
        return jnp.exp(self.log_weights)

    def interval(self, level: float = 0.95, exact: bool = True) -> tuple[Array, Array]:
        """Central ``level`` interval.

        Args:
          level: coverage probability in (0, 1) (static).
          exact: ``True`` (default): the mixture's own ``(1 ∓ level)/2``
            quantiles (:func:`mixture_quantile`), the interval the library's
            metrics score for a mixture; asymmetric when members disagree.
            ``False``: the moment-matched Gaussian's ``mean ± z·std``, which a
            wide member with a small weight can make arbitrarily wide.
        Returns:
          ``(lower, upper)``, each of the shape of ``mean``.
        """
        if not exact:
            half = normal_quantile(level) * self.std
            return self.mean - half, self.mean + half
        normal_quantile(level)  # validates level
        lo = mixture_quantile(self, 0.5 - 0.5 * float(level))
        hi = mixture_quantile(self, 0.5 + 0.5 * float(level))
        return lo, hi

    def cdf(self, y: Array) -> Array:
        """Mixture CDF ``Σ_m w_m Φ((y - μ_m)/σ_m)``, shape of ``mean`` (members of weight 0 left out)."""
        y = jnp.asarray(y, self.mean.dtype)[..., None]
        on = self.log_weights > -jnp.inf
        z = (y - self.means) / jnp.sqrt(jnp.where(on, self.vars, 1.0))
        return jnp.sum(jnp.where(on, jnp.exp(self.log_weights) * ndtr(z), 0.0), axis=-1)

    def log_prob(self, y: Array) -> Array:
        """Exact mixture log density ``log Σ_m w_m N(y; μ_m, σ²_m)``, shape of ``mean``."""
        y = jnp.asarray(y, self.mean.dtype)[..., None]
        # members left out (weight 0) may hold NaN predictions: mask them, do not add -inf + NaN
        terms = jnp.where(self.log_weights > -jnp.inf,
                          self.log_weights + gaussian_log_density(y, self.means, self.vars), -jnp.inf)
        return jax.nn.logsumexp(terms, axis=-1)


def gaussian_log_density(y: Array, mean: Array, var: Array) -> Array:
    """``log N(y; mean, var)``, broadcast."""
    return -0.5 * (jnp.log(2.0 * jnp.pi * var) + (y - mean) ** 2 / var)


#: Members that take part in a prediction (finite mean, variance in (0, sqrt(finfo.max))); shared with
#: :mod:`onlinejax.calibration`.
_informative = is_informative


def mixture_prediction(log_weights: Array, means: Array, vars: Array) -> MixturePrediction:
    """The mixture of members' Gaussians, moment-matched.

    Members whose mean or variance is not finite, whose variance is not
    positive, or who abstain (variance >= ``sqrt(finfo.max)``, the library's
    "no information" value) get weight 0 for this prediction, so one broken
    or clueless member cannot turn the mixture into NaN or an interval of
    width 1e9 (when every usable member abstains, they are mixed as they
    are); if no member is usable the result is NaN.

    Args:
      log_weights: ``[..., M]`` log-weights (need not be normalised).
      means, vars: ``[..., M]`` member predictive means and variances.
    Returns:
      :class:`MixturePrediction` with ``[...]`` moments and ``[..., M]`` members.
    """
    usable = jnp.isfinite(means) & jnp.isfinite(vars) & (vars > 0)
    inf_ = _informative(means, vars)
    # abstainers are left out while someone informs; if nobody does, every usable member counts
    ok = jnp.where(jnp.any(inf_, axis=-1, keepdims=True), inf_, usable)
    any_ok = jnp.any(ok, axis=-1)
    lw = jnp.where(ok, log_weights, -jnp.inf)
    lw = jnp.where(any_ok[..., None], jax.nn.log_softmax(jnp.where(any_ok[..., None], lw, 0.0), axis=-1), jnp.nan)
    w = jnp.exp(lw)
    mu = jnp.where(ok, means, 0.0)
    mean = jnp.sum(w * mu, axis=-1)
    var = jnp.sum(w * (jnp.where(ok, vars, 0.0) + (mu - mean[..., None]) ** 2), axis=-1)
    nan = jnp.asarray(jnp.nan, mean.dtype)
    return MixturePrediction(jnp.where(any_ok, mean, nan), jnp.where(any_ok, var, nan), lw, means, vars)


def mixture_quantile(pred: MixturePrediction, q: float, iterations: Optional[int] = None) -> Array:
    """The ``q``-quantile of a Gaussian mixture, by bisection on its CDF.

    The quantile lies between the smallest and largest member quantile
    (the mixture CDF is a convex combination of the members' CDFs), so
    bisection on that bracket converges; ``iterations`` defaults to the
    dtype's mantissa bits + 66, enough to shrink a bracket 2⁶⁴ times wider
    than the answer's magnitude to rounding (one wide member — variance 1e12
    — made the bracket ~1e6 wide, and mantissa + 2 iterations left the
    float32 quantile off by 0.05).

    Args:
      pred: a :class:`MixturePrediction` with ``[..., M]`` members.
      q: probability in (0, 1) (static).
    Returns:
      ``[...]`` quantiles.
    """
    check_in_range(q, "q", 0.0, 1.0, hi_open=True)
    dt = pred.means.dtype
    iterations = iterations or int(np.finfo(dt).nmant) + 66
    w = jnp.exp(pred.log_weights)
    sd = jnp.sqrt(pred.vars)
    live = w > 0
    qm = pred.means + sd * ndtri(jnp.asarray(q, dt))
    lo = jnp.min(jnp.where(live, qm, jnp.inf), axis=-1)
    hi = jnp.max(jnp.where(live, qm, -jnp.inf), axis=-1)

    def cdf(t):
        return jnp.sum(jnp.where(live, w * ndtr((t[..., None] - pred.means) / sd), 0.0), axis=-1)

    def body(_, b):
        lo, hi = b
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < q
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, iterations, body, (lo, hi))
    return 0.5 * (lo + hi)


def _abs_moment(u: Array, s: Array) -> Array:
    """``E|u + s Z|`` for ``Z ~ N(0, 1)``: ``s·2φ(u/s) + u·(2Φ(u/s) - 1)``."""
    ok = (s > 0) & jnp.isfinite(s)
    t = u / jnp.where(ok, s, 1.0)
    moment = s * jnp.sqrt(2.0 / jnp.pi) * jnp.exp(-0.5 * t * t) + u * (2.0 * ndtr(t) - 1.0)
    # a point mass (s = 0) has E|u| = |u|; an infinite spread an infinite moment (not 0/0 = NaN)
    return jnp.where(ok, moment, jnp.where(s > 0, jnp.inf, jnp.abs(u)))


def mixture_crps(weights: Array, means: Array, vars: Array, y: Array) -> Array:
    """CRPS of a Gaussian mixture at ``y`` (Grimit et al. 2006, eq. 5).

    ``CRPS = Σ_i w_i E|X_i - y| - ½ Σ_ij w_i w_j E|X_i - X_j|`` with
    ``X_i - X_j ~ N(μ_i - μ_j, σ²_i + σ²_j)``: a quadratic in the weights.

    Args:
      weights, means, vars: ``[M]``; y: ``[]``.
    Returns:
      ``[]`` the CRPS (lower is better; units of ``y``).
    """
    a = _abs_moment(y - means, jnp.sqrt(vars))
    b = _abs_moment(means[:, None] - means[None, :], jnp.sqrt(vars[:, None] + vars[None, :]))
    # members of weight 0 leave the score (0·inf would make it NaN)
    on = weights > 0
    a = jnp.where(on, a, 0.0)
    b = jnp.where(on[:, None] & on[None, :], b, 0.0)
    return weights @ a - 0.5 * weights @ b @ weights


# --------------------------------------------------------------------------
# Weight rules
# --------------------------------------------------------------------------
class WeightRule(NamedTuple):
    """How the log-weights move after each label (a record of pure functions).

    Attributes:
      name: ``"bma"``, ``"fixed_share"`` or ``"stacking"``.
      init: ``init(log_prior [M], **params) -> rule_state``; ``params``
        override the rule's defaults (array parameters, so they vmap).
      update: ``update(rule_state, log_weights [M], log_dens [M], means [M],
        vars [M], y []) -> (rule_state, log_weights [M])`` with the new
        log-weights normalised.
    """

    name: str
    init: Callable[..., Any]
    update: Callable[..., tuple]


class BMAState(NamedTuple):
    """``log_score``: ``[M]`` discounted accumulated log scores plus log prior, shifted so max = 0."""

    log_score: Array
    forgetting: Array


def bma(forgetting: float = 1.0) -> WeightRule:
    """Bayesian model averaging with forgetting on the accumulated log scores.

    ``S_m ← γ S_m + ℓ_m`` (``S_m`` starts at the log prior), ``log w =
    log_softmax(S)``. With ``γ = 1`` and a uniform prior this is the exact
    posterior model probability. ``S`` is shifted by its maximum after every
    update (softmax is shift-invariant, and so is the recursion), so it never
    overflows however long the stream.

    Args:
      forgetting: ``γ`` in (0, 1]; an array parameter (``init(forgetting=…)``).
    """
    check_in_range(forgetting, "forgetting", 0.0, 1.0)

    def init(log_prior, forgetting=forgetting):
        check_in_range(forgetting, "forgetting", 0.0, 1.0)
        dt = log_prior.dtype
        return BMAState(log_prior - jnp.max(log_prior), jnp.asarray(forgetting, dt))

    def update(st: BMAState, log_w, ell, means, vars, y):
        s = st.forgetting * st.log_score + ell
        s = s - jnp.max(s)
        return st._replace(log_score=s), jax.nn.log_softmax(s)

    return WeightRule("bma", init, update)


class FixedShareState(NamedTuple):
    """``rate``: ``[]`` share ``α`` moved toward uniform after every Bayes step."""

    rate: Array


def fixed_share(rate: float = 0.01) -> WeightRule:
    """Fixed share (Herbster & Warmuth 1998): ``v ∝ w·exp(ℓ)``, ``w ← (1-α) v + α/M``.

    Args:
      rate: ``α`` in [0, 1); ``0`` is Bayesian model averaging without
        forgetting. An array parameter (``init(rate=…)``).
    """
    check_in_range(rate, "rate", 0.0, 1.0, lo_open=False, hi_open=True)

    def init(log_prior, rate=rate):
        check_in_range(rate, "rate", 0.0, 1.0, lo_open=False, hi_open=True)
        return FixedShareState(jnp.asarray(rate, log_prior.dtype))

    def update(st: FixedShareState, log_w, ell, means, vars, y):
        m = log_w.shape[-1]
        v = jax.nn.log_softmax(log_w + ell)
        a = st.rate
        # log1p(-a) and log(a) are -inf at the ends; logaddexp handles them
        new = jnp.logaddexp(jnp.log1p(-a) + v, jnp.log(a) - np.log(m))
        return st, jax.nn.log_softmax(new)

    return WeightRule("fixed_share", init, update)


class EWASquaredErrorState(NamedTuple):
    """State of :func:`ewa_squared_error`.

    Attributes:
      sq_error: ``[M]`` discounted sums ``L_m`` of squared errors.
      count: ``[]`` the discounted item count ``N``.
      log_prior: ``[M]``; forgetting, eta: ``[]`` array parameters.
    """

    sq_error: Array
    count: Array
    log_prior: Array
    forgetting: Array
    eta: Array


def ewa_squared_error(forgetting: float = 0.95, eta: float = 1.0) -> WeightRule:
    """Exponentially weighted average of the members on their recent squared errors.

    ``L_m ← γ L_m + (y - μ_m)²``, ``N ← γ N + 1``, ``e_m = L_m / N`` and

        log w_m = log π_m - η · N · (e_m - e_min) / (2 e_min) + const

    — the exponentially weighted average forecaster on squared loss
    (Cesa-Bianchi & Lugosi 2006, ch. 2–3), with the learning rate set by the
    best member's recent mean squared error ``e_min``: with ``η = 1`` it is
    Bayesian model averaging over the last ``N ≈ 1/(1-γ)`` items under a
    Gaussian noise variance ``e_min`` common to all members, so it is
    scale-free. The weights depend only on how well the members' *means*
    predict (what SMSE scores), not on their stated variances; the mixture's
    intervals still use the (recalibrated) member variances.

    A member whose prediction is not finite is charged 4× the largest finite
    squared error of the item; an abstaining member (the "no information"
    variance) is charged the squared error of the mixture of the others, so
    abstaining neither costs nor earns weight (as in :func:`combine`).

    Args:
      forgetting: ``γ`` in (0, 1]; an array parameter.
      eta: ``η > 0``; an array parameter.
    """
    check_in_range(forgetting, "forgetting", 0.0, 1.0)
    check_positive(eta, "eta")

    def init(log_prior, forgetting=forgetting, eta=eta):
        check_in_range(forgetting, "forgetting", 0.0, 1.0)
        check_positive(eta, "eta")
        dt = log_prior.dtype
        return EWASquaredErrorState(jnp.zeros_like(log_prior), jnp.zeros((), dt), log_prior,
                                    jnp.asarray(forgetting, dt), jnp.asarray(eta, dt))

    def update(st: EWASquaredErrorState, log_w, ell, means, vars, y):
        dt = means.dtype
        e2 = (y - means) ** 2
        ok = jnp.isfinite(e2) & jnp.isfinite(vars) & (vars > 0)
        informative = ok & _informative(means, vars)
        # the mixture this item was predicted with leaves abstainers out while anyone informs
        others = mixture_prediction(log_w, means, vars).mean
        e2 = jnp.where(ok & ~informative & jnp.any(informative), (y - others) ** 2, e2)
        worst = jnp.max(jnp.where(ok, e2, 0.0))
        e2 = jnp.where(ok, e2, 4.0 * worst + jnp.finfo(dt).tiny)
        L = st.forgetting * st.sq_error + e2
        N = st.forgetting * st.count + 1.0
        mse = L / N
        best = jnp.maximum(jnp.min(mse), jnp.finfo(dt).tiny)
        floor = 4.0 * float(np.log(np.finfo(dt).tiny))  # keeps every log-weight finite
        logit = jnp.maximum(-st.eta * N * (mse - best) / (2.0 * best), floor)
        logit = jnp.where(jnp.isnan(logit), floor, logit)
        return st._replace(sq_error=L, count=N), jax.nn.log_softmax(st.log_prior + logit)

    return WeightRule("ewa_se", init, update)


def stacking(score: str = "crps", optimizer=None, steps: int = 1) -> WeightRule:
    """Online stacking: projected gradient steps on each new item's mixture score.

    After each label, ``steps`` optax updates of the weights on the item's
    loss, each followed by Euclidean projection on the probability simplex.
    A constant step size weighs recent items most (online gradient descent
    tracks a drifting optimum).

    Args:
      score: ``"crps"`` (mixture CRPS, closed form, :func:`mixture_crps`) or
        ``"log"`` (negative mixture log density). (For weights that aim at the
        squared error of the mean, use :func:`ewa_squared_error`: a squared-error
        score here, with Adam's per-coordinate step, random-walked onto a
        member that always predicted 0.)
      optimizer: an ``optax.GradientTransformation``; default
        ``optax.adam(0.02)`` (scale-free, so CRPS in any unit of ``y`` works).
      steps: gradient steps per item (static).
    """
    import optax
    from optax.projections import projection_simplex

    if score not in ("crps", "log"):
        raise ValueError(f"score: must be 'crps' or 'log', got {score!r}")
    steps = check_int(steps, "steps", 1)
    opt = optimizer if optimizer is not None else optax.adam(0.02)

    def loss(w, ell, means, vars, y):
        if score == "crps":
            return mixture_crps(w, means, vars, y)
        top = jnp.max(ell)
        return -(jnp.log(jnp.sum(w * jnp.exp(ell - top))) + top)

    def init(log_prior):
        return opt.init(jnp.exp(log_prior))

    def update(st, log_w, ell, means, vars, y):
        dt = log_w.dtype
        w = jnp.exp(log_w)

        def one(_, c):
            w, st = c
            g = jax.grad(loss)(w, ell, means, vars, y)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            upd, st = opt.update(g, st, w)
            return projection_simplex(optax.apply_updates(w, upd)).astype(dt), st

        w, st = jax.lax.fori_loop(0, steps, one, (w, st))
        # exact zeros from the projection would be -inf log-weights: floor at tiny
        return st, jax.nn.log_softmax(jnp.log(jnp.maximum(w, jnp.finfo(dt).tiny)))

    return WeightRule("stacking", init, update)


# --------------------------------------------------------------------------
# The combination learner
# --------------------------------------------------------------------------
class MixState(NamedTuple):
    """The weighting part of a combination's state (everything but the members).

    Attributes:
      log_weights: ``[M]`` normalised log-weights used for the next prediction.
      rule: the weight rule's state.
      var_scale: ``[M]`` each member's variance multiplier ``c_m`` (all 1
        without recalibration).
      sq_err: ``[M]`` each member's exponentially weighted mean squared error
        ``E_m`` (decay ``ρ``; ``inf`` before its first error and always
        without recalibration), which caps its recalibrated variance.
      last_log_density: ``[M]`` members' log predictive densities (of the
        recalibrated predictions) of the last label; the input of the last
        weight update.
      correction: :class:`MeanCorrectionState`, or ``None`` without a mean
        correction (see :func:`mean_correction`).
    """

    log_weights: Array
    rule: Any
    var_scale: Array
    last_log_density: Array
    sq_err: Array
    correction: Optional["MeanCorrectionState"] = None


class MeanCorrection(NamedTuple):
    """Configuration of the stacked mean correction (:func:`mean_correction`); static floats."""

    forgetting: float
    ridge: float
    max_shift: float


class MeanCorrectionState(NamedTuple):
    """Discounted sufficient statistics of the mean correction's ridge regression.

    Attributes:
      gram: ``[M, M]`` ``Σ_s λ^{t-s} z_s z_sᵀ``; cross: ``[M]`` ``Σ_s λ^{t-s} z_s r_s``.
      sq_dev: ``[]`` ``Σ_s λ^{t-s} ‖z_s‖²/M``; count: ``[]`` ``Σ_s λ^{t-s}``.
      forgetting, ridge, max_shift: ``[]`` ``λ``, ``τ`` and ``κ`` (arrays, so they can be vmapped over).
    """

    gram: Array
    cross: Array
    sq_dev: Array
    count: Array
    forgetting: Array
    ridge: Array
    max_shift: Array


def mean_correction(forgetting: float = 0.99, ridge: float = 100.0, max_shift: float = 0.25) -> MeanCorrection:
    """Stacked mean correction: a ridge regression of the mixture's residual on the members' deviations.

    The weight rules choose convex weights ``w`` and can at best track the best
    member; where members err in different directions a combination of their
    means beats all of them. With ``μ̄ = Σ_m w_m μ_m`` and the deviations
    ``z_m = μ_m - μ̄`` (0 for members left out of the mixture), the combination
    predicts ``μ̄ + vᵀz``, where

        v = argmin_v Σ_s λ^{t-s} (y_s - μ̄_s - vᵀz_s)² + τ · ŝ · ‖v‖²,
        ŝ = (Σ_s λ^{t-s} ‖z_s‖²/M) / (Σ_s λ^{t-s})

    — online linear stacking (Breiman 1996, "stacked regressions") of the
    members' means, discounted by ``λ`` (about ``1/(1-λ)`` items) and shrunk
    towards the weight rule's mixture with a ridge ``τ`` measured in items
    (scale-free through ``ŝ``). The shift is clipped to ``±κ`` standard
    deviations of the rule's mixture, and the whole predictive mixture moves
    by it (its variance and weights are the rule's), so intervals move with
    the mean. ``M × M`` statistics, one ``M × M`` solve per prediction
    (``O(M³)``, small next to any member). With one member ``z = 0`` and
    nothing changes; ``ŝ·τ`` bounds the condition number of the solve by
    about ``1 + M/((1-λ)τ)``.

    Why the clip: on noise-free streams the rule soon sits on an exact member
    and the mixture's standard deviation collapses, while the regression still
    remembers the large residuals of the first items; unclipped, shifts of a
    few units left 95 % intervals covering 13–40 % of such streams. Replaying
    two 48-stream thesis-grid samples' recorded member predictions with
    ``ewa_squared_error(0.98)`` and recalibration (float32), the share of
    streams whose SMSE is at most the best member's went from 0.48 / 0.42
    (no correction) to 0.58 / 0.58 (``κ = ∞``, coverage 0.90 / 0.89) and
    0.67 / 0.60 (``κ = 0.25``, coverage 0.942 / 0.941, as without the
    correction); weighting the regression by the mixture's precision instead
    of clipping kept 0.52 / 0.50.

    Args:
      forgetting: ``λ`` in (0, 1]; ridge: ``τ > 0`` (prior weight, in items, of
        "no correction"); max_shift: ``κ > 0``, the largest shift in standard
        deviations of the rule's mixture.
    Returns:
      a :class:`MeanCorrection` for ``combine(..., correct=...)`` / ``replay``.
    """
    check_in_range(forgetting, "forgetting", 0.0, 1.0)
    check_positive(ridge, "ridge")
    check_positive(max_shift, "max_shift")
    return MeanCorrection(float(forgetting), float(ridge), float(max_shift))


def _correction_init(c: MeanCorrection, M: int, dtype) -> MeanCorrectionState:
    z = jnp.zeros((), dtype)
    return MeanCorrectionState(jnp.zeros((M, M), dtype), jnp.zeros((M,), dtype), z, z,
                               jnp.asarray(c.forgetting, dtype), jnp.asarray(c.ridge, dtype),
                               jnp.asarray(c.max_shift, dtype))


def _deviations(pred: MixturePrediction) -> Array:
    """``[M]`` members' deviations from the mixture mean; 0 for members left out or a NaN mixture."""
    z = pred.means - pred.mean
    return jnp.where((pred.log_weights > -jnp.inf) & jnp.isfinite(z), z, 0.0)


def _correction_shift(c: MeanCorrectionState, z: Array) -> Array:
    dt = z.dtype
    M = z.shape[-1]
    s_hat = c.sq_dev / jnp.maximum(c.count, 1.0)
    A = c.gram + (c.ridge * s_hat + jnp.finfo(dt).tiny) * jnp.eye(M, dtype=dt)
    v = jnp.linalg.solve(A, c.cross)
    shift = v @ z
    return jnp.where(jnp.isfinite(shift), shift, 0.0)


def _correction_update(c: MeanCorrectionState, z: Array, resid: Array) -> MeanCorrectionState:
    # unweighted, like SMSE: weighting by the mixture's predictive precision lost most of the gain
    lam = c.forgetting
    new = c._replace(gram=lam * c.gram + jnp.outer(z, z), cross=lam * c.cross + z * resid,
                     sq_dev=lam * c.sq_dev + jnp.sum(z * z) / z.shape[-1], count=lam * c.count + 1.0)
    ok = jnp.isfinite(resid) & jnp.all(jnp.isfinite(new.gram)) & jnp.all(jnp.isfinite(new.cross))
    return keep_if(ok, new, c)


def _mixture(ms: MixState, means: Array, vars: Array) -> tuple[MixturePrediction, MixturePrediction]:
    """``(the rule's mixture, the prediction)``: the same unless a mean correction shifts it."""
    pred0 = mixture_prediction(ms.log_weights, means, vars)
    if ms.correction is None:
        return pred0, pred0
    shift = _correction_shift(ms.correction, _deviations(pred0))
    # bounded by a fraction of the rule's mixture's predictive sd: where the rule already sits on an
    # exact member (noise-free streams) an unbounded shift left 95 % intervals covering 13-40 %
    lim = ms.correction.max_shift * jnp.sqrt(pred0.var)
    shift = jnp.where(jnp.isfinite(lim), jnp.clip(shift, -lim, lim), 0.0)
    # a common shift moves the mean and every component and leaves weights and variance as they are
    return pred0, pred0._replace(mean=pred0.mean + shift, means=pred0.means + shift)


def mix_init(rule: WeightRule, n_members: int, dtype, prior=None, correct: Optional[MeanCorrection] = None,
             **rule_params) -> MixState:
    """Initial :class:`MixState`: uniform weights or ``prior`` (``[M]``, >= 0, positive sum).

    ``correct``: optional :func:`mean_correction` configuration.
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
    if correct is not None and not isinstance(correct, MeanCorrection):
        raise TypeError(f"correct: expected mean_correction(...) or None, got {type(correct).__name__}")
    corr = None if correct is None else _correction_init(correct, M, dtype)
    return MixState(log_prior, rule.init(log_prior, **rule_params), jnp.ones((M,), dtype), jnp.zeros((M,), dtype),
                    jnp.full((M,), jnp.inf, dtype), corr)


def _scaled_vars(ms: MixState, means: Array, vars: Array) -> Array:
    # min(c_m σ²_m, 25 E_m) (onlinejax.calibration's shared step); E_m = 0 (exact so far) or inf (no
    # error seen, or no recalibration) leaves the variance uncapped
    v = capped_variance(vars, ms.var_scale, ms.sq_err, RECALIBRATION_VAR_CAP)
    # an abstaining member keeps its "no information" variance whatever its scale
    return jnp.where(_informative(means, vars), v, vars)


def mix_step(rule: WeightRule, recalibrate: Optional[float], ms: MixState, means: Array, vars: Array,
             y: Array) -> tuple[MixState, MixturePrediction]:
    """Predict with the current weights, then score the members on ``y`` and update the weights.

    Args:
      rule: the weight rule (static).
      recalibrate: ``None``, or the decay ``ρ`` of each member's running
        variance scale ``c_m ← ρ c_m + (1 - ρ)(y - μ_m)²/σ²_m`` (static).
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
    dt = means.dtype
    v = _scaled_vars(ms, means, vars)
    pred0, pred = _mixture(ms, means, v)
    ell = gaussian_log_density(y, means, v)
    # a member that predicted NaN/inf (or var <= 0) is scored as very unlikely, not NaN,
    # so it can still earn weight back; if all are broken the weights do not move
    bad = 4.0 * np.log(np.finfo(dt).tiny)
    broken = ~(jnp.isfinite(ell) & (v > 0))
    ell = jnp.where(broken, bad, ell)
    # an abstaining member (variance at the "no information" cap) is scored like the mixture of
    # the others, so abstaining neither costs nor earns weight
    abstain = ~broken & ~_informative(means, v)
    ell = jnp.where(abstain & jnp.any(_informative(means, v)), pred0.log_prob(y), ell)
    rule_state, log_w = rule.update(ms.rule, ms.log_weights, ell, means, v, y)
    scale, sq_err = ms.var_scale, ms.sq_err
    if recalibrate is not None:
        # onlinejax.calibration's shared step at the constant weight 1 - ρ. Clipped relative to c_m: one
        # wild miss (an ad-hoc bound collapsed to ~0 gave z² ~ 1e30) multiplies c_m by at most
        # ρ + 25(1 - ρ) instead of setting it for hundreds of items
        e2 = (y - means) ** 2
        new = scale_update(scale, e2, vars, recalibrate, RECALIBRATION_CLIP)
        upd = jnp.isfinite(new) & _informative(means, vars)
        scale = jnp.where(upd, jnp.maximum(new, jnp.finfo(dt).tiny), scale)
        sq_err = jnp.where(jnp.isfinite(e2), sq_err_update(sq_err, e2, recalibrate), sq_err)
    corr = ms.correction
    if corr is not None:
        corr = _correction_update(corr, _deviations(pred0), y - pred0.mean)
    return MixState(log_w, rule_state, scale, ell, sq_err, corr), pred


def replay(rule: WeightRule, means: Array, vars: Array, Y: Array, *, recalibrate: Optional[float] = None,
           prior=None, correct: Optional[MeanCorrection] = None, record: Optional[Callable] = None, **rule_params):
    """Combine recorded member predictions: what :func:`combine` would predict, without re-running the members.

    The members learn the same whatever the weights, so their predictions can
    be computed once (``progressive_validation`` per member) and every weight
    rule tried on them in milliseconds.

    Args:
      rule: a :class:`WeightRule`; means, vars: ``[n, M]`` members'
        predictions of ``Y: [n]``, each made before its label was learned.
      recalibrate, prior, correct, rule_params: as in :func:`combine`.
      record: optional ``record(MixState) -> pytree`` after each item.
    Returns:
      ``(MixturePrediction with [n] leaves, records or None)``; equal to
      the predictions of ``progressive_validation(combine(members, rule,
      recalibrate=..., correct=...), ...)``.
    """
    means, vars = jnp.asarray(means), jnp.asarray(vars)
    Y = jnp.asarray(Y, means.dtype)
    if means.ndim != 2 or vars.shape != means.shape or Y.shape != means.shape[:1]:
        raise ValueError(f"means, vars: expected [n, M] with Y [n]; got {means.shape}, {vars.shape}, {Y.shape}")
    ms = mix_init(rule, means.shape[1], means.dtype, prior, correct, **rule_params)

    def body(ms, mvy):
        ms, p = mix_step(rule, recalibrate, ms, *mvy)
        return ms, (p, record(ms) if record is not None else None)

    return jax.lax.scan(body, ms, (means, vars, Y))[1]


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


def combine(learners: Sequence[Learner], weighting: Optional[WeightRule] = None, *,
            recalibrate: Optional[float] = None, correct: Optional[MeanCorrection] = None) -> Learner:
    """A learner that mixes its members' predictive distributions online.

    Args:
      learners: the members (a static tuple; they may have different state
        types, but the same ``n_features`` and floating dtype).
      weighting: a :class:`WeightRule`; default ``ewa_squared_error(0.95, 1.0)``
        (on two 48-stream thesis-grid samples its SMSE was at most the best
        member's on 56 % of streams against 38 % for ``fixed_share(0.05)``,
        the best of the log-score rules; ``benchmarks/combination.py``).
      recalibrate: ``None`` (default: members' distributions as they are) or
        a decay ``ρ ∈ (0, 1)``: each member's variance is multiplied by the
        exponentially weighted mean of its own standardised squared errors
        ``(y - μ_m)²/σ²_m`` (about ``1/(1-ρ)`` items), so an over- or
        under-confident member is scored (and mixed) for the accuracy of its
        mean rather than penalised for its stated variance. Each squared
        error enters clipped at ``25 c_m`` (:data:`RECALIBRATION_CLIP`), and
        the recalibrated variance is capped at 25 times the member's own
        exponentially weighted mean squared error (:data:`RECALIBRATION_VAR_CAP`):
        without them, members whose stated variances are erratic (ad-hoc
        bounds collapsing to ~0, kernel regression far from its window) made
        the mixture's 95 % interval 10⁴–10⁶ times the targets' scale on a third
        of the thesis-grid streams (median SAIW after the first 128 items 10–45
        on two 48-stream samples; with them 0.36, coverage 96 % → 94.6 %).
      correct: ``None`` (default) or :func:`mean_correction` ``(λ, τ, κ)``: the
        mixture is shifted by an online ridge regression of its residual on
        the members' deviations from its mean (linear stacking of the means,
        shrunk towards the rule's weights).
    Returns:
      A :class:`~onlinejax.base.Learner`. ``init(member_kwargs=None, prior=None,
      dtype=None, **rule_params)``: ``member_kwargs`` is an optional sequence of keyword dicts
      for each member's ``init``; ``prior`` optional ``[M]`` initial weights
      (uniform by default); ``dtype`` is passed to every member; ``rule_params`` override the rule's array
      parameters (``forgetting=``, ``rate=``). ``predict`` returns a
      :class:`MixturePrediction`; ``step`` predicts, scores, reweights, then
      lets every member learn; ``tune`` tunes the members that can.
    """
    members = tuple(learners)
    if not members:
        raise ValueError("learners: need at least one member")
    for i, m in enumerate(members):
        if not isinstance(m, Learner):
            raise TypeError(f"learners[{i}]: expected a Learner, got {type(m).__name__}")
    d = members[0].n_features
    if any(m.n_features != d for m in members):
        raise ValueError(f"learners: members disagree on n_features: {[m.n_features for m in members]}")
    rule = weighting if weighting is not None else ewa_squared_error(0.95, 1.0)
    if not isinstance(rule, WeightRule):
        raise TypeError(f"weighting: expected a WeightRule (bma, fixed_share, stacking), got {type(rule).__name__}")
    if recalibrate is not None:
        check_in_range(recalibrate, "recalibrate", 0.0, 1.0, hi_open=True)
        recalibrate = float(recalibrate)
    if correct is not None and not isinstance(correct, MeanCorrection):
        raise TypeError(f"correct: expected mean_correction(...) or None, got {type(correct).__name__}")
    M = len(members)

    def _init(member_kwargs=None, prior=None, dtype=None, **rule_params):
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
        return CombinationState(states, mix_init(rule, M, dts.pop(), prior, correct, **rule_params), z, z)

    def predict_one(s: CombinationState, x):
        preds = [m.predict(ms, x) for m, ms in zip(members, s.members)]
        means = jnp.stack([p.mean for p in preds], -1)
        vars = jnp.stack([p.var for p in preds], -1)
        return _mixture(s.mix, means, _scaled_vars(s.mix, means, vars))[1]

    def step_one(s: CombinationState, x, y):
        ok = jnp.all(jnp.isfinite(x)) & jnp.isfinite(y)
        out = [m.step(ms, x, y) for m, ms in zip(members, s.members)]
        new_members = tuple(o[0] for o in out)
        means = jnp.stack([o[1].mean for o in out])
        vars = jnp.stack([o[1].var for o in out])
        mix, pred = mix_step(rule, recalibrate, s.mix, means, vars, y)
        new = CombinationState(new_members, mix, s.n_seen + 1, s.n_skipped)
        # members skip non-finite items themselves; the weights must not move either
        skipped = s._replace(members=new_members, n_skipped=s.n_skipped + 1)
        return keep_if(ok, new, skipped), pred

    def learn_one(s, x, y):
        return step_one(s, x, y)[0]

    def _tune(s: CombinationState):
        return s._replace(members=tuple(m.tune(ms) if m.tune is not None else ms
                                        for m, ms in zip(members, s.members)))

    return make_learner(init=_init, learn_one=learn_one, predict_one=predict_one, step_one=step_one,
                        n_features=d, tune=jax.jit(_tune))

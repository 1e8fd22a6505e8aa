"""Weight rules: how a combination's member weights move after each label.

A rule is a :class:`WeightRule` record of two pure functions, ``init`` and
``update``. All work on normalised log-weights, so the weights stay finite
and sum to 1 in float32 however extreme the members' scores:

* :func:`bma` — Bayesian model averaging with forgetting ``γ`` on the
  accumulated log scores: ``S_m ← γ S_m + ℓ_m``, ``w = softmax(S)``. With
  ``γ = 1`` and a uniform prior ``w`` is exactly the posterior model
  probability ``p(m | y_1..t) ∝ Π_t p_m(y_t | past)`` (the prequential
  marginal likelihood, Dawid 1984); ``γ < 1`` remembers about ``1/(1-γ)``
  items, so weight can move back to a member after a drift.
* :func:`fixed_share` — Herbster & Warmuth (1998): a Bayes step
  ``v ∝ w · exp(ℓ)`` then ``w ← (1 - α) v + α/M``.
* :func:`ewa_squared_error` — the exponentially weighted average forecaster
  on the members' recent squared errors (Cesa-Bianchi & Lugosi 2006), with a
  scale-free learning rate.
* :func:`stacking` — online stacking: convex weights moved by projected
  gradient steps (an optax optimiser, then Euclidean projection on the
  simplex, ``optax.projections.projection_simplex``) on the mixture's CRPS
  (closed form, :func:`~onlinejax.wrappers.combination.mixture_crps`) or log score of
  each new item; a constant step size tracks the recent items.

``ℓ_m`` is member ``m``'s log predictive density of the new label.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...core.base import check_in_range, check_int, check_positive, reuse_equal_calls
from ..calibration import is_informative
from .distribution import mixture_crps, mixture_prediction

Array = jax.Array

__all__ = ["WeightRule", "BMAState", "bma", "FixedShareState", "fixed_share", "EWASquaredErrorState",
           "ewa_squared_error", "stacking"]


class WeightRule(NamedTuple):
    """How the log-weights move after each label (a record of pure functions).

    Attributes:
      name: ``"bma"``, ``"fixed_share"``, ``"ewa_se"`` or ``"stacking"``.
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


@reuse_equal_calls  # the same rule object: combine's programs are reused
def bma(forgetting: float = 1.0) -> WeightRule:
    """Bayesian model averaging with forgetting on the accumulated log scores.

    ``S_m ← γ S_m + ℓ_m`` (``S_m`` starts at the log prior), ``log w =
    log_softmax(S)``. With ``γ = 1`` and a uniform prior this is the exact
    posterior model probability (Dawid 1984). ``S`` is shifted by its maximum
    after every update (softmax is shift-invariant, and so is the recursion),
    so it never overflows however long the stream.

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


@reuse_equal_calls  # the same rule object: combine's programs are reused
def fixed_share(rate: float = 0.01) -> WeightRule:
    """Fixed share (Herbster & Warmuth 1998): ``v ∝ w·exp(ℓ)``, ``w ← (1-α) v + α/M``.

    The share ``α`` keeps every weight above ``α/M``, so a member that was
    poor before a drift can win its weight back in a few items.

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


#: :func:`ewa_squared_error`: one item's squared error is charged at most this multiple of the member's own
#: recent mean squared error, so an outlier in the targets, which every member misses, scales every member's
#: error alike and leaves the weights as they were.
CHARGE_CLIP = 1e4


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


def _charged_sq_errors(log_w: Array, means: Array, vars: Array, y: Array) -> Array:
    """``[M]`` squared errors charged to the members: a broken member 4× the worst, an abstainer the others'."""
    dt = means.dtype
    e2 = (y - means) ** 2
    ok = jnp.isfinite(e2) & jnp.isfinite(vars) & (vars > 0)
    informative = ok & is_informative(means, vars)
    # the mixture this item was predicted with leaves abstainers out while anyone informs
    others = mixture_prediction(log_w, means, vars).mean
    e2 = jnp.where(ok & ~informative & jnp.any(informative), (y - others) ** 2, e2)
    worst = jnp.max(jnp.where(ok, e2, 0.0))
    return jnp.where(ok, e2, 4.0 * worst + jnp.finfo(dt).tiny)


@reuse_equal_calls  # the same rule object: combine's programs are reused
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
    abstaining neither costs nor earns weight (as in
    :func:`~onlinejax.wrappers.combination.combine`). Once the discounted count ``N``
    reaches ``min(10, 1/(2(1-γ)))`` and a member's ``e_m`` is positive, its
    charge is at most ``CHARGE_CLIP · e_m``: one
    target far off (a sensor's spike) that every member misses multiplies
    every ``e_m`` by about the same factor, where unclipped it would swamp
    their differences for ``~log(spike)/(1-γ)`` items; a member whose
    errors truly grow gets there within a few items.

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
        e2 = _charged_sq_errors(log_w, means, vars, y)
        own = st.sq_error / jnp.maximum(st.count, jnp.finfo(dt).tiny)
        # not on the first items, whose errors fall by orders of magnitude as the members learn (N tends to
        # 1/(1 - γ), so a short memory starts at half of it)
        start = jnp.minimum(10.0, 0.5 / jnp.maximum(1.0 - st.forgetting, jnp.finfo(dt).tiny))
        e2 = jnp.where((st.count >= start) & (own > 0), jnp.minimum(e2, CHARGE_CLIP * own), e2)
        L = st.forgetting * st.sq_error + e2
        N = st.forgetting * st.count + 1.0
        mse = L / N
        best = jnp.maximum(jnp.min(mse), jnp.finfo(dt).tiny)
        floor = 4.0 * float(np.log(np.finfo(dt).tiny))  # keeps every log-weight finite
        logit = jnp.maximum(-st.eta * N * (mse - best) / (2.0 * best), floor)
        logit = jnp.where(jnp.isnan(logit), floor, logit)
        return st._replace(sq_error=L, count=N), jax.nn.log_softmax(st.log_prior + logit)

    return WeightRule("ewa_se", init, update)


@reuse_equal_calls  # the same rule object: combine's programs are reused
def stacking(score: str = "crps", optimizer=None, steps: int = 1) -> WeightRule:
    """Online stacking: projected gradient steps on each new item's mixture score.

    After each label, ``steps`` optax updates of the weights on the item's
    loss, each followed by Euclidean projection on the probability simplex
    (Duchi et al. 2008, as ``optax.projections.projection_simplex``). A
    constant step size weighs recent items most (online gradient descent
    tracks a drifting optimum; Zinkevich 2003).

    Args:
      score: ``"crps"`` (mixture CRPS, closed form,
        :func:`~onlinejax.wrappers.combination.mixture_crps`) or ``"log"`` (negative
        mixture log density). For weights that aim at the squared error of the
        mean use :func:`ewa_squared_error`: a squared-error score here, with
        Adam's per-coordinate step, can random-walk onto a poor member.
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

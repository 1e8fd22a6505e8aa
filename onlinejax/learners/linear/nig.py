"""Bayesian linear regression that learns its noise: the Normal-inverse-gamma model, optionally forgetting.

Model (Bishop eq. 3.112-3.113; Murphy 2012 §7.6.3)::

    y | x, w, σ² ~ N(xᵀw, σ²),   w | σ² ~ N(0, σ²/α₀ · I),   σ² ~ InvGamma(a₀, b₀)

Conjugate: after each item ``(x, y)``, with ``S = WWᵀ`` the weights' covariance in units
of ``σ²`` and ``f = Wᵀx``,

    W, m ← rank-1 update of (S⁻¹ + xxᵀ)⁻¹                     (onlinejax.core.linalg.sqrt_cov_rank1)
    a ← a + 1/2,    b ← b + (y - xᵀm)² / (2(1 + fᵀf))

and the predictive is a Student-t with location ``xᵀm``, scale² ``(b/a)(1 + fᵀf)`` and
``2a`` degrees of freedom (Murphy 2012 eq. 7.76). The count ``a`` stops at :func:`max_count`
(``2⁻⁸/eps``: 32,768 in float32, after 65,536 items), where ``a + 1/2`` would no longer be exact
relative to ``b``'s increments: from there ``a`` and ``b`` are both scaled back by
``a_max/(a_max + 1/2)`` after each item, so ``b/a`` becomes a running mean of the scaled squared
errors over the last ``2a_max`` items (float32 keeps it to about 0.4 % over any stream) and the
degrees of freedom stay at ``2a_max``. In float64 the stop (2⁴⁴) is never reached. Unlike :func:`~onlinejax.learners.linear.bayes_linreg`
(a fixed noise precision ``β``) the noise level is learned, and a model that has seen few
items predicts heavy tails: what a run of :func:`~onlinejax.wrappers.changepoint.bocpd` needs so that a
young run neither claims a tight noise level nor reads its first surprise as a change.

Options (static presence):

* **forgetting** ``λ ∈ (0, 1]``: after each item ``S ← S/λ``, ``a ← λa + (1 - λ)a₀``,
  ``b ← λb`` (the step of a state-space model whose weights follow a random walk), so the
  model follows a drifting relation over about ``1/(1 - λ)`` items; with an intercept this
  is a local level. The noise's prior count ``a₀`` is not forgotten, so the degrees of
  freedom stay above ``2a₀ > 2``; on a stationary stream the noise estimate ``b/a`` is then
  low by the factor ``1/(1 + 2a₀(1 - λ))`` (a calibration wrapper rescales it). Keeping ``b₀``
  too would remove that factor but hold ``b/a`` above ``b₀(1 - λ)/(a₀(1 - λ) + 1/2)``, a floor in
  the targets' units that a short memory of a low-noise stream pays for in every interval. A direction no recent item excited is set back to its
  prior variance once its variance reaches ``1/√eps`` times it
  (:func:`onlinejax.core.linalg.cap_variance`).
* **trend** ``τ``: a level and a slope per ``τ`` items (a constant feature and a feature
  ``t/τ``, ``t`` the item's index in the model's own stream), kept in the coordinates of the
  next item: the weights are the level at the next item and the slope, and after each item
  the level moves by the slope (``m ← Am``, ``W ← AW``, ``A = I + e_level e_slopeᵀ/τ``, the
  local linear trend's transition; Durbin & Koopman 2012 §3.2), so the clock never grows and
  float32 keeps its precision over any stream. The predictions equal those of the features
  ``[x, 1, t/τ]``. With forgetting: a local linear trend. Inside
  :func:`~onlinejax.wrappers.changepoint.bocpd` every run starts its clock at its own start.

An item that cannot be learned (a non-finite ``x`` or ``y``: a gap) is not absorbed, but time
passes: the level follows the slope and forgetting applies (``n_skipped`` counts it).
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from ...core.checks import check_record
from ...core.base import (Learner, LearnerCores, StudentTPrediction, check_in_range, check_int, check_positive,
                          default_float_dtype, describe_factory, keep_if, learnable, make_learner, zero_unusable)
from ...core.linalg import affine_weights_inverse, cap_variance, prior_sqrt_cov, sqrt_cov_rank1, variance_floor

Array = jax.Array

__all__ = ["NIGState", "nig_linreg", "init", "predict_one", "step_one", "update_one", "predictive", "absorb",
           "forget", "max_count", "NIGReexpress", "NIGPrior"]


class NIGPrior(NamedTuple):
    """The Normal-inverse-gamma prior's defaults (``init`` overrides each): an immutable, hashable record.

    Shared by :func:`nig_linreg` and :func:`~onlinejax.learners.linear.random_feature_gp` (whose own default is
    ``NIGPrior(0.1, 0.5, 4.0)``); equal records build the same learner. The values become state arrays,
    so ``init(prior_precision=..., noise_var=..., prior_df=...)`` and ``vmap`` reach them as before.

    Attributes:
      prior_precision: ``α₀ > 0``: the weights' prior is ``N(0, σ²/α₀)`` (default 1.0).
      noise_var: the noise variance's prior guess ``b₀/a₀ > 0`` (default 1.0).
      prior_df: the noise prior's degrees of freedom ``2a₀ > 2`` (default 4.0: the first prediction has a
        variance).
    """

    prior_precision: float = 1.0
    noise_var: float = 1.0
    prior_df: float = 4.0

    def checked(self, name: str = "prior") -> "NIGPrior":
        """The record with its values checked (``ValueError``: ``prior.<field>: ...``), unchanged otherwise."""
        check_positive(self.prior_precision, f"{name}.prior_precision")
        check_positive(self.noise_var, f"{name}.noise_var")
        check_in_range(self.prior_df, f"{name}.prior_df", 2.0, float("inf"), hi_open=True)
        return self


def checked_prior(prior, name: str = "prior") -> NIGPrior:
    """``prior`` checked (:meth:`NIGPrior.checked`); a TypeError unless it is a :class:`NIGPrior`."""
    return check_record(prior, NIGPrior, name).checked(name)


class NIGState(NamedTuple):
    """State of :func:`nig_linreg` with ``F`` weights: the inputs', then the level (intercept) and the slope if on.

    Attributes:
      mean: ``[F]`` posterior mean ``m``.
      cov_sqrt: ``[F, F]`` ``W`` with ``S = WWᵀ`` (in units of the noise variance).
      a, b: ``[]`` the noise variance's inverse-gamma posterior.
      prior_precision: ``[]`` ``α₀``.
      prior_a: ``[]`` ``a₀``, the noise's prior count (kept by forgetting).
      forgetting: ``[]`` ``λ ∈ (0, 1]`` (used when built with forgetting).
      time_scale: ``[]`` ``τ > 0``, the slope's time unit in items (used when built with a trend).
      n_seen: ``[]`` int32 items learned.
      n_skipped: ``[]`` int32 items not learned (non-finite or too large).
    """

    mean: Array
    cov_sqrt: Array
    a: Array
    b: Array
    prior_precision: Array
    prior_a: Array
    forgetting: Array
    time_scale: Array
    n_seen: Array
    n_skipped: Array


def predictive(mean: Array, cov_sqrt: Array, a: Array, b: Array, x: Array):
    """The Student-t predictive's parts for features ``x: [F]`` (module doc; Murphy 2012 eq. 7.76).

    Returns:
      ``(f [F], loc [], scale2 [], df [])``: ``f = Wᵀx`` (the update needs it too), ``xᵀm``,
      ``(b/a)(1 + fᵀf)``, at least :func:`onlinejax.core.linalg.variance_floor` of ``loc²`` (forgetting
      takes ``b`` to 0 over a long run of targets the model fits exactly), and ``2a``.
    """
    f = cov_sqrt.T @ x
    loc = x @ mean
    return f, loc, jnp.maximum(b / a * (1.0 + f @ f), variance_floor(loc * loc)), 2.0 * a


def max_count(dtype) -> float:
    """``a_max = 2⁻⁸/eps`` of ``dtype``: the largest noise count ``a`` (module doc).

    Past it one item's share of ``b``, about ``1/(2a)``, would be fewer than 2⁷ of ``b``'s units in
    the last place, and rounding would bias the noise estimate.
    """
    return 2.0 ** -8 / float(jnp.finfo(dtype).eps)


def absorb(mean: Array, cov_sqrt: Array, a: Array, b: Array, x: Array, y: Array, f: Array, loc: Array):
    """Learn one item given :func:`predictive`'s ``f`` and ``loc`` (module doc's recursion).

    ``a ← a + 1/2``, ``b ← b + (y - loc)²/(2(1 + fᵀf))``, both then scaled by
    ``min(1, a_max/a)`` (:func:`max_count`), which is exactly 1 below it.

    Returns:
      ``(mean [F], cov_sqrt [F, F], a [], b [])`` of the posterior.
    """
    W, m = sqrt_cov_rank1(cov_sqrt, mean, x, y, 1.0, 1.0, f=f)
    a_new = a + 0.5
    stop = jnp.minimum(1.0, max_count(a.dtype) / a_new)
    return m, W, a_new * stop, (b + 0.5 * (y - loc) ** 2 / (1.0 + f @ f)) * stop


def forget(cov_sqrt: Array, a: Array, b: Array, forgetting: Array, prior_a: Array, prior_precision: Array,
           max_batch: Optional[int] = None):
    """The step to the next item: ``S ← S/λ``, ``a ← λa + (1 - λ)a₀``, ``b ← λb``, with the windup clamp.

    A marginal variance that reaches ``1/√eps`` times the prior's ``1/α₀`` is set back to it
    (:func:`onlinejax.core.linalg.cap_variance`; ``max_batch`` is its static argument).

    Returns:
      ``(cov_sqrt [F, F], a [], b [])``.
    """
    eps = float(jnp.finfo(cov_sqrt.dtype).eps)
    cap = jnp.full(cov_sqrt.shape[:1], eps ** -0.5 / prior_precision, cov_sqrt.dtype)
    W = cap_variance(cov_sqrt, cap, jax.lax.rsqrt(forgetting), headroom=eps ** 0.5, max_batch=max_batch)
    return W, forgetting * a + (1.0 - forgetting) * prior_a, forgetting * b


def init(n_inputs: int, *, prior_precision=1.0, noise_var=1.0, prior_df=4.0, forgetting=1.0, time_scale=100.0,
         intercept: bool = False, trend: bool = False, dtype=None) -> NIGState:
    """The prior state.

    Args:
      n_inputs: ``d`` (static).
      prior_precision: ``α₀ > 0``: the weights' prior is ``N(0, σ²/α₀)`` (the intercept's and the
        slope's at the first item, with a trend).
      noise_var: the noise variance's prior guess ``b₀/a₀``, > 0.
      prior_df: the prior's degrees of freedom ``2a₀ > 2`` (so the first prediction has a variance).
      forgetting: ``λ ∈ (0, 1]``.
      time_scale: ``τ > 0``, the slope's time unit in items.
      intercept, trend: static; a level, a level and a slope (``trend`` implies the level).
      dtype: floating dtype; default float32 (float64 when x64 is enabled).
    Returns:
      The :class:`NIGState` at the prior, ``F = d + (intercept or trend) + trend`` weights; with a
      trend the level is the first item's, ``c + s/τ``.
    Raises:
      ValueError: naming the argument, for out-of-range concrete values or no weights at all.
    """
    for v, name in ((prior_precision, "prior_precision"), (noise_var, "noise_var"), (time_scale, "time_scale")):
        check_positive(v, name)
    check_in_range(prior_df, "prior_df", 2.0, float("inf"), hi_open=True)
    check_in_range(forgetting, "forgetting", 0.0, 1.0)
    dtype = dtype or default_float_dtype()
    n = int(n_inputs) + bool(intercept or trend) + bool(trend)
    if n == 0:
        raise ValueError("n_inputs: with neither an intercept nor a trend, must be >= 1")
    alpha = jnp.asarray(prior_precision, dtype)
    tau = jnp.asarray(time_scale, dtype)
    W = prior_sqrt_cov(jnp.broadcast_to(alpha, (n,)))
    if trend:
        W = _advance(W, tau)
    a0 = jnp.asarray(prior_df, dtype) / 2
    zero = jnp.zeros((), jnp.int32)
    return NIGState(mean=jnp.zeros((n,), dtype), cov_sqrt=W, a=a0, b=a0 * jnp.asarray(noise_var, dtype),
                    prior_precision=alpha, prior_a=a0, forgetting=jnp.asarray(forgetting, dtype),
                    time_scale=tau, n_seen=zero, n_skipped=zero)


def _advance(v: Array, time_scale: Array) -> Array:
    """``Av`` for ``v: [F]`` or ``[F, F]``: the level (second to last weight) moves by the slope (last) over ``τ``."""
    return v.at[-2].add(v[-1] / time_scale)


def _observation(x: Array, level: bool, trend: bool) -> Array:
    """``[F]``: ``x``, then ``1`` for the level and ``0`` for the slope (it reaches ``y`` through the level)."""
    extra = ([1.0] if level else []) + ([0.0] if trend else [])
    return jnp.concatenate([x, jnp.asarray(extra, x.dtype)]) if extra else x


def _student_t(loc, scale2, df) -> StudentTPrediction:
    return StudentTPrediction(loc, jnp.sqrt(scale2), df)


def predict_one(state: NIGState, x: Array, *, intercept: bool = False, trend: bool = False) -> StudentTPrediction:
    """The Student-t predictive of the next item's ``y`` for ``x: [d]`` (module doc), ``[]`` leaves."""
    _, loc, scale2, df = predictive(state.mean, state.cov_sqrt, state.a, state.b,
                                    _observation(x, intercept or trend, trend))
    return _student_t(loc, scale2, df)


def step_one(state: NIGState, x: Array, y: Array, *, intercept: bool = False, trend: bool = False,
             forgets: bool = False) -> tuple[NIGState, StudentTPrediction]:
    """:func:`predict_one`, then learn ``(x, y)`` (``x: [d]``, ``y: []``) with the same ``f`` and location.

    An item that cannot be learned (:func:`~onlinejax.core.base.learnable`) is not absorbed; the step to the
    next item (the trend's transition, forgetting when ``forgets``, static) is taken either way.
    """
    ok, x_finite = learnable(x, y), jnp.all(jnp.isfinite(x))
    xs, ys = zero_unusable(x, x_finite, y, ok)
    z = _observation(xs, intercept or trend, trend)
    f, loc, scale2, df = predictive(state.mean, state.cov_sqrt, state.a, state.b, z)
    pred = _student_t(jnp.where(x_finite, loc, jnp.nan), jnp.where(x_finite, scale2, jnp.nan), df)
    absorbed = absorb(state.mean, state.cov_sqrt, state.a, state.b, z, ys, jnp.where(ok, f, 0.0), loc)
    m, W, a, b = keep_if(ok, absorbed, (state.mean, state.cov_sqrt, state.a, state.b))
    if trend:
        m, W = _advance(m, state.time_scale), _advance(W, state.time_scale)
    if forgets:
        W, a, b = forget(W, a, b, state.forgetting, state.prior_a, state.prior_precision)
    new = state._replace(mean=m, cov_sqrt=W, a=a, b=b, n_seen=state.n_seen + ok, n_skipped=state.n_skipped + ~ok)
    return new, pred


class NIGReexpress(NamedTuple):
    """:func:`nig_linreg`'s change of coordinates when a moving standardisation's statistics move.

    For features ``φ = [z, e, 1, (t/τ)]``: ``z`` the ``d`` standardised inputs, ``e`` further features
    (e.g. :func:`~onlinejax.learners.linear.odd_features` of ``z``), the level and, with a trend, the slope.
    With inputs ``z' = r ⊙ z + c`` and targets ``ỹ' = gỹ + h`` (new statistics: ``r = s/s'``,
    ``c = (μ - μ')/s'``), ``φ' = Mφ`` on the ``z`` and level coordinates and the model ``ỹ = wᵀφ + ε`` is
    ``ỹ' = w'ᵀφ' + gε`` with ``w' = gM⁻ᵀw + h e_level``: ``z``'s weights divided by ``r``, the level's less
    ``Σ_j (c_j/r_j) w_j``, all times ``g``, the level's plus ``h``. ``S`` is in units of the noise variance,
    which scales by ``g²`` like the weights' covariance, so ``W ← M⁻ᵀW`` and ``b ← g²b`` (``a`` is a count).
    Exact when there are no ``e``: every prediction in raw units is unchanged and learning on in the new
    coordinates equals learning in the old ones and moving after (the trend's transition and forgetting
    commute with the map). ``e``, not affine in ``z``, keep their weights, so a prediction moves by
    their share only. With ``r = 1``, ``c = 0``, ``g = 1``, ``h = 0`` the state is returned unchanged.
    A value, so learners built with it compare and hash equal.

    Attributes:
      trend: the model has a trend (its level the second to last weight); ``False``: an intercept
        (``nig_linreg(intercept=True)``, the level last).
    """

    trend: bool = False

    def __call__(self, state: NIGState, x_ratio: Array, x_shift: Array, y_ratio: Array, y_shift: Array) -> NIGState:
        """``state`` in the new coordinates (class doc); ``x_ratio``, ``x_shift``: ``[d]``; ``y_ratio``,
        ``y_shift``: ``[]``.

        Raises:
          ValueError: when the state has fewer than ``d + 1`` (``d + 2`` with a trend) weights.
        """
        d, level = jnp.shape(x_ratio)[-1], (-2 if self.trend else -1)
        if state.mean.shape[-1] < d - level:
            raise ValueError(f"state: NIGReexpress(trend={self.trend}) needs the {d} inputs' weights and a level "
                             f"({d - level} or more), got {state.mean.shape[-1]}")
        mean = y_ratio * affine_weights_inverse(state.mean, x_ratio, x_shift, level)
        return state._replace(mean=mean.at[level].add(y_shift),
                              cov_sqrt=affine_weights_inverse(state.cov_sqrt, x_ratio, x_shift, level),
                              b=state.b * y_ratio * y_ratio)


def update_one(state: NIGState, x: Array, y: Array, pred=None, *, intercept: bool = False, trend: bool = False,
               forgets: bool = False) -> NIGState:
    """Learn ``(x, y)``; ``pred``, the prediction issued for it, carries nothing the update needs
    (``f = Wᵀx`` is recomputed: a Student-t's scale does not hold it)."""
    return step_one(state, x, y, intercept=intercept, trend=trend, forgets=forgets)[0]


@describe_factory
def nig_linreg(n_inputs: int, *, forgetting: Optional[float] = None, trend: Optional[float] = None,
               intercept: bool = False, prior: NIGPrior = NIGPrior(), dtype=None) -> Learner:
    """Bayesian linear regression that learns its noise level and predicts a Student-t (module doc).

    Args:
      n_inputs: ``d >= 0`` (static); 0 with an intercept or a trend: a model of the target alone.
      forgetting: ``λ ∈ (0, 1]``, or ``None`` (static): no forgetting, the cheaper path.
      trend: ``τ > 0``, the slope's time unit in items, or ``None`` (static): no trend.
      intercept: static; a level (implied by ``trend``).
      prior: :class:`NIGPrior`, the defaults of ``α₀`` (the weights' prior precision in units of the
        noise variance), the noise variance's prior guess ``b₀/a₀`` and its degrees of freedom ``2a₀``.
      dtype: default floating dtype.
    Returns:
      A :class:`Learner` whose ``init(**overrides)`` takes :func:`init`'s keywords but the static
      ``intercept`` and ``trend`` (``forgetting`` only when built with it, ``time_scale`` only with a trend).

    Example::

        # a run model for bocpd: each run learns its level, slope and noise, the level following a random walk
        learner = bocpd(nig_linreg(0, trend=50.0, forgetting=0.99), n_runs=32, hazard=1 / 250)
    Raises:
      ValueError: naming the argument or the record's field (``prior.prior_df: ...``).
      TypeError: ``prior`` not a :class:`NIGPrior`.
    """
    d = check_int(n_inputs, "n_inputs", 0)
    prior = checked_prior(prior)
    if trend is not None:
        check_positive(trend, "trend")
    if forgetting is not None:
        check_in_range(forgetting, "forgetting", 0.0, 1.0)
    static = dict(intercept=bool(intercept), trend=trend is not None)
    forgets = forgetting is not None
    defaults = dict(prior._asdict(), dtype=dtype,
                    **({"forgetting": forgetting} if forgets else {}), **({"time_scale": trend} if trend else {}))
    init(d, **defaults, **static)  # the defaults are checked now, naming the argument

    def _init(**overrides):
        unknown = set(overrides) - set(defaults)
        if unknown:
            raise TypeError(f"init: unexpected keyword(s) {sorted(unknown)} (forgetting and time_scale: only "
                            f"when built with forgetting, a trend)")
        return init(d, **{**defaults, **overrides}, **static)

    core = dict(static, forgets=forgets)
    return make_learner(
        init=_init,
        learn_one=partial(update_one, **core),
        predict_one=partial(predict_one, **static),
        n_features=d,
        cores=LearnerCores(step_one=partial(step_one, **core), update_one=partial(update_one, **core)),
    )

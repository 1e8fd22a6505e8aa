"""Conjugate Bayesian linear regression, optionally with exponential forgetting.

Model (Bishop ch. 3; blog ``002_c70c839f662b534f.txt``)::

    w ~ N(0, diag(alpha)⁻¹),      y | x, w ~ N(xᵀw, 1/beta)

After items ``(x_i, y_i)``, ``i = 1..n``, with forgetting factor ``λ ∈ (0, 1]``
the posterior is ``N(m_n, S_n)`` with

    S_n⁻¹ = λⁿ diag(alpha) + beta Σ λ^{n-i} x_i x_iᵀ
    m_n   = beta S_n Σ λ^{n-i} x_i y_i

i.e. the exponentially weighted least-squares solution with a ridge that
decays like the data (``λ = 1``: Bishop eq. 3.53–3.54 exactly). The
predictive distribution is ``N(xᵀm, 1/beta + xᵀSx)`` (Bishop eq. 3.58–3.59).

Per item this is one rank-1 update of the square-root covariance
(:func:`onlinejax.core.linalg.sqrt_cov_rank1`, ``O(d²)``, no inverse) preceded by
``S ← S/λ``.

How the parametrisations of forgetting relate
---------------------------------------------
* The blog's smoothing ``γ``: ``S⁻¹ ← γS⁻¹ + (1-γ)βxxᵀ`` and
  ``S⁻¹m ← γS⁻¹m + (1-γ)βxy`` is exactly this model with ``λ = γ`` and noise
  precision ``(1-γ)β`` — see :func:`forgetting_from_smoothing`.
* The thesis's forgetting factor ``α_ff`` (eq. 5.6, "FF0.05") multiplies the
  inverse Gram matrix by ``1/(1-α_ff)`` after each rank-1 update, i.e.
  ``XXᵀ ← (1-α_ff)(XXᵀ + xxᵀ)``: this model with ``λ = 1 - α_ff`` and noise
  precision ``(1-α_ff)β`` — see :func:`forgetting_from_thesis`. (The thesis's
  text says the m-th most recent item is discounted by ``α^{m-1}``; its
  formula discounts by ``(1-α)^m``, which is what FF0.05 means in its results.)

Windup guard: with ``λ < 1`` a direction the inputs stop exciting has its
variance multiplied by ``1/λ`` every step and would overflow (float32 after
~1700 steps at ``λ = 0.95``). Once a marginal variance exceeds
``1/(alpha_j·sqrt(eps))`` — the prior variance times ~3000 in float32 — the
covariance is clamped in the basis whitened by these caps, every direction
over a quarter of the cap brought down to that quarter
(:func:`onlinejax.core.linalg.cap_variance`); the directions the data keeps
tight are left as they are. The cap never binds while the data keeps the
posterior tighter than that, so the exponentially weighted solution above
is exact in that regime (tested); it binds only on directions no recent
input has excited, where the honest answer is "very uncertain" anyway.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ...core.checks import check_bool, check_record
from ...core.base import (BLAS_MIN_FEATURES, Learner, LearnerCores, Prediction, check_in_range, check_int, check_positive,
                          default_float_dtype, describe_factory, keep_if, learnable, make_learner, zero_unusable)
from ...core.linalg import affine_weights_inverse, cap_variance, prior_sqrt_cov, sqrt_cov_batch_update, sqrt_cov_rank1
from .evidence import SufficientStats, evidence_fixed_point, posterior_from_stats
from .features import intercept_features, map_features

Array = jax.Array

__all__ = [
    "BayesLinRegState",
    "bayes_linreg",
    "init",
    "learn_one",
    "learn_batch",
    "step_one",
    "predict_one",
    "predict_batch",
    "unlearn_one",
    "tune_evidence",
    "reexpress",
    "forgetting_from_smoothing",
    "forgetting_from_thesis",
    "BayesOptions",
]


class BayesOptions(NamedTuple):
    """The static switches of :func:`bayes_linreg`: an immutable, hashable record (equal records, one learner).

    Attributes:
      tunable: keep the ``λ``-weighted sufficient statistics that ``tune`` (type-II ML for
        ``alpha``/``beta``, :func:`tune_evidence`) needs (default True); ``False`` drops them and
        ``tune`` — the fast path, 3–5× fewer flops per item at ``d = 45``.
    """

    tunable: bool = True


class BayesLinRegState(NamedTuple):
    """State of :func:`bayes_linreg` (``d`` features).

    Attributes:
      mean: ``[d]`` posterior mean ``m``.
      cov_sqrt: ``[d, d]`` ``W`` with posterior covariance ``S = WWᵀ``.
      alpha: ``[d]`` prior precisions.
      beta: ``[]`` noise precision.
      forgetting: ``[]`` ``λ ∈ (0, 1]`` (1 = no forgetting).
      stats: :class:`SufficientStats`, ``λ``-weighted, for :func:`tune_evidence`.
      n_seen: ``[]`` int32 items learned.
      n_skipped: ``[]`` int32 items skipped inside jit because ``x`` or ``y``
        was not finite or too large (:func:`onlinejax.core.base.learnable`).
    """

    mean: Array
    cov_sqrt: Array
    alpha: Array
    beta: Array
    forgetting: Array
    stats: SufficientStats
    n_seen: Array
    n_skipped: Array


def init(n_features: int, alpha=1.0, beta=1.0, forgetting=1.0, dtype=None) -> BayesLinRegState:
    """The prior state.

    Args:
      n_features: ``d`` (static).
      alpha: prior precision, ``[]`` or ``[d]``, > 0.
      beta: noise precision ``[]``, > 0.
      forgetting: ``λ ∈ (0, 1]``.
      dtype: floating dtype; default float32 (float64 when x64 is enabled).
    Raises:
      ValueError: naming the argument, for out-of-range concrete values.
    """
    check_positive(alpha, "alpha")
    check_positive(beta, "beta")
    check_in_range(forgetting, "forgetting", 0.0, 1.0)
    dtype = dtype or default_float_dtype()
    d = int(n_features)
    if jnp.shape(alpha) not in ((), (d,)):
        raise ValueError(f"alpha: must be a scalar or have shape [{d}], got shape {jnp.shape(alpha)}")
    alpha = jnp.broadcast_to(jnp.asarray(alpha, dtype), (d,))
    return BayesLinRegState(
        mean=jnp.zeros((d,), dtype),
        cov_sqrt=prior_sqrt_cov(alpha),
        alpha=alpha,
        beta=jnp.asarray(beta, dtype),
        forgetting=jnp.asarray(forgetting, dtype),
        stats=SufficientStats(jnp.zeros((d, d), dtype), jnp.zeros((d,), dtype), jnp.zeros((), dtype), jnp.zeros((), dtype)),
        n_seen=jnp.zeros((), jnp.int32),
        n_skipped=jnp.zeros((), jnp.int32),
    )


def _finite_rows(X, Y):
    ok = learnable(X, Y)
    return ok, *zero_unusable(X, ok, Y, ok)


def _variance_cap(state):
    return jax.lax.rsqrt(jnp.finfo(state.alpha.dtype).eps) / state.alpha


def learn_one(state: BayesLinRegState, x: Array, y: Array, *, forget: bool = True, track: bool = True) -> BayesLinRegState:
    """Absorb one item (``x: [d]``, ``y: []``); a non-finite item is skipped.

    ``forget=False`` / ``track=False`` (static) drop the forgetting step and the
    sufficient statistics — the fast path used when the factory was told there
    is no forgetting / no tuning (3–5× fewer flops at ``d = 45``).
    """
    ok, x, y = _finite_rows(x, y)
    W = state.cov_sqrt
    if forget:
        lam = jnp.where(ok, state.forgetting, 1.0)
        W = cap_variance(W, _variance_cap(state), jax.lax.rsqrt(lam))
    else:
        lam = 1.0
    # A zeroed x is an exact no-op of the rank-1 update (f = 0).
    W, m = sqrt_cov_rank1(W, state.mean, x, y, 1.0 / state.beta, 1.0)
    stats = state.stats
    if track:
        s = stats
        stats = SufficientStats(lam * s.gram + jnp.outer(x, x), lam * s.xty + x * y, lam * s.yty + y * y, lam * s.n + ok)
    return state._replace(mean=m, cov_sqrt=W, stats=stats, n_seen=state.n_seen + ok, n_skipped=state.n_skipped + (~ok))


def step_one(state: BayesLinRegState, x: Array, y: Array, *, forget: bool = True,
             track: bool = True) -> tuple[BayesLinRegState, Prediction]:
    """:func:`predict_one`, then :func:`learn_one` (``x: [d]``, ``y: []``), sharing their work.

    Without forgetting (``forget=False``) the prediction's ``f = Wᵀx``
    (``xᵀSx = fᵀf``, Bishop eq. 3.59) and ``xᵀm`` are the ones the rank-1
    update needs (:func:`onlinejax.core.linalg.sqrt_cov_rank1`), so an item costs
    three ``O(d²)`` passes over ``W`` instead of four. With forgetting the
    update works on ``W`` rescaled first, and the two are computed apart.
    The prediction of an ``x`` with a non-finite element is NaN, as
    :func:`predict_one`'s.
    """
    if forget:
        return learn_one(state, x, y, forget=True, track=track), predict_one(state, x)
    ok = learnable(x, y)
    x_finite = jnp.all(jnp.isfinite(x))
    xs, y = zero_unusable(x, x_finite, y, ok)
    f = state.cov_sqrt.T @ xs
    mean = xs @ state.mean
    pred = Prediction(jnp.where(x_finite, mean, jnp.nan), jnp.where(x_finite, 1.0 / state.beta + f @ f, jnp.nan))
    # a skipped item enters the update as f = 0, an exact no-op, as in learn_one
    W, m = sqrt_cov_rank1(state.cov_sqrt, state.mean, xs, y, 1.0 / state.beta, 1.0, f=jnp.where(ok, f, 0.0))
    m = jnp.where(ok, m, state.mean)  # xᵀm may overflow for a finite x too large to learn
    stats = state.stats
    if track:
        s = stats
        stats = keep_if(ok, SufficientStats(s.gram + jnp.outer(xs, xs), s.xty + xs * y, s.yty + y * y, s.n + 1.0), s)
    new = state._replace(mean=m, cov_sqrt=W, stats=stats, n_seen=state.n_seen + ok, n_skipped=state.n_skipped + (~ok))
    return new, pred


def learn_batch(state: BayesLinRegState, X: Array, Y: Array, *, forget: bool = True, track: bool = True) -> BayesLinRegState:
    """Absorb a mini-batch (``X: [b, d]``, ``Y: [b]``) in one ``O(bd² + d³)`` step.

    Equals ``b`` sequential :func:`learn_one` calls (forgetting included: row
    ``i`` is weighted by ``λ`` to the number of valid rows after it); rows with
    non-finite values are skipped.
    """
    ok, X, Y = _finite_rows(X, Y)
    okf = ok.astype(X.dtype)
    n_after = jnp.cumsum(okf[::-1])[::-1] - okf
    lam = state.forgetting
    w = jnp.where(ok, lam ** n_after, 0.0)
    decay = lam ** jnp.sum(okf)
    W = state.cov_sqrt
    if forget:
        W = cap_variance(W, _variance_cap(state), jax.lax.rsqrt(decay))
    W, m = sqrt_cov_batch_update(W, state.mean, X, Y, state.beta * w)
    stats = state.stats
    if track:
        s = stats
        stats = SufficientStats(decay * s.gram + (X.T * w) @ X, decay * s.xty + X.T @ (w * Y), decay * s.yty + w @ (Y * Y),
                                decay * s.n + jnp.sum(w))
    nv = jnp.sum(ok.astype(jnp.int32))
    return state._replace(mean=m, cov_sqrt=W, stats=stats, n_seen=state.n_seen + nv, n_skipped=state.n_skipped + (ok.shape[0] - nv))


def unlearn_one(state: BayesLinRegState, x: Array, y: Array, *, track: bool = True) -> BayesLinRegState:
    """Exact inverse of :func:`learn_one` (thesis eq. 5.8–5.11 as a square-root downdate).

    Removes ``(x, y)`` and undoes one step of forgetting:
    ``S⁻¹ ← (S⁻¹ - βxxᵀ)/λ``. Only meaningful for an item that was learned.
    """
    ok, x, y = _finite_rows(x, y)
    lam = jnp.where(ok, state.forgetting, 1.0)
    W, m = sqrt_cov_rank1(state.cov_sqrt, state.mean, x, y, 1.0 / state.beta, -1.0)
    W = W * jnp.sqrt(lam)
    stats = state.stats
    if track:
        s = stats
        stats = SufficientStats((s.gram - jnp.outer(x, x)) / lam, (s.xty - x * y) / lam, (s.yty - y * y) / lam, (s.n - ok) / lam)
    return state._replace(mean=m, cov_sqrt=W, stats=stats, n_seen=state.n_seen - ok)


def predict_one(state: BayesLinRegState, x: Array) -> Prediction:
    """``N(xᵀm, 1/beta + xᵀSx)`` for ``x: [d]`` (Bishop eq. 3.58–3.59)."""
    f = state.cov_sqrt.T @ x
    return Prediction(x @ state.mean, 1.0 / state.beta + f @ f)


def predict_batch(state: BayesLinRegState, X: Array) -> Prediction:
    """Predictive distributions for ``X: [b, d]`` (``mean``, ``var``: ``[b]``)."""
    F = X @ state.cov_sqrt
    return Prediction(X @ state.mean, 1.0 / state.beta + jnp.sum(F * F, axis=-1))


def tune_evidence(state: BayesLinRegState, n_iter: int = 100) -> BayesLinRegState:
    """Re-estimate ``alpha`` (shared) and ``beta`` by type-II ML and rebuild the posterior.

    Uses the ``λ``-weighted sufficient statistics (Bishop 3.5.2, see
    :mod:`onlinejax.learners.linear.evidence`); the rebuilt posterior applies the new
    prior at full strength: ``S⁻¹ = alpha·I + beta Σ λ^{n-i} x_i x_iᵀ``.
    """
    a0 = jnp.mean(state.alpha)
    a, b = evidence_fixed_point(state.stats, a0, state.beta, n_iter)
    alpha = jnp.broadcast_to(a, state.alpha.shape)
    W, m = posterior_from_stats(state.stats, alpha, b)
    return state._replace(mean=m, cov_sqrt=W, alpha=alpha, beta=b)


def reexpress(state: BayesLinRegState, x_ratio: Array, x_shift: Array, y_ratio: Array,
              y_shift: Array) -> BayesLinRegState:
    """The same posterior in new coordinates, for features ``φ = [z, 1]`` (``bayes_linreg(intercept=True)``).

    With inputs ``z' = r ⊙ z + c`` and targets ``ỹ' = gỹ + h`` (new standardising statistics:
    ``r = s/s'``, ``c = (μ - μ')/s'``), ``φ' = Mφ`` with ``M = [[diag(r), c], [0, 1]]`` and the model
    ``ỹ = θᵀφ + ε`` is ``ỹ' = θ'ᵀφ' + gε`` with ``θ' = gM⁻ᵀθ + h e₁`` (``e₁`` the constant's weight):
    ``m ← gM⁻ᵀm + h e₁``, ``W ← gM⁻ᵀW``, ``β ← β/g²``, and the sufficient statistics
    ``Σφφᵀ ← M(Σφφᵀ)Mᵀ``, ``Σφỹ ← M(gΣφỹ + hΣφ)``, ``Σỹ² ← g²Σỹ² + 2ghΣỹ + h²n`` (``Σφ`` is
    ``Σφφᵀ``'s last column, ``Σỹ`` ``Σφỹ``'s last entry). Exact: every prediction in raw units is
    unchanged, and learning on continues as if every item had been learned in the new coordinates.
    With ``r = 1``, ``c = 0``, ``g = 1``, ``h = 0`` it returns the state bit for bit.

    Args:
      state: a state over ``d + 1`` features, the constant last.
      x_ratio, x_shift: ``[d]`` ``r`` and ``c``; y_ratio, y_shift: ``[]`` ``g`` and ``h``.
    Raises:
      ValueError: when the state has not ``d + 1`` features (a model without the intercept).
    """
    if state.mean.shape[-1] != jnp.shape(x_ratio)[-1] + 1:
        raise ValueError(f"state: reexpress needs d + 1 = {jnp.shape(x_ratio)[-1] + 1} features, the constant last "
                         f"(bayes_linreg(d, intercept=True)), got {state.mean.shape[-1]}")

    def fwd(v):  # Mv over the leading axis
        scale = x_ratio if v.ndim == 1 else x_ratio[:, None]
        shift = jnp.outer(x_shift, v[-1]) if v.ndim == 2 else x_shift * v[-1]
        return jnp.concatenate([scale * v[:-1] + shift, v[-1:]], axis=0)

    e1 = jnp.zeros_like(state.mean).at[-1].set(1.0)
    st = state.stats
    sum_phi, sum_y = st.gram[:, -1], st.xty[-1]
    stats = SufficientStats(fwd(fwd(st.gram).T).T, fwd(y_ratio * st.xty + y_shift * sum_phi),
                            y_ratio ** 2 * st.yty + 2.0 * y_ratio * y_shift * sum_y + y_shift ** 2 * st.n, st.n)
    mean, W = (affine_weights_inverse(v, x_ratio, x_shift, -1) for v in (state.mean, state.cov_sqrt))
    return state._replace(mean=y_ratio * mean + y_shift * e1, cov_sqrt=y_ratio * W, beta=state.beta / y_ratio ** 2,
                          stats=stats)


def forgetting_from_smoothing(gamma, beta):
    """The blog's smoothing ``γ`` as ``(forgetting, beta)`` of this model: ``(γ, (1-γ)β)``."""
    check_in_range(gamma, "gamma", 0.0, 1.0, hi_open=True)
    return gamma, (1.0 - gamma) * beta


def forgetting_from_thesis(forgetting_factor, beta=1.0):
    """The thesis's factor ``α_ff`` (eq. 5.6) as ``(forgetting, beta)``: ``(1-α_ff, (1-α_ff)β)``."""
    check_in_range(forgetting_factor, "forgetting_factor", 0.0, 1.0, lo_open=False, hi_open=True)
    lam = 1.0 - forgetting_factor
    return lam, lam * beta


@describe_factory
def bayes_linreg(
    n_features: int,
    *,
    alpha=1.0,
    beta=1.0,
    forgetting=None,
    intercept: bool = False,
    options: BayesOptions = BayesOptions(),
    dtype=None,
) -> Learner:
    """Conjugate Bayesian linear regression (optionally forgetting) as a :class:`Learner`.

    Args:
      n_features: ``d``, the input width (static).
      alpha: default prior precision (``[]`` or ``[d']``, ``d' = d + intercept``).
      beta: default noise precision.
      forgetting: ``None`` (static: no forgetting, the fast path) or the
        default ``λ ∈ (0, 1]`` of a forgetting learner (``λ`` is then a state
        array, so it vmaps; 1 means no forgetting).
      intercept: append a constant feature (weight learned like the others).
      options: :class:`BayesOptions` (static): ``tunable``.
      dtype: default floating dtype of the state.
    Returns:
      A learner whose ``init(alpha=, beta=, [forgetting=,] dtype=)`` overrides the
      defaults (all array hyperparameters, so they vmap), whose ``downdate(state,
      x, y)`` is :func:`unlearn_one` and whose ``tune(state, n_iter=100)`` is
      :func:`tune_evidence`.

    Example::

        learner = bayes_linreg(2, alpha=2.0, beta=25.0)
        state = learner.init()
        state, pred = learner.step(state, [1.0, 0.3], 0.2)   # predict, then learn
        lo, hi = pred.interval(0.95)
    Raises:
      ValueError: naming the argument or the record's field (``options.tunable: ...``).
      TypeError: ``options`` not a :class:`BayesOptions`.
    """
    d = check_int(n_features, "n_features", 1)
    check_record(options, BayesOptions, "options")
    tunable = check_bool(options.tunable, "options.tunable")
    d_int = d + int(bool(intercept))
    # validate defaults eagerly
    check_positive(alpha, "alpha")
    check_positive(beta, "beta")
    forget = forgetting is not None
    if forget:
        check_in_range(forgetting, "forgetting", 0.0, 1.0)
    lam0 = forgetting if forget else 1.0

    if forget:
        def _init(alpha=alpha, beta=beta, forgetting=lam0, dtype=dtype):
            return init(d_int, alpha, beta, forgetting, dtype)
    else:
        def _init(alpha=alpha, beta=beta, dtype=dtype):
            return init(d_int, alpha, beta, 1.0, dtype)

    learner = make_learner(
        init=_init,
        learn_one=partial(learn_one, forget=forget, track=tunable),
        predict_one=predict_one,
        n_features=d_int,
        cores=LearnerCores(
            learn_batch=partial(learn_batch, forget=forget, track=tunable),
            predict_batch=predict_batch,
            # the shared step pays off once the products are BLAS calls (base.BLAS_MIN_FEATURES)
            step_one=partial(step_one, forget=forget, track=tunable) if d_int >= BLAS_MIN_FEATURES else None,
            downdate=partial(unlearn_one, track=tunable),
            tune=jax.jit(tune_evidence, static_argnames="n_iter") if tunable else None,
        ),
    )
    if intercept:
        learner = map_features(intercept_features(d), learner)
    return learner




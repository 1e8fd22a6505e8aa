"""A GP with unbounded memory: Bayesian linear regression on random Fourier features.

Model (Rahimi & Recht 2007; Lázaro-Gredilla et al. 2010, sparse-spectrum GP)::

    φ_ℓ(x) = [cos(Ωx/ℓ), sin(Ωx/ℓ)] / √M  ++  x/√d  ++  [1]      Ω: [M, d], Ω_ij ~ N(0, 1)
    y | x, w, σ² ~ N(φ_ℓ(x)ᵀw, σ²),   w | σ² ~ N(0, σ²/α₀ · I),   σ² ~ InvGamma(a₀, b₀)

``φ_ℓ(x)ᵀφ_ℓ(x')`` is an unbiased estimate of the squared-exponential kernel
``exp(-|x - x'|²/2ℓ²)`` (plus a linear kernel and a constant), so the posterior
mean approximates a GP's with ``F = 2M + d + 1`` features, for every item
ever seen, at ``O(F²)`` per item and a state of fixed size.

The noise variance is learned with the weights: the Normal-inverse-gamma
prior is conjugate (Bishop eq. 3.112-3.113, Murphy 2012 §7.6.3), and after
each item ``(x, y)`` with ``f = Wᵀφ``, ``S = WWᵀ`` in units of ``σ²``::

    W, m ← rank-1 update of (S⁻¹ + φφᵀ)⁻¹            (onlinejax.core.linalg.sqrt_cov_rank1, r = 1)
    a ← a + 1/2,    b ← b + (y - φᵀm)² / (2(1 + fᵀf))

and the predictive is Student-t: location ``φᵀm``, scale² ``(b/a)(1 + fᵀf)``,
``2a`` degrees of freedom (Murphy 2012 eq. 7.76).

The lengthscale is learned by Bayesian model averaging: ``K`` such models
share ``Ω`` at the lengthscales ``ℓ_k``, each scores its prediction of every
item, and the prediction is their mixture weighted by the models' log
evidence (the sum of their predictive log densities: with ``δ = 1`` and no
forgetting, exactly the marginal likelihood of a conjugate model),
discounted by ``δ`` per item so that a drift can hand the weight to another
lengthscale. The mixture is returned as a Student-t with its mean and
variance (floored at :func:`onlinejax.core.linalg.variance_floor` of the mean).

Optionally one more model sees the constant feature alone: a local level,
``y ~ N(c, σ²)`` with ``c`` forgotten at its own ``λ`` (the kernel's
infinite-lengthscale limit without its linear term). Where the inputs explain
little (a short series whose lags carry no signal) it predicts the recent
level with the noise's spread, while the flexible models, whose prior lets
them fit a few items' noise, would be overconfident; the evidence hands it
the weight there, and takes it away within a few items where the inputs
explain the target.

Forgetting ``λ < 1`` (optional, static presence) discounts the precision and
the noise statistics after each item, before the next is predicted (the
step of a state-space model): ``S ← S/λ``, ``a ← λa + (1 - λ)a₀``, ``b ← λb``,
so the model follows a drifting function over about ``1/(1 - λ)`` items.
The noise's prior count ``a₀`` is not forgotten, so that the degrees of
freedom stay above ``2a₀ > 2`` (with ``a ← λa`` they would settle at
``λ/(1 - λ)``, at most 2 for ``λ <= 2/3``: no variance). A direction that
no recent item excited would have its variance grow without bound. Each
model keeps a bound of its largest marginal variance (``1/λ`` per item, from
the prior's ``1/α₀``); once it passes ``1/√eps`` times the prior's, the
model gets the prior's precision back, ``S ← (S⁻¹ + α₀I)⁻¹`` (the mean
kept): every variance is then below the prior's, the directions the data
holds tight keep theirs, and the next such step is ``log(1/√eps)/log(1/λ)``
items away (156 at ``λ = 0.95`` in float32). The step costs ``O(F³)`` and
runs on one model at a time, on those items only; the recursion itself has
no branch (a branch over the models' ``[K, F, F]`` state costs a copy of it
on every item).

An input equal to the one learned before it excites one direction only, so
the step after it forgets that direction alone (directional forgetting,
Kulhavý 1987; the noise statistics as above): ``S ← S + (1/λ - 1)
SφφᵀS/(φᵀSφ)``. A sensor that repeats its last row then still follows a
drifting target there, while the directions no repeat excites keep their
variance: forgetting every direction at each of ``n`` repeats would inflate
them by ``λ⁻ⁿ``, and the first new row after a block of repeats would be
predicted from a model that had forgotten everything else.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp

import numpy as np

from ...core.checks import check_record
from ...core.base import (Learner, LearnerCores, StudentTPrediction, check_in_range, check_int, check_positive,
                          default_float_dtype, describe_factory, make_learner)
from ...core.batching import computed_if_any
from ...core.linalg import sqrt_cov_add_precision, variance_floor
from .nig import NIGPrior, absorb, checked_prior, predictive

Array = jax.Array

__all__ = ["RandomFeatureState", "random_feature_gp", "init", "predict_one", "step_one", "update_one", "features",
           "RandomFeatureModels"]


class RandomFeatureState(NamedTuple):
    """State of :func:`random_feature_gp`: ``K`` models of ``F = 2M + d + 1`` features.

    Attributes:
      freqs: ``[M, d]`` the frequencies ``Ω`` (shared by the models).
      lengthscale: ``[K]`` each model's lengthscale ``ℓ_k``.
      mean: ``[K, F]`` posterior means ``m_k``.
      cov_sqrt: ``[K, F, F]`` ``W_k`` with ``S_k = W_kW_kᵀ`` (in units of the noise variance).
      a, b: ``[K]`` the noise variance's inverse-gamma posterior.
      log_weight: ``[K]`` each model's discounted log evidence.
      prior_precision: ``[]`` ``α₀``.
      prior_a: ``[]`` ``a₀``, the noise's prior count (kept by forgetting).
      discount: ``[]`` ``δ ∈ (0, 1]``, the log evidence's discount per item.
      forgetting: ``[K]`` each model's ``λ_k ∈ (0, 1]``.
      n_seen: ``[]`` int32 items learned.
      n_skipped: ``[]`` int32 items skipped (non-finite or too large).
      last_x: ``[d]`` the last input learned (a repeat of it is forgotten along its own direction only).
      level_only: ``[K]`` bool, the models that see the constant feature alone (the local level, module doc).
      variance_bound: ``[K]`` an upper bound of each model's largest marginal variance ``max_i S_ii`` (the
        windup guard's, module doc).
    """

    freqs: Array
    lengthscale: Array
    mean: Array
    cov_sqrt: Array
    a: Array
    b: Array
    log_weight: Array
    prior_precision: Array
    prior_a: Array
    discount: Array
    forgetting: Array
    n_seen: Array
    n_skipped: Array
    last_x: Array
    level_only: Array
    variance_bound: Array


def features(x: Array, freqs: Array, lengthscale: Array) -> Array:
    """``φ_ℓ(x)``: ``[2M + d + 1]`` for ``x: [d]``, ``freqs: [M, d]``, ``lengthscale: []`` (module doc)."""
    m, d = freqs.shape
    u = freqs @ x / lengthscale
    one = jnp.ones((1,), x.dtype)
    return jnp.concatenate([jnp.cos(u) / m ** 0.5, jnp.sin(u) / m ** 0.5, x / d ** 0.5, one])


def init(n_inputs: int, n_frequencies: int, lengthscales, *, prior_precision=1.0, noise_var=0.5, prior_df=4.0,
         discount=0.999, forgetting=1.0, level=None, seed: int = 0, dtype=None) -> RandomFeatureState:
    """The prior state.

    Args:
      n_inputs: ``d`` (static).
      n_frequencies: ``M`` (static).
      lengthscales: ``[L]`` lengthscales (or one), > 0.
      forgetting: ``[Φ]`` forgetting factors (or one) in (0, 1]: the ``K = LΦ`` models are every pair.
      level: ``None`` (static presence) or the forgetting factor in (0, 1] of one more model, the local level
        (module doc), appended after them: ``K = LΦ + 1``.
      prior_precision: ``α₀ > 0``: the weights' prior is ``N(0, σ²/α₀)``.
      noise_var: the noise variance's prior guess ``b₀/a₀``, > 0.
      prior_df: the prior's degrees of freedom ``2a₀``, > 2 (so the first prediction has a variance).
      discount: ``δ ∈ (0, 1]``.
      seed: the frequencies' PRNG seed.
      dtype: floating dtype; default float32 (float64 when x64 is enabled).
    Returns:
      The :class:`RandomFeatureState` of ``K`` models at the prior (the level's ``lengthscale`` is 1, unused).
    Raises:
      ValueError: naming the argument, for out-of-range concrete values or an empty ``lengthscales`` or
        ``forgetting``.
    """
    dtype = dtype or default_float_dtype()
    for v, name in ((lengthscales, "lengthscales"), (prior_precision, "prior_precision"), (noise_var, "noise_var")):
        check_positive(v, name)
    check_in_range(prior_df, "prior_df", 2.0, float("inf"), hi_open=True)
    check_in_range(discount, "discount", 0.0, 1.0)
    check_in_range(forgetting, "forgetting", 0.0, 1.0)
    if level is not None:
        check_in_range(level, "level", 0.0, 1.0)
    d, m = int(n_inputs), int(n_frequencies)
    ell, lam = (jnp.ravel(jnp.asarray(v, dtype)) for v in (lengthscales, forgetting))
    for v, name in ((ell, "lengthscales"), (lam, "forgetting")):
        if v.shape[0] == 0:
            raise ValueError(f"{name}: must hold at least one value")
    ell, lam = jnp.repeat(ell, lam.shape[0]), jnp.tile(lam, ell.shape[0])
    level_only = jnp.zeros(ell.shape, bool)
    if level is not None:
        ell, lam = jnp.append(ell, jnp.ones((), dtype)), jnp.append(lam, jnp.asarray(level, dtype))
        level_only = jnp.append(level_only, True)
    k, f = ell.shape[0], 2 * m + d + 1
    alpha = jnp.asarray(prior_precision, dtype)
    a0 = jnp.asarray(prior_df, dtype) / 2
    return RandomFeatureState(
        freqs=jax.random.normal(jax.random.PRNGKey(seed), (m, d), dtype),
        lengthscale=ell,
        mean=jnp.zeros((k, f), dtype),
        cov_sqrt=jnp.broadcast_to(jnp.eye(f, dtype=dtype) * jax.lax.rsqrt(alpha), (k, f, f)),
        a=jnp.full((k,), a0, dtype),
        b=jnp.full((k,), a0 * jnp.asarray(noise_var, dtype), dtype),
        log_weight=jnp.zeros((k,), dtype),
        prior_precision=alpha,
        prior_a=a0,
        discount=jnp.asarray(discount, dtype),
        forgetting=lam,
        n_seen=jnp.zeros((), jnp.int32),
        n_skipped=jnp.zeros((), jnp.int32),
        last_x=jnp.zeros((d,), dtype),
        level_only=level_only,
        variance_bound=jnp.full((k,), 1.0 / alpha, dtype),
    )


def _members(state: RandomFeatureState, x: Array):
    """Each model's features ``[K, F]``, ``f = Wᵀφ`` ``[K, F]`` and Student-t (loc, scale², df) ``[K]`` each."""
    phi = jax.vmap(features, in_axes=(None, None, 0))(x, state.freqs, state.lengthscale)
    phi = jnp.where(state.level_only[:, None], jnp.zeros_like(phi).at[:, -1].set(1.0), phi)
    return (phi, *jax.vmap(predictive)(state.mean, state.cov_sqrt, state.a, state.b, phi))


def _mixture(state: RandomFeatureState, loc, scale2, df) -> StudentTPrediction:
    """The models' mixture as a Student-t with its mean and variance (``df``: the weighted mean of theirs)."""
    w = jax.nn.softmax(state.log_weight)
    var_k = scale2 * df / (df - 2.0)
    mean = w @ loc
    var = w @ (var_k + (loc - mean) ** 2)
    nu = w @ df
    var = jnp.maximum(var, variance_floor(mean * mean))
    return StudentTPrediction(mean, jnp.sqrt(var * (nu - 2.0) / nu), nu)


def predict_one(state: RandomFeatureState, x: Array) -> StudentTPrediction:
    """The predictive for ``x: [d]`` (module doc): a Student-t, ``[]`` leaves."""
    _, _, loc, scale2, df = _members(state, x)
    return _mixture(state, loc, scale2, df)


def _learn(state: RandomFeatureState, x: Array, y: Array, members, *, forget: bool) -> RandomFeatureState:
    """Absorb ``(x, y)`` given :func:`_members`' ``members`` (module doc's recursion, every model at once).

    A finite item: :func:`~onlinejax.core.base.make_learner`'s boundary skips the others (``skip_nonfinite``).
    """
    phi, f, loc, scale2, df = members
    log_p = StudentTPrediction(loc, jnp.sqrt(scale2), df).log_prob(y)  # [K], each model's score of y
    repeat = (state.n_seen > 0) & jnp.all(x == state.last_x)
    lam = state.forgetting if forget else jnp.ones_like(state.forgetting)
    models = (state.mean, state.cov_sqrt, state.a, state.b, phi, f, loc, lam, state.level_only)
    one = partial(_model_step, y=y, repeat=repeat, prior_a=state.prior_a, forget=forget)
    m, W, a, b = jax.vmap(one)(*models)
    bound = state.variance_bound  # an item only lowers a variance: the bound holds
    if forget:
        W, bound = _restore_prior_precision(W, bound / lam, state.prior_precision, models, y, repeat, state.prior_a)
    return state._replace(cov_sqrt=W, mean=m, a=a, b=b, variance_bound=bound,
                          log_weight=state.discount * state.log_weight + log_p - jnp.max(log_p),
                          n_seen=state.n_seen + 1, last_x=x)


def _model_step(mean, W, a, b, phi, f, loc, lam, level_only, *, y, repeat, prior_a, forget: bool):
    """One model's item (``W: [F, F]``; ``mean``, ``phi``, ``f``: ``[F]``; the rest ``[]``): :func:`absorb`, then
    with ``forget`` (static) the step to the next item (:func:`_forget`; ``a ← λa + (1 - λ)a₀``, ``b ← λb``).

    Returns:
      ``(mean [F], cov_sqrt [F, F], a [], b [])``.
    """
    m, W1, a1, b1 = absorb(mean, W, a, b, phi, y, f, loc)
    if not forget:
        return m, W1, a1, b1
    return m, _forget(W1, W, f, lam, level_only, repeat), lam * a1 + (1.0 - lam) * prior_a, lam * b1


def _forget(W1: Array, W: Array, f: Array, lam: Array, level_only: Array, repeat: Array) -> Array:
    """The forgetting step of one model's square root ``W₁`` after the item (module doc), elementwise.

    The item left ``W₁ = W - c(Wf)fᵀ``, ``ρ = 1 + fᵀf`` (:func:`~onlinejax.core.linalg.sqrt_cov_rank1`).
    Forgetting every direction: ``W₂ = W₁/√λ``, the local level's constant row alone. After a repeated input,
    along its direction only (directional forgetting, Kulhavý 1987; Hägglund 1983):
    ``S ← S + (1/λ - 1)SφφᵀS/(φᵀSφ)``, in the square root ``W₂ = W₁ + (λ^(-1/2) - 1)(W₁u)uᵀ`` with
    ``u = W₁ᵀφ/|W₁ᵀφ| = f/|f|`` and ``W₁f = Wf/√ρ``: the variance of ``φᵀw`` grows by ``1/λ`` as in the full
    step, while the directions no repeat excites keep theirs (the full step would inflate them by ``λ⁻ⁿ`` over
    ``n`` repeats). Either case is ``W₂ = D(W₁ + τ(Wf)fᵀ)`` with a diagonal ``D`` and a scalar ``τ``: it fuses
    with the item's update into one pass over ``W``, with no branch.

    Args:
      W1: ``[F, F]`` ``W₁``; W: ``[F, F]`` before the item; f: ``[F]`` ``Wᵀφ`` (:func:`_members`);
      lam: ``[]`` ``λ``; level_only, repeat: ``[]`` bool.
    Returns:
      ``[F, F]``.
    """
    n = W.shape[-1]
    ff = f @ f
    along = (jax.lax.rsqrt(lam) - 1.0) / (jnp.sqrt(1.0 + ff) * jnp.maximum(ff, jnp.finfo(ff.dtype).tiny))
    grow = jnp.where(level_only & (jnp.arange(n) < n - 1), 1.0, jax.lax.rsqrt(lam))
    rows = jnp.where(repeat, 1.0, grow)  # [F]
    tau = jnp.where(repeat, along, 0.0)
    return rows[:, None] * (W1 + tau * jnp.outer(W @ f, f))


@jax.custom_jvp
def _restore_prior_precision(W: Array, bound: Array, alpha: Array, models, y: Array, repeat: Array, prior_a: Array):
    """The windup guard (module doc): a model whose variance may exceed its cap gets the prior's precision back.

    ``bound`` ``[K]`` bounds each model's largest marginal variance from above (a forgetting step raises a
    variance by at most ``1/λ``, an item only lowers it). The model furthest over the cap by its bound, if one
    is, takes ``S ← (S⁻¹ + α₀I)⁻¹`` (:func:`~onlinejax.core.linalg.sqrt_cov_add_precision`, ``O(F³)``; the mean
    kept): every variance is then below the prior's ``1/α₀``, which becomes its bound, and the directions the
    data holds tight keep theirs. The others wait, a factor ``1/λ`` per item. The branch
    (:func:`~onlinejax.core.batching.computed_if_any`: lazily under ``vmap``) takes that model's inputs before the
    item and steps it again (:func:`_model_step`): a branch over the whole ``[K, F, F]`` would copy it on every
    item, and a slice of the stepped ``W`` would be computed on every item. The gradient takes the guard as the
    identity.

    Args:
      W: ``[K, F, F]`` after the item; bound: ``[K]``; alpha: ``[]`` ``α₀``; models: the :func:`_model_step`
        arguments of every model before the item (leading axis ``K``); y, repeat, prior_a: its keywords.
    Returns:
      ``(cov_sqrt [K, F, F], bound [K])``.
    """
    k = jnp.argmax(bound)
    over = bound[k] > float(jnp.finfo(W.dtype).eps) ** -0.5 / alpha
    this = jax.tree_util.tree_map(lambda v: v[k], models)

    def restore(operand):
        inputs, y, repeat, prior_a, alpha = operand
        W1 = _model_step(*inputs, y=y, repeat=repeat, prior_a=prior_a, forget=True)[1]
        return sqrt_cov_add_precision(W1, alpha)

    Wk = computed_if_any(restore, max_batch=1)(over, (this, y, repeat, prior_a, alpha))
    pick = over & (jnp.arange(W.shape[0]) == k)
    return jnp.where(pick[:, None, None], Wk, W), jnp.where(pick, 1.0 / alpha, bound)


@_restore_prior_precision.defjvp
def _restore_prior_precision_jvp(primals, tangents):
    return _restore_prior_precision(*primals), (tangents[0], jnp.zeros_like(primals[1]))


def step_one(state: RandomFeatureState, x: Array, y: Array, *, forget: bool = False):
    """:func:`predict_one`, then learn ``(x, y)`` (``x: [d]``, ``y: []``), the models' predictions computed once.

    ``forget`` (static) applies the state's forgetting factors; the factory sets it (built without
    forgetting, it is off and ``λ`` unused).
    """
    members = _members(state, x)
    return _learn(state, x, y, members, forget=forget), _mixture(state, *members[2:])


def update_one(state: RandomFeatureState, x: Array, y: Array, pred=None, *, forget: bool = False) -> RandomFeatureState:
    """Learn ``(x, y)`` (``x: [d]``, ``y: []``; ``pred``, the mixture issued for it, carries nothing the models'
    updates need; ``forget`` as in :func:`step_one`)."""
    return _learn(state, x, y, _members(state, x), forget=forget)


#: Default lengthscales, in units of ``√d`` standardised input standard deviations.
LENGTHSCALES = (0.25, 0.5, 1.0, 2.0)

#: Default forgetting factors: no forgetting (unbounded memory) and memories of about 100 and 20 items.
FORGETTING = (1.0, 0.99, 0.95)


class RandomFeatureModels(NamedTuple):
    """The models :func:`random_feature_gp` averages, and how fast their weights forget: a hashable record.

    ``K = LΦ`` conjugate models, one per lengthscale and forgetting factor, and the local level if ``level``
    is given (``K = LΦ + 1``; the counts and the level's presence are static: they
    set the state's shapes; their values are state arrays, which ``init`` overrides). Give sequences as
    tuples, so that equal records build the same learner.

    Attributes:
      lengthscales: ``[L]`` lengthscales > 0; ``None`` (default): :data:`LENGTHSCALES` times ``√d``.
      forgetting: ``[Φ]`` forgetting factors in (0, 1] (default :data:`FORGETTING`); ``None`` (static): no
        forgetting, the cheaper path.
      discount: ``δ ∈ (0, 1]``, the models' log evidence discount per item (default 0.99).
      level: ``None`` (default, static presence) or the forgetting factor in (0, 1] of one more model, the local
        level on the constant feature alone (module doc); below 1 only where the models forget.
    """

    lengthscales: Optional[Sequence[float]] = None
    forgetting: Optional[Sequence[float]] = FORGETTING
    discount: float = 0.99
    level: Optional[float] = None

    def checked(self, n_inputs: int, name: str = "models") -> "RandomFeatureModels":
        """The record with tuples of floats, ``lengthscales`` resolved (``ValueError``: ``models.<field>: ...``)."""
        ell = tuple(v * n_inputs ** 0.5 for v in LENGTHSCALES) if self.lengthscales is None else _values(
            self.lengthscales)
        lam = None if self.forgetting is None else _values(self.forgetting)
        for vals, field in ((ell, "lengthscales"), (lam, "forgetting")):
            if vals is not None and len(vals) == 0:
                raise ValueError(f"{name}.{field}: must hold at least one value")
        check_positive(ell, f"{name}.lengthscales")
        if lam is not None:
            check_in_range(lam, f"{name}.forgetting", 0.0, 1.0)
        check_in_range(self.discount, f"{name}.discount", 0.0, 1.0)
        level = None if self.level is None else float(self.level)
        if level is not None:
            check_in_range(level, f"{name}.level", 0.0, 1.0)
            if lam is None and level < 1.0:
                raise ValueError(f"{name}.level: below 1 needs forgetting (built with forgetting=None, no model "
                                 f"forgets), got {level!r}")
        return RandomFeatureModels(ell, lam, self.discount, level)


@describe_factory
def random_feature_gp(n_inputs: int, n_frequencies: int = 64, *, models: RandomFeatureModels = RandomFeatureModels(),
                      prior: NIGPrior = NIGPrior(0.1, 0.5, 4.0), seed: int = 0, dtype=None) -> Learner:
    """A GP with unbounded memory on standardised data: random Fourier features, noise and lengthscale learned.

    ``K = LΦ`` conjugate models, one per lengthscale and forgetting factor
    (and a local level, if ``models.level`` is given), averaged by their
    discounted evidence (module doc). Meant for inputs and
    targets of unit spread: wrap it in :func:`onlinejax.wrappers.calibration.calibrated`
    with a warm-up (the frequencies are fixed, so the coordinates must be too).

    Args:
      n_inputs: ``d`` (static).
      n_frequencies: ``M`` (static): ``F = 2M + d + 1`` features, ``O(KF²)`` per item.
      models: :class:`RandomFeatureModels`, the defaults of the lengthscales ``[L]`` and forgetting
        factors ``[Φ]`` (static counts; ``forgetting=None``: no forgetting, the cheaper path), of the
        evidence discount ``δ`` and of the local level's forgetting factor (static presence).
      prior: :class:`~onlinejax.learners.linear.NIGPrior`, the defaults of ``α₀`` (the weights' prior precision in
        units of the noise variance), the noise variance's prior guess (on the standardised scale) and its
        degrees of freedom ``2a₀ > 2``; default ``NIGPrior(0.1, 0.5, 4.0)``.
      seed: the frequencies' default seed.
      dtype: default floating dtype.
    Returns:
      A :class:`Learner` whose ``init(**overrides)`` takes :func:`init`'s keywords.

    Example::

        from onlinejax.wrappers.calibration import CALIBRATED_STANDARDIZATION, calibrated
        # raw data: standardise (statistics of the first 32 items, then fixed), calibrate
        learner = calibrated(random_feature_gp(2), standardization=CALIBRATED_STANDARDIZATION._replace(warmup=32))
        state = learner.init()
        state, pred = learner.step(state, [0.3, 1.2], 0.7)
    Raises:
      ValueError: naming the argument or the record's field (``models.discount: ...``).
      TypeError: a record of the wrong type.
    """
    d = check_int(n_inputs, "n_inputs", 1)
    m = check_int(n_frequencies, "n_frequencies", 1)
    mo = check_record(models, RandomFeatureModels, "models").checked(d)
    forget = mo.forgetting is not None
    defaults = dict(lengthscales=mo.lengthscales, **checked_prior(prior)._asdict(), discount=mo.discount,
                    forgetting=mo.forgetting if forget else (1.0,), level=mo.level, seed=seed, dtype=dtype)
    n_models = init(d, m, **defaults).lengthscale.shape[0]  # the defaults are checked now, naming the argument

    def _init(**overrides):
        unknown = (set(overrides) - set(defaults)) | (set() if forget else {"forgetting", "level"} & set(overrides))
        if unknown:
            raise TypeError(f"init: unexpected keyword(s) {sorted(unknown)}")
        state = init(d, m, **{**defaults, **overrides})
        if state.lengthscale.shape[0] != n_models:  # the model count is static: it sets the state's shapes
            raise ValueError(f"lengthscales, forgetting: must give {n_models} models as built, "
                             f"got {state.lengthscale.shape[0]}")
        return state

    return make_learner(
        init=_init,
        learn_one=lambda s, x, y: update_one(s, x, y, forget=forget),
        predict_one=predict_one,
        n_features=d,
        cores=LearnerCores(step_one=partial(step_one, forget=forget), update_one=partial(update_one, forget=forget)),
        skip_nonfinite=True,
    )


def _values(v) -> tuple:
    """A scalar or a sequence of numbers as a tuple of floats (the model count is static)."""
    return tuple(float(u) for u in np.ravel(np.asarray(v, dtype=float)))

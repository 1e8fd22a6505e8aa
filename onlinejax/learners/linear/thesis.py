"""The thesis's parametric learners: BayesianMLE / BayesianMAP, forgetting and windowed.

Thesis sections 4.2, 5.4.1–5.4.2 (``003_89e17038b7e7160f.txt``):

* **BayesianMLE** is recursive least squares started from ``XXᵀ = kI``
  (``k = 10⁴``, thesis 5.4.1.2) — in Bayesian terms the conjugate model with
  prior precision ``1/k`` and unit noise precision, whose mean is the RLS
  estimate.
* **BayesianMAP** starts from the prior instead (thesis 5.4.2.2): prior
  precision ``alpha`` and noise precision ``beta`` (``σ_y² Σ_w⁻¹`` in the
  thesis's notation). Its ``tune`` uses type-II maximum likelihood
  (:mod:`onlinejax.learners.linear.evidence`) where the thesis grid-searched ``σ_y`` on
  the window's *training* residuals — a criterion that always prefers the
  least regularisation.
* Windowed variants give the asymptotic prediction bounds of eq. 4.17; the
  forgetting variants give the ad-hoc 3-learner ensemble bounds of 5.4.1.1
  (:func:`adhoc_bounds`).
* ``features=ThesisFeatures(mapped=True)`` applies the thesis's feature-space
  mapping (:func:`~onlinejax.learners.linear.features.thesis_features`);
  ``ThesisFeatures(intercept=True)`` adds the constant feature the thesis code lacked.

The ad-hoc bounds alone (``floor="none"``) are by construction about ±0.5
noise standard deviations wide, far below a nominal 95 % (see
:func:`adhoc_bounds`); the default floor at the base learner's recursive
residuals and, for the windowed variants, the one-step floor of
:func:`~onlinejax.learners.linear.windowed_bayes_linreg` bring the intervals to their
nominal level when the model fits.

The ad-hoc learner in one place: :class:`AdHocState`, :func:`adhoc_init`,
:func:`adhoc_learn_one`, :func:`adhoc_predict_one`; :func:`adhoc_bounds`
binds them to a learner. The other factories configure
:func:`~onlinejax.learners.linear.bayes_linreg` and
:func:`~onlinejax.learners.linear.windowed_bayes_linreg`.
"""
from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ...core.checks import check_bool, check_record
from ...core.base import (Learner, Prediction, check_in_range, check_int, check_positive, describe_factory, keep_if,
                          learnable, make_learner, normal_quantile, state_dtype)
from .bayes import bayes_linreg, forgetting_from_thesis
from .features import compose, intercept_features, map_features, thesis_features
from .windowed import WindowedOptions, windowed_bayes_linreg

Array = jax.Array

__all__ = [
    "AdHocState",
    "adhoc_bounds",
    "adhoc_init",
    "adhoc_learn_one",
    "adhoc_predict_one",
    "FLOORS",
    "bayesian_mle_forgetting",
    "bayesian_map_forgetting",
    "bayesian_mle_windowed",
    "bayesian_map_windowed",
    "MLE_K",
    "AdHocOptions",
    "ThesisFeatures",
    "MAP_WINDOWED",
    "MLE_WINDOWED",
]

MLE_K = 1e4
#: :func:`bayesian_map_windowed`'s default options: the thesis's asymptotic bounds (eq. 4.17), evidence tune.
MAP_WINDOWED = WindowedOptions(bounds="asymptotic")
#: :func:`bayesian_mle_windowed`'s default options: asymptotic bounds, nothing of the model tuned.
MLE_WINDOWED = WindowedOptions(bounds="asymptotic", tune_evidence=False)


class ThesisFeatures(NamedTuple):
    """The features a thesis learner sees: an immutable, hashable record of two bools (default: the raw inputs).

    Attributes:
      mapped: apply the thesis's feature-space mapping (:func:`~onlinejax.learners.linear.features.thesis_features`;
        default False).
      intercept: append the constant feature the thesis code lacked (default False).
    """

    mapped: bool = False
    intercept: bool = False


class AdHocOptions(NamedTuple):
    """The ad-hoc bounds' options (:func:`adhoc_bounds`) of the thesis's forgetting learners: a hashable record.

    Attributes:
      burn_in: items before the bound learners start to specialise (>= 0, static; default 50).
      level: nominal level used to turn the bound width into a variance (default 0.95).
      floor: ``"residual"`` (default) or ``"none"`` (static; ``"none"``: the thesis's bounds alone).
      residual_forgetting: default ``ρ ∈ (0, 1]`` of the residual floor (an array in the state:
        ``init(residual_forgetting=)``; default 0.99, ~100 items).
    """

    burn_in: int = 50
    level: float = 0.95
    floor: str = "residual"
    residual_forgetting: float = 0.99


def _checked_features(features) -> ThesisFeatures:
    f = check_record(features, ThesisFeatures, "features")
    return ThesisFeatures(*(check_bool(v, f"features.{name}") for name, v in zip(f._fields, f)))


def _adhoc(learner: Learner, adhoc) -> Learner:
    """``adhoc_bounds(learner)`` with the record's options, a bad field named ``adhoc.<field>``."""
    a = check_record(adhoc, AdHocOptions, "adhoc")
    try:
        return adhoc_bounds(learner, burn_in=a.burn_in, level=a.level, floor=a.floor,
                            residual_forgetting=a.residual_forgetting)
    except ValueError as e:
        raise ValueError(f"adhoc.{e}") from None


class AdHocState(NamedTuple):
    """State of :func:`adhoc_bounds`: three copies of a learner, a counter and the residual floor.

    Attributes:
      base, upper, lower: the three copies' states.
      n_seen: ``[]`` int32 items learned.
      z2_sum, z2_weight: ``[]`` exponentially weighted sum of the base's squared
        standardised one-step errors ``z² = (y - μ)²/σ²`` and of the weights
        (``c = z2_sum / z2_weight``, see :func:`adhoc_bounds`).
      y2_sum: ``[]`` ``Σy²`` of the items learned (used only while too few
        ``z²`` are in).
      residual_forgetting: ``[]`` the factor ``ρ`` of those sums.
    """

    base: Any
    upper: Any
    lower: Any
    n_seen: Array
    z2_sum: Array
    z2_weight: Array
    y2_sum: Array
    residual_forgetting: Array


FLOORS = ("residual", "none")


def adhoc_init(learner: Learner, residual_forgetting=0.99, **kw) -> AdHocState:
    """Three identical copies of ``learner.init(**kw)``, zero counters and sums.

    Args:
      learner: the copied learner (static).
      residual_forgetting: ``ρ ∈ (0, 1]`` of the residual floor's sums.
      **kw: forwarded to ``learner.init``.
    """
    check_in_range(residual_forgetting, "residual_forgetting", 0.0, 1.0)
    s = learner.init(**kw)
    dt = state_dtype(s)
    zero = jnp.zeros((), dt)
    return AdHocState(s, s, s, jnp.zeros((), jnp.int32), zero, zero, zero, jnp.asarray(residual_forgetting, dt))


def adhoc_learn_one(state: AdHocState, x: Array, y: Array, *, learner: Learner, burn_in: int = 50,
                    floor: str = "residual") -> AdHocState:
    """Learn ``(x [d], y [])`` by the thesis's rule (5.4.1.1) and update the residual floor's sums.

    The base learns every item; after ``burn_in`` items the upper copy learns
    only items above the lower copy's prediction, the lower copy only items
    below the upper copy's (both predicted before learning). With
    ``floor="residual"`` the base's squared standardised one-step error
    ``z² = (y - μ)²/σ²`` enters ``z2_sum`` once the base has seen ``d`` items.
    All options static.

    A non-finite item is passed on to the copies, which skip it and count it
    in their own ``n_skipped`` (the copies' boundaries own the skip, so this
    state has no counter of its own); here it leaves ``n_seen`` and the
    floor's sums unchanged.
    """
    s = state
    ok = learnable(x, y)
    hi = learner.predict(s.upper, x).mean
    lo = learner.predict(s.lower, x).mean
    warm = s.n_seen >= burn_in
    base = learner.learn(s.base, x, y)
    up = keep_if(~warm | (y > lo), learner.learn(s.upper, x, y), s.upper)
    low = keep_if(~warm | (y < hi), learner.learn(s.lower, x, y), s.lower)
    new = AdHocState(base, up, low, s.n_seen + ok, s.z2_sum, s.z2_weight, s.y2_sum, s.residual_forgetting)
    if floor == "residual":
        p = learner.predict(s.base, x)
        use = ok & (s.n_seen >= learner.n_features)
        z2 = jnp.where(use, (y - p.mean) ** 2 / p.var, 0.0)
        rho = jnp.where(use, s.residual_forgetting, 1.0)
        new = new._replace(z2_sum=rho * s.z2_sum + z2, z2_weight=rho * s.z2_weight + use,
                           y2_sum=s.y2_sum + jnp.where(ok, y * y, 0.0))
    return new


def adhoc_predict_one(state: AdHocState, x: Array, *, learner: Learner, burn_in: int = 50, level: float = 0.95,
                      floor: str = "residual") -> Prediction:
    """``N(μ_base, max(v_rule, floor))`` at ``x: [d]`` (:func:`adhoc_bounds`; all options static).

    ``v_rule = ((upper - lower)/(2 z_level))²`` after the burn-in, the base's
    ``σ²`` before; the floor is ``c·σ²`` (``floor="residual"``, ``c`` the
    weighted mean ``z2_sum/z2_weight``, ``max(σ², Σy²/n)`` until three ``z²``
    are in) or ``eps·σ²`` (``"none"``).
    """
    s = state
    p = learner.predict(s.base, x)
    hi = learner.predict(s.upper, x).mean
    lo = learner.predict(s.lower, x).mean
    v_rule = jnp.where(s.n_seen >= burn_in, ((hi - lo) / (2.0 * normal_quantile(level))) ** 2, p.var)
    eps = jnp.finfo(p.var.dtype).eps
    if floor == "residual":
        c = s.z2_sum / jnp.maximum(s.z2_weight, jnp.finfo(p.var.dtype).tiny)
        early = jnp.maximum(p.var, s.y2_sum / jnp.maximum(s.n_seen, 1).astype(p.var.dtype))
        lo_var = jnp.where(s.n_seen >= learner.n_features + 3, jnp.maximum(c, eps) * p.var, early)
    else:
        lo_var = eps * p.var
    return Prediction(p.mean, jnp.maximum(v_rule, lo_var))


@describe_factory
def adhoc_bounds(learner: Learner, *, burn_in: int = 50, level: float = 0.95, floor: str = "residual",
                 residual_forgetting=0.99) -> Learner:
    """The thesis's ad-hoc "3-learner ensemble" bounds (5.4.1.1, Fig. 5.4), with a variance floor.

    Three copies of ``learner``: the *base* gives the point prediction; after
    ``burn_in`` items the *upper* copy learns only items whose target lies
    above the ensemble's lower bound and the *lower* copy only items below its
    upper bound (the bounds are the copies' predictions made before learning).
    Before the burn-in ends all three learn everything. This rule is the
    thesis's, unchanged.

    The bounds are heuristic (the thesis: "without any theoretical support")
    and carry no coverage guarantee. To return a :class:`Prediction`, the
    interval ``[lower, upper]`` is read as a central ``level`` interval around
    the base mean: ``v_rule = ((upper - lower) / (2 z_level))²``. During the
    burn-in ``v_rule`` is the base learner's own predictive variance ``σ²``.

    Why a floor: the width is ``xᵀ(w_upper - w_lower)`` for linear copies, a
    linear function of ``x`` that is exactly 0 on the first item after the
    burn-in (the three copies are still identical) and crosses 0 wherever the
    two copies' hyperplanes intersect inside the input domain; and where it is
    positive, the rule settles near ``E[y | y > lower]`` and
    ``E[y | y < upper]``, about ±0.5 noise standard deviations, not ±1.96.
    The returned variance is therefore ``max(v_rule, floor)``:

    * ``floor="residual"`` (default): ``c·σ²`` with ``c`` the exponentially
      weighted (factor ``ρ``, normalised by the sum of the weights) mean of
      the base's squared standardised one-step errors ``(y - μ)²/σ²``, scored
      before the base learns each item. For the conjugate linear model
      ``σ² = (1 + β xᵀSx)/β`` and ``(y - μ)/σ`` are its recursive residuals,
      i.i.d. ``N(0, σ_noise² β)`` when the model holds (Brown, Durbin & Evans
      1975, JRSS B 37:149), so ``c σ²`` estimates the predictive variance with
      the noise level estimated online; the thesis's fixed ``β`` (1 for
      BayesianMLE) knows nothing of the data's scale. Recursive residuals
      start once the base has seen ``d`` items (``d`` = ``learner.n_features``;
      before, the error measures the prior), and standardising keeps the cold
      start's large errors (made while ``xᵀSx`` is large) from dominating
      ``c``. Until three of them are in, the floor is ``max(σ², Σy²/n)``,
      the squared error of predicting 0 (the prior mean), as the windowed
      learners' eq. 4.17 with fewer than three residual degrees of freedom.
      ``c`` is floored at the dtype's ``eps``.
    * ``floor="none"``: the thesis's interval as it is, the variance floored
      only at ``eps·σ²`` (never 0 or the dtype's tiny, but as overconfident
      as the rule).

    Args:
      learner: any learner (normally a forgetting linear learner).
      burn_in: items before the bound learners start to specialise (>= 0, static).
      level: nominal level used to turn the bound width into a variance.
      floor: ``"residual"`` or ``"none"`` (static), see above.
      residual_forgetting: default ``ρ ∈ (0, 1]`` of ``c`` (an array in the
        state: ``init(residual_forgetting=)``); 0.99 remembers ~100 items.
    Returns:
      A :class:`Learner` over :func:`adhoc_init`, :func:`adhoc_learn_one` and
      :func:`adhoc_predict_one` with state :class:`AdHocState`; ``init(**kw)``
      forwards ``kw`` (except ``residual_forgetting``) to ``learner.init``.
    """
    if int(burn_in) != burn_in or burn_in < 0:
        raise ValueError(f"burn_in: must be an integer >= 0, got {burn_in!r}")
    if floor not in FLOORS:
        raise ValueError(f"floor: must be one of {FLOORS}, got {floor!r}")
    check_in_range(residual_forgetting, "residual_forgetting", 0.0, 1.0)
    normal_quantile(level)  # validates level

    def _init(residual_forgetting=residual_forgetting, **kw):
        return adhoc_init(learner, residual_forgetting, **kw)

    opts = dict(learner=learner, burn_in=burn_in, floor=floor)
    return make_learner(init=_init, learn_one=partial(adhoc_learn_one, **opts),
                        predict_one=partial(adhoc_predict_one, level=level, **opts), n_features=learner.n_features)


def _feature_map(n_features, features):
    check_int(n_features, "n_features", 1)
    f = _checked_features(features)
    fm = thesis_features(n_features) if f.mapped else None
    if f.intercept:
        ic = intercept_features(fm.n_out if fm else n_features)
        fm = compose(fm, ic) if fm else ic
    return fm


def _wrap(fm, make):
    return map_features(fm, make(fm.n_out)) if fm else make(None)


@describe_factory
def bayesian_mle_forgetting(n_features: int, *, forgetting_factor=0.05, k=MLE_K,
                            features: ThesisFeatures = ThesisFeatures(), adhoc: AdHocOptions = AdHocOptions(),
                            dtype=None) -> Learner:
    """BayesianMLEForgetting: RLS from ``kI`` with the thesis's forgetting factor and ad-hoc bounds.

    Args:
      n_features: ``d``.
      forgetting_factor: the thesis's ``α_ff ∈ [0, 1)`` (eq. 5.6; FF0.05 = 0.05).
      k: initial ``XXᵀ = kI`` scale (thesis: 10⁴), i.e. prior precision ``1/k``.
      features: :class:`ThesisFeatures`, the feature mapping and the intercept (module doc).
      adhoc: :class:`AdHocOptions`, the options of :func:`adhoc_bounds`
        (``AdHocOptions(floor="none")``: the thesis's bounds alone).
      dtype: default floating dtype.
    Raises:
      ValueError: naming the argument or the record's field (``adhoc.burn_in: ...``).
      TypeError: a record of the wrong type.
    """
    check_positive(k, "k")
    lam, b = forgetting_from_thesis(forgetting_factor, 1.0)
    fm = _feature_map(n_features, features)
    return _wrap(fm, lambda m: _adhoc(
        bayes_linreg(m or n_features, alpha=1.0 / k, beta=b, forgetting=lam, dtype=dtype), adhoc))


@describe_factory
def bayesian_map_forgetting(n_features: int, *, forgetting_factor=0.05, alpha=1.0, beta=1.0,
                            features: ThesisFeatures = ThesisFeatures(), adhoc: AdHocOptions = AdHocOptions(),
                            dtype=None) -> Learner:
    """BayesianMAPForgetting: the conjugate model from the prior, thesis forgetting, ad-hoc bounds.

    Arguments as in :func:`bayesian_mle_forgetting`; ``alpha``, ``beta``: the prior
    precision and the noise precision before the thesis's ``(1 - α_ff)`` factor.
    """
    lam, b = forgetting_from_thesis(forgetting_factor, beta)
    fm = _feature_map(n_features, features)
    return _wrap(fm, lambda m: _adhoc(
        bayes_linreg(m or n_features, alpha=alpha, beta=b, forgetting=lam, dtype=dtype), adhoc))


def _thesis_windowed(options: WindowedOptions, model: WindowedOptions, name: str) -> WindowedOptions:
    """``options`` unless it changes what makes the learner the thesis's (``ValueError`` naming the field).

    A record built from scratch (``WindowedOptions(capacity=128)``) would silently carry the generic
    learner's ``bounds="bayes"`` (and evidence tuning for the MLE model): start from the model's record
    (``name._replace(...)``) or use :func:`~onlinejax.learners.linear.windowed_bayes_linreg`.
    """
    check_record(options, WindowedOptions, "options")
    for field in ("bounds", "tune_evidence"):
        if getattr(options, field) != getattr(model, field):
            raise ValueError(f"options.{field}: the thesis's model has {getattr(model, field)!r}, got "
                             f"{getattr(options, field)!r}; start from {name}._replace(...) or use "
                             "windowed_bayes_linreg")
    return options


@describe_factory
def bayesian_mle_windowed(n_features: int, window: int, *, k=MLE_K, features: ThesisFeatures = ThesisFeatures(),
                          options: WindowedOptions = MLE_WINDOWED, dtype=None) -> Learner:
    """BayesianMLEWindowed: windowed RLS from ``kI`` with asymptotic bounds (eq. 4.17).

    Nothing of the model is tuned (thesis 5.4.1.5): ``tune`` only re-standardises
    the features on the window and rebuilds the factor, keeping the prior
    ``kI`` on the raw weights and ``beta = 1`` (``tune_evidence=False`` of
    :class:`~onlinejax.learners.linear.WindowedOptions`). Without it the float32
    factor of the raw mapped features (inputs of scale 50–100: features
    spanning 1–10⁴) loses all precision.

    Args:
      n_features: ``d``.
      window: the default window length (``init(window=)``; see
        :func:`~onlinejax.learners.linear.windowed_bayes_linreg`).
      k: initial ``XXᵀ = kI`` scale (thesis: 10⁴), i.e. prior precision ``1/k``.
      features: :class:`ThesisFeatures` (module doc).
      options: the windowed learner's :class:`~onlinejax.learners.linear.WindowedOptions`, as a whole
        (default :data:`MLE_WINDOWED`, the thesis's model; change a field with
        ``MLE_WINDOWED._replace(capacity=128)``, which keeps the others).
      dtype: default floating dtype.
    """
    check_in_range(k, "k", 0.0, float("inf"), hi_open=True)
    options = _thesis_windowed(options, MLE_WINDOWED, "MLE_WINDOWED")
    fm = _feature_map(n_features, features)
    return _wrap(fm, lambda m: windowed_bayes_linreg(m or n_features, window, alpha=1.0 / k, beta=1.0,
                                                     options=options, dtype=dtype))


@describe_factory
def bayesian_map_windowed(n_features: int, window: int, *, alpha=1.0, beta=1.0,
                          features: ThesisFeatures = ThesisFeatures(), options: WindowedOptions = MAP_WINDOWED,
                          dtype=None) -> Learner:
    """BayesianMAPWindowed: windowed conjugate model, asymptotic bounds, evidence ``tune``.

    Arguments as in :func:`bayesian_mle_windowed`; ``alpha``, ``beta``: the default prior and noise
    precisions (tuned by type-II ML); ``options`` defaults to :data:`MAP_WINDOWED`
    (``prior_floor=None``, the thesis's model).
    """
    options = _thesis_windowed(options, MAP_WINDOWED, "MAP_WINDOWED")
    fm = _feature_map(n_features, features)
    return _wrap(fm, lambda m: windowed_bayes_linreg(m or n_features, window, alpha=alpha, beta=beta,
                                                     options=options, dtype=dtype))

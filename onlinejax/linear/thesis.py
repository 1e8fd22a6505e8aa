"""The thesis's parametric learners: BayesianMLE / BayesianMAP, forgetting and windowed.

Thesis sections 4.2, 5.4.1–5.4.2 (``003_89e17038b7e7160f.txt``):

* **BayesianMLE** is recursive least squares started from ``XXᵀ = kI``
  (``k = 10⁴``, thesis 5.4.1.2) — in Bayesian terms the conjugate model with
  prior precision ``1/k`` and unit noise precision, whose mean is the RLS
  estimate.
* **BayesianMAP** starts from the prior instead (thesis 5.4.2.2): prior
  precision ``alpha`` and noise precision ``beta`` (``σ_y² Σ_w⁻¹`` in the
  thesis's notation). Its ``tune`` uses type-II maximum likelihood
  (:mod:`onlinejax.linear.evidence`) where the thesis grid-searched ``σ_y`` on
  the window's *training* residuals — a criterion that always prefers the
  least regularisation.
* Windowed variants give the asymptotic prediction bounds of eq. 4.17; the
  forgetting variants give the ad-hoc 3-learner ensemble bounds of 5.4.1.1
  (:func:`adhoc_bounds`).
* ``mapped=True`` applies the thesis's feature-space mapping
  (:func:`~onlinejax.linear.features.thesis_features`); ``intercept=True``
  adds the constant feature the thesis code lacked.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..base import Learner, Prediction, check_in_range, keep_if, make_learner, normal_quantile
from .bayes import bayes_linreg, forgetting_from_thesis
from .features import compose, intercept_features, map_features, thesis_features
from .windowed import windowed_bayes_linreg

Array = jax.Array

__all__ = [
    "AdHocState",
    "adhoc_bounds",
    "bayesian_mle_forgetting",
    "bayesian_map_forgetting",
    "bayesian_mle_windowed",
    "bayesian_map_windowed",
    "MLE_K",
]

MLE_K = 1e4


class AdHocState(NamedTuple):
    """State of :func:`adhoc_bounds`: three copies of a learner and a counter."""

    base: Any
    upper: Any
    lower: Any
    n_seen: Array


def adhoc_bounds(learner: Learner, *, burn_in: int = 50, level: float = 0.95) -> Learner:
    """The thesis's ad-hoc "3-learner ensemble" bounds (5.4.1.1, Fig. 5.4).

    Three copies of ``learner``: the *base* gives the point prediction; after
    ``burn_in`` items the *upper* copy learns only items whose target lies
    above the ensemble's lower bound and the *lower* copy only items below its
    upper bound (the bounds are the copies' predictions made before learning).
    Before the burn-in ends all three learn everything.

    The bounds are heuristic (the thesis: "without any theoretical support")
    and carry no coverage guarantee. To return a :class:`Prediction`, the
    interval ``[lower, upper]`` is read as a central ``level`` interval around
    the base mean: ``var = ((upper - lower) / (2 z_level))²``. During the burn-in
    the base learner's own predictive variance is returned.

    Args:
      learner: any learner (normally a forgetting linear learner).
      burn_in: items before the bound learners start to specialise (>= 0, static).
      level: nominal level used to turn the bound width into a variance.
    Returns:
      A :class:`Learner` with state :class:`AdHocState`; ``init(**kw)``
      forwards ``kw`` to ``learner.init``.
    """
    if int(burn_in) != burn_in or burn_in < 0:
        raise ValueError(f"burn_in: must be an integer >= 0, got {burn_in!r}")
    z = normal_quantile(level)

    def _init(**kw):
        s = learner.init(**kw)
        return AdHocState(s, s, s, jnp.zeros((), jnp.int32))

    def learn_one(s: AdHocState, x, y):
        ok = jnp.all(jnp.isfinite(x)) & jnp.isfinite(y)
        hi = learner.predict(s.upper, x).mean
        lo = learner.predict(s.lower, x).mean
        warm = s.n_seen >= burn_in
        base = learner.learn(s.base, x, y)
        up = keep_if(~warm | (y > lo), learner.learn(s.upper, x, y), s.upper)
        low = keep_if(~warm | (y < hi), learner.learn(s.lower, x, y), s.lower)
        return AdHocState(base, up, low, s.n_seen + ok)

    def predict_one(s: AdHocState, x):
        p = learner.predict(s.base, x)
        hi = learner.predict(s.upper, x).mean
        lo = learner.predict(s.lower, x).mean
        var = jnp.maximum(((hi - lo) / (2.0 * z)) ** 2, jnp.finfo(p.var.dtype).tiny)
        return Prediction(p.mean, jnp.where(s.n_seen >= burn_in, var, p.var))

    return make_learner(init=_init, learn_one=learn_one, predict_one=predict_one, n_features=learner.n_features)


def _feature_map(n_features, mapped, intercept):
    fm = thesis_features(n_features) if mapped else None
    if intercept:
        ic = intercept_features(fm.n_out if fm else n_features)
        fm = compose(fm, ic) if fm else ic
    return fm


def _wrap(fm, make):
    return map_features(fm, make(fm.n_out)) if fm else make(None)


def bayesian_mle_forgetting(n_features: int, *, forgetting_factor=0.05, k=MLE_K, burn_in=50, level=0.95,
                            mapped=False, intercept=False, dtype=None) -> Learner:
    """BayesianMLEForgetting: RLS from ``kI`` with the thesis's forgetting factor and ad-hoc bounds.

    Args:
      n_features: ``d``.
      forgetting_factor: the thesis's ``α_ff ∈ [0, 1)`` (eq. 5.6; FF0.05 = 0.05).
      k: initial ``XXᵀ = kI`` scale (thesis: 10⁴), i.e. prior precision ``1/k``.
      burn_in, level: see :func:`adhoc_bounds`.
      mapped, intercept: feature options (module doc).
    """
    lam, b = forgetting_from_thesis(forgetting_factor, 1.0)
    fm = _feature_map(n_features, mapped, intercept)
    return _wrap(fm, lambda m: adhoc_bounds(
        bayes_linreg(m or n_features, alpha=1.0 / k, beta=b, forgetting=lam, dtype=dtype), burn_in=burn_in, level=level))


def bayesian_map_forgetting(n_features: int, *, forgetting_factor=0.05, alpha=1.0, beta=1.0, burn_in=50, level=0.95,
                            mapped=False, intercept=False, dtype=None) -> Learner:
    """BayesianMAPForgetting: the conjugate model from the prior, thesis forgetting, ad-hoc bounds."""
    lam, b = forgetting_from_thesis(forgetting_factor, beta)
    fm = _feature_map(n_features, mapped, intercept)
    return _wrap(fm, lambda m: adhoc_bounds(
        bayes_linreg(m or n_features, alpha=alpha, beta=b, forgetting=lam, dtype=dtype), burn_in=burn_in, level=level))


def bayesian_mle_windowed(n_features: int, window: int, *, k=MLE_K, mapped=False, intercept=False, capacity=None,
                          dtype=None) -> Learner:
    """BayesianMLEWindowed: windowed RLS from ``kI`` with asymptotic bounds (eq. 4.17).

    Nothing of the model is tuned (thesis 5.4.1.5): ``tune`` only re-standardises
    the features on the window and rebuilds the factor, keeping the prior
    ``kI`` on the raw weights and ``beta = 1`` (``tune_evidence=False`` of
    :func:`~onlinejax.linear.windowed_bayes_linreg`). Without it the factor of
    the raw mapped features (inputs of scale 50–100: features spanning 1–10⁴)
    was silently wrong in float32 on the thesis grid: NaN or SMSE up to 1e15 on
    69 of the 5 × 576 mapped (stream, window) runs, none in float64.

    ``capacity`` (static, ``>= window``) sizes the ring buffer; the window
    length is ``init(window=)`` (default ``window``), so windows up to the
    capacity share one compiled program (see
    :func:`~onlinejax.linear.windowed_bayes_linreg`).
    """
    check_in_range(k, "k", 0.0, float("inf"), hi_open=True)
    fm = _feature_map(n_features, mapped, intercept)

    def make(m):
        return windowed_bayes_linreg(m or n_features, window, alpha=1.0 / k, beta=1.0, bounds="asymptotic",
                                     tune_evidence=False, capacity=capacity, dtype=dtype)

    return _wrap(fm, make)


def bayesian_map_windowed(n_features: int, window: int, *, alpha=1.0, beta=1.0, mapped=False, intercept=False,
                          capacity=None, dtype=None) -> Learner:
    """BayesianMAPWindowed: windowed conjugate model, asymptotic bounds, evidence ``tune``.

    ``capacity``: as in :func:`bayesian_mle_windowed`.
    """
    fm = _feature_map(n_features, mapped, intercept)
    return _wrap(fm, lambda m: windowed_bayes_linreg(
        m or n_features, window, alpha=alpha, beta=beta, bounds="asymptotic", capacity=capacity, dtype=dtype))

"""Online linear regression by stochastic gradient descent with any optax optimizer.

The blogs' ``SGDRegressor`` baseline, returning a :class:`Prediction` too: the
predictive variance is either fixed or a running (exponentially weighted)
mean of the squared residuals seen *before* each update.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ..base import Learner, Prediction, check_in_range, check_positive, default_float_dtype, keep_if, make_learner
from .features import intercept_features, map_features

Array = jax.Array

__all__ = ["SGDState", "sgd_linreg"]


class SGDState(NamedTuple):
    """Attributes: ``weights [d]``, ``opt_state`` (optax), ``resid_var []``, ``decay []``, counters."""

    weights: Array
    opt_state: Any
    resid_var: Array
    decay: Array
    n_seen: Array
    n_skipped: Array


def sgd_linreg(n_features: int, optimizer: optax.GradientTransformation | None = None, *, variance: str = "running",
               noise_var=1.0, decay=0.99, intercept: bool = True, dtype=None) -> Learner:
    """Linear regression trained online by an optax optimizer on the squared loss.

    Args:
      n_features: ``d``.
      optimizer: default ``optax.sgd(0.01)``; its hyperparameters are closed
        over (use ``optax.inject_hyperparams`` to make them state arrays).
      variance: ``"running"`` (EW mean of squared pre-update residuals, started
        at ``noise_var``) or ``"fixed"`` (always ``noise_var``).
      noise_var: initial / fixed predictive variance, > 0.
      decay: EW decay of the running residual variance, in (0, 1).
      intercept: append a constant feature (default True, like scikit-learn).
      dtype: default floating dtype.
    Note:
      A mini-batch takes one step on the batch's mean gradient (standard
      mini-batch SGD), which is *not* the same as ``b`` sequential steps.
    """
    d = int(n_features)
    if d < 1:
        raise ValueError(f"n_features: must be >= 1, got {n_features!r}")
    if variance not in ("running", "fixed"):
        raise ValueError(f"variance: must be 'running' or 'fixed', got {variance!r}")
    check_positive(noise_var, "noise_var")
    check_in_range(decay, "decay", 0.0, 1.0, hi_open=True)
    opt = optimizer or optax.sgd(0.01)
    dm = d + int(bool(intercept))
    running = variance == "running"

    def _init(noise_var=noise_var, decay=decay, dtype=dtype):
        dt = dtype or default_float_dtype()
        w = jnp.zeros((dm,), dt)
        return SGDState(w, opt.init(w), jnp.asarray(noise_var, dt), jnp.asarray(decay, dt),
                        jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))

    def _step(s, X, Y):
        resid = Y - X @ s.weights
        grads = -(X.T @ resid) / X.shape[0]
        upd, opt_state = opt.update(grads, s.opt_state, s.weights)
        w = optax.apply_updates(s.weights, upd)
        rv = s.decay * s.resid_var + (1 - s.decay) * jnp.mean(resid * resid) if running else s.resid_var
        return s._replace(weights=w, opt_state=opt_state, resid_var=rv)

    def learn_batch(s, X, Y):
        ok = jnp.all(jnp.isfinite(X)) & jnp.all(jnp.isfinite(Y))
        new = _step(s, jnp.where(ok, X, 0.0), jnp.where(ok, Y, 0.0))._replace(n_seen=s.n_seen + X.shape[0] * ok)
        return keep_if(ok, new, s._replace(n_skipped=s.n_skipped + X.shape[0]))

    def learn_one(s, x, y):
        return learn_batch(s, x[None], y[None])

    def predict_one(s, x):
        return Prediction(x @ s.weights, s.resid_var)

    def predict_batch(s, X):
        return Prediction(X @ s.weights, jnp.broadcast_to(s.resid_var, X.shape[:1]))

    lrn = make_learner(init=_init, learn_one=learn_one, learn_batch=learn_batch, predict_one=predict_one,
                       predict_batch=predict_batch, n_features=dm)
    return map_features(intercept_features(d), lrn) if intercept else lrn

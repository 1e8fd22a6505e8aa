"""Online linear regression by stochastic gradient descent with any optax optimizer.

The blogs' ``SGDRegressor`` baseline, returning a :class:`Prediction` too: the
predictive variance is either fixed or a running (exponentially weighted)
mean of the squared residuals seen *before* each update.

Per step, on a mini-batch ``(X [b, d], Y [b])`` (one item: ``b = 1``)::

    r = Y - X w,   g = ∇_w ½ mean(r²) = -Xᵀr / b,   w ← w + optimizer.update(g)
    v ← δ v + (1 - δ) mean(r²)        (variance="running"; "fixed": v stays)

and the predictive is ``N(xᵀw, v)``.

The learner in one file
-----------------------
* :class:`SGDState`: the state; :func:`init`: zero weights, ``v = noise_var``;
* :func:`learn_one` / :func:`learn_batch`: one optimizer step;
* :func:`predict_one` / :func:`predict_batch`: ``N(xᵀw, v)``;
* :func:`sgd_linreg`: validates the static options, binds them and returns a
  :class:`~onlinejax.Learner` whose boundary skips a non-finite item
  (``make_learner(skip_nonfinite=True)``); :func:`learn_batch` skips a batch
  with any non-finite value itself.
"""
from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ...core.checks import check_record
from ...core.base import (Learner, LearnerCores, Prediction, check_in_range, check_int, check_positive, default_float_dtype,
                          describe_factory, keep_if, learnable, make_learner)
from .features import intercept_features, map_features

Array = jax.Array

__all__ = ["SGDState", "sgd_linreg", "init", "learn_one", "learn_batch", "predict_one", "predict_batch", "VARIANCES",
           "SGDOptions"]

VARIANCES = ("running", "fixed")


class SGDOptions(NamedTuple):
    """The static switches of :func:`sgd_linreg`: an immutable, hashable record (equal records, one learner).

    Attributes:
      variance: the predictive variance ``v``: ``"running"`` (default; the exponentially weighted mean of
        the squared pre-update residuals, started at ``noise_var``) or ``"fixed"`` (always ``noise_var``).
    """

    variance: str = "running"


class SGDState(NamedTuple):
    """State of :func:`sgd_linreg` (``d`` weights).

    Attributes:
      weights: ``[d]`` the weights ``w``.
      opt_state: the optax optimizer's state.
      resid_var: ``[]`` the predictive variance ``v``.
      decay: ``[]`` ``δ`` of the running residual variance.
      n_seen, n_skipped: ``[]`` int32 counters.
    """

    weights: Array
    opt_state: Any
    resid_var: Array
    decay: Array
    n_seen: Array
    n_skipped: Array


def init(n_features: int, optimizer: optax.GradientTransformation, noise_var=1.0, decay=0.99, dtype=None) -> SGDState:
    """Zero weights, the optimizer's initial state and ``v = noise_var``.

    Args:
      n_features: ``d`` (static; the intercept column included).
      optimizer: the optax transformation the learner steps with.
      noise_var: ``[]`` initial / fixed predictive variance.
      decay: ``[]`` ``δ`` of the running residual variance.
      dtype: floating dtype; default float32 (float64 when x64 is enabled).
    """
    dt = dtype or default_float_dtype()
    w = jnp.zeros((n_features,), dt)
    return SGDState(w, optimizer.init(w), jnp.asarray(noise_var, dt), jnp.asarray(decay, dt),
                    jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def _step(s: SGDState, X: Array, Y: Array, optimizer, variance: str) -> SGDState:
    """One optimizer step on the mean squared-loss gradient of ``(X [b, d], Y [b])`` (module doc)."""
    resid = Y - X @ s.weights
    grads = -(X.T @ resid) / X.shape[0]
    upd, opt_state = optimizer.update(grads, s.opt_state, s.weights)
    w = optax.apply_updates(s.weights, upd)
    rv = s.decay * s.resid_var + (1 - s.decay) * jnp.mean(resid * resid) if variance == "running" else s.resid_var
    return s._replace(weights=w, opt_state=opt_state, resid_var=rv)


def learn_one(state: SGDState, x: Array, y: Array, *, optimizer: optax.GradientTransformation,
              variance: str = "running") -> SGDState:
    """One optimizer step on one finite item (``x: [d]``, ``y: []``); the residual is scored before the step.

    ``optimizer``, ``variance`` (static): as in :func:`sgd_linreg`. The
    Learner's boundary skips non-finite items before this runs.
    """
    return _step(state, x[None], y[None], optimizer, variance)._replace(n_seen=state.n_seen + 1)


def learn_batch(state: SGDState, X: Array, Y: Array, *, optimizer: optax.GradientTransformation,
                variance: str = "running") -> SGDState:
    """One optimizer step on a mini-batch's mean gradient (``X: [b, d]``, ``Y: [b]``).

    Standard mini-batch SGD, *not* ``b`` sequential steps. A batch with any
    non-finite value is skipped whole (``n_skipped += b``): one step cannot
    leave part of a batch out without changing the step. An empty batch
    (``b = 0``, whose mean gradient would be ``0/0``) leaves the state as it is.
    """
    if X.shape[0] == 0:  # static: no step at all
        return state
    ok = jnp.all(learnable(X, Y))
    new = _step(state, jnp.where(ok, X, 0.0), jnp.where(ok, Y, 0.0), optimizer, variance)
    new = new._replace(n_seen=state.n_seen + X.shape[0] * ok)
    return keep_if(ok, new, state._replace(n_skipped=state.n_skipped + X.shape[0]))


def predict_one(state: SGDState, x: Array) -> Prediction:
    """``N(xᵀw, v)`` for ``x: [d]``."""
    return Prediction(x @ state.weights, state.resid_var)


def predict_batch(state: SGDState, X: Array) -> Prediction:
    """``N(Xw, v)`` for ``X: [b, d]`` (``mean``, ``var``: ``[b]``)."""
    return Prediction(X @ state.weights, jnp.broadcast_to(state.resid_var, X.shape[:1]))


@describe_factory
def sgd_linreg(n_features: int, optimizer: optax.GradientTransformation | None = None, *, noise_var=1.0, decay=0.99,
               intercept: bool = True, options: SGDOptions = SGDOptions(), dtype=None) -> Learner:
    """Linear regression trained online by an optax optimizer on the squared loss.

    Args:
      n_features: ``d``.
      optimizer: default ``optax.sgd(0.01)``; its hyperparameters are closed
        over (use ``optax.inject_hyperparams`` to make them state arrays).
      noise_var: initial / fixed predictive variance, > 0.
      decay: EW decay of the running residual variance, in (0, 1).
      intercept: append a constant feature (default True, like scikit-learn).
      options: :class:`SGDOptions` (static): ``variance``, running or fixed.
      dtype: default floating dtype.
    Returns:
      A :class:`~onlinejax.Learner` over :func:`init`, :func:`learn_one`,
      :func:`learn_batch`, :func:`predict_one` and :func:`predict_batch`;
      ``init(noise_var=, decay=, dtype=)``.
    Note:
      A mini-batch takes one step on the batch's mean gradient (standard
      mini-batch SGD), which is *not* the same as ``b`` sequential steps.
    Raises:
      ValueError: naming the argument or the record's field (``options.variance: ...``).
      TypeError: ``options`` not an :class:`SGDOptions`.
    """
    d = check_int(n_features, "n_features", 1)
    check_record(options, SGDOptions, "options")
    variance = options.variance
    if variance not in VARIANCES:
        raise ValueError(f"options.variance: must be 'running' or 'fixed', got {variance!r}")
    check_positive(noise_var, "noise_var")
    check_in_range(decay, "decay", 0.0, 1.0, hi_open=True)
    opt = optimizer or optax.sgd(0.01)
    dm = d + int(bool(intercept))

    def _init(noise_var=noise_var, decay=decay, dtype=dtype):
        return init(dm, opt, noise_var, decay, dtype)

    lrn = make_learner(init=_init, learn_one=partial(learn_one, optimizer=opt, variance=variance),
                       predict_one=predict_one, n_features=dm,
                       cores=LearnerCores(learn_batch=partial(learn_batch, optimizer=opt, variance=variance),
                                          predict_batch=predict_batch),
                       skip_nonfinite=True)
    return map_features(intercept_features(d), lrn) if intercept else lrn

"""Baselines as learners: climatology (the targets' Student-t predictive) and train-once batch learners.

:func:`climatology` ignores the inputs and predicts every target from the
running mean and variance of the targets seen so far: the posterior
predictive of a Gaussian with unknown mean and variance, a Student-t. It is the yardstick of
the log-score skill (a learner's mean log predictive density minus
climatology's, :func:`onlinejax.evaluation.metrics.log_score_skill`): a
learner with negative skill would have done better by forgetting its inputs.

Batch baselines: train once on the first ``n_train`` items, then predict only.

The thesis's control group (6.2.1: BayesianMLEBatch, GPRegressionBatch,
KernelRegressionBatch with training sets of 32, 64 and 128 items) fits a model
on a training set and never updates it. :func:`train_once` turns any learner
into that baseline inside the same streaming protocol, so the grid runner
evaluates batch and online learners with one code path: the wrapped learner
learns the first ``n_train`` items, is tuned once (when it has a ``tune``)
and is frozen afterwards. Score it only from item ``n_train`` on (the grid
runner's ``score_from``), as the thesis tests batch learners on the items
after their training set.

Each baseline's state, ``init``, ``learn`` and ``predict`` are module-level
functions (``climatology_*``, ``train_once_*``, ``recorded_*``); the
factories bind them into learners.
"""
from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..core.base import (Learner, Prediction, StudentTPrediction, check_int, check_positive, default_float_dtype,
                         describe_factory, keep_if, make_learner, welford_update)
from ..core.batching import cond_if_any

__all__ = [
    "TrainOnceState",
    "train_once",
    "train_once_init",
    "train_once_learn",
    "train_once_predict",
    "ClimatologyState",
    "climatology",
    "climatology_init",
    "climatology_learn",
    "climatology_predict",
]


class ClimatologyState(NamedTuple):
    """State of :func:`climatology`.

    Attributes:
      n: ``[]`` number of targets seen (floating, for Welford's update; it
        saturates at :func:`~onlinejax.core.base.welford_update`'s ``n_max``,
        ``2¹⁸`` in float32, beyond which the statistics are exponentially
        weighted with that memory).
      mean: ``[]`` their mean ``ȳ``.
      var: ``[]`` their mean squared deviation from ``ȳ`` (the population
        variance, ``(n - 1)/n`` times the unbiased ``s²``).
      prior_var: ``[]`` the predictive variance before two targets were seen.
      n_skipped: ``[]`` int32 non-finite targets skipped.
    """

    n: jax.Array
    mean: jax.Array
    var: jax.Array
    prior_var: jax.Array
    n_skipped: jax.Array


def climatology_init(prior_var=1.0, dtype=None) -> ClimatologyState:
    """The state before any target: predicts ``N(0, prior_var)``."""
    check_positive(prior_var, "prior_var")
    dt = dtype or default_float_dtype()
    z = jnp.zeros((), dt)
    return ClimatologyState(z, z, z, jnp.asarray(prior_var, dt), jnp.zeros((), jnp.int32))


def climatology_learn(s: ClimatologyState, y: jax.Array) -> ClimatologyState:
    """Welford's update of the running mean and variance (:func:`~onlinejax.core.base.welford_update`); a non-finite ``y`` is skipped."""
    # not skip_nonfinite: the inputs are ignored (a non-finite x is harmless) and metrics call this on targets alone
    ok = jnp.isfinite(y)
    n, mean, var = welford_update(s.n, s.mean, s.var, jnp.where(ok, y, s.mean))
    return keep_if(ok, s._replace(n=n, mean=mean, var=var), s._replace(n_skipped=s.n_skipped + 1))


def climatology_predict(s: ClimatologyState) -> StudentTPrediction:
    """The next target's posterior predictive: ``ȳ + s·sqrt(1 + 1/n)·T_{n-1}`` after ``n >= 2`` targets.

    The exact posterior predictive of a Gaussian with unknown mean and
    variance under the noninformative prior ``p(μ, σ²) ∝ 1/σ²`` (Gelman et
    al. 2013, BDA3 §3.2, "Normal data with a noninformative prior"): a Student-t with
    ``ν = n - 1`` degrees of freedom, location ``ȳ`` and scale
    ``s·sqrt(1 + 1/n)``, ``s²`` the unbiased sample variance. Its tails keep
    a target far from the first few costing tens of nats, not the millions
    of a Gaussian fitted to two nearly equal targets. At ``n = 2`` it is a
    Cauchy (``ν = 1``: no mean, an infinite CRPS), at ``n = 3`` its variance
    is infinite (``ν = 2``); the log density and the interval are finite.

    Before two targets: ``N(ȳ, prior_var)`` (``ȳ = 0`` before the first), as
    a Student-t of ``ν = 1/ε`` degrees of freedom, which is that Gaussian to
    the dtype's resolution within a few scales of ``ȳ``, so that every item's
    prediction is the same pytree (a ``lax.scan`` needs one type). The scale
    is kept above ``ε|ȳ| + sqrt(tiny)`` (the dtype's resolution at the
    targets' scale), so constant targets never give a zero scale.

    Args:
      s: the state after the targets so far.
    Returns:
      A :class:`~onlinejax.core.base.StudentTPrediction` with ``[]`` leaves.
    """
    dt = s.mean.dtype
    fi = jnp.finfo(dt)
    ready = s.n >= 2.0
    n = jnp.where(ready, s.n, 2.0)  # a valid n in the branch not taken, so no 0/0 reaches a gradient
    # s²(1 + 1/n) with s² = var·n/(n - 1); kept above tiny so that no sqrt(0) reaches a gradient
    scale = jnp.sqrt(jnp.maximum(s.var * (n + 1.0) / (n - 1.0), fi.tiny))
    scale = jnp.maximum(scale, fi.eps * jnp.abs(s.mean) + jnp.sqrt(fi.tiny))
    return StudentTPrediction(s.mean, jnp.where(ready, scale, jnp.sqrt(s.prior_var)),
                              jnp.where(ready, n - 1.0, 1.0 / fi.eps).astype(dt))


@describe_factory
def climatology(n_features: int, *, prior_var=1.0, dtype=None) -> Learner:
    """Climatology: predict every target from the running mean and variance of the targets so far.

    The prediction is the Student-t posterior predictive of :func:`climatology_predict`.

    Args:
      n_features: ``d``; the inputs are checked and ignored.
      prior_var: predictive variance before two targets were seen (> 0).
      dtype: default floating dtype of the state.
    Returns:
      A learner with state :class:`ClimatologyState`; ``init(prior_var=, dtype=)``.

    Example::

        clim = climatology(3)
        state, pred = clim.step(clim.init(), [0.0, 1.0, 2.0], 5.0)   # ≈ N(0, 1), then learns 5
    """
    d = check_int(n_features, "n_features", 1)
    check_positive(prior_var, "prior_var")

    def _init(prior_var=prior_var, dtype=dtype):
        return climatology_init(prior_var, dtype)

    return make_learner(init=_init, learn_one=lambda s, x, y: climatology_learn(s, y),
                        predict_one=lambda s, x: climatology_predict(s), n_features=d)


class TrainOnceState(NamedTuple):
    """Attributes: ``inner`` (the wrapped learner's state), ``n_learned`` (``[]`` int32)."""

    inner: Any
    n_learned: jax.Array


def train_once_init(learner: Learner, /, **inner_kwargs) -> TrainOnceState:
    """``learner.init(**inner_kwargs)`` with nothing learned yet."""
    return TrainOnceState(learner.init(**inner_kwargs), jnp.zeros((), jnp.int32))


def _learn_item(learner: Learner, args):
    s, x, y = args
    return learner.learn(s, x, y), x, y


def train_once_learn(learner: Learner, n_train: int, tune: bool, s: TrainOnceState, x: jax.Array,
                     y: jax.Array) -> TrainOnceState:
    """Learn ``(x, y)`` while fewer than ``n_train`` items were learned; tune once after the ``n_train``-th.

    The thesis's batch baselines (6.2.1): fit on a training set, never update.
    Learning and the tune run through :func:`~onlinejax.core.batching.cond_if_any`,
    so under ``vmap`` they cost nothing once every stream has its training set.

    Args:
      learner: the inner learner; n_train: training-set size; tune: call
        ``learner.tune`` (when it has one) after the last training item (all static).
      s: :class:`TrainOnceState`; x: ``[d]``; y: ``[]``.
    """
    inner_tune = learner.tune if (tune and learner.tune is not None) else None
    # not skip_nonfinite: a non-finite item must not count as a training item, and the state has no n_skipped
    ok = (s.n_learned < n_train) & jnp.all(jnp.isfinite(x)) & jnp.isfinite(y)
    inner = cond_if_any(partial(_learn_item, learner))(ok, (s.inner, x, y))[0]
    n = s.n_learned + ok.astype(jnp.int32)
    if inner_tune is not None:
        inner = cond_if_any(inner_tune)(ok & (n == n_train), inner)
    return TrainOnceState(inner, n)


def train_once_predict(learner: Learner, s: TrainOnceState, x: jax.Array) -> Prediction:
    """The inner learner's prediction for ``x: [d]``."""
    return learner.predict(s.inner, x)


@describe_factory
def train_once(learner: Learner, n_train: int, *, tune: bool = True) -> Learner:
    """Wrap ``learner`` so that it learns only its first ``n_train`` items.

    Args:
      learner: any learner.
      n_train: training-set size (static, >= 1).
      tune: call ``learner.tune`` once, right after the ``n_train``-th item
        (under ``vmap`` the tune runs once for the batch, not per item).
    Returns:
      A learner with state :class:`TrainOnceState` (:func:`train_once_learn`);
      ``init(**kw)`` forwards to ``learner.init``.
    """
    n_train = check_int(n_train, "n_train", 1)
    return make_learner(init=partial(train_once_init, learner),
                        learn_one=partial(train_once_learn, learner, n_train, tune),
                        predict_one=partial(train_once_predict, learner), n_features=learner.n_features)


class RecordedState(NamedTuple):
    """State of :func:`recorded`: ``mean [n]``, ``var [n]`` and the position ``t`` (``[]`` int32)."""

    mean: jax.Array
    var: jax.Array
    t: jax.Array


def recorded_init(mean, var, dtype=None) -> RecordedState:
    """A recording of ``[n]`` predictive means and variances, at its first item."""
    dt = dtype or default_float_dtype()
    mean, var = jnp.asarray(mean, dt), jnp.asarray(var, dt)
    if mean.ndim != 1 or var.shape != mean.shape:
        raise ValueError(f"mean, var: expected two [n] arrays, got shapes {mean.shape} and {var.shape}")
    return RecordedState(mean, var, jnp.zeros((), jnp.int32))


def recorded_learn(s: RecordedState, x: jax.Array, y: jax.Array) -> RecordedState:
    """Move to the next item (the item itself is ignored)."""
    return s._replace(t=s.t + 1)


def recorded_predict(s: RecordedState, x: jax.Array) -> Prediction:
    """``N(mean[t], var[t])`` (the last recorded item once the recording is exhausted)."""
    t = jnp.minimum(s.t, s.mean.shape[0] - 1)
    return Prediction(s.mean[t], s.var[t])


@describe_factory
def recorded(n_features: int = 1) -> Learner:
    """A learner that replays recorded predictions: item ``t`` is predicted as ``N(mean[t], var[t])``.

    ``init(mean=[n], var=[n])`` holds the recording; each ``learn`` moves to the
    next item (the inputs are ignored). Wrapping it replays a wrapper over a
    learner whose predictions were kept, e.g. a calibrator over a
    combination's replayed mixture (:func:`onlinejax.runner.replay_combination`),
    without running the learner again.
    """
    d = check_int(n_features, "n_features", 1)
    return make_learner(init=recorded_init, learn_one=recorded_learn, predict_one=recorded_predict, n_features=d)

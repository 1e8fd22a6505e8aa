"""Baselines as learners: climatology (the targets' running Gaussian) and train-once batch learners.

:func:`climatology` ignores the inputs and predicts every target from the
running mean and variance of the targets seen so far. It is the yardstick of
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
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .base import (Learner, Prediction, check_int, check_positive, default_float_dtype, keep_if, make_learner,
                   welford_update)
from .batching import cond_if_any

__all__ = ["TrainOnceState", "train_once", "ClimatologyState", "climatology", "climatology_init",
           "climatology_learn", "climatology_predict", "RecordedState", "recorded"]


class ClimatologyState(NamedTuple):
    """State of :func:`climatology`.

    Attributes:
      n: ``[]`` number of targets seen (floating, for Welford's update).
      mean: ``[]`` their mean.
      m2: ``[]`` sum of squared deviations from ``mean``.
      prior_var: ``[]`` the predictive variance before two targets were seen.
      n_skipped: ``[]`` int32 non-finite targets skipped.
    """

    n: jax.Array
    mean: jax.Array
    m2: jax.Array
    prior_var: jax.Array
    n_skipped: jax.Array


def climatology_init(prior_var=1.0, dtype=None) -> ClimatologyState:
    """The state before any target: predicts ``N(0, prior_var)``."""
    check_positive(prior_var, "prior_var")
    dt = dtype or default_float_dtype()
    z = jnp.zeros((), dt)
    return ClimatologyState(z, z, z, jnp.asarray(prior_var, dt), jnp.zeros((), jnp.int32))


def climatology_learn(s: ClimatologyState, y: jax.Array) -> ClimatologyState:
    """Welford's update of the running mean and squared deviations (Welford 1962); a non-finite ``y`` is skipped."""
    ok = jnp.isfinite(y)
    n, mean, m2 = welford_update(s.n, s.mean, s.m2, jnp.where(ok, y, s.mean))
    return keep_if(ok, s._replace(n=n, mean=mean, m2=m2), s._replace(n_skipped=s.n_skipped + 1))


def climatology_predict(s: ClimatologyState) -> Prediction:
    """The next target's predictive ``N(ȳ, s²(1 + 1/n))`` after ``n >= 2`` targets.

    ``s²`` is the unbiased sample variance; ``(1 + 1/n)`` adds the mean's own
    uncertainty (the plug-in form of the Student-t predictive of a Gaussian
    with unknown mean and variance). Before two targets: ``N(ȳ, prior_var)``
    (``ȳ = 0`` before the first). The variance is kept above ``eps·ȳ²`` (the
    dtype's resolution at the targets' scale), so constant targets do not
    give a zero variance.
    """
    dt = s.mean.dtype
    var = jnp.where(s.n >= 2, s.m2 / jnp.maximum(s.n - 1.0, 1.0) * (1.0 + 1.0 / jnp.maximum(s.n, 1.0)), s.prior_var)
    floor = jnp.finfo(dt).eps * s.mean * s.mean + jnp.sqrt(jnp.finfo(dt).tiny)
    return Prediction(s.mean, jnp.maximum(var, floor))


def climatology(n_features: int, *, prior_var=1.0, dtype=None) -> Learner:
    """Climatology: predict every target from the running mean and variance of the targets so far.

    Args:
      n_features: ``d``; the inputs are checked and ignored.
      prior_var: predictive variance before two targets were seen (> 0).
      dtype: default floating dtype of the state.
    Returns:
      A learner with state :class:`ClimatologyState`; ``init(prior_var=, dtype=)``.

    Example::

        clim = climatology(3)
        state, pred = clim.step(clim.init(), [0.0, 1.0, 2.0], 5.0)   # N(0, 1), then learns 5
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


def train_once(learner: Learner, n_train: int, *, tune: bool = True) -> Learner:
    """Wrap ``learner`` so that it learns only its first ``n_train`` items.

    Args:
      learner: any learner.
      n_train: training-set size (static, >= 1).
      tune: call ``learner.tune`` once, right after the ``n_train``-th item
        (under ``vmap`` the tune runs once for the batch, not per item).
    Returns:
      A learner with state :class:`TrainOnceState`; ``init(**kw)`` forwards
      to ``learner.init``.
    """
    n_train = check_int(n_train, "n_train", 1)
    inner_tune = learner.tune if (tune and learner.tune is not None) else None
    tune_lazily = cond_if_any(inner_tune) if inner_tune is not None else None
    # lazy under vmap: once every stream has its training set, learning costs nothing
    learn_lazily = cond_if_any(lambda a: (learner.learn(*a), a[1], a[2]))

    def _init(**kw):
        return TrainOnceState(learner.init(**kw), jnp.zeros((), jnp.int32))

    def learn_one(s: TrainOnceState, x, y):
        # non-finite items are skipped (as every learner here does) and do not count
        ok = (s.n_learned < n_train) & jnp.all(jnp.isfinite(x)) & jnp.isfinite(y)
        inner = learn_lazily(ok, (s.inner, x, y))[0]
        n = s.n_learned + ok.astype(jnp.int32)
        if tune_lazily is not None:
            inner = tune_lazily(ok & (n == n_train), inner)
        return TrainOnceState(inner, n)

    def predict_one(s: TrainOnceState, x):
        return learner.predict(s.inner, x)

    return make_learner(init=_init, learn_one=learn_one, predict_one=predict_one, n_features=learner.n_features)


class RecordedState(NamedTuple):
    """State of :func:`recorded`: ``mean [n]``, ``var [n]`` and the position ``t`` (``[]`` int32)."""

    mean: jax.Array
    var: jax.Array
    t: jax.Array


def recorded(n_features: int = 1) -> Learner:
    """A learner that replays recorded predictions: item ``t`` is predicted as ``N(mean[t], var[t])``.

    ``init(mean=[n], var=[n])`` holds the recording; each ``learn`` moves to the
    next item (the inputs are ignored). Wrapping it replays a wrapper over a
    learner whose predictions were kept, e.g. a calibrator over a
    combination's replayed mixture (:func:`onlinejax.evaluation.replay_combination`),
    without running the learner again.
    """
    d = check_int(n_features, "n_features", 1)

    def _init(mean, var, dtype=None):
        dt = dtype or default_float_dtype()
        mean, var = jnp.asarray(mean, dt), jnp.asarray(var, dt)
        if mean.ndim != 1 or var.shape != mean.shape:
            raise ValueError(f"mean, var: expected two [n] arrays, got shapes {mean.shape} and {var.shape}")
        return RecordedState(mean, var, jnp.zeros((), jnp.int32))

    def predict_one(s: RecordedState, x):
        t = jnp.minimum(s.t, s.mean.shape[0] - 1)
        return Prediction(s.mean[t], s.var[t])

    return make_learner(init=_init, learn_one=lambda s, x, y: s._replace(t=s.t + 1), predict_one=predict_one,
                        n_features=d)

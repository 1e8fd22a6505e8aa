"""Batch baselines as learners: train once on the first ``n_train`` items, then predict only.

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

from .base import Learner, check_int, make_learner
from .batching import cond_if_any

__all__ = ["TrainOnceState", "train_once"]


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

"""A scikit-learn estimator around any onlinejax learner (``pip install scikit-learn``).

:class:`OnlineRegressor` has ``fit`` (forget, then learn the rows in order), ``partial_fit``
(learn more rows), ``predict(X, return_std=False)`` (the predictive mean, and with
``return_std=True`` the predictive standard deviation, noise included, like
``GaussianProcessRegressor``) and ``predict_interval``. It round-trips through
``sklearn.base.clone`` and ``pickle`` (tested): the learner is rebuilt from its spec and the state
is a pytree of arrays.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..base import normal_quantile
from ._core import Engine

__all__ = ["OnlineRegressor"]


class OnlineRegressor(RegressorMixin, BaseEstimator):
    """Any onlinejax learner as a scikit-learn regressor that also learns incrementally.

    Args:
      learner: a function of onlinejax (``"bayes_linreg"``, ``"windowed_bayes_linreg"``,
        ``"gp_window"``, ``"kernel_regression"``, ...), a configuration registered by
        :mod:`onlinejax.zoo`, or a picklable ``factory(n_features, **learner_params) -> Learner``.
      learner_params: keyword arguments of the factory after ``n_features``.
      init_params: keyword arguments of ``learner.init`` (``alpha``, ``beta``, ...).
      tune_every: call ``learner.tune`` after every this many learned rows (0: never).

    Attributes (after ``fit`` / ``partial_fit``):
      n_features_in_: ``d``.
      state_: the learner's state pytree.
      n_seen_: rows learned since the last ``fit``.

    Example::

        model = OnlineRegressor("windowed_bayes_linreg", {"window": 64}).fit(X[:500], y[:500])
        for Xb, yb in batches:
            mean, std = model.predict(Xb, return_std=True)   # [b], [b]
            model.partial_fit(Xb, yb)
    """

    def __init__(self, learner="calibrated_bayes_linreg", learner_params=None, init_params=None, tune_every=None):
        self.learner = learner
        self.learner_params = learner_params
        self.init_params = init_params
        self.tune_every = tune_every

    def _new_engine(self):
        return Engine(self.learner, self.learner_params, self.init_params, None, self.tune_every)

    @staticmethod
    def _xy(X, y):
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X: expected a 2-d array [n_samples, n_features], got shape {X.shape}")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y: expected shape ({X.shape[0]},), got {y.shape}")
        return X, y

    def fit(self, X, y):
        """Forget everything, then learn the rows of ``X: [n, d]``, ``y: [n]`` in order."""
        self._engine = self._new_engine()
        return self.partial_fit(X, y)

    def partial_fit(self, X, y):
        """Learn the rows of ``X: [n, d]``, ``y: [n]`` in order, after what was learned before."""
        X, y = self._xy(X, y)
        if not hasattr(self, "_engine"):
            self._engine = self._new_engine()
        Xc = self._engine.array(X)
        if len(y):
            self._engine.learn(Xc, y)
        self.n_features_in_ = Xc.shape[1]
        self.state_ = self._engine.state
        self.n_seen_ = self._engine.n_learned
        return self

    def predict(self, X, return_std: bool = False):
        """Predictive mean ``[n]`` (and standard deviation ``[n]`` with ``return_std=True``)."""
        check_is_fitted(self, "state_")
        X = self._engine.array(X)
        p = self._engine.predict(X)
        mean = np.asarray(p.mean, np.float64).reshape(-1)
        if return_std:
            return mean, np.sqrt(np.asarray(p.var, np.float64)).reshape(-1)
        return mean

    def predict_interval(self, X, level: float = 0.95):
        """Central ``level`` interval of the predictive distribution: ``(lower [n], upper [n])``.

        Gaussian learners give ``mean ± z·std``; the calibrated default learner's Student-t gives
        its own quantiles (at ``level = 0.95`` the interval its calibration holds).
        """
        normal_quantile(level)  # ValueError naming level
        check_is_fitted(self, "state_")
        p = self._engine.predict(self._engine.array(X))
        lo, hi = p.interval(level)
        return np.asarray(lo, np.float64).reshape(-1), np.asarray(hi, np.float64).reshape(-1)

    def __sklearn_is_fitted__(self):
        return hasattr(self, "state_")

"""A scikit-learn estimator around any onlinejax learner (``pip install scikit-learn``).

:class:`OnlineRegressor` has ``fit`` (forget, then learn the rows in order), ``partial_fit``
(learn more rows), ``predict(X, return_std=False)`` (the predictive mean, and with
``return_std=True`` the predictive standard deviation, noise included, like
``GaussianProcessRegressor``) and ``predict_interval``. It passes scikit-learn's
``check_estimator`` (tested), which means in particular:

- Inputs are validated by scikit-learn's own ``validate_data``, so the errors are scikit-learn's:
  NaN, infinite, complex or empty data raise ``ValueError``; sparse input raises the standard
  ``TypeError`` (densify it first); a 2-d ``y`` of one column is raveled with a
  ``DataConversionWarning``.
- ``fit`` records ``n_features_in_`` and, for a pandas ``DataFrame``, ``feature_names_in_``;
  ``predict``, ``predict_interval`` and later ``partial_fit`` calls raise scikit-learn's
  ``ValueError`` on another number of features or on renamed, missing or reordered columns.
- The nested hyperparameters are reachable the usual way: ``get_params(deep=True)`` lists
  ``learner_params__<k>`` and ``init_params__<k>``, and ``set_params(init_params__alpha=0.1)``
  works (also when the dict is ``None``), so ``GridSearchCV(pipe,
  {"onlineregressor__init_params__alpha": [...]})`` searches them.
- ``predict`` runs in fixed blocks of :data:`PREDICT_BLOCK` rows (the last one padded), so it
  compiles once whatever the number of rows, and a row's prediction does not depend on the rows
  predicted with it (bit for bit, also in float32).

A ``Pipeline`` forwards ``predict(X, return_std=True)`` to its last step, but not other methods:
the module functions :func:`predict_interval` and :func:`partial_fit` (which keeps the fitted
transformers) take an ``OnlineRegressor`` or a ``Pipeline`` ending in one. :func:`log_score` and
:func:`neg_crps` are scikit-learn scorers of the predictive distribution (``GridSearchCV(...,
scoring=log_score)``): unlike a point score they can choose a noise level. The estimator round-trips through ``sklearn.base.clone`` and ``pickle`` (tested):
the learner is rebuilt from its spec and the state is a pytree of arrays.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted, validate_data

from ..core.base import normal_quantile
from ._core import Engine

__all__ = [
    "OnlineRegressor",
    "predict_interval",
    "partial_fit",
    "log_score",
    "neg_crps",
]

#: Rows per compiled ``predict`` call; the last block is padded with zero rows.
PREDICT_BLOCK = 256

_DICT_PARAMS = ("learner_params", "init_params")


class OnlineRegressor(RegressorMixin, BaseEstimator):
    """Any onlinejax learner as a scikit-learn regressor that also learns incrementally.

    Args:
      learner: a function of onlinejax (``"bayes_linreg"``, ``"windowed_bayes_linreg"``,
        ``"gp_window"``, ``"kernel_regression"``, ...), a configuration registered by
        :mod:`onlinejax.zoo`, or a picklable ``factory(n_features, **learner_params) -> Learner``.
      learner_params: keyword arguments of the factory after ``n_features``; each is also the
        parameter ``learner_params__<k>`` of ``get_params`` / ``set_params``.
      init_params: keyword arguments of ``learner.init`` (``alpha``, ``beta``, ...); each is also
        the parameter ``init_params__<k>``.
      tune_interval: call ``learner.tune`` after every this many learned rows (0: never; ``None``:
        every 50 rows for the default learner, never for others).

    Attributes:
      n_features_in_: ``d`` (this and the others after ``fit`` / ``partial_fit``).
      feature_names_in_: ``[d]`` the column names, when ``X`` was a ``DataFrame`` with string names.
      state_: the learner's state pytree.
      n_seen_: rows learned since the last ``fit``.

    Example::

        model = OnlineRegressor("windowed_bayes_linreg", {"window": 64}).fit(X[:500], y[:500])
        for Xb, yb in batches:
            mean, std = model.predict(Xb, return_std=True)   # [b], [b]
            model.partial_fit(Xb, yb)
    """

    def __init__(self, learner="calibrated_bayes_linreg", learner_params=None, init_params=None, tune_interval=None):
        self.learner = learner
        self.learner_params = learner_params
        self.init_params = init_params
        self.tune_interval = tune_interval

    # -- parameters: the entries of the two dicts are nested parameters ------------------------
    def get_params(self, deep: bool = True) -> dict:
        """The constructor's parameters; with ``deep``, also ``learner_params__<k>`` and ``init_params__<k>``."""
        out = super().get_params(deep=deep)
        if deep:
            for name in _DICT_PARAMS:
                value = getattr(self, name)
                for k, v in (value.items() if isinstance(value, Mapping) else ()):
                    out[f"{name}__{k}"] = v
        return out

    def set_params(self, **params) -> "OnlineRegressor":
        """Set parameters; ``init_params__alpha=0.1`` sets one entry of a (new copy of the) dict.

        Returns:
          ``self``.
        """
        nested = {key: params.pop(key) for key in list(params) if key.split("__", 1)[0] in _DICT_PARAMS and "__" in key}
        super().set_params(**params)  # whole dicts first, then their entries
        for key, value in nested.items():
            name, k = key.split("__", 1)
            current = getattr(self, name)
            if current is not None and not isinstance(current, Mapping):
                raise TypeError(f"{key}: {name} is a {type(current).__name__}, not a dict or None")
            setattr(self, name, {**(current or {}), k: value})
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False  # sparse X raises scikit-learn's TypeError (densify it first)
        tags.input_tags.allow_nan = False
        return tags

    # -- learning ----------------------------------------------------------------------------
    def _new_engine(self) -> Engine:
        return Engine(self.learner, self.learner_params, self.init_params, None, self.tune_interval)

    def fit(self, X, y) -> "OnlineRegressor":
        """Forget everything, then learn the rows of ``X: [n, d]``, ``y: [n]`` in order.

        Records ``n_features_in_`` (and ``feature_names_in_`` for a ``DataFrame``).

        Returns:
          ``self``.
        """
        X, y = validate_data(self, X, y, reset=True, dtype=np.float64, y_numeric=True)
        self._engine = self._new_engine()
        return self._learn(X, y)

    def partial_fit(self, X, y) -> "OnlineRegressor":
        """Learn the rows of ``X: [n, d]``, ``y: [n]`` in order, after what was learned before.

        The first call (on an unfitted model) acts like ``fit``; later ones need the features of
        the first (``ValueError`` otherwise).

        Returns:
          ``self``.
        """
        first = not hasattr(self, "_engine")
        X, y = validate_data(self, X, y, reset=first, dtype=np.float64, y_numeric=True)
        if first:
            self._engine = self._new_engine()
        return self._learn(X, y)

    def _learn(self, X: np.ndarray, y: np.ndarray) -> "OnlineRegressor":
        self._engine.learn(self._engine.array(X), y)
        self.n_seen_ = self._engine.n_learned
        return self

    @property
    def state_(self):
        """The learner's state pytree, unpacked when asked for (a grid search never asks: no program for it)."""
        engine = self.__dict__.get("_engine")
        if engine is None or engine.state_is_empty:
            raise AttributeError("state_: the model is not fitted yet")
        return engine.state

    # -- prediction --------------------------------------------------------------------------
    def _predictive(self, X):
        """The predictive distribution of ``X: [n, d]`` (fields ``[n]``), in blocks of :data:`PREDICT_BLOCK` rows."""
        check_is_fitted(self)
        X = self._engine.array(validate_data(self, X, reset=False, dtype=np.float64))
        n, b = X.shape[0], PREDICT_BLOCK
        padded = np.zeros((-(-n // b) * b, X.shape[1]), X.dtype)
        padded[:n] = X
        parts = [self._engine.predict(padded[i:i + b]) for i in range(0, len(padded), b)]
        return type(parts[0])(*(np.concatenate(f)[:n] for f in zip(*parts)))

    def predict(self, X, return_std: bool = False):
        """Predictive mean of ``X: [n, d]``.

        Args:
          X: ``[n, d]`` with the features of ``fit``.
          return_std: also return the predictive standard deviation (noise included).

        Returns:
          ``mean: [n]``, or ``(mean [n], std [n])`` with ``return_std=True``.
        """
        p = self._predictive(X)
        mean = np.asarray(p.mean, np.float64).reshape(-1)
        if return_std:
            return mean, np.sqrt(np.asarray(p.var, np.float64)).reshape(-1)
        return mean

    def predict_interval(self, X, level: float = 0.95):
        """Central ``level`` interval of the predictive distribution of ``X: [n, d]``.

        The learner's own interval (``prediction.interval(level)``): Gaussian learners give
        ``mean ± z·std``, the calibrated default learner's Student-t its own quantiles (at
        ``level = 0.95`` the interval its calibration holds), a combination's mixture its exact
        quantiles.

        Returns:
          ``(lower [n], upper [n])``.
        """
        normal_quantile(level)  # ValueError naming level
        lo, hi = self._predictive(X).interval(level)
        return np.asarray(lo, np.float64).reshape(-1), np.asarray(hi, np.float64).reshape(-1)

    def __sklearn_is_fitted__(self) -> bool:
        return "n_seen_" in self.__dict__

    def __setstate__(self, state):
        state.pop("state_", None)  # a copy kept by models pickled before state_ was read from the learner
        super().__setstate__(state)


def _final_step(estimator, X, what: str):
    """``(final estimator, X passed through the fitted transformers)`` of a ``Pipeline`` (or ``estimator``, ``X``)."""
    while isinstance(estimator, Pipeline):
        check_is_fitted(estimator)
        if len(estimator) > 1:
            X = estimator[:-1].transform(X)
        estimator = estimator[-1]
    if not hasattr(estimator, what):
        raise TypeError(f"estimator: {type(estimator).__name__} (the final step) has no {what}")
    return estimator, X


def predict_interval(estimator, X, level: float = 0.95):
    """``estimator.predict_interval(X, level)`` for an ``OnlineRegressor`` or a ``Pipeline`` ending in one.

    A ``Pipeline`` forwards ``predict`` (and its ``return_std=True``) but not ``predict_interval``:
    this passes ``X`` through the pipeline's transformers (nested pipelines too), then calls the
    final step's ``predict_interval``.

    Args:
      estimator: a fitted ``OnlineRegressor``, or a fitted ``Pipeline`` whose last step has
        ``predict_interval``.
      X: ``[n, ...]`` what the pipeline's first step takes.
      level: the central probability, in (0, 1).

    Returns:
      ``(lower [n], upper [n])``.
    """
    estimator, X = _final_step(estimator, X, "predict_interval")
    return estimator.predict_interval(X, level)


def partial_fit(estimator, X, y):
    """``estimator.partial_fit(X, y)`` for an ``OnlineRegressor`` or a ``Pipeline`` ending in one.

    A ``Pipeline`` has no ``partial_fit``. On an unfitted pipeline this fits the transformers
    on ``X`` (``fit_transform``, as ``Pipeline.fit`` does) and learns the rows; on a fitted one it
    keeps the transformers as they are (``transform`` only) and learns the new rows: the
    regressor keeps reading its inputs in the coordinates it learned them in (a scaler
    re-fitted on every batch would move them under it).

    Args:
      estimator: an ``OnlineRegressor``, or a ``Pipeline`` whose last step has ``partial_fit``.
      X: ``[n, ...]`` what the pipeline's first step takes; y: ``[n]``.

    Returns:
      ``estimator``.
    """
    if not isinstance(estimator, Pipeline):
        if not hasattr(estimator, "partial_fit"):
            raise TypeError(f"estimator: {type(estimator).__name__} has no partial_fit")
        return estimator.partial_fit(X, y)
    final = estimator[-1]
    while isinstance(final, Pipeline):
        final = final[-1]
    if not hasattr(final, "partial_fit"):
        raise TypeError(f"estimator: {type(final).__name__} (the final step) has no partial_fit")
    try:
        check_is_fitted(estimator)
    except NotFittedError:
        # the first batch: fit the transformers and learn it, as Pipeline.fit would
        Xt = estimator[:-1].fit_transform(X, y) if len(estimator) > 1 else X
        partial_fit(estimator[-1], Xt, y)
        return estimator
    Xt = estimator[:-1].transform(X) if len(estimator) > 1 else X
    partial_fit(estimator[-1], Xt, y)
    return estimator


def _scored_predictive(estimator, X, y):
    """The final ``OnlineRegressor``'s predictive distribution of ``X`` (fields ``[n]``) and ``y`` as ``[n]`` floats."""
    estimator, X = _final_step(estimator, X, "predict")
    if not isinstance(estimator, OnlineRegressor):
        raise TypeError(f"estimator: the final step must be an OnlineRegressor (a predictive distribution to score), "
                        f"got {type(estimator).__name__}")
    pred = estimator._predictive(X)
    y = np.asarray(y, np.float64).reshape(-1)
    if y.shape[0] != np.shape(pred.mean)[0]:
        raise ValueError(f"y: expected {np.shape(pred.mean)[0]} targets, got {y.shape[0]}")
    return pred, y


def log_score(estimator, X, y) -> float:
    """Mean log predictive density of ``y`` under the fitted estimator's own predictive distribution.

    A scikit-learn scorer (``scorer(estimator, X, y)``, higher is better): pass
    ``scoring=log_score`` to ``GridSearchCV`` or ``cross_val_score``. Unlike R² or the mean
    absolute error it can choose a noise level or a prior (a point score cannot tell an interval
    that is too wide from one that is right). ``estimator``: an ``OnlineRegressor`` or a
    ``Pipeline`` ending in one; ``X: [n, ...]``, ``y: [n]``.
    """
    pred, y = _scored_predictive(estimator, X, y)
    return float(np.mean(np.asarray(pred.log_prob(np.asarray(y, np.asarray(pred.mean).dtype)), np.float64)))


def neg_crps(estimator, X, y) -> float:
    """Minus the mean continuous ranked probability score of ``y`` under the estimator's own predictive.

    A scikit-learn scorer like :func:`log_score` (higher is better, in ``y``'s units; for a point
    forecast the CRPS is the absolute error), less sensitive than the log score to a few targets
    far out in the tails.
    """
    pred, y = _scored_predictive(estimator, X, y)
    return -float(np.mean(np.asarray(pred.crps(np.asarray(y, np.asarray(pred.mean).dtype)), np.float64)))

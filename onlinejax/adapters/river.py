"""A River regressor around any onlinejax learner (``pip install river``).

:class:`RiverRegressor` follows River's conventions (``learn_one(x: dict, y)``,
``predict_one(x, with_dist=False)``, ``learn_many`` / ``predict_many`` on data frames, ``clone``,
pickling) and passes ``river.checks.check_estimator`` (tested). Each call is one compiled JAX
call; for speed over whole streams use the functional core
(:func:`onlinejax.evaluation.progressive_validation`).

Features by name (:mod:`onlinejax.adapters._core`): a feature takes an input slot of the learner
the first time an item with it is *learned*; a rejected item (``ValueError``: non-finite target or
feature value, a value that is not a number) and a prediction take none. A missing feature
(absent, ``None``, NaN) is 0. Features that arrive after every slot is taken widen the learner
where that is exact (``bayes_linreg`` and the default ``calibrated_bayes_linreg`` without
forgetting: as River's linear models grow their weights); other learners ignore them, count them
in ``n_ignored_features`` and warn once, so reserve slots with ``n_features=K``.
"""
from __future__ import annotations

import numpy as np
from river import base, proba, utils

from ._core import Engine

__all__ = ["RiverRegressor"]


class RiverRegressor(base.MiniBatchRegressor):
    """Any onlinejax learner as a River regressor with a Gaussian predictive distribution.

    Args:
      learner: a function of onlinejax (``"bayes_linreg"``, ``"windowed_bayes_linreg"``,
        ``"gp_window"``, ``"kernel_regression"``, ...), a configuration registered by
        :mod:`onlinejax.zoo` (``"GPRegressionOLSMean_WS64"``), or a picklable callable
        ``factory(n_features, **learner_params) -> Learner``.
      learner_params: keyword arguments of the factory after ``n_features`` (e.g. ``{"window": 64}``).
      init_params: keyword arguments of ``learner.init`` (array hyperparameters such as ``alpha``, ``beta``).
      n_features: input slots. ``None``: as many as the first item learned has features. A feature
        takes a slot when the first item with it is learned (not when it is predicted on, not by an
        item that is rejected). A feature that appears once every slot is taken widens the learner
        (doubling the slots) if it can be widened exactly (``"bayes_linreg"``,
        ``"calibrated_bayes_linreg"``, without forgetting: the new weights start at their prior, as
        if the slots had been reserved); for every other learner it is ignored, with a warning, and
        counted in ``n_ignored_features``. A missing feature (absent, ``None`` or NaN) counts as 0;
        in ``predict_one`` a feature never learned counts at its prior weight where a slot is free
        or the learner widens, and is ignored otherwise.
      tune_every: re-estimate the learner's hyperparameters (``learner.tune``) after every this
        many learned items; 0 never does.

    Example::

        >>> from onlinejax.adapters.river import RiverRegressor
        >>> model = RiverRegressor("bayes_linreg", {"intercept": True}, {"alpha": 1e-2, "beta": 1.0})
        >>> model.learn_one({"a": 1.0, "b": 2.0}, 3.0)
        >>> dist = model.predict_one({"a": 1.0, "b": 2.0}, with_dist=True)
        >>> round(dist.mu, 3) == round(model.predict_one({"a": 1.0, "b": 2.0}), 3)
        True
    """

    def __init__(self, learner="calibrated_bayes_linreg", learner_params: dict | None = None,
                 init_params: dict | None = None, n_features: int | None = None, tune_every: int | None = None):
        self.learner = learner
        self.learner_params = learner_params
        self.init_params = init_params
        self.n_features = n_features
        self.tune_every = tune_every
        self._engine = Engine(learner, learner_params, init_params, n_features, tune_every, grow=True)

    @classmethod
    def _unit_test_params(cls):
        yield {"learner": "bayes_linreg", "learner_params": {"intercept": True}, "init_params": {"alpha": 1e-2}}
        yield {"learner": "windowed_bayes_linreg", "learner_params": {"window": 32}}

    @property
    def _multiclass(self):  # pragma: no cover - River asks this of classifiers only
        return False

    @property
    def state(self):
        """The learner's state pytree (``None`` before the first item)."""
        return self._engine.state

    @property
    def n_ignored_features(self) -> int:
        """How many feature names arrived after every input slot was taken and were ignored
        (always 0 for a learner that widens)."""
        return self._engine.slots.n_ignored

    # -- one item --------------------------------------------------------------------------
    def learn_one(self, x: dict, y: float) -> None:
        """Learn one item: ``x`` a dict of numbers (see ``n_features`` for new or missing keys).

        Raises ``ValueError`` (and changes nothing) for a non-finite ``y`` or feature value.
        """
        self._engine.learn_dict(x, float(y))

    def predict_one(self, x: dict, with_dist: bool = False):
        """The predictive mean, or with ``with_dist=True`` a ``river.proba.Gaussian`` (``mu``, ``sigma``;
        the observation noise included)."""
        p = self._engine.predict_dict(x)
        mean, var = float(p.mean), float(p.var)
        if not with_dist:
            return mean
        return proba.Gaussian._from_state(n=1, m=mean, var=var, ddof=0)

    # -- mini-batches (pandas, polars, ... through narwhals) -------------------------------------
    def _frame(self, X):
        frame = utils.dataframe.into_frame(X)
        return frame, frame.columns, utils.dataframe.to_numpy(frame)

    def learn_many(self, X, y) -> None:
        """Learn the rows of ``X`` in order (for the conjugate learners exactly as ``learn_one`` would);
        a batch with a non-finite target is rejected whole."""
        _, columns, values = self._frame(X)
        yv = np.asarray(utils.dataframe.into_series(y).to_numpy(), dtype=np.float64)
        if len(yv) != values.shape[0]:
            raise ValueError(f"y: {len(yv)} targets for {values.shape[0]} rows")
        if len(yv):
            self._engine.learn_frame(columns, values, yv)

    def _predict_frame(self, X):
        frame, columns, values = self._frame(X)
        if not values.shape[0]:
            return frame, np.zeros(0), np.zeros(0)
        p = self._engine.predict_frame(columns, values)
        return frame, np.asarray(p.mean, np.float64), np.asarray(p.var, np.float64)

    def predict_many(self, X):
        """Predictive means, a series with ``X``'s index."""
        frame, mean, _ = self._predict_frame(X)
        return utils.dataframe.to_native_series(mean, name=None, like=frame)

    def predict_many_dist(self, X):
        """Predictive means and standard deviations, as a data frame with columns ``mu``, ``sigma``."""
        frame, mean, var = self._predict_frame(X)
        import narwhals as nw

        out = nw.from_dict({"mu": mean, "sigma": np.sqrt(var)}, backend=nw.get_native_namespace(frame)).to_native()
        if (index := nw.maybe_get_index(frame)) is not None:
            out.index = index
        return out

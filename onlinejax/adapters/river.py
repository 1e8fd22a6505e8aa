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

import math

import numpy as np
from river import base, proba, stats, utils

from ._core import Engine

__all__ = ["RiverRegressor", "PredictiveDistribution"]

#: Points per round of :meth:`PredictiveDistribution.quantile`'s multisection, and its rounds: each
#: round narrows the bracket 64-fold, so 9 rounds shrink it 64⁹ ≈ 2·10¹⁶ times (below float64 rounding).
_GRID, _ROUNDS = 65, 9


class PredictiveDistribution(proba.Gaussian):
    """A learner's own predictive distribution behind River's ``proba.Gaussian`` interface.

    ``RiverRegressor.predict_one(x, with_dist=True)`` returns it. A subclass of
    ``proba.Gaussian``, so River code that checks for a Gaussian and reads
    ``mu``/``sigma`` keeps working, but the density, log density, CDF and
    quantiles are those of the prediction itself: a
    :class:`~onlinejax.core.base.Prediction` (Gaussian), a
    :class:`~onlinejax.core.base.StudentTPrediction` (the calibrated learners'), a
    :class:`~onlinejax.core.student_mixture.StudentTMixture` (a hedged learner's, or ``bocpd`` over Student-t runs) or a
    :class:`~onlinejax.wrappers.combination.MixturePrediction`, whose tails a Gaussian
    of the same variance would misstate by many nats per item.

    Args:
      prediction: one item's prediction (``[]`` leaves; a mixture's members ``[M]``).
      seed: seed of :meth:`sample`'s generator.

    Attributes:
      mu: the predictive mean; sigma: the predictive standard deviation (noise included).
    """

    def __init__(self, prediction, seed: int | None = None):
        super().__init__(seed)
        self.prediction = prediction
        # River's Gaussian keeps its moments in a running variance: one "sample" at the mean, ddof 0
        self._var = stats.Var._from_state(n=1, m=float(prediction.mean), var=float(prediction.var), ddof=0)

    @property
    def mu(self) -> float:
        return float(self.prediction.mean)

    @property
    def sigma(self) -> float:
        return float(self.prediction.std)

    def __repr__(self) -> str:
        kind = type(self.prediction).__name__.removesuffix("Prediction") or "𝒩"
        return f"{kind}(μ={self.mu:.3f}, σ={self.sigma:.3f})"

    def __call__(self, x) -> float:
        """Density at ``x``: ``exp(prediction.log_prob(x))``."""
        return math.exp(self.log_pdf(x))

    def log_pdf(self, x) -> float:
        """Log density at ``x``: ``prediction.log_prob(x)``."""
        return float(self.prediction.log_prob(float(x)))

    def cdf(self, x) -> float:
        """``P(Y <= x)``: ``prediction.cdf(x)``."""
        return float(self.prediction.cdf(float(x)))

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """Central ``level`` interval: ``prediction.interval(level)`` (its own quantiles)."""
        lo, hi = self.prediction.interval(level)
        return float(lo), float(hi)

    def quantile(self, q: float) -> float:
        """The ``q``-quantile, ``q`` in (0, 1), by multisection on :meth:`cdf` (vectorised, so a few calls).

        Raises:
          ValueError: ``q`` outside (0, 1).
        """
        if not 0.0 < float(q) < 1.0:
            raise ValueError(f"q: must lie in (0, 1), got {q!r}")
        q = float(q)
        cdf = lambda t: np.asarray(self.prediction.cdf(t), np.float64)  # noqa: E731
        mu, sd = self.mu, self.sigma
        if not (math.isfinite(mu) and math.isfinite(sd) and sd > 0):
            return math.nan
        half = 8.0 * sd
        for _ in range(64):  # widen until the bracket holds q (heavy tails: a few doublings)
            f = cdf(np.array([mu - half, mu + half]))
            if f[0] <= q <= f[1]:
                break
            half *= 2.0
        lo, hi = mu - half, mu + half
        for _ in range(_ROUNDS):
            t = np.linspace(lo, hi, _GRID)
            k = int(np.searchsorted(cdf(t), q))  # first point with cdf >= q (the cdf is non-decreasing)
            k = min(max(k, 1), _GRID - 1)
            lo, hi = t[k - 1], t[k]
        return 0.5 * (lo + hi)

    def sample(self) -> float:
        """One draw, by inverting the prediction's CDF at a uniform variate."""
        return self.quantile(min(max(self._rng.random(), 1e-12), 1.0 - 1e-12))

    @property
    def mode(self) -> float:
        """The predictive mean (the mode of a Gaussian or a Student-t)."""
        return self.mu

    def update(self, x, w=1.0):
        raise NotImplementedError("PredictiveDistribution: a learner's prediction is not updated; "
                                  "learn the item with the regressor's learn_one")

    def revert(self, x, w=1.0):
        raise NotImplementedError("PredictiveDistribution: a learner's prediction is not reverted")



class RiverRegressor(base.MiniBatchRegressor):
    """Any onlinejax learner as a River regressor with its own predictive distribution.

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
      tune_interval: re-estimate the learner's hyperparameters (``learner.tune``) after every this
        many learned items; 0 never does.

    The default learner standardises its inputs itself. Behind a learning scaler
    (``preprocessing.StandardScaler() | RiverRegressor()``) it would standardise them a
    second time and its target once, out of step (``docs/for_river_users.md``), so it
    watches its first 100 items: three in a row learned right after one prediction whose
    inputs the pipeline changed in between, every input within ±5, and it is built again
    with ``learner_params={"standardization": CALIBRATED_STANDARDIZATION._replace(scale_inputs=False)}``
    (inputs taken as given, target standardised; :mod:`onlinejax.wrappers.calibration`), the items so far learned
    again (:attr:`inputs_scaled_upstream` then says so). Give ``standardization`` yourself to decide
    (:data:`~onlinejax.wrappers.calibration.CARRIED_STANDARDIZATION`, the default's own, keeps the inputs standardised).

    Example::

        >>> from onlinejax.adapters.river import RiverRegressor
        >>> model = RiverRegressor("bayes_linreg", {"intercept": True}, {"alpha": 1e-2, "beta": 1.0})
        >>> model.learn_one({"a": 1.0, "b": 2.0}, 3.0)
        >>> dist = model.predict_one({"a": 1.0, "b": 2.0}, with_dist=True)
        >>> round(dist.mu, 3) == round(model.predict_one({"a": 1.0, "b": 2.0}), 3)
        True
    """

    def __init__(self, learner="calibrated_bayes_linreg", learner_params: dict | None = None,
                 init_params: dict | None = None, n_features: int | None = None, tune_interval: int | None = None):
        self.learner = learner
        self.learner_params = learner_params
        self.init_params = init_params
        self.n_features = n_features
        self.tune_interval = tune_interval
        self._engine = Engine(learner, learner_params, init_params, n_features, tune_interval, grow=True)

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
    def inputs_scaled_upstream(self) -> bool:
        """Whether the learner takes its inputs as given (``standardization`` with ``scale_inputs=False``):
        asked for, or the default learner saw a scaler in front (class doc)."""
        return self._engine.inputs_scaled_upstream

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
        """The predictive mean, or with ``with_dist=True`` the learner's own predictive distribution.

        The distribution is a :class:`PredictiveDistribution`: a ``river.proba.Gaussian`` (``mu``,
        ``sigma``, the observation noise included) whose density, ``log_pdf``, ``cdf``,
        ``interval`` and ``quantile`` are the learner's (Gaussian, Student-t or mixture).
        """
        p = self._engine.predict_dict(x)
        if not with_dist:
            return float(p.mean)
        return PredictiveDistribution(p)

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

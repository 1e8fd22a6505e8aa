"""onlinejax: online regression learners with uncertainty, and their evaluation, in JAX.

Public names are re-exported here; see ``ARCHITECTURE.md`` for the layout. The guide
pages below are ``docs/*.md``; ``python docs/make.py`` builds this API reference with
them (``docs/README.md``).

.. include:: ../docs/getting_started.md

.. include:: ../docs/public_names.md

.. include:: ../docs/for_river_users.md

.. include:: ../docs/for_sklearn_users.md

.. include:: ../docs/metrics.md
"""
from . import core, data, evaluation, learners, runner, wrappers
from .learners import linear
from .core.base import Learner, Prediction, StudentTPrediction, default_float_dtype
from .wrappers.baseline import climatology
from .wrappers.calibration import calibrated, calibrated_bayes_linreg, conformal, recalibrate
from .wrappers.changepoint import bocpd
from .wrappers.combination import MixturePrediction, bma, combine, ewa_squared_error, fixed_share, mean_correction, stacking
from .learners.linear import (AdHocState, BayesLinRegState, FeatureMap, SGDState, SufficientStats, WindowedBayesState,
                              adhoc_bounds, bayes_linreg, bayesian_map_forgetting, bayesian_map_windowed, bayesian_mle_forgetting,
                              bayesian_mle_windowed, compose, evidence_fixed_point, forgetting_from_smoothing,
                              forgetting_from_thesis, intercept_features, log_evidence, map_features, posterior_from_stats,
                              nig_linreg, random_feature_gp, sgd_linreg, thesis_features, window_stats, windowed_bayes_linreg)
from .learners.linear import (AdHocOptions, BayesOptions, NIGPrior, RandomFeatureModels, SGDOptions, ThesisFeatures,
                              WindowedOptions)
from .core.schedule import TunePlan
from .wrappers.standardize import standardize
from .wrappers.hedge import with_climatology
from .core.student_mixture import StudentTMixture
from .evaluation import tune_prequential
from .core.stateful import StatefulLearner

__version__ = "0.1.0"
from .learners import gp

__all__ = [
    # learners
    "bayes_linreg", "windowed_bayes_linreg", "sgd_linreg", "bayesian_mle_forgetting", "bayesian_map_forgetting",
    "bayesian_mle_windowed", "bayesian_map_windowed", "adhoc_bounds", "forgetting_from_smoothing",
    "forgetting_from_thesis", "window_stats", "climatology", "bocpd", "random_feature_gp", "nig_linreg",
    # the linear learners' option records
    "BayesOptions", "WindowedOptions", "ThesisFeatures", "AdHocOptions", "SGDOptions", "NIGPrior",
    "RandomFeatureModels",
    # features and evidence
    "FeatureMap", "compose", "intercept_features", "map_features", "thesis_features", "SufficientStats",
    "evidence_fixed_point", "log_evidence", "posterior_from_stats",
    # wrappers
    "calibrated", "calibrated_bayes_linreg", "conformal", "recalibrate", "standardize", "with_climatology",
    # combination
    "combine", "bma", "ewa_squared_error", "fixed_share", "stacking", "mean_correction",
    # the protocol and predictions
    "Learner", "Prediction", "StudentTPrediction", "MixturePrediction", "StudentTMixture", "StatefulLearner",
    "default_float_dtype", "tune_prequential", "TunePlan",
    # states
    "AdHocState", "BayesLinRegState", "SGDState", "WindowedBayesState",
    # the public modules, by layer (each layer package lists its public modules; the rest, e.g. core.linalg and
    # core.batching, are internal); the learners' linear and gp are bound here too
    "core", "learners", "wrappers", "evaluation", "runner", "data", "adapters", "linear", "gp", "plots", "zoo",
]

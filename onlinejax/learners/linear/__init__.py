"""Linear learners: conjugate Bayesian (forgetting, windowed, learning the noise), the thesis's MLE/MAP, SGD."""
from .bayes import BayesLinRegState, BayesOptions, bayes_linreg, forgetting_from_smoothing, forgetting_from_thesis
from .evidence import SufficientStats, evidence_fixed_point, log_evidence, posterior_from_stats
from .features import FeatureMap, compose, intercept_features, map_features, odd_features, thesis_features
from .nig import NIGPrior, NIGState, nig_linreg
from .random_features import RandomFeatureModels, RandomFeatureState, random_feature_gp
from .windowed import WindowedBayesState, WindowedOptions, windowed_bayes_linreg, window_stats
from .sgd import SGDOptions, SGDState, sgd_linreg
from .thesis import (
    MAP_WINDOWED,
    MLE_WINDOWED,
    AdHocOptions,
    AdHocState,
    ThesisFeatures,
    adhoc_bounds,
    bayesian_map_forgetting,
    bayesian_map_windowed,
    bayesian_mle_forgetting,
    bayesian_mle_windowed,
)

__all__ = [
    "bayes_linreg",
    "BayesLinRegState",
    "BayesOptions",
    "forgetting_from_smoothing",
    "forgetting_from_thesis",
    "windowed_bayes_linreg",
    "WindowedBayesState",
    "WindowedOptions",
    "window_stats",
    "sgd_linreg",
    "SGDState",
    "SGDOptions",
    "bayesian_mle_forgetting",
    "bayesian_map_forgetting",
    "bayesian_mle_windowed",
    "bayesian_map_windowed",
    "adhoc_bounds",
    "AdHocState",
    "AdHocOptions",
    "ThesisFeatures",
    "MAP_WINDOWED",
    "MLE_WINDOWED",
    "nig_linreg",
    "NIGState",
    "NIGPrior",
    "random_feature_gp",
    "RandomFeatureState",
    "RandomFeatureModels",
    "FeatureMap",
    "compose",
    "intercept_features",
    "map_features",
    "odd_features",
    "thesis_features",
    "SufficientStats",
    "evidence_fixed_point",
    "log_evidence",
    "posterior_from_stats",
    "bayes",
    "windowed",
    "sgd",
    "thesis",
    "features",
    "evidence",
    "random_features",
    "nig",
]

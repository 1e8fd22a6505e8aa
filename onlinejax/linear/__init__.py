"""Linear learners: conjugate Bayesian (forgetting, windowed, learning the noise), the thesis's MLE/MAP, SGD."""
from .bayes import BayesLinRegState, bayes_linreg, forgetting_from_smoothing, forgetting_from_thesis
from .evidence import SufficientStats, evidence_fixed_point, log_evidence, posterior_from_stats
from .features import FeatureMap, compose, intercept_features, map_features, odd_features, thesis_features
from .nig import NIGState, nig_linreg
from .random_features import RandomFeatureState, random_feature_gp
from .windowed import WindowedBayesState, windowed_bayes_linreg, window_stats
from .sgd import SGDState, sgd_linreg
from .thesis import (
    AdHocState,
    adhoc_bounds,
    bayesian_map_forgetting,
    bayesian_map_windowed,
    bayesian_mle_forgetting,
    bayesian_mle_windowed,
)

__all__ = [
    "bayes_linreg",
    "BayesLinRegState",
    "forgetting_from_smoothing",
    "forgetting_from_thesis",
    "windowed_bayes_linreg",
    "WindowedBayesState",
    "window_stats",
    "sgd_linreg",
    "SGDState",
    "bayesian_mle_forgetting",
    "bayesian_map_forgetting",
    "bayesian_mle_windowed",
    "bayesian_map_windowed",
    "adhoc_bounds",
    "AdHocState",
    "nig_linreg",
    "NIGState",
    "random_feature_gp",
    "RandomFeatureState",
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

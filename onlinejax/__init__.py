"""onlinejax: online regression learners with uncertainty, and their evaluation, in JAX.

Public names are re-exported here; see ``ARCHITECTURE.md`` for the layout.
"""
from . import data, evaluation, linear
from .base import Learner, Prediction, StudentTPrediction, default_float_dtype
from .baseline import climatology
from .calibration import calibrated, calibrated_bayes_linreg, conformal, recalibrate
from .combination import MixturePrediction, bma, combine, ewa_squared_error, fixed_share, mean_correction, stacking
from .linear import *  # noqa: F401,F403
from .standardize import standardize
from .stateful import StatefulLearner

__version__ = "0.1.0"
from . import gp

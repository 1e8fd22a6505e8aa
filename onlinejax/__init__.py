"""onlinejax: online regression learners with uncertainty, and their evaluation, in JAX."""
from .base import Learner, Prediction, default_float_dtype
from .linear import *  # noqa: F401,F403
from .stateful import StatefulLearner

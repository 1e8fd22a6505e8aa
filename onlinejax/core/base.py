"""Core types: :class:`Prediction`, :class:`Learner` and the input boundary.

A learner is an immutable record of pure functions over an immutable state
pytree, in the spirit of optax's ``GradientTransformation(init, update)``.
The functions stored in a :class:`Learner` do two things:

1. at the *boundary* they normalise inputs (``x`` to ``[d]`` or ``[b, d]``
   and ``y`` to ``[]`` or ``[b]``, both cast to the state's floating dtype) and,
   when the inputs are concrete (not traced), validate them and raise a
   :class:`ValueError` that names the argument;
2. they call a ``jax.jit``-compiled core, so that a Python loop that feeds
   Python floats, ints, ``np.float32``/``np.float64`` scalars, NumPy or JAX
   arrays hits one compiled executable (no retrace per input type).

Inside ``jit``/``vmap``/``scan`` the validation cannot raise; there the
learners *skip* an item whose ``x`` or ``y`` is not finite, or finite but too
large to square in the dtype (:func:`learnable`; the state is
returned unchanged and its ``n_skipped`` counter is incremented), so one bad
item never poisons a posterior.

This module gathers these names from the modules that define them:
:mod:`onlinejax.core.distributions` (the predictive distributions),
:mod:`onlinejax.core.learner` (the :class:`Learner` record, :func:`make_learner` and its :class:`LearnerCores`),
:mod:`onlinejax.core.factory_call` (a factory's recorded call and its cache),
:mod:`onlinejax.core.tree_summary` (one-line summaries of states),
:mod:`onlinejax.core.cores` (the skip of unusable items and other building blocks
of the cores), :mod:`onlinejax.core.checks` (the input checks) and
:mod:`onlinejax.core.special` (the Student-t's special functions).
"""
from __future__ import annotations

from .checks import (State, _as_array, _check_finite, check_in_range, check_int, check_positive, check_record, coerce_x,
                     coerce_xy, default_float_dtype, is_concrete, state_dtype)
from .cores import (BLAS_MIN_FEATURES, Array, _skip_with_prediction, full_precision, keep_if, learnable, sequential,
                    skip_nonfinite, welford_update, zero_unusable)
from .distributions import (_INV_SQRT_PI, Prediction, StudentTPrediction, _student_t_crps_terms, normal_quantile,
                            student_t_abs_moments)
from .factory_call import _FACTORY_CACHE_SIZE, FactoryCall, _frozen, map_nested, reuse_equal_calls
from .learner import (DeferredStep, Learner, LearnerCores, StaticOptions, _checked_downdate, _checked_prediction,
                      _predict_then_update, _short_repr, _skipping, _step_cores, _update_cores, describe_factory,
                      make_learner, pass_through)
from .special import _log_gamma_ratio_excess, student_t_cdf, student_t_quantile
from .tree_summary import _leaf_repr, tree_nbytes, tree_repr

__all__ = [
    "Prediction",
    "StudentTPrediction",
    "student_t_cdf",
    "student_t_quantile",
    "Learner",
    "DeferredStep",
    "FactoryCall",
    "default_float_dtype",
    "normal_quantile",
    "LearnerCores",
    "make_learner",
    "pass_through",
    "sequential",
    "skip_nonfinite",
    "welford_update",
]

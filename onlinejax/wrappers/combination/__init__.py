"""Online model combination: a learner that mixes other learners' predictive distributions.

The thesis (chapter 6) finds no single family best everywhere: parametric
learners win on smooth and drifting streams, GPs and kernel regression on
discontinuous ones, forgetting learners recover fastest after a drift. Model
combination lets the data pick.

:func:`combine` builds a :class:`~onlinejax.core.base.Learner` whose state holds
every member's state and a normalised log-weight per member; it predicts
the mixture ``p(y|x) = Σ_m w_m N(y; μ_m, σ²_m)`` of the members' predictions
made before the label, then moves the weights by a weight rule and lets every
member learn. The package's modules, each importing only those before it:

* :mod:`~onlinejax.wrappers.combination.distribution` — :class:`MixturePrediction`
  (exact moments, quantiles, log density and CRPS of the mixture),
  :func:`mixture_prediction`, :func:`mixture_quantile` (and :func:`mixture_quantile_newton`), :func:`mixture_crps`;
* :mod:`~onlinejax.wrappers.combination.rules` — the weight rules :func:`bma`,
  :func:`fixed_share`, :func:`ewa_squared_error`, :func:`stacking`
  (:class:`WeightRule` records of pure ``init``/``update`` functions);
* :mod:`~onlinejax.wrappers.combination.correction` — :func:`mean_correction`, an
  online ridge regression of the mixture's residual on the members'
  deviations (linear stacking of the means, Breiman 1996), which can beat
  every member where their errors cancel, while the weight rules can at best
  follow the best one;
* :mod:`~onlinejax.wrappers.combination.learner` — :func:`combine`, its pure step
  functions and :func:`replay` (the same weighting run on recorded member
  predictions).

Cost per item: the members' own costs plus ``O(M)`` (``bma``, ``fixed_share``,
``ewa_squared_error``), ``O(steps · M²)`` (CRPS stacking) and ``O(M³)`` (the
mean correction's solve).

Intervals and scores. ``MixturePrediction.interval(level)`` returns the
mixture's exact central quantiles; ``interval(level, exact=False)`` the
moment-matched Gaussian ``mean ± z·std``. ``mean`` and ``var`` are the
mixture's exact first two moments. The metrics of :mod:`onlinejax.evaluation`
score a mixture by its own ``interval``, ``log_prob`` and ``crps``, except
delayed validation, which stores only the moments of pending predictions. A
member that reports a huge variance (kernel regression far from its window's
points reports up to ``sqrt(finfo.max)``) leaves the exact interval sensible
but dominates the moment-matched one.
"""
from ..calibration import RECALIBRATION_CLIP, RECALIBRATION_VAR_CAP
from .correction import MeanCorrection, MeanCorrectionState, mean_correction
from .distribution import (MixturePrediction, gaussian_log_density, mixture_crps, mixture_prediction, mixture_quantile,
                           mixture_quantile_newton)
from .learner import CombinationOptions  # noqa: F401
from .learner import CombinationState, MixState, combine, mix_init, mix_step, replay
from .rules import BMAState, EWASquaredErrorState, FixedShareState  # noqa: F401
from .rules import WeightRule, bma, ewa_squared_error, fixed_share, stacking

__all__ = ["MixturePrediction", "mixture_prediction", "mixture_quantile", "mixture_quantile_newton", "mixture_crps",
           "CombinationState", "MixState", "WeightRule", "bma", "fixed_share", "stacking", "ewa_squared_error", "combine",
           "mix_init", "mix_step", "replay", "gaussian_log_density", "mean_correction", "MeanCorrection",
           "MeanCorrectionState", "RECALIBRATION_CLIP", "RECALIBRATION_VAR_CAP"]

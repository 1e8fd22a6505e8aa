"""Evaluation: progressive validation, running metrics, many streams in one program (the grid runner,
:func:`onlinejax.runner.run_grid`, builds on it)."""
from .progressive import ProgressiveResult, progressive_validation, running_metrics, summarize
from . import metrics
from .metrics import Accumulator, exponential, fading, item_quantities, prequential, sliding, stable_mask
from .delayed import DelayedResult, EventSchedule, delayed_progressive_validation, schedule_from_delays, schedule_from_times
from .compare import compare_evaluations
from .timing import timing_report
from .streams import StreamsResult, compiled_scores, evaluate_streams, predictions_program, scores_program, streams_program
from .runtime import (default_cache_dir, enable_compilation_cache, ensure_compilation_cache, initialize_distributed,
                      use_cpu_cores)
from .options import GridLayout, ItemWeights, ReplayOptions, Scoring, SplitOptions, StreamsOptions
from ..core.registry import GridLearner, GridLearnerOptions, register_learner, registered_learners
from .tuning import GradientOptions, PrequentialScoring, TuneResult, prequential_score, tune_prequential

__all__ = [
    "progressive_validation",
    "ProgressiveResult",
    "running_metrics",
    "summarize",
    "delayed_progressive_validation",
    "DelayedResult",
    "EventSchedule",
    "schedule_from_delays",
    "schedule_from_times",
    "evaluate_streams",
    "StreamsResult",
    "streams_program",
    "predictions_program",
    "scores_program",
    "compiled_scores",
    "Scoring",
    "GridLayout",
    "StreamsOptions",
    "ItemWeights",
    "ReplayOptions",
    "GridLearner",
    "GridLearnerOptions",
    "register_learner",
    "registered_learners",
    "tune_prequential",
    "TuneResult",
    "prequential_score",
    "PrequentialScoring",
    "GradientOptions",
    "Accumulator",
    "prequential",
    "fading",
    "exponential",
    "sliding",
    "item_quantities",
    "stable_mask",
    "compare_evaluations",
    "SplitOptions",
    "timing_report",
    "enable_compilation_cache",
    "ensure_compilation_cache",
    "default_cache_dir",
    "use_cpu_cores",
    "initialize_distributed",
    "progressive",
    "delayed",
    "streams",
    "tuning",
    "metrics",
    "crossval",
    "compare",
    "timing",
    "runtime",
    "options",
]

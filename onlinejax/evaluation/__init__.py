"""Evaluation: progressive validation and running metrics."""
from .progressive import ProgressiveResult, progressive_validation, running_metrics, summarize
from . import metrics
from .metrics import Accumulator, exponential, fading, item_quantities, prequential, sliding, stable_mask
from .delayed import DelayedResult, EventSchedule, delayed_progressive_validation, schedule_from_delays, schedule_from_times
from .compare import compare_evaluations
from .timing import timing_report
from .grid import (GridLearner, GridResult, default_cache_dir, enable_compilation_cache, register_learner,
                   registered_learners, replay_combination, run_grid, use_cpu_cores)

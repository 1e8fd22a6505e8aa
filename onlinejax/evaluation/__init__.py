"""Evaluation: progressive validation, running metrics, many streams in one program, the grid runner."""
from .progressive import ProgressiveResult, progressive_validation, running_metrics, summarize
from . import metrics
from .metrics import Accumulator, exponential, fading, item_quantities, prequential, sliding, stable_mask
from .delayed import DelayedResult, EventSchedule, delayed_progressive_validation, schedule_from_delays, schedule_from_times
from .compare import compare_evaluations
from .timing import timing_report
from .streams import StreamsResult, evaluate_streams, streams_program
from .runtime import (default_cache_dir, enable_compilation_cache, ensure_compilation_cache, initialize_distributed,
                      use_cpu_cores)
from .grid import GridResult, replay_combination, run_grid
from ..registry import GridLearner, register_learner, registered_learners
from .tuning import TuneResult, prequential_score, tune_prequential

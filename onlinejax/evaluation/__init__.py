"""Evaluation: progressive validation and running metrics."""
from .progressive import ProgressiveResult, progressive_validation, running_metrics, summarize

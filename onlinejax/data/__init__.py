"""Synthetic streams."""
from .synthetic import abrupt_drift_stream, drifting_linear_stream
from .shipped import trump_approval

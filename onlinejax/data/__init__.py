"""Synthetic streams."""
from .synthetic import drifting_linear_stream
from .shipped import trump_approval

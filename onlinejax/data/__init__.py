"""Synthetic streams."""
from .synthetic import drifting_linear_stream

"""Synthetic streams and shipped data sets."""
from .synthetic import abrupt_drift_stream, drifting_linear_stream
from .hostile import PATHOLOGIES, hostile_stream
from .shipped import airline_passengers, chick_weights, lagged, nile, trump_approval, water_flow
from .grid import (GridStream, StreamGroup, grid_names, grid_streams, parse_name, stratified_names, taxi_stream,
                   thesis_grid, thesis_stream)

__all__ = [
    "thesis_grid",
    "thesis_stream",
    "grid_names",
    "grid_streams",
    "stratified_names",
    "parse_name",
    "GridStream",
    "StreamGroup",
    "taxi_stream",
    "drifting_linear_stream",
    "abrupt_drift_stream",
    "hostile_stream",
    "PATHOLOGIES",
    "trump_approval",
    "chick_weights",
    "airline_passengers",
    "nile",
    "water_flow",
    "lagged",
    "grid",
    "synthetic",
    "hostile",
    "shipped",
]

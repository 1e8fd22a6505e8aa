"""Real data sets that ship inside installed packages (no downloads).

``trump_approval`` reads River's ``TrumpApproval`` CSV
(``river/datasets/trump_approval.csv.gz``, 1001 daily rows): the target is
FiveThirtyEight's approval estimate, the features are five pollsters' values.
River is an optional dependency (``pip install onlinejax[test]`` or
``river``); without it a clear ``ImportError`` says so.
"""
from __future__ import annotations

import csv
import gzip
import importlib.resources

import numpy as np

__all__ = ["trump_approval"]


def trump_approval():
    """River's TrumpApproval stream.

    Returns:
      ``(days [n] float64 ordinal dates, X [n, 5] float64, y [n] float64, feature_names)``
      in time order.
    Raises:
      ImportError: if River is not installed.
    """
    try:
        path = importlib.resources.files("river.datasets") / "trump_approval.csv.gz"
    except ModuleNotFoundError as e:
        raise ImportError("trump_approval needs the River package: pip install river") from e
    with path.open("rb") as raw, gzip.open(raw, "rt") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], np.array(rows[1:], dtype=np.float64)
    order = np.argsort(body[:, 0], kind="stable")
    body = body[order]
    return body[:, 0], body[:, 2:], body[:, 1], tuple(header[2:])

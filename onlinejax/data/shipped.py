"""Real data sets that ship inside installed packages (no downloads).

* :func:`trump_approval` — River's ``TrumpApproval`` (1001 daily rows): the
  target is FiveThirtyEight's approval estimate, the features five
  pollsters' values (and the ordinal date, returned apart).
* :func:`chick_weights` — River's ``ChickWeights`` (578 rows): a chick's
  weight from the time since birth, the chick and its diet.
* :func:`airline_passengers` and :func:`water_flow` — River's monthly airline
  passengers (144) and hourly water flow (1268) series; :func:`lagged` turns
  a series into an autoregressive stream (lagged targets as features).
* :func:`nile` — the annual flow of the Nile at Aswan, 1871-1970 (100 values, R's
  ``datasets::Nile``), stored in this module.

The others read the CSV files inside the River package; River is an optional
dependency (``pip install onlinejax[test]`` or ``river``), and without it a
clear ``ImportError`` says so.
"""
from __future__ import annotations

import csv
import gzip
import importlib.resources

import numpy as np

__all__ = ["trump_approval", "chick_weights", "airline_passengers", "water_flow", "nile", "lagged"]

#: R's ``datasets::Nile`` (Durbin & Koopman 2001, ch. 2; Cobb 1978): annual flow at Aswan, 10⁸ m³, 1871-1970.
_NILE = (1120, 1160, 963, 1210, 1160, 1160, 813, 1230, 1370, 1140, 995, 935, 1110, 994, 1020, 960, 1180, 799, 958,
         1140, 1100, 1210, 1150, 1250, 1260, 1220, 1030, 1100, 774, 840, 874, 694, 940, 833, 701, 916, 692, 1020, 1050,
         969, 831, 726, 456, 824, 702, 1120, 1100, 832, 764, 821, 768, 845, 864, 862, 698, 845, 744, 796, 1040, 759,
         781, 865, 845, 944, 984, 897, 822, 1010, 771, 676, 649, 846, 812, 742, 801, 1040, 860, 874, 848, 890, 744,
         749, 838, 1050, 918, 986, 797, 923, 975, 815, 1020, 906, 901, 1170, 912, 746, 919, 718, 714, 740)


def _river_csv(name: str):
    try:
        path = importlib.resources.files("river.datasets") / name
    except ModuleNotFoundError as e:
        raise ImportError(f"{name} ships with the River package: pip install river") from e
    with path.open("rb") as raw:
        text = raw.read()
    if name.endswith(".gz"):
        text = gzip.decompress(text)
    rows = list(csv.reader(text.decode().splitlines()))
    return rows[0], rows[1:]


def trump_approval():
    """River's TrumpApproval stream.

    Returns:
      ``(days [n] float64 ordinal dates, X [n, 5] float64, y [n] float64, feature_names)``
      in time order.
    Raises:
      ImportError: if River is not installed.
    """
    header, rows = _river_csv("trump_approval.csv.gz")
    body = np.array(rows, dtype=np.float64)
    order = np.argsort(body[:, 0], kind="stable")
    body = body[order]
    return body[:, 0], body[:, 2:], body[:, 1], tuple(header[2:])


def chick_weights():
    """River's ChickWeights stream, in file order (by time, then chick).

    Returns:
      ``(X [578, 3] float64: time (days), chick, diet; y [578] weight in grams, feature_names)``.
    Raises:
      ImportError: if River is not installed.
    """
    header, rows = _river_csv("chick-weights.csv")
    body = np.array(rows, dtype=np.float64)
    return body[:, 1:], body[:, 0], tuple(header[1:])


def airline_passengers():
    """River's AirlinePassengers: monthly passengers (thousands), January 1949 to December 1960.

    Returns:
      ``y [144]`` float64.
    """
    _, rows = _river_csv("airline-passengers.csv")
    return np.array([r[1] for r in rows], dtype=np.float64)


def water_flow():
    """River's WaterFlow: hourly water flow in l/s (1268 values).

    Returns:
      ``y [1268]`` float64.
    """
    _, rows = _river_csv("water-flow.csv")
    return np.array([r[1] for r in rows], dtype=np.float64)


def nile():
    """The annual flow of the Nile at Aswan, 1871-1970 (R's ``datasets::Nile``), a level shift near 1899.

    A short, noisy series whose lags carry little signal: a test of a learner's first items.

    Returns:
      ``y [100]`` float64, in 10⁸ m³.
    """
    return np.array(_NILE, dtype=np.float64)


def lagged(series, lags: int):
    """An autoregressive stream: predict ``y_t`` from ``y_{t-1}, ..., y_{t-lags}``.

    Args:
      series: ``[n]`` values in time order.
      lags: ``p >= 1``.
    Returns:
      ``(X [n - p, p], y [n - p])`` with ``X[i, j] = series[i + p - 1 - j]``.
    Raises:
      ValueError: naming ``lags`` or ``series``.
    """
    y = np.asarray(series, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError(f"series: expected shape [n], got {y.shape}")
    if isinstance(lags, bool) or int(lags) != lags or lags < 1 or lags >= len(y):
        raise ValueError(f"lags: must be an integer in [1, {len(y) - 1}], got {lags!r}")
    p = int(lags)
    X = np.column_stack([y[p - 1 - j: len(y) - 1 - j] for j in range(p)])
    return X, y[p:]

"""Hostile streams: the pathologies of real streams, generated with a seed.

Every stream is the same well-specified regression, ``y = 3·xᵀw + sin(2πx₀)
+ ε`` with ``x ~ U(0, 1)^d``, ``w ~ N(0, I)`` and ``ε ~ N(0, 1)``, with one
pathology laid over it (:data:`PATHOLOGIES`):

* ``"clean"``: none (the reference run);
* ``"constant_start"`` / ``"constant_middle"``: ``length`` targets (and
  inputs) stuck at one value, at the start or from item ``at`` (a stuck
  sensor);
* ``"outlier"``: one target at item ``at`` moved by ``magnitude`` noise
  standard deviations;
* ``"heavy_tails"``: Student-t noise with 2 degrees of freedom throughout;
* ``"stuck_feature"``: feature 0 stuck at its value from item ``at`` for
  ``length`` items, then jumping back;
* ``"covariate_shift"``: feature 0 shifted by ``magnitude`` (in units of its
  range) from item ``at`` on; the targets follow the same function;
* ``"trend"``: feature 0 grows linearly from 0 to ``magnitude`` over the
  stream (a trending input);
* ``"wide_range"``: inputs log-uniform over ``[1e-6, 1e6]``, the target a
  linear function of their logarithms plus noise (a learner must cope with
  the raw inputs);
* ``"duplicates"``: the inputs repeat in blocks of ``length`` identical rows.

:func:`hostile_stream` also returns the item at which the pathology ended
(0 for the pathologies that never end), from which recovery is measured.
"""
from __future__ import annotations

import numpy as np

__all__ = ["PATHOLOGIES", "hostile_stream"]

PATHOLOGIES = ("clean", "constant_start", "constant_middle", "outlier", "heavy_tails", "stuck_feature",
               "covariate_shift", "trend", "wide_range", "duplicates")


#: The pathologies that start at item ``at``.
_STARTS_AT = ("constant_middle", "outlier", "stuck_feature", "covariate_shift")


def hostile_stream(seed: int, pathology: str, n_items: int = 3000, n_features: int = 2, *, at: int = 1000,
                   length: int = 100, magnitude: float | None = None, dtype=np.float32):
    """One stream of ``n_items`` with a pathology (module doc).

    Args:
      seed: NumPy seed; the clean stream of a seed is the same for every pathology.
      pathology: one of :data:`PATHOLOGIES`.
      n_items: ``n``; n_features: ``d >= 1``.
      at: the item where the pathology starts (``"constant_middle"``,
        ``"outlier"``, ``"stuck_feature"``, ``"covariate_shift"``).
      length: items of a constant run, a stuck feature or a duplicated block.
      magnitude: the outlier's size in noise standard deviations (default
        10³), the covariate shift (default 30) or the trend's end (default 10).
      dtype: NumPy float dtype of the arrays.
    Returns:
      ``(X [n, d], y [n], end)``: ``end`` is the first item after the
      pathology (0 where it never ends or has no end).
    """
    if pathology not in PATHOLOGIES:
        raise ValueError(f"pathology: must be one of {PATHOLOGIES}, got {pathology!r}")
    n, d = int(n_items), int(n_features)
    if n < 1 or d < 1:
        raise ValueError(f"n_items, n_features: must be >= 1, got {n_items!r}, {n_features!r}")
    if pathology in _STARTS_AT and not 0 <= at < n:  # the others ignore it (a short clean stream needs no at=)
        raise ValueError(f"at: must lie in [0, {n}), got {at!r}")
    if length < 1:
        raise ValueError(f"length: must be >= 1, got {length!r}")
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (n, d))
    w = rng.normal(size=d)
    noise = rng.normal(size=n)
    f = lambda X: 3.0 * X @ w + np.sin(2.0 * np.pi * X[:, 0])  # noqa: E731
    end = 0
    if pathology == "heavy_tails":
        noise = rng.standard_t(2.0, size=n)
    elif pathology == "stuck_feature":
        X[at:at + length, 0] = X[at, 0]
        end = min(at + length, n)
    elif pathology == "covariate_shift":
        X[at:, 0] += 30.0 if magnitude is None else magnitude
        end = at
    elif pathology == "trend":
        X[:, 0] = np.linspace(0.0, 10.0 if magnitude is None else magnitude, n)
    elif pathology == "wide_range":
        X = np.exp(rng.uniform(np.log(1e-6), np.log(1e6), (n, d)))
        y = np.log(X) @ w + noise
        return X.astype(dtype), y.astype(dtype), 0
    elif pathology == "duplicates":
        X = np.repeat(X[::length], length, axis=0)[:n]
    y = f(X) + noise
    if pathology == "constant_start":
        y[:length] = y[0]
        X[:length] = X[0]
        end = min(length, n)
    elif pathology == "constant_middle":
        y[at:at + length] = y[at]
        X[at:at + length] = X[at]
        end = min(at + length, n)
    elif pathology == "outlier":
        y[at] += 1e3 if magnitude is None else magnitude
        end = at + 1
    return X.astype(dtype), y.astype(dtype), end

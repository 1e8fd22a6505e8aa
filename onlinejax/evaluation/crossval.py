"""Batch model assessment to compare online evaluation against.

Seed ``004_6154ce83d91a130f.txt`` (cross-validation for economists) and the
first section of ``000_1463b71a5ad3192a.txt`` (why temporal splits and plain
K-fold mislead for online models). Splits are generators of
``(train_idx, test_idx)`` NumPy index arrays; :func:`cross_validate` scores
any batch ``fit``/``predict`` pair on them. This is host-side NumPy: these
are the *batch* baselines, evaluated a handful of times, not inside ``jit``.
"""
from __future__ import annotations

from typing import Callable, Iterator, NamedTuple

import numpy as np

__all__ = [
    "temporal_split",
    "kfold",
    "expanding_window",
    "rolling_window",
    "hblock_kfold",
    "stratified_kfold",
    "lag_matrix",
    "CVResult",
    "cross_validate",
    "one_standard_error_rule",
    "aic_linear",
    "linear_fit",
    "linear_predict",
]

Split = tuple[np.ndarray, np.ndarray]


def _check_n(n, name="n"):
    if int(n) != n or n < 2:
        raise ValueError(f"{name}: must be an integer >= 2, got {n!r}")
    return int(n)


def temporal_split(n: int, test_size: float | int = 0.25) -> Iterator[Split]:
    """One split: the first items train, the last ``test_size`` (fraction or count) test."""
    n = _check_n(n)
    k = int(round(test_size * n)) if isinstance(test_size, float) else int(test_size)
    if not 1 <= k < n:
        raise ValueError(f"test_size: must leave at least one training and one test item, got {test_size!r}")
    yield np.arange(n - k), np.arange(n - k, n)


def kfold(n: int, k: int = 5, *, shuffle: bool = False, seed: int = 0) -> Iterator[Split]:
    """K-fold CV: ``k`` (nearly) equal contiguous folds, optionally over a shuffled order."""
    n = _check_n(n)
    if int(k) != k or not 2 <= k <= n:
        raise ValueError(f"k: must be an integer in [2, n], got {k!r}")
    idx = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    for test in np.array_split(idx, k):
        yield np.setdiff1d(idx, test, assume_unique=True), np.sort(test)


def expanding_window(n: int, initial: int, horizon: int = 1, step: int = 1) -> Iterator[Split]:
    """Time-series out-of-sample: train on ``[0, t)``, test on ``[t, t + horizon)``, ``t`` from ``initial`` by ``step``."""
    n = _check_n(n)
    if not 1 <= initial < n or horizon < 1 or step < 1:
        raise ValueError("initial, horizon, step: need 1 <= initial < n, horizon >= 1, step >= 1")
    for t in range(initial, n - horizon + 1, step):
        yield np.arange(t), np.arange(t, t + horizon)


def rolling_window(n: int, window: int, horizon: int = 1, step: int = 1) -> Iterator[Split]:
    """Rolling out-of-sample: train on the ``window`` items before ``t`` (constant length), test on ``[t, t + horizon)``."""
    n = _check_n(n)
    if not 1 <= window < n or horizon < 1 or step < 1:
        raise ValueError("window, horizon, step: need 1 <= window < n, horizon >= 1, step >= 1")
    for t in range(window, n - horizon + 1, step):
        yield np.arange(t - window, t), np.arange(t, t + horizon)


def hblock_kfold(n: int, k: int = 5, h: int = 1) -> Iterator[Split]:
    """h-block K-fold CV: contiguous test blocks; the ``h`` items on each side of a block leave the training set."""
    if int(h) != h or h < 0:
        raise ValueError(f"h: must be an integer >= 0, got {h!r}")
    for train, test in kfold(n, k):
        lo, hi = test[0], test[-1]
        keep = (train < lo - h) | (train > hi + h)
        yield train[keep], test


def stratified_kfold(y, k: int = 5, n_bins: int = 5, seed: int = 0) -> Iterator[Split]:
    """K-fold with every fold covering the range of a continuous target: bin ``y`` by quantiles, deal each bin round-robin."""
    y = np.asarray(y, np.float64)
    n = _check_n(len(y), "y")
    if int(k) != k or not 2 <= k <= n:
        raise ValueError(f"k: must be an integer in [2, len(y)], got {k!r}")
    edges = np.quantile(y, np.linspace(0, 1, n_bins + 1)[1:-1])
    bins = np.searchsorted(edges, y, side="right")
    rng = np.random.default_rng(seed)
    fold = np.empty(n, np.int64)
    for b in np.unique(bins):
        members = rng.permutation(np.nonzero(bins == b)[0])
        fold[members] = (np.arange(len(members)) + rng.integers(k)) % k
    for f in range(k):
        yield np.nonzero(fold != f)[0], np.nonzero(fold == f)[0]


def lag_matrix(y, p: int, x=None):
    """Design matrix of an ARX(p) model: rows ``[y_{t-1}, ..., y_{t-p}, x_t]`` with target ``y_t``, ``t = p..n-1``.

    Returns:
      ``(Z [n - p, p + m], target [n - p])`` (``m`` exogenous columns).
    """
    y = np.asarray(y, np.float64)
    if int(p) != p or not 1 <= p < len(y):
        raise ValueError(f"p: must be an integer in [1, len(y)), got {p!r}")
    n = len(y)
    Z = np.stack([y[p - j: n - j] for j in range(1, p + 1)], axis=1)
    if x is not None:
        x = np.asarray(x, np.float64).reshape(n, -1)
        Z = np.concatenate([Z, x[p:]], axis=1)
    return Z, y[p:]


class CVResult(NamedTuple):
    """Attributes: ``scores [K]`` per split, ``mean``, ``se = std(scores, ddof=1)/sqrt(K)``."""

    scores: np.ndarray
    mean: float
    se: float


def cross_validate(fit: Callable, predict: Callable, X, y, splits, loss: Callable | None = None) -> CVResult:
    """Score a batch learner on every split.

    Args:
      fit: ``fit(X_train, y_train) -> model``.
      predict: ``predict(model, X_test) -> [m]`` point predictions.
      X: ``[n, d]``; y: ``[n]``; splits: iterable of ``(train_idx, test_idx)``.
      loss: ``loss(y_test, y_hat) -> float``; default mean squared error.
    """
    X = np.asarray(X)
    y = np.asarray(y)
    loss = loss or (lambda a, b: float(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))
    scores = []
    for tr, te in splits:
        if np.intersect1d(tr, te).size:
            raise ValueError("splits: a test index appears in its training set")
        scores.append(loss(y[te], predict(fit(X[tr], y[tr]), X[te])))
    s = np.asarray(scores, np.float64)
    if len(s) == 0:
        raise ValueError("splits: no split given")
    se = float(np.std(s, ddof=1) / np.sqrt(len(s))) if len(s) > 1 else float("nan")
    return CVResult(s, float(np.mean(s)), se)


def one_standard_error_rule(means, ses, complexity=None) -> int:
    """Index of the simplest model whose CV error is within one SE of the best (seed 004).

    Args:
      means: ``[M]`` CV errors; ses: ``[M]`` their standard errors;
      complexity: ``[M]`` (lower is simpler); default the index order.
    """
    means = np.asarray(means, np.float64)
    ses = np.asarray(ses, np.float64)
    cx = np.arange(len(means)) if complexity is None else np.asarray(complexity)
    best = int(np.argmin(means))
    ok = np.nonzero(means <= means[best] + ses[best])[0]
    return int(ok[np.lexsort((means[ok], cx[ok]))[0]])


def aic_linear(rss: float, n: int, k: int) -> float:
    """AIC of a Gaussian linear model with ``k`` coefficients: ``n ln(RSS/n) + 2k`` (seed 004)."""
    return float(n * np.log(rss / n) + 2 * k)


def linear_fit(X, y, ridge: float = 0.0):
    """Least squares with an intercept (and optional ridge): returns the coefficient vector ``[d + 1]``."""
    Z = np.column_stack([np.asarray(X, np.float64), np.ones(len(X))])
    A = Z.T @ Z + ridge * np.eye(Z.shape[1])
    return np.linalg.lstsq(A, Z.T @ np.asarray(y, np.float64), rcond=None)[0]


def linear_predict(coef, X):
    """Predictions of :func:`linear_fit`'s coefficients."""
    return np.column_stack([np.asarray(X, np.float64), np.ones(len(X))]) @ coef

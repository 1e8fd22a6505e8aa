"""Online metrics as pure accumulators: ``init() -> state``, ``update(state, y, pred) -> state``, ``value(state)``.

Every accumulator tracks the same per-item quantities of a Gaussian
prediction ``N(μ, σ²)`` for a target ``y`` and reports them all:

| key | value |
|-----|-------|
| ``mae`` | mean ``abs(y - μ)`` |
| ``mse`` | mean ``(y - μ)²``; ``rmse = sqrt(mse)`` |
| ``smse`` | ``mse / Var[y]`` (thesis 6.1.2; ``Var`` by weighted Welford, population; NaN when ``Var[y] = 0``, e.g. a 1-item stream) |
| ``r2`` | ``1 - smse`` |
| ``icr`` | interval containment ratio: share of ``y`` inside the central ``level`` interval (thesis 6.1.3) |
| ``aiw`` | average interval width; ``saiw = aiw / abs(mean(y))`` (thesis 6.1.3; NaN when ``mean(y) = 0``); ``aiw_sd = aiw / sd(y)`` (scale-free at any offset; NaN when ``Var[y] = 0``) |
| ``mlpd`` | mean log predictive density ``log N(y; μ, σ²)`` |
| ``crps`` | mean continuous ranked probability score of the Gaussian, closed form ``σ[z(2Φ(z) - 1) + 2φ(z) - 1/√π]``, ``z = (y - μ)/σ`` (Gneiting & Raftery 2007, eq. 21); ``crps_sd = crps / sd(y)`` |

(a non-Gaussian prediction — Student-t, Gaussian mixture — supplies its own
interval, log density and CRPS: :func:`item_quantities`), under one of four
weightings of the past:

* :func:`prequential` — all items equally (thesis eq. 6.1);
* :func:`fading` — ``S ← L + δS``, ``N ← 1 + δN`` (Gama et al.; thesis eq. 6.2–6.3);
* :func:`exponential` — the blog's ``v ← a·new + (1 - a)·v`` from ``v = 0``
  (``000_1463b71a5ad3192a.txt``: ``exp_mae = .1 * mae + .9 * exp_mae``);
* :func:`sliding` — the last ``W`` items (the thesis's sliding error window,
  its "resolution" parameter).

``update`` takes an optional ``weight`` (0/1 or any ≥ 0): passing the
"stable" flag of a learner's state machine — or :func:`stable_mask`, which
marks items outside the first ``W`` after the start and after each drift —
gives the thesis's RMSE-ST / SMSE-ST. All states are NamedTuples of arrays:
the accumulators run inside ``scan`` and ``vmap``. An item whose target or
quantities are not finite (a NaN mean, a zero variance's ``-inf`` log
density) is left out of every average and counted in ``n_nonfinite``, so one
bad item never makes a stream's metrics NaN.

:func:`log_score_skill` compares a learner's log densities with those of
climatology (:func:`onlinejax.wrappers.baseline.climatology`), the Student-t posterior
predictive of the targets seen so far.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import norm

from ..core.base import Prediction, check_in_range, check_int, default_float_dtype, normal_quantile
from ..wrappers.baseline import climatology_init, climatology_learn, climatology_predict
from ..core.window import RingBuffer, ring_init, ring_push

Array = jax.Array

__all__ = [
    "QUANTITIES",
    "METRICS",
    "Accumulator",
    "item_quantities",
    "prequential",
    "fading",
    "exponential",
    "sliding",
    "stable_mask",
    "running_mean",
    "score",
    "climatology_log_density",
    "log_score_skill",
]

QUANTITIES = ("abs", "sq", "cover", "width", "lpd", "crps")
METRICS = ("mae", "mse", "rmse", "smse", "r2", "icr", "aiw", "saiw", "aiw_sd", "mlpd", "crps", "crps_sd")
_INV_SQRT_PI = 1.0 / np.sqrt(np.pi)


def item_quantities(y: Array, pred: Prediction, level: float = 0.95) -> Array:
    """Per-item quantities ``[..., 6]`` in the order of :data:`QUANTITIES`.

    A Gaussian :class:`~onlinejax.core.base.Prediction` is scored in closed form
    (the formulas of the table above). Any other prediction — a Student-t
    (:class:`onlinejax.core.base.StudentTPrediction`), a Gaussian mixture
    (:class:`onlinejax.wrappers.combination.MixturePrediction`) — is scored by its own
    distribution: coverage and width of its ``interval(level)``, its
    ``log_prob(y)`` and its ``crps(y)``. For a mixture these are the exact
    central quantiles, mixture log density and mixture CRPS; its
    moment-matched Gaussian would let one wide low-weight member inflate the
    interval width without bound.

    Args:
      y: ``[...]`` targets; pred: leaves ``[...]``; level: interval level (static).
    """
    z_level = normal_quantile(level)
    y = jnp.asarray(y, pred.mean.dtype)
    err = y - pred.mean
    if not isinstance(pred, Prediction):  # a non-Gaussian prediction scores itself
        lo, hi = pred.interval(level)
        cover = ((y >= lo) & (y <= hi)).astype(y.dtype)
        return jnp.stack([jnp.abs(err), err * err, cover, hi - lo, pred.log_prob(y), pred.crps(y)], axis=-1)
    sd = jnp.sqrt(pred.var)
    z = err / sd
    crps = sd * (z * (2.0 * norm.cdf(z) - 1.0) + 2.0 * norm.pdf(z) - _INV_SQRT_PI)
    lpd = -0.5 * (jnp.log(2.0 * jnp.pi * pred.var) + z * z)
    cover = (jnp.abs(err) <= z_level * sd).astype(y.dtype)
    return jnp.stack([jnp.abs(err), err * err, cover, 2.0 * z_level * sd, lpd, crps], axis=-1)


class WeightedState(NamedTuple):
    """State of the weighted accumulators (prequential, fading, exponential).

    Attributes:
      sums: ``[6]`` weighted sums of the quantities (for ``exponential``: the
        smoothed values themselves).
      weight: ``[]`` total weight ``N``.
      y_mean: ``[]``; y_m2: ``[]``: weighted Welford mean and sum of squared
        deviations of the targets.
      count: ``[]`` int32 items seen (including weight-0 items).
      n_nonfinite: ``[]`` int32 weighted-in items left out because the target
        or one of its quantities was not finite (e.g. a zero variance).
    """

    sums: Array
    weight: Array
    y_mean: Array
    y_m2: Array
    count: Array
    n_nonfinite: Array


class WindowState(NamedTuple):
    """State of :func:`sliding`: a ring buffer of quantities (``x``) and targets (``y``), plus weights."""

    buffer: RingBuffer
    weights: Array
    count: Array
    n_nonfinite: Array


class Accumulator(NamedTuple):
    """A metric accumulator.

    Attributes:
      init: ``init(dtype=None) -> state``.
      update: ``update(state, y: [], pred: Prediction, weight=1.0) -> state``.
      value: ``value(state) -> dict`` of ``[]`` arrays, keys :data:`METRICS`.
      level: interval level used for ``icr`` / ``aiw``.
    """

    init: Callable
    update: Callable
    value: Callable
    level: float


def _finish(mean_q: Array, y_mean: Array, y_var: Array, n_nonfinite: Array) -> dict:
    mae, mse, icr, aiw, lpd, crps = (mean_q[..., i] for i in range(6))
    # undefined (NaN, left out of summaries) for constant targets, e.g. a 1-item stream, not ±inf
    smse = jnp.where(y_var > 0, mse / jnp.where(y_var > 0, y_var, 1.0), jnp.nan)
    saiw = jnp.where(y_mean != 0, aiw / jnp.where(y_mean != 0, jnp.abs(y_mean), 1.0), jnp.nan)
    # in units of the targets' standard deviation: comparable across streams of any scale or offset
    y_sd = jnp.sqrt(jnp.where(y_var > 0, y_var, 1.0))
    per_sd = lambda v: jnp.where(y_var > 0, v / y_sd, jnp.nan)  # noqa: E731
    return {
        "mae": mae, "mse": mse, "rmse": jnp.sqrt(mse), "smse": smse, "r2": 1.0 - smse,
        "icr": icr, "aiw": aiw, "saiw": saiw, "aiw_sd": per_sd(aiw), "mlpd": lpd, "crps": crps,
        "crps_sd": per_sd(crps), "n_nonfinite": n_nonfinite,
    }


def _finite_item(y: Array, q: Array, w: Array):
    """``(ok, y, q, w)`` with a non-finite item's weight set to 0 and its values made harmless.

    One item whose target, mean or variance is not finite (or whose log
    density is ``-inf``: a zero variance) would make every average NaN or
    infinite; like the learners, the accumulators skip it and count it.
    """
    ok = jnp.isfinite(y) & jnp.all(jnp.isfinite(q), axis=-1)
    return ok, jnp.where(ok, y, 0.0), jnp.where(ok, q, 0.0), jnp.where(ok, w, 0.0)


def _weighted(decay: float | None, blog_alpha: float | None, level: float) -> Accumulator:
    def init(dtype=None):
        dt = dtype or default_float_dtype()
        z = jnp.zeros((), dt)
        return WeightedState(jnp.zeros((6,), dt), z, z, z, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))

    def update(s: WeightedState, y, pred: Prediction, weight=1.0):
        y = jnp.asarray(y, s.sums.dtype)
        w = jnp.asarray(weight, s.sums.dtype)
        ok, y, q, w_ok = _finite_item(y, item_quantities(y, pred, level), w)
        bad = s.n_nonfinite + ((~ok) & (w > 0)).astype(jnp.int32)
        w = w_ok
        d = 1.0 if decay is None else decay
        if blog_alpha is None:
            sums = d * s.sums + w * q
        else:  # v <- a·new + (1-a)·v, only for weighted-in items
            sums = jnp.where(w > 0, blog_alpha * q + (1.0 - blog_alpha) * s.sums, s.sums)
        # weighted Welford (West 1979) with the old weight faded by d
        W = d * s.weight + w
        delta = y - s.y_mean
        mean = s.y_mean + jnp.where(W > 0, w / jnp.where(W > 0, W, 1.0), 0.0) * delta
        m2 = d * s.y_m2 + w * delta * (y - mean)
        return WeightedState(sums, W, mean, m2, s.count + 1, bad)

    def value(s: WeightedState):
        mean_q = s.sums if blog_alpha is not None else s.sums / s.weight
        return _finish(mean_q, s.y_mean, s.y_m2 / s.weight, s.n_nonfinite)

    return Accumulator(init, update, value, level)


@functools.lru_cache(maxsize=None)  # same arguments -> same object -> no recompilation
def prequential(level: float = 0.95) -> Accumulator:
    """Whole-stream averages (thesis eq. 6.1: ``M = S/n``)."""
    normal_quantile(level)
    return _weighted(None, None, level)


@functools.lru_cache(maxsize=None)  # same arguments -> same object -> no recompilation
def fading(delta: float, level: float = 0.95) -> Accumulator:
    """Fading-factor averages ``S_δ/N_δ`` (thesis eq. 6.2–6.3), ``δ ∈ (0, 1]``."""
    check_in_range(delta, "delta", 0.0, 1.0)
    normal_quantile(level)
    return _weighted(float(delta), None, level)


@functools.lru_cache(maxsize=None)  # same arguments -> same object -> no recompilation
def exponential(alpha: float = 0.1, level: float = 0.95) -> Accumulator:
    """The blog's exponentially weighted average ``v ← alpha·new + (1 - alpha)·v`` from ``v = 0``.

    The metrics derived from the target's mean and variance (``smse``, ``r2``, ``saiw``, ``aiw_sd``, ``crps_sd``)
    use a fading Welford with ``δ = 1 - alpha``.
    """
    check_in_range(alpha, "alpha", 0.0, 1.0)
    normal_quantile(level)
    acc = _weighted(1.0 - float(alpha), float(alpha), level)
    return acc


@functools.lru_cache(maxsize=None)  # same arguments -> same object -> no recompilation
def sliding(window: int, level: float = 0.95) -> Accumulator:
    """Averages over the last ``window`` items (thesis 6.1: sliding error window)."""
    if int(window) != window or window < 1 or isinstance(window, bool):
        raise ValueError(f"window: must be an integer >= 1, got {window!r}")
    normal_quantile(level)
    W = int(window)

    def init(dtype=None):
        dt = dtype or default_float_dtype()
        return WindowState(ring_init(W, 6, dt), jnp.zeros((W,), dt), jnp.zeros((), jnp.int32),
                           jnp.zeros((), jnp.int32))

    def update(s: WindowState, y, pred: Prediction, weight=1.0):
        dt = s.weights.dtype
        y = jnp.asarray(y, dt)
        w = jnp.asarray(weight, dt)
        ok, y, q, w_ok = _finite_item(y, item_quantities(y, pred, level), w)
        h = s.buffer.head
        return WindowState(ring_push(s.buffer, q, y), s.weights.at[h].set(w_ok), s.count + 1,
                           s.n_nonfinite + ((~ok) & (w > 0)).astype(jnp.int32))

    def value(s: WindowState):
        w = s.weights * s.buffer.valid
        tot = jnp.sum(w)
        mean_q = (w @ s.buffer.x) / tot
        ym = (w @ s.buffer.y) / tot
        var = (w @ (s.buffer.y - ym) ** 2) / tot  # two-pass: exact over the window
        return _finish(mean_q, ym, var, s.n_nonfinite)

    return Accumulator(init, update, value, level)


def score(acc: Accumulator, Y: Array, predictions: Prediction, weights: Array | None = None) -> dict:
    """Run ``acc`` over stored predictions in order and return its final values.

    Args:
      acc: an accumulator (static under ``jit``).
      Y: ``[n]`` targets; predictions: leaves ``[n]``; weights: optional ``[n]``.
    Returns:
      ``acc.value`` of the final state (dict of ``[]`` arrays).
    """
    dt = predictions.mean.dtype
    Y = jnp.asarray(Y, dt)
    w = jnp.ones_like(Y) if weights is None else jnp.asarray(weights, dt)

    def body(m, a):
        return acc.update(m, a[0], a[1], a[2]), None

    # the whole prediction pytree is scanned, so a non-Gaussian prediction keeps every leaf it scores itself with
    return acc.value(jax.lax.scan(body, acc.init(dt), (Y, predictions, w))[0])


def climatology_log_density(Y: Array) -> Array:
    """``[n]`` log density of each target under :func:`onlinejax.wrappers.baseline.climatology` (predicted before learning it).

    Item ``t`` is scored by the Student-t posterior predictive of the ``t``
    targets before it (:func:`onlinejax.wrappers.baseline.climatology_predict`:
    ``ν = t - 1`` from ``t = 2``, ``≈ N(ȳ, 1)`` before), so nearly equal
    first targets cost tens of nats at most, not millions.

    Args:
      Y: ``[n]`` targets (a non-finite one is scored NaN and not learned).
    Returns:
      ``[n]`` log densities in ``Y``'s floating dtype (the default float for integers).
    """
    Y = jnp.asarray(Y)
    dt = Y.dtype if jnp.issubdtype(Y.dtype, jnp.floating) else default_float_dtype()

    def body(s, y):
        return climatology_learn(s, y), climatology_predict(s).log_prob(y)

    return jax.lax.scan(body, climatology_init(1.0, dt), Y.astype(dt))[1]


def log_score_skill(Y: Array, predictions, weights: Array | None = None, skip: int = 2) -> dict:
    """Log-score skill over climatology: mean of ``log p(y_t) - log p_clim(y_t)`` over scored items.

    Climatology (:func:`onlinejax.wrappers.baseline.climatology`) predicts each target
    by the Student-t posterior predictive of a Gaussian with unknown mean
    and variance given the targets before it (:func:`climatology_log_density`;
    Gelman et al. 2013, BDA3 §3.2). Skill > 0
    means the learner's predictive densities beat it on average (a log
    Bayes factor per item; Gneiting & Raftery 2007, sec. 7, on skill scores).
    The first ``skip`` items are left out (before two targets climatology
    knows no spread: it predicts with a fixed unit prior variance), and so is
    an item where either log density is not finite (counted in
    ``n_nonfinite``, as in the accumulators).

    Args:
      Y: ``[n]`` targets; predictions: a prediction with ``[n]`` leaves (a
        :class:`~onlinejax.core.base.Prediction`, a Student-t or a mixture: scored by
        its ``log_prob``); weights: optional
        ``[n]`` item weights (0 leaves an item out).
      skip: leading items left out (static int >= 0).
    Returns:
      dict of ``[]`` arrays: ``skill``, ``mlpd_clim`` (climatology's mean log
      density over the same items), ``mlpd_from`` (the learner's, over the
      same items: unlike the whole-stream MLPD, not dominated by the first
      items, which every learner predicts before it has seen a target) and
      ``n_nonfinite``.
    """
    skip = check_int(skip, "skip", 0)
    dt = predictions.mean.dtype
    Y = jnp.asarray(Y, dt)
    w = jnp.ones_like(Y) if weights is None else jnp.asarray(weights, dt)
    w = jnp.where(jnp.arange(Y.shape[-1]) >= skip, w, 0.0)
    lpd = predictions.log_prob(Y)
    lpd_c = climatology_log_density(Y)
    ok = jnp.isfinite(lpd) & jnp.isfinite(lpd_c)
    wk = jnp.where(ok, w, 0.0)
    tot = jnp.sum(wk)
    return {"skill": jnp.sum(wk * jnp.where(ok, lpd - lpd_c, 0.0)) / tot,
            "mlpd_clim": jnp.sum(wk * jnp.where(ok, lpd_c, 0.0)) / tot,
            "mlpd_from": jnp.sum(wk * jnp.where(ok, lpd, 0.0)) / tot,
            "n_nonfinite": jnp.sum(((~ok) & (w > 0)).astype(jnp.int32))}


def running_mean(loss: Callable[[Array, Prediction], Array], decay: float = 1.0):
    """Running (optionally fading) mean of any per-item loss ``loss(y, pred) -> []``.

    Returns ``(init, update, value)`` with state ``(sum, weight)``.
    """
    check_in_range(decay, "decay", 0.0, 1.0)

    def init(dtype=None):
        dt = dtype or default_float_dtype()
        return jnp.zeros((), dt), jnp.zeros((), dt)

    def update(s, y, pred, weight=1.0):
        return decay * s[0] + weight * loss(y, pred), decay * s[1] + weight

    def value(s):
        return s[0] / s[1]

    return init, update, value


def stable_mask(n: int, window: int, change_points=()) -> np.ndarray:
    """``[n]`` bool: False for the first ``window`` items after the start and after each change point.

    The thesis's "stable" periods for RMSE-ST/SMSE-ST when no state machine
    reports them (6.1.2: a windowed learner is unstable until its window has
    been filled, or recycled after a drift).

    ``change_points``: item indices; negative ones (``-1``: no drift) are skipped.
    """
    m = np.ones(int(n), bool)
    for c in (0, *(c for c in change_points if c >= 0)):
        m[int(c): int(c) + int(window)] = False
    return m

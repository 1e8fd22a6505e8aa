"""The drift detectors of the state machine (:func:`~onlinejax.adaptive.adaptive`'s ``detector=``).

This module holds the detectors' state (:class:`DetectorState`), a fresh one
per stable phase (``_fresh_detector``), and the alarm rule (:func:`detect`)
that the machine runs on each stable item; :data:`DETECTORS` names them.

The thesis compared each error with a reference frozen at the end of the
last learning phase; that reference includes the large errors of the
learning phase itself (cold start, or the first items after a drift), so a
later drift of the same size stays under it and is missed. Our reading of
that rule is available as ``detector="frozen"`` (alarm when ``|e| >
frozen_factor × mean |e|`` of the last learning phase).

The default ``detector="cusum"`` is a one-sided CUSUM (Page, 1954; the
Page–Hinkley form) on the **standardised** squared residual
``z² = (y - μ)²/σ²`` of the learner's own predictive distribution, made
scale-free by dividing by its running mean in the current stable phase
(``r = z² / mean(z²)``, clipped at ``clip`` so one outlier adds at most
``clip - 1 - drift`` to ``g``): ``g ← max(0, g + r - 1 - drift)``, alarm when
``g > threshold``. At the defaults (``clip=10``) one item adds at most 8.5
against a threshold of 20, so it takes three large residuals close together
to alarm; a single outlier cannot (it could with ``clip >= threshold + 1 +
drift``). Why: with the model frozen in a stable phase and i.i.d. inputs,
the ``z²`` of a misspecified learner (a GP extrapolating at the window's
edge, a discontinuity) are heavy-tailed, and with a clip above the threshold
single outliers raise most alarms — each one a needless tune, and a model
refitted to the few items after the outlier. A real drift saturates ``r`` at
``clip``, so it is still caught within about three items.
Under no drift ``r`` has mean 1, so ``g`` drifts down by ``drift`` per item;
for a calibrated learner (``z² ~ χ²₁``) the mean run length to a false
alarm is at least ``exp(θ·threshold)`` stable items, with ``θ > 0`` the root
of ``E[exp(θ(r - 1 - drift))] = 1`` (Lorden 1971; about 340 items at the
defaults, a guaranteed minimum: the Gaussian approximation
``exp(drift·threshold)`` ≈ 2·10⁴ overstates it for χ²₁ residuals), while a
drift that multiplies the squared error by ``k`` is detected after about
``threshold/(k - 1 - drift)`` items. Because the test is relative to the
phase's own mean, a learner whose intervals are too wide or too narrow by a
constant factor is handled too. The first ``warmup`` stable items only
estimate the mean.

``detector="bocpd"`` replaces the CUSUM by Bayesian online changepoint
detection (Adams & MacKay 2007; :mod:`onlinejax.changepoint`) on the same
standardised residuals: each of 16 run-length hypotheses has its own
inverse-gamma posterior of the residuals' variance
(:func:`~onlinejax.changepoint.scale_runs_update`), and the machine alarms
when the posterior probability that the variance changed between
:data:`PERSIST_ITEMS` and :data:`RECENT_ITEMS` items ago exceeds ½ (after
``warmup`` items; ``hazard`` is the prior probability of a change per item):
a single outlier is explained by a new run of length 1 that the following
items close again, a drift's run persists. A constant miscalibration is
absorbed into the runs' variance, as the CUSUM's relative test absorbs it.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from .changepoint import ScaleRunsState, recent_change_probability, scale_runs_init, scale_runs_update

Array = jax.Array

__all__ = ["DetectorState", "detect", "DETECTORS"]

DETECTORS = ("cusum", "frozen", "bocpd")

#: ``detector="bocpd"``: run-length hypotheses kept, and the alarm's horizon: a change between
#: ``PERSIST_ITEMS`` and ``RECENT_ITEMS`` items ago (a single outlier opens a run of length 1 that the next
#: items mostly close again; a drift's run keeps growing).
DETECTOR_RUNS, RECENT_ITEMS, PERSIST_ITEMS = 16, 8, 3


class DetectorState(NamedTuple):
    """CUSUM state for the current stable phase.

    Attributes:
      n: ``[]`` int32 stable items seen since the phase began.
      mean_z2: ``[]`` running mean of the (clipped) standardised squared residuals,
        started from a pseudo-observation of 1 (the calibrated value).
      cusum: ``[]`` the statistic ``g``.
      runs: ``detector="bocpd"``'s run-length posterior
        (:class:`~onlinejax.changepoint.ScaleRunsState`, ``R =`` :data:`DETECTOR_RUNS`); ``None`` otherwise.
      losing: ``[]`` the weighted share of the phase's items on which the
        learner lost to both naive forecasts (``naive_alarm``; 0 otherwise).
    """

    n: Array
    mean_z2: Array
    cusum: Array
    runs: Optional[ScaleRunsState] = None
    losing: Optional[Array] = None


def _fresh_detector(dt, n_runs: int = 0) -> DetectorState:
    """The detector of a new stable phase (``n_runs``: ``detector="bocpd"``'s hypotheses, 0 for the others)."""
    runs = scale_runs_init(n_runs, dt) if n_runs else None
    z = jnp.zeros((), dt)
    return DetectorState(n=jnp.zeros((), jnp.int32), mean_z2=jnp.ones((), dt), cusum=z, runs=runs, losing=z)


def detect(options: Any, det: DetectorState, z2: Array, abs_err: Array,
           reference: Array) -> tuple[DetectorState, Array]:
    """One stable item through the drift detector (see the module doc).

    ``"cusum"`` (Page 1954, Page–Hinkley form, on the relative standardised
    squared residual): ``r = min(z²/mean(z²), clip)``,
    ``g ← max(0, g + r - 1 - drift)`` once ``warmup`` items estimated the
    mean, alarm when ``g > threshold`` or (with ``shock``) when
    ``z²/mean(z²) > shock``; the mean is updated with ``r·mean`` (so one item
    moves it by at most the factor ``clip``). ``"frozen"`` (the thesis's rule,
    5.3): alarm when ``|e| > frozen_factor · reference``, no state.

    Args:
      options: the machine's :class:`~onlinejax.adaptive.AdaptiveOptions` (static; read: ``detector``,
        ``threshold``, ``drift``, ``warmup``, ``clip``, ``shock``, ``frozen_factor``, ``hazard``).
      det: :class:`DetectorState` of the current stable phase.
      z2: ``[]`` ``(y - μ)²/σ²``; abs_err: ``[]`` ``|y - μ|``.
      reference: ``[]`` the mean ``|e|`` of the last learning phase.
    Returns:
      ``(det, alarm)``: the new detector state and a ``[]`` bool.
    """
    o = options
    if o.detector == "frozen":
        return det, abs_err > o.frozen_factor * reference
    dt = det.mean_z2.dtype
    tiny = jnp.finfo(dt).tiny
    ratio = z2 / jnp.maximum(det.mean_z2, tiny)
    shocked = (ratio > o.shock) if o.shock is not None else False
    r = jnp.minimum(ratio, o.clip)
    warm = det.n >= o.warmup
    g = jnp.where(warm, jnp.maximum(0.0, det.cusum + r - 1.0 - o.drift), 0.0)
    nf = det.n.astype(dt)
    mean = (det.mean_z2 * (nf + 1.0) + r * det.mean_z2) / (nf + 2.0)
    if o.detector == "bocpd":
        runs = scale_runs_update(det.runs, z2, o.hazard)
        alarm = warm & (recent_change_probability(runs, RECENT_ITEMS, PERSIST_ITEMS) > 0.5)
        return det._replace(n=det.n + 1, mean_z2=mean, runs=runs), alarm | shocked
    return det._replace(n=det.n + 1, mean_z2=mean, cusum=g), (warm & (g > o.threshold)) | shocked

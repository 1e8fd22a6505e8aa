"""The drift detectors of the state machine (:func:`~onlinejax.wrappers.adaptive.adaptive`'s ``detector=``).

A detector is a value: a small immutable record (a frozen dataclass, equal
and hashable by its options, as the machine's static options must be) built
by a factory of this module, :func:`cusum`, :func:`frozen` or
:func:`bocpd_detector`, that carries the options it uses and its own two
pure functions: ``init(dtype)``, the state of a new stable phase
(:class:`DetectorState`), and ``update(det, z2, abs_err, reference)``, one
stable item through the alarm rule. The machine calls them; it does not
branch on the detector's kind. :class:`Detector` is their common type.

The thesis compared each error with a reference frozen at the end of the
last learning phase; that reference includes the large errors of the
learning phase itself (cold start, or the first items after a drift), so a
later drift of the same size stays under it and is missed. Our reading of
that rule is available as ``detector=frozen()`` (alarm when ``|e| >
factor × mean |e|`` of the last learning phase).

The default ``detector=cusum()`` is a one-sided CUSUM (Page, 1954; the
Page–Hinkley form) on the **standardised** squared residual
``z² = (y - μ)²/σ²`` of the learner's own predictive distribution, made
scale-free by dividing by its running mean in the current stable phase
(``r = z² / mean(z²)``, clipped at ``ratio_clip`` so one outlier adds at most
``ratio_clip - 1 - drift`` to ``g``): ``g ← max(0, g + r - 1 - drift)``, alarm when
``g > threshold``. At the defaults (``ratio_clip=10``) one item adds at most 8.5
against a threshold of 20, so it takes three large residuals close together
to alarm; a single outlier cannot (it could with ``ratio_clip >= threshold + 1 +
drift``). Why: with the model frozen in a stable phase and i.i.d. inputs,
the ``z²`` of a misspecified learner (a GP extrapolating at the window's
edge, a discontinuity) are heavy-tailed, and with a clip above the threshold
single outliers raise most alarms — each one a needless tune, and a model
refitted to the few items after the outlier. A real drift saturates ``r`` at
``ratio_clip``, so it is still caught within about three items.
Under no drift ``r`` has mean 1, so ``g`` drifts down by ``drift`` per item;
for a calibrated learner (``z² ~ χ²₁``) the mean run length to a false
alarm is at least ``exp(θ·threshold)`` stable items, with ``θ > 0`` the root
of ``E[exp(θ(r - 1 - drift))] = 1`` (Lorden 1971; about 340 items at the
defaults, a guaranteed minimum: the Gaussian approximation
``exp(drift·threshold)`` ≈ 2·10⁴ overstates it for χ²₁ residuals), while a
drift that multiplies the squared error by ``k`` is detected after about
``threshold/(k - 1 - drift)`` items. Because the test is relative to the
phase's own mean, a learner whose intervals are too wide or too narrow by a
constant factor is handled too. The first ``reference_items`` stable items only
estimate the mean.

``detector=bocpd_detector()`` replaces the CUSUM by Bayesian online changepoint
detection (Adams & MacKay 2007; :mod:`onlinejax.wrappers.changepoint`) on the same
standardised residuals: each of 16 run-length hypotheses has its own
inverse-gamma posterior of the residuals' variance
(:func:`~onlinejax.wrappers.changepoint.scale_runs_update`), and the machine alarms
when the posterior probability that the variance changed between
:data:`PERSIST_ITEMS` and :data:`RECENT_ITEMS` items ago exceeds ½ (after
``reference_items`` items; ``hazard`` is the prior probability of a change per item):
a single outlier is explained by a new run of length 1 that the following
items close again, a drift's run persists. A constant miscalibration is
absorbed into the runs' variance, as the CUSUM's relative test absorbs it.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from .changepoint import ScaleRunsState, recent_change_probability, scale_runs_init, scale_runs_update
from ..core.checks import check_in_range, check_int, check_positive

Array = jax.Array

__all__ = ["Detector", "CusumDetector", "FrozenDetector", "BOCPDDetector", "DetectorState", "cusum", "frozen",
           "bocpd_detector"]

#: :func:`bocpd_detector`: run-length hypotheses kept, and the alarm's horizon: a change between
#: ``PERSIST_ITEMS`` and ``RECENT_ITEMS`` items ago (a single outlier opens a run of length 1 that the next
#: items mostly close again; a drift's run keeps growing).
DETECTOR_RUNS, RECENT_ITEMS, PERSIST_ITEMS = 16, 8, 3


class DetectorState(NamedTuple):
    """The drift detector's state for the current stable phase.

    Attributes:
      n: ``[]`` int32 stable items seen since the phase began.
      mean_z2: ``[]`` running mean of the (clipped) standardised squared residuals,
        started from a pseudo-observation of 1 (the calibrated value).
      cusum: ``[]`` the statistic ``g`` (:func:`cusum`; 0 for the other detectors).
      runs: :func:`bocpd_detector`'s run-length posterior
        (:class:`~onlinejax.wrappers.changepoint.ScaleRunsState`, ``R =`` :data:`DETECTOR_RUNS`); ``None`` otherwise.
      losing: ``[]`` the weighted share of the phase's items on which the
        learner lost to both naive forecasts (``MachineOptions.naive_alarm``; 0 otherwise).
    """

    n: Array
    mean_z2: Array
    cusum: Array
    runs: Optional[ScaleRunsState] = None
    losing: Optional[Array] = None


def _fresh_detector(dt, n_runs: int = 0) -> DetectorState:
    """The detector state of a new stable phase (``n_runs``: :func:`bocpd_detector`'s hypotheses, 0 for the others)."""
    runs = scale_runs_init(n_runs, dt) if n_runs else None
    z = jnp.zeros((), dt)
    return DetectorState(n=jnp.zeros((), jnp.int32), mean_z2=jnp.ones((), dt), cusum=z, runs=runs, losing=z)


@dataclasses.dataclass(frozen=True)
class Detector:
    """A drift detector: its static options and its pure ``init`` / ``update`` (build one with a factory).

    Equal detectors compare and hash equal (frozen dataclasses), so machines
    built with equal detectors share compiled programs; the ``repr`` is the
    factory call with the options that differ from its defaults.
    """

    #: the factory that builds this kind (its name is the ``repr``'s).
    _factory = "Detector"

    def init(self, dtype) -> DetectorState:
        """The state of a new stable phase (:class:`DetectorState`, arrays of ``dtype``)."""
        return _fresh_detector(dtype)

    def update(self, det: DetectorState, z2: Array, abs_err: Array,
               reference: Array) -> tuple[DetectorState, Array]:
        """One stable item through the alarm rule: ``(det, alarm)``, the new state and a ``[]`` bool.

        Args:
          det: :class:`DetectorState` of the current stable phase.
          z2: ``[]`` ``(y - μ)²/σ²``; abs_err: ``[]`` ``|y - μ|``.
          reference: ``[]`` the mean ``|e|`` of the last learning phase.
        """
        raise NotImplementedError

    def shock_test(self, det: DetectorState, z2: Array) -> Optional[Array]:
        """``[]`` bool: the item alarms on its own, ``z² > shock · mean z²`` judged on ``det`` before the item;
        ``None`` for a detector without a ``shock`` (``MachineOptions(learn_shock=False)`` then leaves no item out)."""
        shock = getattr(self, "shock", None)
        if shock is None:
            return None
        return z2 > shock * jnp.maximum(det.mean_z2, jnp.finfo(z2.dtype).tiny)

    def __repr__(self) -> str:
        changed = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                   if getattr(self, f.name) != f.default]
        return f"{self._factory}({', '.join(changed)})"


def _relative(det: DetectorState, z2: Array, reference_items: int, ratio_clip: float, shock: Optional[float]):
    """The relative residual of :func:`cusum` and :func:`bocpd_detector`: ``(r, warm, shocked)``.

    ``r = min(z²/mean(z²), ratio_clip)``; ``warm``: ``reference_items`` items estimated the
    mean; ``shocked``: ``z²/mean(z²) > shock`` (``False`` without ``shock``).
    """
    tiny = jnp.finfo(det.mean_z2.dtype).tiny
    ratio = z2 / jnp.maximum(det.mean_z2, tiny)
    shocked = (ratio > shock) if shock is not None else False
    return jnp.minimum(ratio, ratio_clip), det.n >= reference_items, shocked


def _mean_after(det: DetectorState, r: Array) -> Array:
    """The phase's running mean of ``z²`` after an item of relative residual ``r`` (updated with ``r·mean``)."""
    nf = det.n.astype(det.mean_z2.dtype)
    return (det.mean_z2 * (nf + 1.0) + r * det.mean_z2) / (nf + 2.0)


@dataclasses.dataclass(frozen=True, repr=False)
class CusumDetector(Detector):
    """:func:`cusum`'s detector (see its Args for the fields)."""

    _factory = "cusum"
    threshold: float = 20.0
    drift: float = 0.5
    reference_items: int = 20
    ratio_clip: float = 10.0
    shock: Optional[float] = 1e3

    def update(self, det, z2, abs_err, reference):
        """Page's CUSUM on ``r = min(z²/mean(z²), ratio_clip)`` (module doc): ``g ← max(0, g + r - 1 - drift)``
        once ``reference_items`` items estimated the mean; alarm when ``g > threshold`` or ``z²/mean(z²) > shock``."""
        r, warm, shocked = _relative(det, z2, self.reference_items, self.ratio_clip, self.shock)
        g = jnp.where(warm, jnp.maximum(0.0, det.cusum + r - 1.0 - self.drift), 0.0)
        mean = _mean_after(det, r)
        return det._replace(n=det.n + 1, mean_z2=mean, cusum=g), (warm & (g > self.threshold)) | shocked


@dataclasses.dataclass(frozen=True, repr=False)
class FrozenDetector(Detector):
    """:func:`frozen`'s detector (see its Args for the field)."""

    _factory = "frozen"
    factor: float = 3.0

    def update(self, det, z2, abs_err, reference):
        """The thesis's rule (5.3): alarm when ``|e| > factor · reference``; the state is left as it is."""
        return det, abs_err > self.factor * reference


@dataclasses.dataclass(frozen=True, repr=False)
class BOCPDDetector(Detector):
    """:func:`bocpd_detector`'s detector (see its Args for the fields)."""

    _factory = "bocpd_detector"
    hazard: float = 1 / 250
    reference_items: int = 20
    ratio_clip: float = 10.0
    shock: Optional[float] = 1e3

    def init(self, dtype) -> DetectorState:
        return _fresh_detector(dtype, DETECTOR_RUNS)

    def update(self, det, z2, abs_err, reference):
        """The runs' posterior takes ``z²`` (:func:`~onlinejax.wrappers.changepoint.scale_runs_update`); alarm once
        ``reference_items`` items passed when a change between :data:`PERSIST_ITEMS` and :data:`RECENT_ITEMS` items
        ago has posterior probability above ½, or when ``z²/mean(z²) > shock``."""
        r, warm, shocked = _relative(det, z2, self.reference_items, self.ratio_clip, self.shock)
        mean = _mean_after(det, r)
        runs = scale_runs_update(det.runs, z2, self.hazard)
        alarm = warm & (recent_change_probability(runs, RECENT_ITEMS, PERSIST_ITEMS) > 0.5)
        return det._replace(n=det.n + 1, mean_z2=mean, runs=runs), alarm | shocked


def _checked_relative(reference_items, ratio_clip, shock) -> tuple[int, float, Optional[float]]:
    """``reference_items``, ``ratio_clip`` and ``shock`` checked (ValueErrors naming them) and as Python numbers."""
    reference_items = check_int(reference_items, "reference_items", 1)
    check_positive(ratio_clip, "ratio_clip")
    if shock is not None:
        check_positive(shock, "shock")
        if not float(shock) > 1.0:
            raise ValueError(f"shock: must be > 1, got {shock!r}")
        shock = float(shock)
    return reference_items, float(ratio_clip), shock


def cusum(threshold: float = 20.0, drift: float = 0.5, reference_items: int = 20, ratio_clip: float = 10.0,
          shock: Optional[float] = 1e3) -> CusumDetector:
    """The relative CUSUM on the standardised squared residuals (the machine's default; module doc).

    Args:
      threshold: the alarm level ``λ`` of ``g`` (> 0).
      drift: the allowance ``δ`` subtracted per item (finite, >= 0).
      reference_items: the stable items that only estimate the phase's mean ``z²`` (int >= 1).
      ratio_clip: the clip of ``r = z²/mean(z²)`` (> ``1 + drift``: one item adds at most
        ``ratio_clip - 1 - drift`` to ``g``).
      shock: ``None``, or alarm at once on one item whose ``z²`` exceeds
        ``shock`` times the phase's mean ``z²`` (> 1; default 10³: a
        residual of ~32 standard deviations, which a calibrated model all
        but never makes). The clipped CUSUM needs about three large residuals
        to alarm; a frozen model scores each of them, and after a jump each
        can cost thousands of nats of log score.
    Returns:
      A :class:`CusumDetector` for :func:`~onlinejax.wrappers.adaptive.adaptive`'s ``detector=``.

    Example::

      >>> cusum(threshold=30.0)
      cusum(threshold=30.0)
    """
    check_positive(threshold, "threshold")
    if not 0.0 <= float(drift) < float("inf"):
        raise ValueError(f"drift: must be finite and >= 0, got {drift!r}")
    reference_items, ratio_clip, shock = _checked_relative(reference_items, ratio_clip, shock)
    if ratio_clip <= 1.0 + float(drift):
        raise ValueError(f"ratio_clip: must exceed 1 + drift = {1.0 + float(drift)!r} (an item adds at most "
                         f"ratio_clip - 1 - drift to g, so the CUSUM could never alarm), got {ratio_clip!r}")
    return CusumDetector(float(threshold), float(drift), reference_items, ratio_clip, shock)


def frozen(factor: float = 3.0) -> FrozenDetector:
    """The thesis's frozen-reference rule (5.3): alarm when ``|e| > factor × mean |e|`` of the last learning phase.

    Args:
      factor: the multiple of the reference error (> 0).
    Returns:
      A :class:`FrozenDetector` for :func:`~onlinejax.wrappers.adaptive.adaptive`'s ``detector=``.
    """
    check_positive(factor, "factor")
    return FrozenDetector(float(factor))


def bocpd_detector(hazard: float = 1 / 250, reference_items: int = 20, ratio_clip: float = 10.0,
                   shock: Optional[float] = 1e3) -> BOCPDDetector:
    """Bayesian online changepoint detection on the standardised residuals' scale (module doc).

    Args:
      hazard: the prior probability of a change per item, in (0, 1).
      reference_items: the stable items before the runs' posterior may alarm (int >= 1).
      ratio_clip: the clip of ``z²/mean(z²)`` in the phase's running mean of ``z²`` (> 0), which ``shock`` reads.
      shock: ``None``, or alarm at once on one item whose ``z²`` exceeds ``shock`` times the phase's mean
        ``z²`` (> 1), as :func:`cusum`'s.
    Returns:
      A :class:`BOCPDDetector` (:data:`DETECTOR_RUNS` run-length hypotheses) for
      :func:`~onlinejax.wrappers.adaptive.adaptive`'s ``detector=``.
    """
    check_in_range(hazard, "hazard", 0.0, 1.0, hi_open=True)
    reference_items, ratio_clip, shock = _checked_relative(reference_items, ratio_clip, shock)
    return BOCPDDetector(float(hazard), reference_items, ratio_clip, shock)

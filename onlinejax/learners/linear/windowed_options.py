"""The static options of :func:`~onlinejax.learners.linear.windowed_bayes_linreg`: :class:`WindowedOptions` and its checks.

The learner itself (state, init, learn, predict, evict, tune and the factory)
is :mod:`onlinejax.learners.linear.windowed`; this record says which bound it predicts
with and what its ``tune`` does, checked against the window length by
:func:`checked_options`.
"""
from __future__ import annotations

from typing import NamedTuple

from ...core.checks import check_bool, check_in_range, check_record

__all__ = ["BOUNDS", "WindowedOptions", "checked_options"]

BOUNDS = ("bayes", "asymptotic")


class WindowedOptions(NamedTuple):
    """The static options of :func:`windowed_bayes_linreg`: an immutable, hashable record of Python values.

    Passed as one value (``windowed_bayes_linreg(d, W, options=WindowedOptions(bounds="asymptotic"))``);
    equal records build the same learner. Changing a field compiles a new program.

    Attributes:
      bounds: ``"bayes"`` (default): predictive variance ``1/beta + xᵀSx`` (Bishop eq. 3.59);
        ``"asymptotic"``: the thesis's asymptotic bound (eq. 4.17) ``s²(1 + beta·xᵀSx)`` with ``s²``
        the window's residual variance ``RSS/(n - d)`` (``beta·S`` stands for ``(XXᵀ)⁻¹``; equal when the
        prior is negligible), an extra ``O(Wd)`` per item. While the window has ``n <= d + 2`` items
        (fewer than three residual degrees of freedom, where the Student-t predictive that ``s²`` stands
        for has no variance) ``s² = Σy²/n``, the residual variance of the nested model without
        parameters (prediction 0, the prior mean).
      standardize: at each ``tune``, fix per-feature scales ``s_j`` = the root mean square of feature
        ``j`` over the window and work on ``x / s`` until the next tune (``alpha`` is then the prior
        precision of the scaled features' weights, as in ridge regression on standardised inputs;
        default True). Why: mapped features of inputs of scale 50–100 span 1–10⁴, and a float32
        square-root covariance of such features loses all precision. The tune also floors the prior
        precision at ``sqrt(eps)·β·n`` (float32: 3.5e-4 of the data precision, float64: 1.5e-8), at
        the price of a small bias where a noise-free stream would be fitted exactly. ``False`` keeps
        the raw features (the thesis's model; fine in float64 or for inputs of order 1).
      tune_evidence: ``tune`` re-estimates ``alpha``/``beta`` (type-II ML; default True). ``False``:
        ``tune`` keeps the model — ``beta`` and ``init``'s prior on the *raw* features' weights
        (``prior_alpha / s²`` on the scaled ones, then the floor) — and only re-standardises and
        rebuilds the factor from the window (what :func:`~onlinejax.learners.linear.bayesian_mle_windowed` uses).
      capacity: the ring buffer's size ``W >= window`` (default ``None``: ``window``). The per-item cost
        does not depend on it (the posterior is updated and downdated in ``O(d²)``); ``tune`` and the
        asymptotic bound's residual variance cost ``O(W d²)`` and ``O(W d)``.
      onestep_floor: floor the noise variance of either bound at the mean squared recursive residual
        of the items learned since the last ``tune`` (module doc; default True). ``False``: the
        bounds exactly as above.
      prior_floor: ``None`` (default) or ``c ∈ (0, 1]``: the evidence tune keeps every raw weight's
        prior precision at least ``c·alpha`` (``init``'s), i.e. ``c·alpha/s_j²`` on the scaled weights.
        Why: a window in which a feature barely varies (repeated or clustered inputs) gives it a tiny
        scale ``s_j``, and one evidence estimate shared by all the scaled weights then leaves its raw
        weight almost free, to be extrapolated a thousandfold where the feature varies again.
    """

    bounds: str = "bayes"
    standardize: bool = True
    tune_evidence: bool = True
    capacity: int | None = None
    onestep_floor: bool = True
    prior_floor: float | None = None

    def checked(self, window: int, name: str = "options") -> "WindowedOptions":
        """The record checked against the window length ``window``, ``capacity`` resolved and numbers as Python's.

        Raises:
          ValueError: naming the field (``options.capacity: ...``).
        """
        if self.bounds not in BOUNDS:
            raise ValueError(f"{name}.bounds: must be one of {BOUNDS}, got {self.bounds!r}")
        for field in ("standardize", "tune_evidence", "onestep_floor"):
            check_bool(getattr(self, field), f"{name}.{field}")
        cap = self.capacity
        W_cap = window if cap is None else (int(cap) if not isinstance(cap, bool) else 0)
        if cap is not None and (W_cap != cap or W_cap < window):
            raise ValueError(f"{name}.capacity: must be an integer >= window ({window}), got {cap!r}")
        floor = self.prior_floor
        if floor is not None:
            check_in_range(floor, f"{name}.prior_floor", 0.0, 1.0)
            floor = float(floor)
        return WindowedOptions(self.bounds, bool(self.standardize), bool(self.tune_evidence), W_cap,
                               bool(self.onestep_floor), floor)


def checked_options(options, window: int, name: str = "options") -> WindowedOptions:
    """``options`` checked (:meth:`WindowedOptions.checked`); a TypeError unless it is a :class:`WindowedOptions`."""
    return check_record(options, WindowedOptions, name).checked(window, name)

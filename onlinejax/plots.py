"""Matplotlib figures (optional extra: ``pip install onlinejax[plot]``): the papers' figures.

Every function takes ``path``: given, the figure is saved as a PNG, closed and the path returned;
``None`` returns the open figure (for notebooks, where it is shown inline).
"""
from __future__ import annotations

import numpy as np

__all__ = ["plot_running_error", "plot_windowed_error", "plot_intervals", "plot_coverage", "plot_phases",
           "plot_grid_summary", "plot_pit", "pit_values", "sliding_mean"]


def _plt():
    try:
        # no matplotlib.use(): headless machines fall back to Agg by themselves, and forcing it
        # would stop notebooks from showing figures inline
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("plots need matplotlib: pip install 'onlinejax[plot]'") from e
    return plt


def _save_or_return(fig, path):
    fig.tight_layout()
    if path is None:
        return fig
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _finish(fig, ax, title, path):
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save_or_return(fig, path)


def sliding_mean(v, window: int) -> np.ndarray:
    """Mean of the last ``min(i + 1, window)`` values at every position ``i``: ``[n] -> [n]``."""
    v = np.asarray(v, np.float64)
    c = np.concatenate([[0.0], np.cumsum(v)])
    i = np.arange(1, len(v) + 1)
    lo = np.maximum(0, i - int(window))
    return (c[i] - c[lo]) / (i - lo)


def plot_running_error(curves: dict, path=None, *, title="Running MAE", drift_span=None, ylabel="running MAE"):
    """Plot running-error curves, one per learner, and save a PNG.

    Args:
      curves: ``{name: [n] array}``.
      path: output PNG (``None``: return the figure).
      drift_span: optional ``(start, end)`` item indices shaded as the drift.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 5))
    for name, c in curves.items():
        ax.plot(np.arange(1, len(c) + 1), np.asarray(c), label=name, lw=1.4)
    if drift_span is not None:
        ax.axvspan(*drift_span, alpha=0.12, color="green", label="transition")
    ax.set_xlabel("# items seen")
    ax.set_ylabel(ylabel)
    return _finish(fig, ax, title, path)


def plot_windowed_error(curves: dict, path=None, *, drift_at=None, title="Sliding-window SMSE", window: int = 100):
    """Sliding-window error curves with the drift marked, saved as a PNG.

    Args:
      curves: ``{name: [n] array}`` of per-item errors already averaged over
        a sliding window (e.g. ``(y - μ)²`` smoothed and divided by ``Var[y]``).
      path: output PNG (``None``: return the figure).
      drift_at: optional item index of a concept drift (vertical line).
      window: the window length, for the axis label.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 5))
    for name, c in curves.items():
        ax.plot(np.arange(1, len(c) + 1), np.asarray(c), label=name, lw=1.3)
    if drift_at is not None and drift_at >= 0:
        ax.axvline(drift_at, color="k", ls="--", lw=1, label="concept drift")
    ax.set_yscale("log")
    ax.set_xlabel("# items seen")
    ax.set_ylabel(f"squared error / Var[y], mean over the last {window} items")
    return _finish(fig, ax, title, path)


def plot_intervals(y, mean, lower, upper, path=None, *, start: int = 0, title="Predictions with 95% intervals",
                   drift_at=None, ylabel="target y"):
    """Targets, predictive means and a central interval band over item index, saved as a PNG.

    Args:
      y, mean, lower, upper: ``[m]`` arrays for items ``start .. start + m - 1``.
      path: output PNG (``None``: return the figure).
      drift_at: optional item index of a concept drift (vertical line).
      ylabel: the y axis's label (the target's name and unit, where known).
    """
    plt = _plt()
    t = np.arange(start, start + len(np.asarray(y)))
    fig, ax = plt.subplots(figsize=(9, 5))
    ax.fill_between(t, np.asarray(lower), np.asarray(upper), alpha=0.25, label="interval")
    ax.plot(t, np.asarray(mean), lw=1.2, label="predictive mean")
    ax.plot(t, np.asarray(y), ".", ms=2.5, color="k", label="target")
    if drift_at is not None and start <= drift_at < t[-1] + 1:
        ax.axvline(drift_at, color="k", ls="--", lw=1, label="concept drift")
    ax.set_xlabel("item")
    ax.set_ylabel(ylabel)
    return _finish(fig, ax, title, path)


def plot_coverage(covered: dict, path=None, *, window: int = 100, level: float = 0.95, drift_at=None,
                  title="Interval coverage over time"):
    """Sliding-window coverage of central intervals, one curve per learner, with the nominal level.

    Args:
      covered: ``{name: [n] bool}``, whether item ``i``'s target fell inside its interval.
      window: items per coverage estimate.
      level: the nominal coverage (horizontal line).
      drift_at: optional item index of a concept drift (vertical line).
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, c in covered.items():
        ax.plot(np.arange(1, len(c) + 1), sliding_mean(np.asarray(c, np.float64), window), label=name, lw=1.3)
    ax.axhline(level, color="grey", ls=":", lw=1.2, label=f"nominal {level:.0%}")
    if drift_at is not None and drift_at >= 0:
        ax.axvline(drift_at, color="k", ls="--", lw=1, label="concept drift")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("# items seen")
    ax.set_ylabel(f"share of the last {window} targets inside the interval")
    return _finish(fig, ax, title, path)


def plot_phases(error, modes, path=None, *, names=("cold start", "stable", "high error", "tune"), window: int = 50,
                drift_at=None, title="Error and the state machine's phases"):
    """A smoothed error curve over item index with the windowed learners' phases shaded.

    Args:
      error: ``[n]`` per-item errors (e.g. squared); shown as a sliding mean over ``window`` items.
      modes: ``[n]`` int phase of each item (:func:`onlinejax.wrappers.adaptive.record_mode`,
        ``0..len(names)-1``, see :data:`onlinejax.wrappers.adaptive.MODES`).
      names: label of each phase.
    """
    plt = _plt()
    modes = np.asarray(modes)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    colours = ["tab:blue", "tab:green", "tab:red", "tab:orange", "tab:purple"]
    start = 0
    seen = set()
    for i in range(1, len(modes) + 1):  # shade runs of equal phase
        if i == len(modes) or modes[i] != modes[start]:
            m = int(modes[start])
            ax.axvspan(start, i, color=colours[m % len(colours)], alpha=0.15, lw=0,
                       label=None if m in seen else names[m] if m < len(names) else str(m))
            seen.add(m)
            start = i
    ax.plot(np.arange(len(error)), sliding_mean(error, window), color="k", lw=1.2, label=f"error, mean of last {window}")
    if drift_at is not None:
        ax.axvline(drift_at, color="k", ls="--", lw=1, label="concept drift")
    ax.set_yscale("log")
    ax.set_xlabel("item")
    return _finish(fig, ax, title, path)


#: Panel titles of :func:`plot_grid_summary`: what each metric is and which way is better.
METRIC_LABELS = {
    "smse": "SMSE (MSE / Var y; lower is better)",
    "smse_st": "SMSE-ST (stable items; lower is better)",
    "icr": "ICR: coverage of the 95% intervals",
    "saiw": "SAIW (interval width / |mean y|)",
    "mlpd": "MLPD (nats; higher is better)",
    "mlpd_from": "MLPD from item 3 (nats; higher is better)",
    "skill": "log-score skill over climatology (nats)",
    "crps": "CRPS (lower is better)",
    "atpi": "ATPI: seconds per item",
}


def plot_grid_summary(summary, path=None, *, by: str = "family", metrics=("smse", "icr"),
                      title="Grid summary (mean over streams)", level: float = 0.95):
    """Bars of :meth:`onlinejax.runner.GridResult.summary` rows, one panel per metric.

    Args:
      summary: the summary's rows (a list of dicts) or its ``pandas.DataFrame``.
      by: the column naming each bar.
      metrics: one panel each, titled from :data:`METRIC_LABELS`; ``icr`` gets a line at ``level``.
    """
    plt = _plt()
    rows = summary.to_dict("records") if hasattr(summary, "to_dict") else list(summary)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 4.2), squeeze=False)
    labels = [str(r[by]) for r in rows]
    for ax, m in zip(axes[0], metrics):
        ax.bar(np.arange(len(rows)), [r[m] for r in rows], color="tab:blue")
        if m.startswith("icr"):
            ax.axhline(level, color="k", ls=":", lw=1, label=f"nominal {level:.0%}")
            ax.legend(fontsize=8)
        ax.set_xticks(np.arange(len(rows)), labels, rotation=35, ha="right", fontsize=8)
        ax.set_title(METRIC_LABELS.get(m, m.upper()), fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(title)
    return _save_or_return(fig, path)


def pit_values(y, mean, var) -> np.ndarray:
    """Probability integral transform ``Φ((y - μ)/σ)`` of Gaussian predictions (Dawid 1984), ``[n]``.

    Calibrated predictions give PIT values uniform on [0, 1]; a U shape means
    intervals too narrow, a hump too wide, a slope a biased mean.
    """
    import math

    y, mean, var = (np.asarray(a, np.float64) for a in (y, mean, var))
    ok = np.isfinite(y) & np.isfinite(mean) & np.isfinite(var) & (var > 0)
    z = (y[ok] - mean[ok]) / np.sqrt(var[ok])
    return 0.5 * np.vectorize(math.erfc, otypes=[float])(-z / math.sqrt(2.0))


def plot_pit(pits: dict, path=None, *, bins: int = 20, title="Calibration: PIT histograms"):
    """One PIT histogram per learner (density scale: a calibrated learner is flat at 1).

    Args:
      pits: ``{name: [n] PIT values}`` (see :func:`pit_values`).
      path: output PNG (``None``: return the figure).
      bins: histogram bins on [0, 1].
    """
    plt = _plt()
    k = max(1, len(pits))
    cols = min(k, 3)
    rows = -(-k // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, (name, v) in zip(axes.ravel(), pits.items()):
        ax.hist(np.asarray(v), bins=bins, range=(0.0, 1.0), density=True, color="tab:blue", alpha=0.75)
        ax.axhline(1.0, color="k", lw=1, ls="--", label="calibrated")
        ax.set_xlim(0, 1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("PIT = predictive CDF at the target")
        ax.set_ylabel("density")
    for ax in axes.ravel()[k:]:
        ax.axis("off")
    fig.suptitle(title)
    return _save_or_return(fig, path)

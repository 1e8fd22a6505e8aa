"""Matplotlib figures (optional extra: ``pip install onlinejax[plot]``)."""
from __future__ import annotations

import numpy as np

__all__ = ["plot_running_error", "plot_windowed_error", "plot_intervals"]


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("plots need matplotlib: pip install 'onlinejax[plot]'") from e
    return plt


def plot_running_error(curves: dict, path, *, title="Running MAE", drift_span=None, ylabel="running MAE"):
    """Plot running-error curves, one per learner, and save a PNG.

    Args:
      curves: ``{name: [n] array}``.
      path: output file.
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
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_windowed_error(curves: dict, path, *, drift_at=None, title="Sliding-window SMSE", window: int = 100):
    """Sliding-window error curves with the drift marked, saved as a PNG.

    Args:
      curves: ``{name: [n] array}`` of per-item errors already averaged over
        a sliding window (e.g. ``(y - μ)²`` smoothed and divided by ``Var[y]``).
      path: output file.
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
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_intervals(y, mean, lower, upper, path, *, start: int = 0, title="Predictions with 95% intervals",
                   drift_at=None):
    """Targets, predictive means and a central interval band over item index, saved as a PNG.

    Args:
      y, mean, lower, upper: ``[m]`` arrays for items ``start .. start + m - 1``.
      path: output file.
      drift_at: optional item index of a concept drift (vertical line).
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
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

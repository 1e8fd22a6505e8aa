"""Matplotlib figures (optional extra: ``pip install onlinejax[plot]``)."""
from __future__ import annotations

import numpy as np

__all__ = ["plot_running_error"]


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

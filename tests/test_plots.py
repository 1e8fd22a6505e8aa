"""Every figure writes a non-empty PNG with a path and returns a Figure without one."""
import numpy as np
import pytest

pytest.importorskip("matplotlib")
from onlinejax import plots  # noqa: E402

pytestmark = pytest.mark.float32_only  # figures


def test_every_plot_saves_and_returns(tmp_path):
    import matplotlib.figure

    r = np.random.default_rng(0)
    calls = {
        "running": lambda p: plots.plot_running_error({"a": r.random(50)}, p, drift_span=(10, 20)),
        "windowed": lambda p: plots.plot_windowed_error({"a": r.random(50) + 0.1}, p, drift_at=25),
        "intervals": lambda p: plots.plot_intervals(r.random(30), r.random(30), r.random(30) - 1, r.random(30) + 1, p),
        "coverage": lambda p: plots.plot_coverage({"a": r.random(60) < 0.9}, p, window=10, drift_at=30),
        "phases": lambda p: plots.plot_phases(r.random(60) + 0.1, np.repeat([0, 3, 1, 2], 15), p, drift_at=30),
        "summary": lambda p: plots.plot_grid_summary([{"family": "A", "smse": 0.1, "icr": 0.9},
                                                      {"family": "B", "smse": 0.2, "icr": 0.95}], p),
    }
    for name, f in calls.items():
        path = tmp_path / f"{name}.png"
        assert f(path) == path and path.stat().st_size > 1000, name
        fig = f(None)
        assert isinstance(fig, matplotlib.figure.Figure), name
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_sliding_mean_against_a_loop():
    v = np.random.default_rng(1).random(40)
    ref = [v[max(0, i - 6):i + 1].mean() for i in range(40)]
    np.testing.assert_allclose(plots.sliding_mean(v, 7), ref, rtol=1e-12)


def test_pit_values_and_histogram(tmp_path):
    from scipy import stats

    from onlinejax.plots import pit_values, plot_pit

    rng = np.random.default_rng(0)
    mu, var = rng.normal(size=500), rng.uniform(0.5, 2.0, 500)
    y = mu + np.sqrt(var) * rng.normal(size=500)
    pit = pit_values(y, mu, var)
    np.testing.assert_allclose(pit, stats.norm.cdf(y, mu, np.sqrt(var)), rtol=1e-12)
    assert stats.kstest(pit, "uniform").pvalue > 1e-3
    # a zero or NaN variance is left out, not turned into NaN
    assert len(pit_values([0.0, 1.0], [0.0, 0.0], [0.0, np.nan])) == 0
    path = plot_pit({"calibrated": pit, "too narrow": pit_values(y, mu, var / 10)}, str(tmp_path / "pit.png"))
    assert (tmp_path / "pit.png").stat().st_size > 5000 and path.endswith("pit.png")

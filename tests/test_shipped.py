"""Real data sets shipped inside River, and the lag-matrix helper."""
import numpy as np
import pytest

import onlinejax as oj


def test_lagged_matches_definition():
    s = np.arange(10.0) ** 2
    X, y = oj.data.lagged(s, 3)
    assert X.shape == (7, 3) and y.shape == (7,)
    for i in range(7):
        t = i + 3
        assert y[i] == s[t] and list(X[i]) == [s[t - 1], s[t - 2], s[t - 3]]
    for bad in (0, 2.5, 10, True):
        with pytest.raises(ValueError, match="lags"):
            oj.data.lagged(s, bad)
    with pytest.raises(ValueError, match="series"):
        oj.data.lagged(np.ones((3, 2)), 1)


def test_river_series_load():
    pytest.importorskip("river")
    X, y, names = oj.data.chick_weights()
    assert X.shape == (578, 3) and names == ("time", "chick", "diet") and y[:3].tolist() == [42, 40, 43]
    a = oj.data.airline_passengers()
    assert a.shape == (144,) and a[:3].tolist() == [112, 118, 132]
    w = oj.data.water_flow()
    assert w.shape == (1268,) and np.all(np.isfinite(w))
    days, Xt, yt, _ = oj.data.trump_approval()
    assert Xt.shape == (1001, 5) and np.all(np.diff(days) >= 0)

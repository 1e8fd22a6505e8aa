import numpy as np
import pytest

import onlinejax as oj
from onlinejax.evaluation.timing import timing_report


def test_timing_report_is_consistent(rng, capsys):
    lrn = oj.windowed_bayes_linreg(2, 8)
    X = rng.normal(size=(40, 2))
    Y = X.sum(1)
    r = timing_report(lrn, X, Y, tune_interval=10)
    assert r["TT"] == pytest.approx(r["TPT"] + r["TUT"] + r["TTT"])
    assert r["ATPI"] == pytest.approx(r["TT"] / 40)
    assert r["DRmax"] == pytest.approx(1e3 / r["ATPI"])
    assert r["APT"] == pytest.approx(r["TPT"] / 40) and r["HPT"] >= r["APT"] > 0
    assert r["ATT"] == pytest.approx(r["TTT"] / 4) and r["scan_us_per_item"] > 0
    assert "DRmax" in capsys.readouterr().out


def test_timing_report_errors(rng):
    with pytest.raises(ValueError, match="tune_interval"):
        timing_report(oj.bayes_linreg(2, options=oj.BayesOptions(tunable=False)), np.ones((5, 2)), np.ones(5),
                      tune_interval=2, verbose=False)
    with pytest.raises(ValueError, match="X, Y"):
        timing_report(oj.bayes_linreg(2), np.ones((5, 2)), np.ones(4), verbose=False)

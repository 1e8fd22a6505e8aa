"""Hostile streams: every recommended learner and the adapters' default, vmapped over the pathologies.

No prediction is ever non-finite or has a variance <= 0; after a pathology
ends, coverage and MSE come back (windows of the stream after its end,
against the same seed's clean stream).
"""
import functools

import jax
import numpy as np
import pytest

from onlinejax import zoo
from onlinejax.calibration import calibrated_bayes_linreg
from onlinejax.data import hostile_stream
from conftest import DTYPE

pytestmark = pytest.mark.float32_only  # float32 is the stress case of hostile streams

N, D, SEED = 2500, 2, 7
#: pathology -> hostile_stream keywords (ending ones are checked for recovery)
CASES = {
    "clean": {},
    "constant_start": {"length": 100},
    "constant_middle": {"at": 700, "length": 300},
    "outlier": {"at": 1000, "magnitude": 1e6},
    "covariate_shift": {"at": 1000},
    "stuck_feature": {"at": 800, "length": 200},
    "heavy_tails": {},
    "trend": {},
    "wide_range": {},
    "duplicates": {"length": 5},
}
LEARNERS = ("RecommendedGP", "RecommendedKernelRegression", "RecommendedWindowedLinear", "RecommendedForgettingLinear",
            "RecommendedBOCPD", "calibrated_bayes_linreg")


@functools.cache
def _streams():
    out = {k: hostile_stream(SEED, k, N, D, dtype=np.dtype(DTYPE), **kw) for k, kw in CASES.items()}
    return out, np.stack([v[0] for v in out.values()]), np.stack([v[1] for v in out.values()])


@functools.cache
def _run(name):
    lrn = calibrated_bayes_linreg(D) if name == "calibrated_bayes_linreg" else zoo.configurations()[name].make(D)
    streams, X, Y = _streams()

    def one(X, Y):
        return jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y))[1]

    p = jax.jit(jax.vmap(one))(X, Y)
    lo, hi = p.interval(0.95)
    return {k: tuple(np.asarray(a)[i] for a in (p.mean, p.var, lo, hi)) for i, k in enumerate(streams)}


@pytest.mark.parametrize("name", LEARNERS)
def test_no_nonfinite_prediction_and_no_variance_at_or_below_zero(name):
    for case, (mean, var, lo, hi) in _run(name).items():
        ok = np.isfinite(mean) & np.isfinite(var) & (var > 0) & np.isfinite(lo) & np.isfinite(hi)
        assert ok.all(), (case, np.flatnonzero(~ok)[:10])


@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("case", ["constant_start", "constant_middle", "outlier", "covariate_shift", "stuck_feature"])
def test_coverage_and_mse_recover_after_the_pathology(name, case):
    streams = _streams()[0]
    res = _run(name)
    y, end = streams[case][1], streams[case][2]
    mean, _, lo, hi = res[case]
    covered = (y >= lo) & (y <= hi)
    # coverage over the 500 items from 300 after the end, MSE over the 500 items from 500 after it
    cov = covered[end + 300:end + 800].mean()
    assert 0.88 <= cov <= 0.99, cov
    w = slice(end + 500, end + 1000)
    y_clean, m_clean = streams["clean"][1], res["clean"][0]
    mse, mse_clean = np.mean((mean[w] - y[w]) ** 2), np.mean((m_clean[w] - y_clean[w]) ** 2)
    assert mse <= 1.5 * mse_clean + 0.05, (mse, mse_clean)

"""Short real series: each recommended learner against the Student-t climatology from item 3.

Run:  .venv/bin/python benchmarks/short_series.py [--learners A,B] [--series nile,airline] [--hedge mean|full]

Series (lagged values as features, ``onlinejax.data.lagged``): the Nile's annual flow at Aswan,
1871-1970 (R's ``datasets::Nile``, 100 values, 2 lags: 98 items), the airline passengers
(144 values, 3 lags), the first 150 items of the water flow series (2 lags) and the first 120
items of TrumpApproval (its 6 features). Per learner and series, over items 3..n (the
climatology, a Student-t with ``n − 1`` degrees of freedom, location the running mean and scale
``s·√(1 + 1/n)``, exists from the third item): the mean log-score skill over the climatology
(nats per item), the 95 % interval's coverage, the MSE relative to the running mean's (the
climatology's mean), and the ratio of the learner's 95 % interval width to the climatology's
(largest and median over the items). The issue's acceptance: skill > 0, coverage in [92, 97] %,
MSE ratio ≤ 1.3, width ratio ≤ 3 from item 3. ``--hedge``: each learner wrapped in
``onlinejax.wrappers.hedge.with_climatology`` (``mean``: ``keep_mean=True``, only the spread hedged;
``full``: the means mixed too); a second row ``(inner)`` then scores the learner inside the hedge
from the same run (the mixture's first component is its own prediction).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402

def series() -> dict:
    from onlinejax.data import shipped

    _, X, y, _ = shipped.trump_approval()
    water = shipped.lagged(shipped.water_flow(), 2)
    return {"nile": shipped.lagged(shipped.nile(), 2), "airline": shipped.lagged(shipped.airline_passengers(), 3),
            "water150": (water[0][:150], water[1][:150]), "trump120": (np.asarray(X)[:120], np.asarray(y)[:120])}


def climatology(y: np.ndarray):
    """``(log density, lower, upper, mean)`` of the Student-t climatology at items 2..n-1 (0-based), float64."""
    from scipy import stats

    out = []
    for i in range(2, len(y)):
        m, s = y[:i].mean(), max(y[:i].std(ddof=1), 1e-300) * np.sqrt(1 + 1 / i)
        lo, hi = stats.t.interval(0.95, i - 1, m, s)
        out.append((stats.t.logpdf(y[i], i - 1, m, s), lo, hi, m))
    return tuple(np.array(a) for a in zip(*out))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--learners", default=None, help="comma-separated zoo names (default: the recommended ones)")
    ap.add_argument("--series", default=None, help="comma-separated series names (default: all)")
    ap.add_argument("--hedge", choices=("mean", "full"), default=None, help="wrap each learner in with_climatology")
    args = ap.parse_args(argv)
    from onlinejax import with_climatology, zoo
    from onlinejax.wrappers.hedge import HedgedPrediction
    from onlinejax.evaluation import progressive_validation

    names = args.learners.split(",") if args.learners else [gl.name for gl in zoo.recommended_learners()]
    data = series()
    keep = args.series.split(",") if args.series else list(data)
    print(describe())
    print(f"{'series':9s} {'learner':36s} {'skill':>7s} {'cov95':>6s} {'MSE/mean':>8s} {'width max':>9s} "
          f"{'median':>6s}")
    for sname in keep:
        X, y = (np.asarray(a, np.float32) for a in data[sname])
        clp, clo, chi, cmean = climatology(y.astype(np.float64))
        y2 = y[2:].astype(np.float64)
        for name in names:
            lrn = zoo.configurations()[name].make(X.shape[1])
            lrn = lrn if args.hedge is None else with_climatology(lrn, keep_mean=args.hedge == "mean")
            pred = progressive_validation(lrn, lrn.init(), X, y).predictions
            rows = [(name, pred)]
            if isinstance(pred, HedgedPrediction):
                rows.append((name + " (inner)", pred.learner))
            for label, p in rows:
                lp = np.asarray(p.log_prob(y), np.float64)[2:]
                lo, hi = (np.asarray(a, np.float64)[2:] for a in p.interval(0.95))
                mse = np.mean((np.asarray(p.mean, np.float64)[2:] - y2) ** 2) / np.mean((cmean - y2) ** 2)
                ratio = (hi - lo) / (chi - clo)
                print(f"{sname:9s} {label:36s} {np.mean(lp - clp):7.3f} {np.mean((lo <= y2) & (y2 <= hi)):6.3f} "
                      f"{mse:8.3f} {ratio.max():9.2f} {np.median(ratio):6.2f}", flush=True)


if __name__ == "__main__":
    main()

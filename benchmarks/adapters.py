"""Per-item cost of the River and scikit-learn adapters against River's own Bayesian linear regression.

Run:  .venv/bin/python benchmarks/adapters.py [--n 2000]

Same stream, same run: River's TrumpApproval features (5, raw), repeated to ``n`` items.
- River ``linear_model.BayesianLinearRegression``: ``predict_one(x, with_dist=True)`` then
  ``learn_one`` per item (pure Python + NumPy, float64);
- ``RiverRegressor("bayes_linreg")``: the same protocol through the adapter (two compiled JAX
  calls per item plus the dict -> vector mapping);
- ``StatefulLearner(bayes_linreg)``: the library's fast Python-loop driver (one compiled call per
  item, arrays in), the floor for item-by-item use from Python;
- ``OnlineRegressor.fit`` on the whole stream at once (one mini-batch update), after a first
  ``fit`` compiled it (every ``fit``, clone and instance of the same spec shares the compiled
  learner).
Prints µs per item and the ratio to River.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402


def per_item(fn, rows):
    t = time.perf_counter()
    fn(rows)
    return 1e6 * (time.perf_counter() - t) / len(rows)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    a = ap.parse_args(argv)
    from river import datasets, linear_model

    import onlinejax as oj
    from onlinejax.adapters.river import RiverRegressor
    from onlinejax.adapters.sklearn import OnlineRegressor

    print(describe())
    base = list(datasets.TrumpApproval())
    rows = [base[i % len(base)] for i in range(a.n)]
    names = sorted(rows[0][0])
    X = np.array([[x[k] for k in names] for x, _ in rows])
    Y = np.array([y for _, y in rows])
    print(f"{a.n} items, {len(names)} features (TrumpApproval, repeated)")

    def river_loop(model):
        def run(rs):
            for x, y in rs:
                model.predict_one(x, with_dist=True)
                model.learn_one(x, y)
        return run

    # warm-up: compile on one model; models built from the same spec share the compiled learner
    warnings.simplefilter("ignore")
    river_loop(RiverRegressor("bayes_linreg"))(rows[:3])
    res = {}
    res["River BayesianLinearRegression"] = per_item(river_loop(linear_model.BayesianLinearRegression()), rows)
    res["onlinejax RiverRegressor(bayes_linreg)"] = per_item(river_loop(RiverRegressor("bayes_linreg")), rows)
    sl = oj.StatefulLearner(oj.bayes_linreg(len(names)))
    sl.step(X[0], Y[0])  # compile

    def stateful(rs):
        for i in range(len(rs)):
            sl.step(X[i], Y[i])

    res["onlinejax StatefulLearner.step"] = per_item(stateful, rows)
    OnlineRegressor("bayes_linreg").fit(X, Y).predict(X[:1])  # compile for these shapes

    def batch(rs):
        OnlineRegressor("bayes_linreg").fit(X, Y).predict(X[:1])

    res["onlinejax OnlineRegressor.fit (one mini-batch)"] = per_item(batch, rows)
    ref = res["River BayesianLinearRegression"]
    for k, v in res.items():
        print(f"  {k:48s} {v:9.2f} µs/item   {v / ref:6.3f}× River")


if __name__ == "__main__":
    main()

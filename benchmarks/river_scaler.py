"""Why River's ``StandardScaler`` in front costs a model that keeps every item: inputs and target out of step.

Run:  .venv/bin/python benchmarks/river_scaler.py [--adapter]

River's TrumpApproval (1,001 items, 6 inputs; River 0.26). The inputs are
given raw, or as River's ``preprocessing.StandardScaler`` hands them to the
next step of a pipeline when it learns (its running statistics including the
item). The models are Bayesian linear regression with an intercept, run by
progressive validation; MAE from the third item. The target is given raw, or
standardised with running statistics as ``onlinejax.wrappers.standardize`` does
(predicted with the statistics before the item, learned with them after it,
the prediction mapped back). Printed: MAE per input form and target form;
the library's default learner and its standardiser in both input forms; the
default with forgetting (``0.99``); the mixture of the default and its
forgetting copy (``oj.combine``, ``fixed_share()`` and ``bma()``); and the
default, the forgetting model and the mixture on a stationary stream (10
standard-normal inputs, unit noise, 1,000 items; MSE over items 100+).

``--adapter`` also runs the default and the two mixtures (forgetting 0.99
and 0.95, ``fixed_share()``) through the River adapter under
``river.evaluate.progressive_val_score`` on TrumpApproval and ChickWeights,
raw and behind the scaler (``benchmarks/river_progressive.py``'s pipelines;
evidence tunes every 50 items; the mixtures given ``n_features=64`` on
ChickWeights, as they cannot widen): MAE, log density per item, coverage.
"""
from __future__ import annotations

import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402


def load():
    from river import datasets, preprocessing

    rows = list(datasets.TrumpApproval())
    keys = list(rows[0][0])
    X = np.array([[x[k] for k in keys] for x, _ in rows])
    Y = np.array([y for _, y in rows], float)
    scaler, scaled = preprocessing.StandardScaler(), []
    for x, _ in rows:
        scaler.learn_one(x)
        t = scaler.transform_one(x)
        scaled.append([t[k] for k in keys])
    return X, np.array(scaled), Y


def mae(pred, Y) -> float:
    return float(np.mean(np.abs(np.asarray(pred)[2:] - Y[2:])))


def linear_run(X, Y, running_target: bool) -> np.ndarray:
    """Bare BLR, one item at a time; with ``running_target`` the target standardised by running statistics."""
    from onlinejax.learners.linear import bayes_linreg

    lrn = bayes_linreg(X.shape[1], intercept=True)
    predict, learn, s = jax.jit(lrn.predict), jax.jit(lrn.learn), lrn.init()
    n, mean, m2, out = 0, 0.0, 0.0, []
    for x, y in zip(X, Y):
        sd = np.sqrt(m2 / (n - 1)) if n > 1 and m2 > 0 else 1.0
        mu = float(predict(s, x).mean)
        out.append(mean + sd * mu if running_target else mu)
        n += 1
        delta = y - mean
        mean += delta / n
        m2 += delta * (y - mean)
        sd = np.sqrt(m2 / (n - 1)) if n > 1 and m2 > 0 else 1.0
        s = learn(s, x, (y - mean) / sd if running_target else y)
    return np.array(out)


def mixture(n_features: int, forgetting: float = 0.99, rule: str = "fixed_share"):
    """The default mixed with its forgetting copy (module level: the River adapter pickles its spec)."""
    import onlinejax as oj

    return oj.combine([oj.calibrated_bayes_linreg(n_features),
                       oj.calibrated_bayes_linreg(n_features, forgetting=forgetting)], getattr(oj, rule)())


def mixture_095(n_features: int):
    return mixture(n_features, 0.95)


def stationary():
    """``(X [1000, 10], Y [1000])``: a linear stream with unit noise."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 10))
    return X, X @ rng.normal(size=10) + rng.normal(size=1000)


def adapter_rows():
    """The default and the mixtures through the River adapter (``river_progressive._run``)."""
    import river_progressive as rp
    from onlinejax.adapters.river import RiverRegressor

    print("\nthrough the River adapter (progressive_val_score): MAE, LPD per item, 95 % coverage")
    for data in ("TrumpApproval", "ChickWeights"):
        wide = {"n_features": 64} if data == "ChickWeights" else {}
        for scaled in (False, True):
            for name, make in (("default", lambda: RiverRegressor()),
                               ("mixture 0.99", lambda: RiverRegressor(mixture, tune_interval=50, **wide)),
                               ("mixture 0.95", lambda: RiverRegressor(mixture_095, tune_interval=50, **wide))):
                sc = rp._run(data, scaled, make)[0]
                print(f"{data:14s} {'scaled' if scaled else 'raw':6s} {name:13s} {sc['mae']:8.3f} {sc['lpd']:8.3f} "
                      f"{sc['cover']:6.3f}", flush=True)


def main():
    import argparse

    import onlinejax as oj
    from onlinejax.evaluation import progressive_validation
    from onlinejax.learners.linear import bayes_linreg

    ap = argparse.ArgumentParser()
    ap.add_argument("--adapter", action="store_true", help="also run the River adapter's rows (about 9 minutes on 2 cores: every model compiles)")
    a = ap.parse_args()
    print(describe())
    X, Xs, Y = load()
    d = X.shape[1]
    print(f"{'model':52s} {'raw inputs':>10s} {'River-scaled':>12s}")
    for target in (False, True):
        name = f"bayes_linreg, target {'running-standardised' if target else 'raw'}"
        print(f"{name:52s} {mae(linear_run(X, Y, target), Y):10.3f} {mae(linear_run(Xs, Y, target), Y):12.3f}")
    for name, lrn in (("standardize(bayes_linreg) (inputs and target)", oj.standardize(bayes_linreg(d, intercept=True))),
                      ("calibrated_bayes_linreg (the adapters' default)", oj.calibrated_bayes_linreg(d)),
                      ("calibrated_bayes_linreg(forgetting=0.99)", oj.calibrated_bayes_linreg(d, forgetting=0.99)),
                      ("mixture of the two, fixed_share()", mixture(d)),
                      ("mixture of the two, bma()", mixture(d, rule="bma"))):
        row = [mae(progressive_validation(lrn, lrn.init(), A, Y).predictions.mean, Y) for A in (X, Xs)]
        print(f"{name:52s} {row[0]:10.3f} {row[1]:12.3f}")
    Xq, Yq = stationary()
    print("\nstationary stream, MSE over items 100+:")
    for name, lrn in (("the default", oj.calibrated_bayes_linreg(10)),
                      ("forgetting 0.99", oj.calibrated_bayes_linreg(10, forgetting=0.99)),
                      ("mixture, fixed_share()", mixture(10))):
        m = np.asarray(progressive_validation(lrn, lrn.init(), Xq, Yq).predictions.mean)
        print(f"{name:52s} {np.mean((m[100:] - Yq[100:]) ** 2):10.4f}")
    if a.adapter:
        adapter_rows()


if __name__ == "__main__":
    main()

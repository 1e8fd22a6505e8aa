"""Why River's ``StandardScaler`` in front costs a model that keeps every item: inputs and target out of step.

Run:  .venv/bin/python benchmarks/river_scaler.py

River's TrumpApproval (1,001 items, 6 inputs; River 0.26). The inputs are
given raw, or as River's ``preprocessing.StandardScaler`` hands them to the
next step of a pipeline when it learns (its running statistics including the
item). Every model is Bayesian linear regression with an intercept that
never forgets, run by progressive validation; MAE from the third item. The
target is given raw, or standardised with running statistics as
``onlinejax.standardize`` does (predicted with the statistics before the
item, learned with them after it, the prediction mapped back). Printed: MAE
per input form and target form, and the library's default learner and its
standardiser in both input forms, with and without forgetting (``0.99``).
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
    from onlinejax.linear import bayes_linreg

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


def main():
    import onlinejax as oj
    from onlinejax.evaluation import progressive_validation
    from onlinejax.linear import bayes_linreg

    print(describe())
    X, Xs, Y = load()
    d = X.shape[1]
    print(f"{'model':52s} {'raw inputs':>10s} {'River-scaled':>12s}")
    for target in (False, True):
        name = f"bayes_linreg, target {'running-standardised' if target else 'raw'}"
        print(f"{name:52s} {mae(linear_run(X, Y, target), Y):10.3f} {mae(linear_run(Xs, Y, target), Y):12.3f}")
    for name, lrn in (("standardize(bayes_linreg) (inputs and target)", oj.standardize(bayes_linreg(d, intercept=True))),
                      ("calibrated_bayes_linreg (the adapters' default)", oj.calibrated_bayes_linreg(d)),
                      ("calibrated_bayes_linreg(forgetting=0.99)", oj.calibrated_bayes_linreg(d, forgetting=0.99))):
        row = [mae(progressive_validation(lrn, lrn.init(), A, Y).predictions.mean, Y) for A in (X, Xs)]
        print(f"{name:52s} {row[0]:10.3f} {row[1]:12.3f}")


if __name__ == "__main__":
    main()

"""River's progressive validation of the River adapter against River's own Bayesian linear regression.

Run:  .venv/bin/python benchmarks/river_progressive.py [--recommended]

``--recommended``: ``preprocessing.StandardScaler() | RiverRegressor(<each recommended learner>)`` on
TrumpApproval and ChickWeights (all features through the scaler), with the climatology's log density
(Student-t) from item 3 for reference.

``river.evaluate.progressive_val_score`` (predict each item, then learn it) on River's shipped
data sets, every model inside the same River pipeline:

- ``TrumpApproval`` (1001 items, 6 numeric features, one of them ``ordinal_date`` ~ 7·10⁵), raw
  and behind ``preprocessing.StandardScaler``;
- ``ChickWeights`` (578 items: ``time`` in days, ``chick`` an id 1-50, ``diet`` 1-4, both ids
  categorical): ``time`` raw or through ``StandardScaler``, ``chick`` and ``diet`` through
  ``preprocessing.OneHotEncoder``. The 50 chicks all appear among the first 50 items, so their
  one-hot features (55 in all) arrive one by one: the adapter's default learner widens its input
  as they come (3 -> 96 slots, doubling); the windowed learner cannot widen and is given
  ``n_features=64`` slots up front.

Models: River's ``linear_model.BayesianLinearRegression()`` (its defaults), the adapter's default
``RiverRegressor()`` (``calibrated_bayes_linreg``: standardised, an intercept, evidence-tuned
every 50 items, calibrated), and ``RiverRegressor(windowed_linear, tune_interval=64)``: the same
recipe on the last 64 items (:func:`windowed_linear`). (The zoo's ``RecommendedWindowedLinear``
maps its inputs to quadratic features, ~2000 of them for 64 inputs: too slow here.)

Each model's last pipeline step records ``predict_one(x, with_dist=True)`` (what a River user
gets: the adapter's ``PredictiveDistribution``, River's ``proba.Gaussian``) and returns its mean, so
one progressive run gives MAE and RMSE (River's metrics), the mean log predictive density of the
returned distribution by its own density (the calibrated learners' Student-t; a proper score, higher
is better) and the coverage of its central 95 % interval. Wall time is the whole
``progressive_val_score`` call, ``with_dist`` included, after a first run of the same model on the
same data compiled its JAX code (the compile run's time is printed too). Prints the machine and each
row's time relative to River's in the same run.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402

Z95 = 1.959963984540054


def _recorder_class():
    from river import base

    class Recorder(base.Regressor):
        """The last step of a pipeline: predicts with ``with_dist=True``, keeps the distribution, returns its mean."""

        def __init__(self, model):
            self.model = model
            self.dists = []

        def learn_one(self, x, y):
            self.model.learn_one(x, y)

        def predict_one(self, x):
            d = self.model.predict_one(x, with_dist=True)
            self.dists.append(d)
            return float(d.mu)

    return Recorder


def windowed_linear(n_features: int):
    """``calibrated(windowed_bayes_linreg(d, 64, intercept=True))``: the default's recipe on a window of 64 items."""
    from onlinejax.wrappers.calibration import calibrated
    from onlinejax.learners.linear import windowed_bayes_linreg

    return calibrated(windowed_bayes_linreg(n_features, 64, intercept=True))


def _pipelines(data: str, scaled: bool):
    from river import compose, preprocessing

    if data == "TrumpApproval":
        return [preprocessing.StandardScaler()] if scaled else []
    time_ = compose.Select("time") | preprocessing.StandardScaler() if scaled else compose.Select("time")
    return [time_ + (compose.Select("chick", "diet") | preprocessing.OneHotEncoder())]


def _models(data: str):
    from river import linear_model

    from onlinejax.adapters.river import RiverRegressor

    wide = {"n_features": 64} if data == "ChickWeights" else {}
    return {"River BayesianLinearRegression": lambda: linear_model.BayesianLinearRegression(),
            "RiverRegressor() (calibrated_bayes_linreg)": lambda: RiverRegressor(),
            "RiverRegressor(windowed_linear, tune_interval=64)": lambda: RiverRegressor(windowed_linear,
                                                                                        tune_interval=64, **wide)}


def _run(data: str, scaled: bool, make):
    """One progressive validation: ``(scores dict, seconds)``."""
    from river import compose, datasets, evaluate, metrics

    rec = _recorder_class()(make())
    model = compose.Pipeline(*_pipelines(data, scaled), rec)
    ds = getattr(datasets, data)()
    ys = np.array([y for _, y in ds], np.float64)
    mae, rmse = metrics.MAE(), metrics.RMSE()
    t = time.perf_counter()
    evaluate.progressive_val_score(ds, model, mae + rmse)
    seconds = time.perf_counter() - t
    mu = np.array([float(d.mu) for d in rec.dists])
    assert len(mu) == len(ys) and math.isclose(np.mean(np.abs(ys - mu)), mae.get(), rel_tol=1e-9)
    lpd, cover = _scores(rec.dists, ys)
    return {"mae": mae.get(), "rmse": rmse.get(), "lpd": float(np.mean(lpd)), "cover": float(np.mean(cover))}, seconds


def _scores(dists, ys):
    """``([n] log densities, [n] 95 % interval hits)`` of each returned distribution, by its own density.

    The adapter's ``PredictiveDistribution`` has the learner's density and interval (a Student-t for
    the calibrated learners); River's ``proba.Gaussian`` is a Gaussian.
    """
    lpd, cover = [], []
    for d, y in zip(dists, ys):
        if hasattr(d, "prediction"):
            lo, hi = d.interval(0.95)
            lpd.append(float(d.log_pdf(y)))
        else:
            mu, sigma = float(d.mu), float(d.sigma)
            lo, hi = mu - Z95 * sigma, mu + Z95 * sigma
            lpd.append(-0.5 * np.log(2 * np.pi * sigma ** 2) - 0.5 * ((y - mu) / sigma) ** 2)
        cover.append(lo <= y <= hi)
    return np.array(lpd), np.array(cover)


def _climatology_lpd(ys) -> float:
    """Mean log density of the Student-t climatology (``n - 1`` dof, scale ``s·√(1 + 1/n)``) from item 3."""
    from scipy import stats

    out = [stats.t.logpdf(ys[i], i - 1, ys[:i].mean(), ys[:i].std(ddof=1) * np.sqrt(1 + 1 / i))
           for i in range(2, len(ys))]
    return float(np.mean(out))


def recommended(learners=None) -> None:
    """``StandardScaler() | RiverRegressor(name)`` under ``progressive_val_score``, each recommended learner."""
    from river import datasets, evaluate, metrics, preprocessing

    from onlinejax import zoo
    from onlinejax.adapters.river import RiverRegressor

    names = learners or [gl.name for gl in zoo.recommended_learners()] + ["calibrated_bayes_linreg"]
    print("StandardScaler() | RiverRegressor(name); scores from item 3")
    print(f"{'data set':14s} {'learner':28s} {'cov95':>6s} {'LPD/item':>9s} {'clim LPD':>9s} {'MAE':>8s}")
    for data in ("TrumpApproval", "ChickWeights"):
        ds = getattr(datasets, data)()
        ys = np.array([y for _, y in ds], np.float64)
        clim = _climatology_lpd(ys)
        for name in names:
            rec = _recorder_class()(RiverRegressor(name))
            mae = metrics.MAE()
            evaluate.progressive_val_score(ds, preprocessing.StandardScaler() | rec, mae)
            lpd, cover = _scores(rec.dists, ys)
            print(f"{data:14s} {name:28s} {np.mean(cover[2:]):6.3f} {np.mean(lpd[2:]):9.3f} {clim:9.3f} "
                  f"{mae.get():8.3f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recommended", action="store_true",
                    help="StandardScaler() | RiverRegressor(<each recommended learner>) instead of the main table")
    args = ap.parse_args(argv)
    import river

    warnings.simplefilter("ignore")  # River's BayesianLinearRegression is not the subject of warnings here
    print(describe())
    print(f"river {river.__version__}")
    if args.recommended:
        return recommended()
    print(f"{'data set':14s} {'x':6s} {'model':48s} {'MAE':>8s} {'RMSE':>8s} {'LPD/item':>9s} {'cov95':>6s} "
          f"{'wall s':>7s} {'vs River':>8s} {'1st run s':>9s}")
    for data in ("TrumpApproval", "ChickWeights"):
        for scaled in (False, True):
            ref = None
            for name, make in _models(data).items():
                _, first = _run(data, scaled, make)  # compiles the JAX code (River: a warm-up)
                s, sec = _run(data, scaled, make)
                ref = sec if ref is None else ref
                print(f"{data:14s} {'scaled' if scaled else 'raw':6s} {name:48s} {s['mae']:8.3f} {s['rmse']:8.3f} "
                      f"{s['lpd']:9.3f} {s['cover']:6.3f} {sec:7.3f} {sec / ref:7.2f}× {first:9.3f}")


if __name__ == "__main__":
    main()

"""River's regression-benchmark protocol: River's models and the recommended learners in the same run.

Run:  .venv/bin/python benchmarks/river_benchmark.py [--datasets Friedman,...] [--models ARF,...]

Every model is the last step of ``preprocessing.StandardScaler() | model`` under
``river.evaluate.progressive_val_score`` (predict each item, then learn it), as River's own regression
benchmarks run them, on River's shipped and synthetic data sets: TrumpApproval (1,001 items),
ChickWeights (578), Friedman (7,000, seed 42), FriedmanDrift ``lea`` (10,000, drifts at 1,000 / 3,000 /
5,000) and ``gsg`` (10,000, drifts at 3,500 / 7,000 over 1,000 items).

Models: River's ``ARFRegressor``, ``AMFRegressor`` (aggregated Mondrian forest),
``HoeffdingAdaptiveTreeRegressor``, ``KNNRegressor``, ``LinearRegression`` and
``BayesianLinearRegression`` (their defaults, seed 42 where they take one), and ``RiverRegressor(name)`` for
each recommended learner. Columns: MAE and RMSE (River's metrics), and for the models that return a
distribution (``predict_one(x, with_dist=True)``: the adapter's, the learner's own; River's Bayesian
linear regression's Gaussian) its 95 % interval's coverage and mean log density; wall seconds of the
whole run. The onlinejax learners' first run also compiles their JAX code; each is run once after a
100-item warm-up run of the same model on the same data set, so the wall time is the run's. Prints the
machine, River's version, and each data set's best MAE.

A second table runs the recommended learners as the library runs them, ``progressive_validation``'s
``lax.scan`` over the whole stream (raw features, every learner standardises its own inputs), after a
compile run: microseconds per item (the fastest of three runs), and River's adaptive random forest's per-item
cost in the pipeline run above divided by it (``ARF / this``; ``--models`` must then include ``ARF``).
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402
from river_progressive import _recorder_class, _scores  # noqa: E402

DATASETS = ("TrumpApproval", "ChickWeights", "Friedman", "FriedmanDrift lea", "FriedmanDrift gsg")


def dataset(name: str) -> list:
    from river import datasets
    from river.datasets import synth

    if name in ("TrumpApproval", "ChickWeights"):
        return list(getattr(datasets, name)())
    if name == "Friedman":
        return list(synth.Friedman(seed=42).take(7000))
    if name == "FriedmanDrift lea":
        return list(synth.FriedmanDrift(drift_type="lea", position=(1000, 3000, 5000), seed=42).take(10000))
    return list(synth.FriedmanDrift(drift_type="gsg", position=(3500, 7000), transition_window=1000,
                                    seed=42).take(10000))


def river_models() -> dict:
    from river import forest, linear_model, neighbors, tree

    return {"ARF": lambda: forest.ARFRegressor(seed=42),
            "AMF": lambda: forest.AMFRegressor(seed=42),
            "HoeffdingAdaptiveTree": lambda: tree.HoeffdingAdaptiveTreeRegressor(seed=42),
            "KNN": lambda: neighbors.KNNRegressor(),
            "LinearRegression": lambda: linear_model.LinearRegression(),
            "BayesianLinearRegression": lambda: linear_model.BayesianLinearRegression()}


def ours() -> dict:
    from onlinejax import zoo
    from onlinejax.adapters.river import RiverRegressor

    return {gl.name: (lambda n=gl.name: RiverRegressor(n)) for gl in zoo.recommended_learners()}


def arrays(data: list):
    """``(X [n, d] float32, y [n] float32)`` of a River data set, its features in their dict order."""
    import jax.numpy as jnp

    X = np.array([[float(v) for v in x.values()] for x, _ in data], np.float32)
    return jnp.asarray(X), jnp.asarray(np.array([y for _, y in data], np.float32))


def scan_us_per_item(name: str, X, y) -> float:
    """Microseconds per item of one recommended learner's ``lax.scan`` over ``(X, y)``, after a compile run: the
    fastest of three runs (a shared machine's other work only ever adds time)."""
    import jax

    from onlinejax import zoo

    lrn = zoo.configurations()[name].make(X.shape[1])
    go = jax.jit(lambda X, Y: jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y))[1])
    jax.block_until_ready(go(X, y))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        jax.block_until_ready(go(X, y))
        best = min(best, time.perf_counter() - t)
    return best / X.shape[0] * 1e6


def run(data: list, make, with_dist: bool) -> dict:
    from river import evaluate, metrics, preprocessing

    last = _recorder_class()(make()) if with_dist else make()
    mae, rmse = metrics.MAE(), metrics.RMSE()
    t = time.perf_counter()
    evaluate.progressive_val_score(data, preprocessing.StandardScaler() | last, mae + rmse)
    out = {"mae": mae.get(), "rmse": rmse.get(), "seconds": time.perf_counter() - t}
    if with_dist:
        lpd, cover = _scores(last.dists, np.array([y for _, y in data], np.float64))
        out.update(lpd=float(np.mean(lpd)), cover=float(np.mean(cover)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    a = ap.parse_args(argv)
    import river

    warnings.simplefilter("ignore")
    print(describe())
    print(f"river {river.__version__}")
    models = {**{k: (m, False) for k, m in river_models().items()}, **{k: (m, True) for k, m in ours().items()}}
    models["BayesianLinearRegression"] = (models["BayesianLinearRegression"][0], True)
    if a.models:
        models = {k: models[k] for k in a.models.split(",")}
    arf_us, names = {}, a.datasets.split(",")
    print("| data set | model | MAE | RMSE | coverage | log density | wall s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        data = dataset(name)
        best = (np.inf, "")
        for model, (make, with_dist) in models.items():
            if with_dist and model != "BayesianLinearRegression":
                run(list(itertools.islice(data, 100)), make, True)  # compile the JAX code
            s = run(data, make, with_dist)
            best = min(best, (s["mae"], model))
            if model == "ARF":
                arf_us[name] = s["seconds"] / len(data) * 1e6
            dist = f"{s['cover']:.3f} | {s['lpd']:.3f}" if with_dist else "– | –"
            print(f"| {name} | {model} | {s['mae']:.3f} | {s['rmse']:.3f} | {dist} | {s['seconds']:.1f} |",
                  flush=True)
        print(f"| {name} | best MAE: {best[1]} | {best[0]:.3f} | | | | |", flush=True)
    scanned = [m for m, (_, with_dist) in models.items() if with_dist and m != "BayesianLinearRegression"]
    print("\n| data set | learner (scan) | µs per item | ARF / this |")
    print("| --- | --- | ---: | ---: |")
    for name in names:
        X, y = arrays(dataset(name))
        for model in scanned:
            us = scan_us_per_item(model, X, y)
            ratio = f"{arf_us[name] / us:.1f}" if name in arf_us else "–"
            print(f"| {name} | {model} | {us:.0f} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()

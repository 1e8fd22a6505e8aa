"""Sliding-window Nadaraya–Watson kernel regression: per-item cost, tune cost, 576 streams vmapped.

Run:  .venv/bin/python benchmarks/kernel_regression.py [--n 5000] [--streams 576] [--grid-n 2000]

1. µs per item of progressive validation (predict + learn, one stream in one
   ``lax.scan``), W ∈ {64, 96}, d ∈ {1, 2, 4}, float32; compared in the same
   run with a numpy float64 loop that recomputes the Nadaraya–Watson
   prediction and the window's sums from scratch each item (what the
   incremental update avoids), and with River's ``KNNRegressor`` (window
   ``W``, k = 5) when River is installed.
2. One tune (leave-one-out CV over the thesis's 195 bandwidths α·COV, one
   vectorised call) at W = 64 and 96.
3. ``--streams`` streams × ``--grid-n`` items, W = 64, d = 2, vmapped in one
   program: the plain learner, and the same learner inside the state machine
   (tune at window fill and after every detected drift; drift at n/2).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402
from gp_window import stream  # noqa: E402  (the same sin stream as the GP benchmark)

from onlinejax.wrappers.adaptive import adaptive  # noqa: E402
from onlinejax.data.synthetic import abrupt_drift_stream  # noqa: E402
from onlinejax.evaluation import progressive_validation  # noqa: E402
from onlinejax.learners.kernel_regression import kernel_regression  # noqa: E402


def numpy_loop(X, Y, W, n):
    X = X.astype(np.float64)
    Y = Y.astype(np.float64)
    t0 = time.perf_counter()
    for t in range(1, n):
        Xw, Yw = X[max(0, t - W):t], Y[max(0, t - W):t]
        k = np.exp(-0.5 * ((Xw - X[t]) ** 2).sum(-1))
        _ = k @ Yw / k.sum()
        K = np.exp(-0.5 * ((Xw[:, None, :] - Xw[None, :, :]) ** 2).sum(-1))
        D, C = K.sum(1), K @ Yw
        _ = np.sum((Yw - C / D) ** 2)
    return (time.perf_counter() - t0) / (n - 1)


def river_loop(X, Y, W, n):
    try:
        from river import neighbors
    except ImportError:
        return float("nan")
    m = neighbors.KNNRegressor(n_neighbors=5, engine=neighbors.LazySearch(window_size=W))
    rows = [{j: float(v) for j, v in enumerate(x)} for x in X[:n]]
    t0 = time.perf_counter()
    for x, y in zip(rows, Y[:n]):
        m.predict_one(x)
        m.learn_one(x, float(y))
    return (time.perf_counter() - t0) / n


def timed(f, *args, reps=3):
    jax.block_until_ready(f(*args))
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--streams", type=int, default=576)
    ap.add_argument("--grid-n", type=int, default=2000)
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--skip-table", action="store_true")
    a = ap.parse_args()
    print(describe())
    rng = np.random.default_rng(0)
    print(f"\nper item, one stream of {a.n} items (float32; numpy/River loops on 1000 items):")
    print(f"{'W':>4s} {'d':>2s} {'onlinejax us':>13s} {'numpy us':>9s} {'ratio':>6s} {'River KNN us':>13s} {'ratio':>6s}")
    for W in (() if a.skip_table else (64, 96)):
        for d in (1, 2, 4):
            X, Y = stream(rng, a.n, d)
            lrn = kernel_regression(d, W)
            s0 = lrn.init()
            us = timed(lambda: progressive_validation(lrn, s0, X, Y).predictions) / a.n * 1e6
            us_np = numpy_loop(X, Y, W, 1000) * 1e6
            us_rv = river_loop(X, Y, W, 1000) * 1e6
            print(f"{W:4d} {d:2d} {us:13.2f} {us_np:9.1f} {us_np / us:5.0f}x {us_rv:13.1f} {us_rv / us:5.0f}x")
    print("\none tune (195 bandwidths, leave-one-out, one call):")
    for W in (() if a.skip_table else (64, 96)):
        for d in (2, 4):
            lrn = kernel_regression(d, W)
            X = rng.uniform(0, 10, (W, d)).astype(np.float32)
            s = lrn.learn(lrn.init(), X, np.sin(X).sum(1))
            print(f"  W={W:3d} d={d}: {timed(lrn.tune, s) * 1e3:.2f} ms")
    if a.skip_grid:
        return
    S, n, d, W = a.streams, a.grid_n, 2, 64
    keys = jax.random.split(jax.random.PRNGKey(0), S)
    Xs, Ys, _ = jax.vmap(lambda k: abrupt_drift_stream(k, n, d, drift_at=n // 2, input_scale=1.0, noise_std=1.0))(keys)
    print(f"\n{S} streams x {n} items, W={W}, d={d}, vmapped (float32):")
    for name, lrn in (("plain", kernel_regression(d, W)), ("state machine", adaptive(kernel_regression(d, W), W))):
        run = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions.mean))
        t0 = time.perf_counter()
        jax.block_until_ready(run(Xs, Ys))
        first = time.perf_counter() - t0
        t = timed(run, Xs, Ys, reps=2)
        print(f"  {name:14s}: {t:6.2f} s ({S * n / t / 1e6:.2f} M items/s; first call incl. compile {first:.2f} s)")


if __name__ == "__main__":
    main()

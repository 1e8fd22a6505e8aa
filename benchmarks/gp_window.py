"""Sliding-window GP: per-item cost of progressive validation, and a 576-stream batch with tuning.

Run:  .venv/bin/python benchmarks/gp_window.py [--n 3000] [--streams 576] [--grid-n 2000] [--skip-grid]

1. µs per item (predict + learn, one stream in one ``lax.scan``) for
   W ∈ {32, 64, 96, 128} and d ∈ {1, 2, 4}, float32, compared in the same run
   with a numpy float64 loop that re-solves the window directly each item.
2. ``--streams`` streams × ``--grid-n`` items (d = 2, W = 64) vmapped in one
   program, tuning every W items (no state machine yet): an outer scan over
   blocks of W items, each block = progressive validation + one tune.
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

from onlinejax.evaluation import progressive_validation  # noqa: E402
from onlinejax.gp import gp_window  # noqa: E402


def stream(rng, n, d):
    X = rng.uniform(0, 10, size=(n, d)).astype(np.float32)
    return X, (np.sin(X).sum(1) + 0.1 * rng.normal(size=n)).astype(np.float32)


def numpy_loop(X, Y, W, n):
    X = X.astype(np.float64)
    Y = Y.astype(np.float64)
    t0 = time.perf_counter()
    for t in range(1, n):
        Xw, Yw = X[max(0, t - W):t], Y[max(0, t - W):t]
        r2 = ((Xw[:, None, :] - Xw[None, :, :]) ** 2).sum(-1)
        K = np.exp(-0.5 * r2) + 0.01 * np.eye(len(Yw))
        ks = np.exp(-0.5 * ((Xw - X[t]) ** 2).sum(-1))
        L = np.linalg.cholesky(K)
        a = np.linalg.solve(L.T, np.linalg.solve(L, Yw))
        v = np.linalg.solve(L, ks)
        _ = ks @ a, 1.0 - v @ v
    return (time.perf_counter() - t0) / (n - 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--streams", type=int, default=576)
    ap.add_argument("--grid-n", type=int, default=2000)
    ap.add_argument("--tune-steps", type=int, default=20)
    ap.add_argument("--tune-restarts", type=int, default=2)
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--skip-table", action="store_true")
    ap.add_argument("--grid-tune", choices=["both", "off", "on"], default="both")
    a = ap.parse_args()
    print(describe())
    rng = np.random.default_rng(0)
    print(f"\nper item, one stream of {a.n} items (float32, SE kernel, zero mean):")
    print(f"{'W':>5s} {'d':>3s} {'onlinejax us/item':>18s} {'numpy direct us/item':>21s} {'ratio':>7s}")
    for W in (() if a.skip_table else (32, 64, 96, 128)):
        for d in (1, 2, 4):
            X, Y = stream(rng, a.n, d)
            lrn = gp_window(d, W, noise_std=0.1)
            jax.block_until_ready(progressive_validation(lrn, lrn.init(), X, Y))
            t0 = time.perf_counter()
            jax.block_until_ready(progressive_validation(lrn, lrn.init(), X, Y))
            us = (time.perf_counter() - t0) / a.n * 1e6
            us_np = numpy_loop(X, Y, W, min(a.n, 600)) * 1e6
            print(f"{W:5d} {d:3d} {us:18.2f} {us_np:21.2f} {us_np / us:6.1f}x")
    if a.skip_grid:
        return
    S, n, d, W = a.streams, a.grid_n, 2, 64
    Xs = rng.uniform(0, 10, size=(S, n, d)).astype(np.float32)
    Ys = (np.sin(Xs).sum(-1) + 0.1 * rng.normal(size=(S, n))).astype(np.float32)
    lrn = gp_window(d, W, noise_std=0.1, tune_steps=a.tune_steps, tune_restarts=a.tune_restarts)
    nb = n // W

    def one(X, Y, tune):
        def block(s, xy):
            r = progressive_validation(lrn, s, *xy)
            s = lrn.tune(r.state) if tune else r.state
            return s, r.predictions.mean
        Xb = X[: nb * W].reshape(nb, W, d)
        Yb = Y[: nb * W].reshape(nb, W)
        return jax.lax.scan(block, lrn.init(), (Xb, Yb))[1]

    for tune in {"both": (False, True), "off": (False,), "on": (True,)}[a.grid_tune]:
        f = jax.jit(jax.vmap(lambda X, Y: one(X, Y, tune)))
        t0 = time.perf_counter()
        jax.block_until_ready(f(Xs, Ys))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        jax.block_until_ready(f(Xs, Ys))
        secs = time.perf_counter() - t0
        what = (f"tuning every {W} items ({nb} tunes/stream, L-BFGS {a.tune_steps} steps x {a.tune_restarts} starts)"
                if tune else "no tuning")
        print(f"\n{S} streams x {nb * W} items, W = {W}, d = {d}, vmapped, {what}: {secs:.2f} s "
              f"({S * nb * W / secs:,.0f} items/s; first call incl. compile {first:.2f} s)")


if __name__ == "__main__":
    main()

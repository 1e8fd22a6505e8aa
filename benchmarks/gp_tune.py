"""The GP's hyperparameter tune alone: milliseconds per window, vmapped and one at a time, and the objective reached.

Run:  .venv/bin/python benchmarks/gp_tune.py [--seed 7] [--window 64] [--save objectives.npz]
      (another version of the library: PYTHONPATH=<its checkout> with the same arguments)

Windows of ``--window`` consecutive items from thesis-grid streams
(``stratified_names(2, seed)``, four windows per stream at random ends, half of
them standardised as the recommended learners see them), grouped by input
dimension. Per dimension: the wall time of ``gp.tune_hyperparameters`` (two
starts, the recommended GP's noise floor and lengthscale prior, a start from
the window's statistics) vmapped over all windows of that dimension in one
compiled call (ms per window, as a GPU or a grid runner runs it) and on one
window at a time (ms, as one stream on a CPU runs it), after compiling, and
the median of the objective reached (nats per item, lower is better).
``--save`` writes every window's objective, so two versions can be compared
window by window.
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

from onlinejax.data import stratified_names, thesis_grid  # noqa: E402
from onlinejax.learners.gp.kernels import squared_exponential  # noqa: E402
from onlinejax.learners.gp.window import (LENGTHSCALE_PRIOR, NOISE_FLOOR, GPTuneOptions, gp_params,  # noqa: E402
                                          params_to_excess, tune_hyperparameters, tune_objective, tune_window)


def windows(seed: int, W: int) -> dict:
    """``{d: (X [m, W, d], Y [m, W])}``: windows of thesis-grid streams, half of them standardised."""
    names = stratified_names(2, size=2000, seed=seed)
    rng = np.random.default_rng(seed)
    out = {}
    for g in thesis_grid(jax.random.key(seed), names):
        X, Y = np.asarray(g.X), np.asarray(g.Y)
        for s in range(X.shape[0]):
            for _ in range(4):
                t = rng.integers(W, X.shape[1])
                xw, yw = X[s, t - W:t], Y[s, t - W:t]
                if rng.random() < 0.5:
                    xw = (xw - xw.mean(0)) / (xw.std(0) + 1e-9)
                    yw = (yw - yw.mean()) / (yw.std() + 1e-9)
                out.setdefault(X.shape[2], []).append((xw, yw))
    return {d: (np.stack([w[0] for w in ws]), np.stack([w[1] for w in ws])) for d, ws in sorted(out.items())}


def objective_after_tune(d: int):
    """``(X [W, d], y [W]) -> []``: the tuned hyperparameters' objective on the window."""
    p0 = gp_params(d, 1.0, 0.1, 1.0)

    def one(X, y):
        valid = jnp.ones(y.shape, bool)
        p = tune_hyperparameters(squared_exponential, "average", p0, X, y, valid, tune_options=GPTuneOptions())
        w = tune_window("average", X, y, valid, NOISE_FLOOR, y.dtype)
        return tune_objective(params_to_excess(w, p), w, squared_exponential, LENGTHSCALE_PRIOR)

    return one


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--save", default=None)
    a = ap.parse_args()
    print(describe())
    print(f"{'d':>2s} {'windows':>7s} {'vmapped ms/window':>18s} {'one at a time ms':>17s} {'median objective':>17s}")
    saved = {}
    for d, (X, Y) in windows(a.seed, a.window).items():
        one = objective_after_tune(d)
        Xs, Ys = jnp.asarray(X), jnp.asarray(Y)
        batch = jax.jit(jax.vmap(one))
        batch(Xs, Ys).block_until_ready()
        t0 = time.perf_counter()
        obj = np.asarray(batch(Xs, Ys).block_until_ready())
        t_batch = (time.perf_counter() - t0) / len(X)
        single = jax.jit(one)
        single(Xs[0], Ys[0]).block_until_ready()
        k = min(20, len(X))
        t0 = time.perf_counter()
        for i in range(k):
            single(Xs[i], Ys[i]).block_until_ready()
        t_one = (time.perf_counter() - t0) / k
        saved[str(d)] = obj
        print(f"{d:2d} {len(X):7d} {1e3 * t_batch:18.2f} {1e3 * t_one:17.2f} {np.median(obj):17.4f}", flush=True)
    if a.save:
        np.savez(a.save, **saved)
        print("wrote", a.save)


if __name__ == "__main__":
    main()

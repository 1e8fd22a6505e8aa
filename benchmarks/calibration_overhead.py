"""Per-item cost of the calibration wrappers over the bare learner (target: <= 10 % for ACI).

Run:  .venv/bin/python benchmarks/calibration_overhead.py [--n 100000] [--reps 15]

Progressive validation (predict, then learn) of ``bayes_linreg(8)`` in one
jitted ``lax.scan`` over ``n`` items, bare and wrapped by
``onlinejax.wrappers.calibration`` (``conformal`` with ACI, the default; quantile
tracking; ``recalibrate``; ACI after recalibration). Variants are timed in
interleaved rounds and the best round of each is kept, so a busy machine
penalises them alike; compile time is excluded. Both wall-clock time and the
process's CPU time are printed (the scan runs on one thread, so on a shared
machine the CPU time is the steadier of the two).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402

from onlinejax.wrappers.calibration import conformal, recalibrate  # noqa: E402
from onlinejax.evaluation import progressive_validation  # noqa: E402
from onlinejax.learners.linear import bayes_linreg  # noqa: E402


def stream(n, d=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    return X, (X @ rng.normal(size=d) + 0.3 * rng.normal(size=n)).astype(np.float32)


def timer(learner, X, Y):
    state = learner.init()
    jax.block_until_ready(progressive_validation(learner, state, X, Y))  # compile

    def run():
        w, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(progressive_validation(learner, state, X, Y))
        return time.perf_counter() - w, time.process_time() - c

    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    X, Y = stream(args.n)
    variants = {
        "bayes_linreg(8)": bayes_linreg(8),
        "conformal(bayes_linreg(8))  [ACI]": conformal(bayes_linreg(8)),
        "conformal(..., 'quantile')": conformal(bayes_linreg(8), method="quantile"),
        "recalibrate(bayes_linreg(8))": recalibrate(bayes_linreg(8)),
        "conformal(..., recalibrate=0.99)": conformal(bayes_linreg(8), recalibrate=0.99),
    }
    runs = {k: timer(v, X, Y) for k, v in variants.items()}
    wall = {k: np.inf for k in runs}
    cpu = {k: np.inf for k in runs}
    for _ in range(args.reps):
        for k, r in runs.items():
            w, c = r()
            wall[k], cpu[k] = min(wall[k], w), min(cpu[k], c)
    print(describe())
    print(f"progressive validation, one jitted lax.scan, n = {args.n}, d = 8, float32, best of {args.reps}")
    base = "bayes_linreg(8)"
    print(f"{'learner':36s} {'wall µs/item':>13s} {'ratio':>6s} {'cpu µs/item':>12s} {'ratio':>6s}")
    for k in runs:
        print(f"{k:36s} {wall[k] / args.n * 1e6:13.4f} {wall[k] / wall[base]:6.3f} "
              f"{cpu[k] / args.n * 1e6:12.4f} {cpu[k] / cpu[base]:6.3f}")


if __name__ == "__main__":
    main()

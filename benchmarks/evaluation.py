"""Throughput of delayed vs plain progressive validation (onlinejax), same learner and stream.

Run:  .venv/bin/python benchmarks/evaluation.py [--n 100000]

Prints µs/item for plain progressive validation and for delayed progressive
validation with a constant delay and with random per-item delays, and the
ratio delayed / plain (the target: within 2×). Compilation is excluded.
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

import onlinejax as oj  # noqa: E402
from onlinejax.evaluation import (  # noqa: E402
    delayed_progressive_validation,
    prequential,
    progressive_validation,
    schedule_from_delays,
)


def best_of(f, reps=3):
    jax.block_until_ready(f())
    out = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f())
        out = min(out, time.perf_counter() - t0)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    a = ap.parse_args()
    print(describe())
    rng = np.random.default_rng(0)
    for d, make in ((8, lambda: oj.bayes_linreg(8, options=oj.BayesOptions(tunable=False))),
                    (4, lambda: oj.windowed_bayes_linreg(4, 64))):
        lrn = make()
        X = rng.normal(size=(a.n, d)).astype(np.float32)
        Y = (X @ rng.normal(size=d) + 0.3 * rng.normal(size=a.n)).astype(np.float32)
        t_pv = best_of(lambda: progressive_validation(lrn, lrn.init(), X, Y))
        t0 = time.perf_counter()
        sch_c = schedule_from_delays(np.full(a.n, 50.0))
        sch_r = schedule_from_delays(rng.exponential(50.0, size=a.n))
        t_sched = (time.perf_counter() - t0) / 2
        t_c = best_of(lambda: delayed_progressive_validation(lrn, lrn.init(), X, Y, sch_c))
        t_r = best_of(lambda: delayed_progressive_validation(lrn, lrn.init(), X, Y, sch_r))
        t_m = best_of(lambda: delayed_progressive_validation(lrn, lrn.init(), X, Y, sch_r, metrics=prequential()))
        name = "bayes_linreg d=8" if d == 8 else "windowed_bayes_linreg d=4 W=64"
        print(f"\n{name}, n = {a.n}")
        print(f"  progressive validation            {t_pv / a.n * 1e6:8.3f} us/item")
        print(f"  delayed, constant delay 50        {t_c / a.n * 1e6:8.3f} us/item   ratio {t_c / t_pv:.2f}x "
              f"(pending slots {sch_c.n_slots})")
        print(f"  delayed, random delays (exp, 50)  {t_r / a.n * 1e6:8.3f} us/item   ratio {t_r / t_pv:.2f}x "
              f"(pending slots {sch_r.n_slots})")
        print(f"  delayed, random + prequential metrics {t_m / a.n * 1e6:8.3f} us/item   ratio {t_m / t_pv:.2f}x")
        print(f"  host schedule build {t_sched:.3f} s per schedule")


if __name__ == "__main__":
    main()

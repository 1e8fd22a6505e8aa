"""How many run-length hypotheses BOCPD needs: scores and time against ``n_runs``.

Run:  .venv/bin/python benchmarks/bocpd_runs.py [--streams 16] [--n 3000] [--seed 7]

:func:`onlinejax.wrappers.changepoint.bocpd` keeps the ``R`` most probable run-length hypotheses
(``lax.top_k``), not the ``R`` shortest, so ``R`` need not cover the expected run length
``1/h``. Streams: 2-d linear regression whose weights jump 3-14 times at random items (the
first after item 50), in two settings: clear changes (weights N(0, 2²), noise sd 0.5) and
noisy ones (weights N(0, 0.5²), noise sd 2, so the run-length posterior stays diffuse). The
inner learner is :func:`~onlinejax.learners.linear.bayes_linreg` with the noise precision of the
setting; hazards 0.01 and 0.002. Printed per (setting, h, R): the mean log predictive density
over the streams (nats per item), the median SMSE, the mean 95 % coverage and the wall time
of the vmapped run after compiling.
"""
from __future__ import annotations

import argparse
import time

import jax
import numpy as np

import onlinejax as oj
from onlinejax.evaluation import evaluate_streams

from _machine import describe

RUNS = (4, 8, 16, 32, 64, 128)
SETTINGS = {"clear": (2.0, 0.5), "noisy": (0.5, 2.0)}  # weight sd, noise sd


def streams(rng, S: int, n: int, w_sd: float, noise_sd: float):
    X = rng.normal(size=(S, n, 2))
    Y = np.empty((S, n))
    for s in range(S):
        cps = np.sort(rng.choice(np.arange(50, n), rng.integers(3, 15), replace=False))
        start = 0
        for c in list(cps) + [n]:
            Y[s, start:c] = X[s, start:c] @ (w_sd * rng.normal(size=2)) + noise_sd * rng.normal(size=c - start)
            start = c
    return X, Y


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    print(describe())
    print(f"{'setting':8s} {'hazard':>7s} {'R':>4s} {'MLPD':>9s} {'SMSE':>8s} {'ICR95':>6s} {'run s':>7s}")
    for setting, (w_sd, noise_sd) in SETTINGS.items():
        X, Y = streams(np.random.default_rng(args.seed), args.streams, args.n, w_sd, noise_sd)
        for h in (0.01, 0.002):
            for R in RUNS:
                lrn = oj.bocpd(oj.bayes_linreg(2, alpha=1.0, beta=1.0 / noise_sd ** 2), n_runs=R, hazard=h)
                jax.block_until_ready(evaluate_streams(lrn, X, Y).metrics)  # compile
                t0 = time.perf_counter()
                m = jax.block_until_ready(evaluate_streams(lrn, X, Y).metrics)
                secs = time.perf_counter() - t0
                print(f"{setting:8s} {h:7.3f} {R:4d} {float(np.mean(m['mlpd'])):9.4f} {float(np.median(m['smse'])):8.4f} "
                      f"{float(np.mean(m['icr'])):6.3f} {secs:7.2f}", flush=True)


if __name__ == "__main__":
    main()

"""Gradient tuning (tune_prequential) against a vmapped grid search, on the blog's drifting stream.

Run:  .venv/bin/python benchmarks/tune_prequential.py [--streams 1] [--steps 100] [--grid 32]

Learner ``bayes_linreg(2, beta=25.0, forgetting=0.95)`` on
``drifting_linear_stream`` (250 items; ``--streams S`` streams, the mean score).
Two problems:

1. the forgetting factor alone: ``tune_prequential`` (Adam 0.05, ``--steps``
   steps, from 0.95) against a ``--grid``-point grid over ``[0.70, 0.999]``
   scored by ``evaluate_streams(..., hyper={"forgetting": grid})`` (one flat vmap);
2. forgetting and beta together: the same against a ``grid × grid`` product
   (beta log-spaced over ``[1, 400]``).

For each path: the first call (compile + run), the run alone (best of 5
calls after it, the compiled program reused) and compile ≈ first − run; the
best score each found and where; the ratios tune / grid measured in this run.
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
from onlinejax.evaluation import GradientOptions, evaluate_streams, tune_prequential  # noqa: E402


def timed(f, reps=5):
    """``(result, first-call seconds, best later-call seconds)``."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(f())
    first = time.perf_counter() - t0
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f())
        best = min(best, time.perf_counter() - t0)
    return out, first, best


def report(name, first, run):
    print(f"  {name:34s} first call {first:7.3f} s   run {run * 1e3:9.2f} ms   compile ~{first - run:7.3f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--grid", type=int, default=32)
    a = ap.parse_args()
    print(describe())
    keys = jax.random.split(jax.random.key(0), a.streams)
    X, Y, _ = jax.vmap(oj.data.drifting_linear_stream)(keys)
    X, Y = np.asarray(X), np.asarray(Y)
    lrn = oj.bayes_linreg(2, beta=25.0, forgetting=0.95)
    lams = np.linspace(0.70, 0.999, a.grid)
    betas = np.geomspace(1.0, 400.0, a.grid)
    Xt, Yt = (X[0], Y[0]) if a.streams == 1 else (X, Y)
    print(f"\nbayes_linreg(2, beta=25, forgetting=0.95), {a.streams} drifting stream(s) x {X.shape[1]} items, "
          f"score: mean log predictive density; tune: Adam 0.05, {a.steps} steps")

    print(f"\n1. forgetting alone: {a.grid}-point grid vs tune_prequential")
    g, g_first, g_run = timed(lambda: evaluate_streams(lrn, X, Y, hyper={"forgetting": lams}).metrics["mlpd"])
    m = np.asarray(g).mean(axis=1)
    t, t_first, t_run = timed(lambda: tune_prequential(lrn, {"forgetting": 0.95}, Xt, Yt, options=GradientOptions(steps=a.steps)).scores)
    res = tune_prequential(lrn, {"forgetting": 0.95}, Xt, Yt, options=GradientOptions(steps=a.steps))
    report(f"grid ({a.grid} settings)", g_first, g_run)
    report(f"tune_prequential ({a.steps} steps)", t_first, t_run)
    print(f"  grid best forgetting {lams[m.argmax()]:.4f} (mlpd {m.max():.5f}, spacing {lams[1] - lams[0]:.4f}); "
          f"tuned {res.params['forgetting']:.4f} (mlpd {res.scores[res.best_step]:.5f})")
    print(f"  ratio tune / grid: run {t_run / g_run:.2f}x, first call {t_first / g_first:.2f}x")

    print(f"\n2. forgetting and beta: {a.grid}x{a.grid} grid vs tune_prequential")
    LL, BB = np.meshgrid(lams, betas, indexing="ij")
    hyper = {"forgetting": LL.ravel(), "beta": BB.ravel()}
    g2, g2_first, g2_run = timed(lambda: evaluate_streams(lrn, X, Y, hyper=hyper).metrics["mlpd"])
    m2 = np.asarray(g2).mean(axis=1)
    p0 = {"forgetting": 0.95, "beta": 25.0}
    _, t2_first, t2_run = timed(lambda: tune_prequential(lrn, p0, Xt, Yt, options=GradientOptions(steps=a.steps)).scores)
    res2 = tune_prequential(lrn, p0, Xt, Yt, options=GradientOptions(steps=a.steps))
    report(f"grid ({a.grid * a.grid} settings)", g2_first, g2_run)
    report(f"tune_prequential ({a.steps} steps)", t2_first, t2_run)
    i = m2.argmax()
    print(f"  grid best forgetting {hyper['forgetting'][i]:.4f}, beta {hyper['beta'][i]:.2f} (mlpd {m2[i]:.5f}); "
          f"tuned {res2.params['forgetting']:.4f}, {res2.params['beta']:.2f} (mlpd {res2.scores[res2.best_step]:.5f})")
    print(f"  ratio tune / grid: run {t2_run / g2_run:.2f}x, first call {t2_first / g2_first:.2f}x")


if __name__ == "__main__":
    main()

"""The random-feature GP (unbounded memory) against the windowed GP and the forgetting linear learner.

Run:  .venv/bin/python benchmarks/random_feature_gp.py [--per-cell 2] [--seed 47] [--learners ...]

Two parts, every learner in the same run:

- **Thesis-grid sample**: ``stratified_names(per_cell, seed)`` streams of 2,000 items (key ``seed``),
  :func:`~onlinejax.evaluation.evaluate_streams` per input dimension: median SMSE over all streams,
  over the continuous (ND) and discontinuous (D) ones and over the drifting and stationary ones, the
  mean log-score skill over the Student-t climatology and the median and range of 95 % coverage.
- **River's synthetic streams** (``river.datasets.synth``, seed 42, raw features, progressive
  validation in one ``lax.scan``): Friedman (7,000 items), FriedmanDrift ``lea`` (10,000, drifts
  at 1,000 / 3,000 / 5,000) and ``gsg`` (10,000, drifts at 3,500 / 7,000 over 1,000 items): MAE,
  95 % coverage, mean log density, and the run's microseconds per item after compiling.

Prints the machine and each learner's per-item time relative to ``RecommendedGP``'s.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import _machine

DEFAULT = "RecommendedGP,RecommendedForgettingLinear,RecommendedRandomFeatureGP"


def grid_sample(names, per_cell, seed):
    import onlinejax as oj
    from onlinejax import zoo
    from onlinejax.evaluation import evaluate_streams

    groups = oj.data.thesis_grid(jax.random.key(seed), oj.data.stratified_names(per_cell, size=2000, seed=seed))
    print(f"\n## Thesis-grid sample: stratified_names({per_cell}, seed={seed}), key {seed}")
    print("| learner | median SMSE | ND | D | drift | no drift | mean skill | coverage median [min, max] |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name in names:
        cols = {k: [] for k in ("smse", "skill", "icr", "nd", "drift")}
        for g in groups:
            r = evaluate_streams(zoo.configurations()[name].make(g.X.shape[-1]), g.X, g.Y)
            for k in ("smse", "skill", "icr"):
                cols[k] += list(np.asarray(r.metrics[k]))
            cols["nd"] += [not p["discontinuous"] for p in g.properties]
            cols["drift"] += [bool(p["drift"]) for p in g.properties]
        sm, sk, cov, nd, dr = (np.asarray(cols[k]) for k in ("smse", "skill", "icr", "nd", "drift"))
        print(f"| {name} | {np.median(sm):.4f} | {np.median(sm[nd]):.4f} | {np.median(sm[~nd]):.4f} | "
              f"{np.median(sm[dr]):.4f} | {np.median(sm[~dr]):.4f} | {sk.mean():.3f} | "
              f"{np.median(cov):.3f} [{cov.min():.3f}, {cov.max():.3f}] |", flush=True)


def river_stream(kind):
    from river.datasets import synth

    if kind == "Friedman":
        it = synth.Friedman(seed=42).take(7000)
    elif kind == "FriedmanDrift lea":
        it = synth.FriedmanDrift(drift_type="lea", position=(1000, 3000, 5000), seed=42).take(10000)
    else:
        it = synth.FriedmanDrift(drift_type="gsg", position=(3500, 7000), transition_window=1000,
                                 seed=42).take(10000)
    X, y = zip(*[(list(x.values()), t) for x, t in it])
    return jnp.asarray(np.array(X, np.float32)), jnp.asarray(np.array(y, np.float32))


def river_streams(names):
    from onlinejax import zoo

    print("\n## River's synthetic streams (raw features, progressive validation)")
    print("| stream | learner | MAE | coverage | log density | µs per item | time / RecommendedGP |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for kind in ("Friedman", "FriedmanDrift lea", "FriedmanDrift gsg"):
        X, y = river_stream(kind)
        base = None
        for name in names:
            lrn = zoo.configurations()[name].make(X.shape[1])
            go = jax.jit(lambda X, Y: jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y))[1])
            jax.block_until_ready(go(X, y))  # compile
            t0 = time.perf_counter()
            p = jax.block_until_ready(go(X, y))
            us = (time.perf_counter() - t0) / X.shape[0] * 1e6
            base = us if base is None else base
            m, yy = np.asarray(p.mean), np.asarray(y)
            lo, hi = map(np.asarray, p.interval(0.95))
            print(f"| {kind} | {name} | {np.mean(np.abs(m - yy)):.3f} | {np.mean((yy >= lo) & (yy <= hi)):.3f} | "
                  f"{float(np.mean(np.asarray(p.log_prob(y)))):.3f} | {us:.0f} | {us / base:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-cell", type=int, default=2)
    ap.add_argument("--seed", type=int, default=47)
    ap.add_argument("--learners", default=DEFAULT)
    ap.add_argument("--grid-only", action="store_true")
    ap.add_argument("--river-only", action="store_true")
    a = ap.parse_args()
    names = a.learners.split(",")
    print(_machine.describe())
    if not a.river_only:
        grid_sample(names, a.per_cell, a.seed)
    if not a.grid_only:
        river_streams(names)


if __name__ == "__main__":
    main()

"""The default combination against its members on a stratified thesis-grid sample.

Run:  .venv/bin/python benchmarks/combination.py [--per-cell 4] [--seed 1] [--csv out.csv]

1. Every member of :data:`onlinejax.zoo.COMBINATION_MEMBERS` and the default
   combination (:data:`onlinejax.zoo.DEFAULT_COMBINATION`) run by progressive
   validation on ``12 × per-cell`` grid streams (2000 items), one vmapped
   program per input dimension; wall time per item of each (compile excluded).
   The combination's cost per item minus the sum of its members' is its own
   overhead (``O(M)`` per item for fixed share).
2. Per stream: the combination's SMSE against the best member's (chosen in
   hindsight), the share of streams where it is <= the best and within 10 %,
   and its 95 % interval coverage, moment-matched (what the library's metrics
   score) and exact mixture quantiles.
3. The other registered weight rules on the same member predictions, by
   :func:`onlinejax.wrappers.combination.replay` (the members learn the same whatever
   the weights; replay is checked to equal the combination learner).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402

from onlinejax import zoo  # noqa: E402
from onlinejax.wrappers.combination import replay  # noqa: E402
from onlinejax.data import stratified_names, thesis_grid  # noqa: E402
from onlinejax.evaluation import progressive_validation  # noqa: E402
from onlinejax.core.registry import REGISTRY  # noqa: E402

zoo.register_all()  # the configurations are looked up by name


def timed_run(learner, X, Y, repeats=3):
    """Predictions of ``learner`` on ``X [S, n, d]`` (vmapped) and the seconds of the compiled run (best of ``repeats``:
    single runs of the GP member varied by ±20 % on this shared machine, more than the combination's own cost)."""
    f = jax.jit(jax.vmap(lambda x, y: progressive_validation(learner, learner.init(), x, y).predictions))
    c = f.lower(X, Y).compile()
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        p = jax.block_until_ready(c(X, Y))
        best = min(best, time.perf_counter() - t)
    return p, best


def smse(Y, m):
    Y = np.asarray(Y, np.float64)
    return np.mean((Y - np.asarray(m, np.float64)) ** 2, -1) / np.var(Y, -1)


def coverage(Y, lo, hi):
    Y = np.asarray(Y)
    return np.mean((Y >= np.asarray(lo)) & (Y <= np.asarray(hi)), -1)


def summarise(name, sm, best, cov_mm, cov_ex):
    ratio = sm / best
    print(f"{name:36s} <=best {np.mean(ratio <= 1):5.2f}  within 10% {np.mean(ratio <= 1.1):5.2f}  "
          f"median ratio {np.median(ratio):6.3f}  max {np.max(ratio):6.2f}  "
          f"ICR95 moment-matched {np.mean(cov_mm):.3f}  exact {np.mean(cov_ex):.3f} (min {np.min(cov_ex):.3f})")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-cell", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--csv", default=None, help="write the per-stream table here")
    a = ap.parse_args(argv)
    print(describe())
    names = stratified_names(a.per_cell, size=2000, seed=a.seed)
    groups = thesis_grid(jax.random.key(a.seed), names)
    members = zoo.COMBINATION_MEMBERS
    comb_gl = REGISTRY[zoo.DEFAULT_COMBINATION]
    rule_fn, rc, mc = zoo.COMBINATION_RULES[zoo.DEFAULT_COMBINATION.removeprefix("Combination_")]
    print(f"{len(names)} streams x 2000 items; members: {', '.join(members)}; "
          f"combination: {zoo.DEFAULT_COMBINATION}")

    secs = {m: 0.0 for m in (*members, "combination")}
    items = 0
    rows, replays = [], {k: [] for k in zoo.COMBINATION_RULES}
    for g in groups:
        S, n, d = g.X.shape
        items += S * n
        means, vars = [], []
        for m in members:
            p, t = timed_run(REGISTRY[m].make(d), g.X, g.Y)
            secs[m] += t
            means.append(p.mean)
            vars.append(p.var)
        means, vars = jnp.stack(means, -1), jnp.stack(vars, -1)
        pc, t = timed_run(comb_gl.make(d), g.X, g.Y)
        secs["combination"] += t
        rp = jax.vmap(lambda mu, v, y: replay(rule_fn(), mu, v, y, recalibrate=rc, correct=mc)[0])(means, vars, g.Y)
        # members inside the combination's program vs alone: equal up to rounding, which an
        # ill-conditioned member can amplify (float32 BayesianMLEForgettingMapped: up to 124% on
        # 7 of 16 d = 2 streams), so this is reported, not asserted (tests assert it on stable members)
        gap = np.asarray(jnp.max(jnp.abs(rp.mean - pc.mean) / (1.0 + jnp.abs(pc.mean)), axis=1))
        # the mean correction moves every component by one shift; the members' median difference is that
        # shift as long as at most one member differs (non-finite predictions left out)
        diff = jnp.where(jnp.isfinite(means - pc.means), pc.means - means, jnp.nan)
        diff = diff - jnp.nanmedian(diff, axis=-1, keepdims=True)
        mgap = np.asarray(jnp.nanmax(jnp.abs(diff) / (1.0 + jnp.abs(means)), axis=1))  # [S, M]
        print(f"d={d}: replay vs learner max rel. gap {gap.max():.2e}; members alone vs inside: "
              + ", ".join(f"{m.split('_')[0]} {mgap[:, k].max():.1e}" for k, m in enumerate(members)))
        mem_smse = np.stack([smse(g.Y, means[..., k]) for k in range(len(members))], -1)
        best = np.nanmin(np.where(np.isfinite(mem_smse), mem_smse, np.inf), -1)
        c_sm = smse(g.Y, pc.mean)
        lo, hi = pc.interval(0.95, exact=False)
        cov_mm = coverage(g.Y, lo, hi)
        lo, hi = jax.vmap(lambda q: q.interval(0.95, exact=True))(pc)
        cov_ex = coverage(g.Y, lo, hi)
        for i in range(S):
            rows.append(dict(stream=g.names[i], combination_smse=c_sm[i], best_member_smse=best[i],
                             best_member=members[int(np.argmin(mem_smse[i]))],
                             **{f"smse_{m}": mem_smse[i, k] for k, m in enumerate(members)},
                             icr95=cov_mm[i], icr95_exact=cov_ex[i]))
        for k, (rf, rrc, rmc) in zoo.COMBINATION_RULES.items():
            p = jax.vmap(lambda mu, v, y: replay(rf(), mu, v, y, recalibrate=rrc, correct=rmc)[0])(means, vars, g.Y)
            lo, hi = p.interval(0.95, exact=False)
            lx, hx = jax.vmap(lambda q: q.interval(0.95, exact=True))(p)
            replays[k].append((smse(g.Y, p.mean), best, coverage(g.Y, lo, hi), coverage(g.Y, lx, hx)))

    print("\ncost per item (vmapped over the sample's streams, compile excluded):")
    for m, s in secs.items():
        print(f"  {m:36s} {1e6 * s / items:8.2f} us")
    overhead = secs["combination"] - sum(secs[m] for m in members)
    print(f"  combination - sum of members          {1e6 * overhead / items:8.2f} us per item")

    sm = np.array([r["combination_smse"] for r in rows])
    best = np.array([r["best_member_smse"] for r in rows])
    print("\nSMSE against the best member (per stream, chosen in hindsight) and 95% interval coverage:")
    summarise(zoo.DEFAULT_COMBINATION + " (learner)", sm, best, np.array([r["icr95"] for r in rows]),
              np.array([r["icr95_exact"] for r in rows]))
    for k, parts in replays.items():
        cat = [np.concatenate(x) for x in zip(*parts)]
        summarise("Combination_" + k + " (replay)", *cat)
    for m in members:
        ms = np.array([r[f"smse_{m}"] for r in rows])
        print(f"  member {m:34s} best on {np.mean(ms <= best):5.2f} of streams, median SMSE {np.median(ms):.4f}")
    print(f"  best member: median SMSE {np.median(best):.4f}; combination: median SMSE {np.median(sm):.4f}")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {a.csv}")


if __name__ == "__main__":
    main()

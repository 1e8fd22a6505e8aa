"""The thesis's evaluation (learner configurations × the 576-stream grid): items/s per family.

Run:  .venv/bin/python benchmarks/grid.py [--learners GP,Kernel] [--per-cell K | --full] [--n 2000]
      (one host device per core by default, see onlinejax.evaluation.use_cpu_cores; XLA_FLAGS=
       --xla_force_host_platform_device_count=N overrides it)

Prints, per learner family, the sessions (learner × stream), the items
processed, the compile seconds and the run seconds (compiled calls only), the
items per second, and — as the in-run baseline the guide asks for — the ratio
to the thesis's own reported per-item cost, which put the whole 36,864-session
evaluation at about 8 hours of CPU (36,864 × 2000 items / 8 h ≈ 2,560 items/s).
Default: all 64 registered configurations on the full grid.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402

THESIS_ITEMS_PER_S = 36864 * 2000 / (8 * 3600)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--learners", default=None,
                    help="comma-separated names/substrings (default: the thesis's 64, without the combinations)")
    ap.add_argument("--per-cell", type=int, default=None, help="stratified sample instead of the full grid")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--compile-cache", default="none", metavar="DIR",
                    help="persistent compilation cache ('none', the default, times a cold run; 'default': "
                         "the command line's ~/.cache/onlinejax/xla)")
    a = ap.parse_args()
    from onlinejax.data import grid_names, stratified_names, thesis_grid
    from onlinejax import zoo
    from onlinejax.evaluation import enable_compilation_cache, registered_learners, run_grid, use_cpu_cores

    zoo.register_all()

    use_cpu_cores()  # one host device per core (XLA_FLAGS=--xla_force_host_platform_device_count=N overrides)

    if a.compile_cache != "none":
        print("compilation cache:", enable_compilation_cache(None if a.compile_cache == "default" else a.compile_cache))

    print(describe())
    names = grid_names(a.n) if a.per_cell is None else stratified_names(a.per_cell, size=a.n)
    gls = registered_learners(a.learners)
    if a.learners is None:  # the thesis's 52 online + 12 batch configurations, not the registered combinations
        gls = [g for g in gls if g.family != "Combination"]
    groups = thesis_grid(jax.random.key(0), names)
    t0 = time.perf_counter()
    res = run_grid(gls, groups)
    wall = time.perf_counter() - t0
    fam = {}
    for gl in gls:
        comp = sum(v for k, v in res.compile_seconds.items() if k[0] == gl.name)
        f = fam.setdefault(gl.family, {"sessions": 0, "items": 0, "compile": 0.0, "run": 0.0})
        f["compile"] += comp
    for r in res.rows:
        f = fam[r["family"]]
        f["sessions"] += 1
        f["items"] += r["n"]
        f["run"] += r["atpi"] * r["n"]
    print(f"{len(gls)} configurations x {len(names)} streams x {a.n} items: {len(res.rows)} sessions, "
          f"{wall:.1f} s wall incl. compile")
    print(f"{'family':18s} {'sessions':>8s} {'M items':>8s} {'compile s':>9s} {'run s':>8s} {'items/s':>10s} {'x thesis':>8s}")
    for k, f in fam.items():
        ips = f["items"] / max(f["run"], 1e-12)
        print(f"{k:18s} {f['sessions']:8d} {f['items'] / 1e6:8.2f} {f['compile']:9.1f} {f['run']:8.1f} {ips:10.0f} "
              f"{ips / THESIS_ITEMS_PER_S:8.1f}")
    if a.csv:
        print("wrote", res.to_csv(a.csv))


if __name__ == "__main__":
    main()

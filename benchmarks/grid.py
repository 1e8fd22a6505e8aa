"""The thesis's evaluation (learner configurations × the 576-stream grid): items/s per family.

Run:  .venv/bin/python benchmarks/grid.py [--learners GP,Kernel] [--per-cell K] [--n 2000] [--bare]
      [--tune-every K] [--programs]
      (one host device per core by default, see onlinejax.evaluation.use_cpu_cores; XLA_FLAGS=
       --xla_force_host_platform_device_count=N overrides it)

Prints, per learner family, the sessions (learner × stream), the items
processed, the compile seconds and the run seconds (compiled calls only), the
items per second, and — as the in-run baseline the guide asks for — the ratio
to the thesis's own reported per-item cost, which put the whole 36,864-session
evaluation at about 8 hours of CPU (36,864 × 2000 items / 8 h ≈ 2,560 items/s).
Default: the thesis's 64 configurations (52 online, 12 batch) on the full grid.

``--bare`` also runs, on the same streams, each windowed family's bare
learner at W = 64 (learning every item, never tuned, no state machine) and
prints µs per item of the state-machine configuration at W = 64 beside it
(issue 26's per-item target: within 2x), per input dimension.

``--programs`` also prints, per compiled program, the seconds spent tracing,
lowering and compiling it with XLA (two programs compile at a time, so the
trace and lower times include waiting for the interpreter).

``--tune-every K`` runs the grid with ``run_grid(tune_plan=TunePlan(every=K))``
(the configurations keep their names): on an accelerator, where every stream
of a group is vmapped, the batch then tunes on at most one item in ``K``
instead of on every item some stream tunes (``benchmarks/tune_every.py``);
the thesis's rule is ``K = 1``, the default.
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
    ap.add_argument("--bare", action="store_true",
                    help="also run each windowed family's bare learner (W = 64) and compare per-item costs")
    ap.add_argument("--tune-every", type=int, default=1, metavar="K",
                    help="the runner's TunePlan(every=K) for every state machine (default 1, the thesis's rule)")
    ap.add_argument("--programs", action="store_true",
                    help="also print each program's trace, lower and XLA compile seconds")
    ap.add_argument("--compile-cache", default="none", metavar="DIR",
                    help="persistent compilation cache ('none', the default, times a cold run; 'default': "
                         "the command line's ~/.cache/onlinejax/xla)")
    a = ap.parse_args()
    from onlinejax.data import grid_names, stratified_names, thesis_grid
    from onlinejax import TunePlan, zoo
    from onlinejax.evaluation import enable_compilation_cache, registered_learners, use_cpu_cores
    from onlinejax.runner import run_grid

    zoo.register_all()

    use_cpu_cores()  # one host device per core (XLA_FLAGS=--xla_force_host_platform_device_count=N overrides)

    if a.compile_cache != "none":
        print("compilation cache:", enable_compilation_cache(None if a.compile_cache == "default" else a.compile_cache))

    print(describe())
    names = grid_names(a.n) if a.per_cell is None else stratified_names(a.per_cell, size=a.n)
    if a.learners is None:  # the thesis's 52 online + 12 batch configurations (not the recommended ones)
        gls = zoo.thesis_online_learners() + zoo.thesis_batch_learners()
    else:
        gls = registered_learners(a.learners)
    if a.tune_every < 1:
        ap.error("--tune-every: must be >= 1")
    bare = bare_learners() if a.bare else []
    groups = thesis_grid(jax.random.key(0), names)
    t0 = time.perf_counter()
    res = run_grid(gls + bare, groups, tune_plan=TunePlan(every=a.tune_every) if a.tune_every > 1 else None)
    wall = time.perf_counter() - t0
    gls_all, gls = gls + bare, gls
    fam = {}
    for gl in gls:  # the bare learners are compared below, not counted in their families
        comp = sum(v for k, v in res.compile_seconds.items() if k[0] == gl.name)
        f = fam.setdefault(gl.family, {"sessions": 0, "items": 0, "compile": 0.0, "run": 0.0})
        f["compile"] += comp
    for r in res.rows:
        if r["learner"].startswith("bare:"):
            continue
        f = fam[r["family"]]
        f["sessions"] += 1
        f["items"] += r["n"]
        f["run"] += r["atpi"] * r["n"]
    print(f"{len(gls_all)} configurations x {len(names)} streams x {a.n} items: {len(res.rows)} sessions, "
          f"{wall:.1f} s wall incl. compile")
    print(f"{'family':18s} {'sessions':>8s} {'M items':>8s} {'compile s':>9s} {'run s':>8s} {'items/s':>10s} {'x thesis':>8s}")
    for k, f in fam.items():
        ips = f["items"] / max(f["run"], 1e-12)
        print(f"{k:18s} {f['sessions']:8d} {f['items'] / 1e6:8.2f} {f['compile']:9.1f} {f['run']:8.1f} {ips:10.0f} "
              f"{ips / THESIS_ITEMS_PER_S:8.1f}")
    if a.programs:
        print_program_stages(res)
    if bare:
        print_bare_comparison(res.rows)
    if a.csv:
        print("wrote", res.to_csv(a.csv))


def print_program_stages(res):
    """One line per compiled program (configuration, n, d): trace, lower and XLA compile seconds, and their sum."""
    print(f"{'program':44s} {'trace s':>8s} {'lower s':>8s} {'XLA s':>8s} {'total s':>8s}")
    for key, (tr, lo, xc) in sorted((res.compile_stages or {}).items(), key=lambda kv: -sum(kv[1])):
        name, n, d = key
        print(f"{f'{name} n={n} d={d}':44s} {tr:8.2f} {lo:8.2f} {xc:8.2f} {tr + lo + xc:8.2f}")


#: windowed family -> (its state-machine configuration at W = 64, the bare learner's maker)
def _bare_makers():
    from onlinejax.learners.gp import gp_window
    from onlinejax.learners.kernel_regression import kernel_regression
    from onlinejax.learners.linear import MAP_WINDOWED, MLE_WINDOWED, bayesian_map_windowed, bayesian_mle_windowed
    from onlinejax.zoo import THESIS_WINDOWS

    cap = max(THESIS_WINDOWS)
    return {
        "BayesianMLE": ("BayesianMLEWindowed_WS64",
                        lambda d: bayesian_mle_windowed(d, 64, options=MLE_WINDOWED._replace(capacity=cap)), None),
        "BayesianMAP": ("BayesianMAPWindowed_WS64",
                        lambda d: bayesian_map_windowed(d, 64, options=MAP_WINDOWED._replace(capacity=cap)), None),
        "GPRegression": ("GPRegressionZeroMean_WS64", lambda d: gp_window(d, 64, mean="zero"), 1),
        "KernelRegression": ("KernelRegression_WS64", lambda d: kernel_regression(d, 64), None),
    }


def bare_learners():
    from onlinejax.core.registry import GridLearnerOptions, grid_learner

    return [grid_learner(f"bare:{fam}_WS64", fam, make, options=GridLearnerOptions(vmap_bytes=vb))
            for fam, (_, make, vb) in _bare_makers().items()]


def print_bare_comparison(rows):
    """µs per item (``atpi``, items-weighted) of each W = 64 state machine beside its bare learner, per d."""
    import numpy as np

    def us(name):
        out = {}
        for r in rows:
            if r["learner"] == name:
                t = out.setdefault(r["d"], [0.0, 0])
                t[0] += r["atpi"] * r["n"]
                t[1] += r["n"]
        return {d: 1e6 * t / n for d, (t, n) in out.items()}

    print("\nper-item cost, state machine (W = 64) vs its bare learner (learns every item, no tune), µs/item:")
    print(f"{'family':18s} {'d':>3s} {'machine':>9s} {'bare':>9s} {'ratio':>7s}")
    for fam, (machine, _, _) in _bare_makers().items():
        m, b = us(machine), us(f"bare:{fam}_WS64")
        if not m:  # the W = 64 configuration was not among --learners
            continue
        for d in sorted(set(m) & set(b)):
            print(f"{fam:18s} {d:3d} {m[d]:9.2f} {b[d]:9.2f} {m[d] / b[d]:6.2f}x")
        mm, bb = np.mean(list(m.values())), np.mean(list(b.values()))
        print(f"{fam:18s} {'all':>3s} {mm:9.2f} {bb:9.2f} {mm / bb:6.2f}x")


if __name__ == "__main__":
    main()

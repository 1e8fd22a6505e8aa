"""Many vmapped state machines: the cost of tuning on every item some stream tunes, and ``tune_every``.

Run:  .venv/bin/python benchmarks/tune_every.py [--streams 192] [--n 400] [--window 32] [--dim 2]
      [--every 1,16,32]

The GP state machine (``adaptive(gp_window(d, W), W)``, zero mean) on
``--streams`` thesis-grid streams of input dimension ``--dim``, all vmapped
in one ``run_grid`` program (as on an accelerator; on a CPU ``run_grid``
would run such a GP stream by stream), for each ``k`` in ``--every`` the
runner's ``run_grid(tune_plan=TunePlan(every=k))``, beside the same machine with ``tune=False`` and the bare
window learner. Prints, per configuration, the wall time of the compiled run
per item of the whole batch (µs; ``atpi`` × streams), the ratio to the first
configuration measured in the same run, the mean log-score skill (against
climatology) and its largest per-stream change from the first
configuration. The machines tune as ``TunePlan(batch="auto")`` (the
machine's own) chooses for the backend: the whole batch at once on an
accelerator, stream by stream (under ``lax.map``) on a CPU, where
``every`` therefore saves nothing.
"""
from __future__ import annotations

import argparse
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402

from onlinejax import TunePlan  # noqa: E402
from onlinejax.wrappers.adaptive import adaptive  # noqa: E402
from onlinejax.data import grid_names, parse_name, thesis_grid  # noqa: E402
from onlinejax.evaluation import GridLayout, GridLearner  # noqa: E402
from onlinejax.runner import run_grid  # noqa: E402
from onlinejax.learners.gp import gp_window  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=192)
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--dim", type=int, default=2, choices=(1, 2, 4))
    ap.add_argument("--every", default="1,16,32")
    a = ap.parse_args()
    W, ks = a.window, [int(k) for k in a.every.split(",")]
    print(describe())
    names = [s for s in grid_names(a.n) if parse_name(s).dim == a.dim][: a.streams]
    groups = thesis_grid(jax.random.key(0), names, size=a.n)
    print(f"{len(names)} streams x {a.n} items, d = {a.dim}, W = {W}, float32, all streams vmapped in one program")
    machine = lambda d: adaptive(gp_window(d, W), W)  # noqa: E731
    cfgs = [(f"tune_every={k}", machine, TunePlan(every=k)) for k in ks]
    cfgs += [("tune=False", lambda d: adaptive(gp_window(d, W), W, tune=False), None),
             ("bare window", lambda d: gp_window(d, W), None)]
    ref = None
    print(f"{'configuration':14s} {'us/item':>10s} {'vs first':>9s} {'skill':>7s} {'worst change':>12s}")
    for name, make, plan in cfgs:
        r = run_grid([GridLearner(name, "gp", make, vmap_bytes=1 << 40)], groups, progress=False,
                     layout=GridLayout(vmap_bytes=1 << 40, chunk_bytes=1 << 40), tune_plan=plan)
        rows = sorted(r.rows, key=lambda x: x["stream"])
        us = np.mean([x["atpi"] for x in rows]) * len(rows) * 1e6
        skill = np.array([x["skill"] for x in rows])
        ref = ref or (us, skill)
        print(f"{name:14s} {us:10.1f} {us / ref[0]:8.2f}x {skill.mean():7.3f} "
              f"{np.min(skill - ref[1]):+12.3f}", flush=True)


if __name__ == "__main__":
    main()

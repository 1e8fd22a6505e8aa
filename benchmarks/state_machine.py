"""What the state machine costs per item when it neither learns nor tunes (issue 26, item 5).

Run:  .venv/bin/python benchmarks/state_machine.py [--window 64] [--items 400] [--seed 5]

For the windowed GP (d = 2) and kernel regression (d = 1) on a thesis-grid
stream: the machine (``adaptive``) is run up to the first stretch of
``--items`` stable items in a row, then timed from that state over the
stretch, in which it only predicts (the printed counts of tunes and learned
items in the stretch are 0). The same stretch runs with

* the learner's own ``tune`` (what the grid runs),
* a trivial ``tune`` (one counter, so the branch is nearly empty),
* ``tune=False`` (no tune branch at all),

beside the bare learner (predict, then learn every item). The difference
between the first two rows is what an untaken tune branch costs per item on
this backend: the branch runs on no item of the segment.

The stable-stretch rows time the machine with its tune inside the per-item
step (``learner.deferred`` removed, so ``progressive_validation`` scans
``learner.step``). ``--outside`` compares, on whole streams (``--streams`` per
learner, one at a time), that plain scan with the library's default for one
stream: the tunes run between item loops (``Learner.deferred``), with the
largest deviation between the two runs' predictions.
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

from onlinejax.wrappers.adaptive import STABLE, adaptive, record_mode  # noqa: E402
from onlinejax.data import stratified_names, thesis_grid  # noqa: E402
from onlinejax.evaluation import progressive_validation  # noqa: E402
from onlinejax.learners.gp import gp_window  # noqa: E402
from onlinejax.learners.kernel_regression import kernel_regression  # noqa: E402


def _trivial_tune(s):
    return s._replace(n_seen=s.n_seen + (s.n_skipped > 2 ** 30))  # not the identity, so the branch stays


def _stable_stretch(machine, d, items, seed):
    """The first thesis stream of dimension ``d`` (stratified sample, ``seed``) with ``items`` stable items in a row."""
    for name in (n for n in stratified_names(4, seed=seed) if n.split("_")[4] == str(d)):
        g = thesis_grid(jax.random.key(seed), [name])[0]
        X, Y = np.asarray(g.X[0]), np.asarray(g.Y[0])
        modes = np.asarray(progressive_validation(machine, machine.init(), X, Y, record=record_mode).records)
        ok = np.convolve(modes == STABLE, np.ones(items), "valid") == items
        if ok.any():
            return name, X, Y, int(np.argmax(ok))
    raise SystemExit(f"no stream of dimension {d} has {items} stable items in a row; try a smaller --items")


def _time(learner, state, X, Y, reps=5):
    f = jax.jit(lambda s, x, y: progressive_validation(learner, s, x, y).state)
    jax.block_until_ready(f(state, X, Y))
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        out = jax.block_until_ready(f(state, X, Y))
        best = min(best, time.perf_counter() - t0)
    return best / len(Y) * 1e6, out


def compare_outside(label, d, make, window, streams, seed):
    print(f"\n{label}, d = {d}: whole streams, tune inside the per-item step vs between item loops (deferred), "
          "µs per item")
    g = thesis_grid(jax.random.key(seed), [n for n in stratified_names(4, seed=seed) if n.split("_")[4] == str(d)][:streams])[0]
    machine = adaptive(make(d), window)
    plain = machine._replace(deferred=None)
    f_in = jax.jit(lambda s, x, y: progressive_validation(plain, s, x, y))
    f_out = jax.jit(lambda s, x, y: progressive_validation(machine, s, x, y))
    for i in range(g.X.shape[0]):
        X, Y = np.asarray(g.X[i]), np.asarray(g.Y[i])
        s0 = machine.init()
        us_in, r = _time_call(f_in, s0, X, Y)
        us_out, o = _time_call(f_out, s0, X, Y)
        dev = float(np.max(np.abs(np.asarray(r.predictions.mean, np.float64)
                               - np.asarray(o.predictions.mean, np.float64))) / np.std(Y))
        print(f"  {g.properties[i]['stream']:30s} in the step {us_in:6.2f}  deferred {us_out:6.2f}  tunes "
              f"{int(r.state.n_tunes)}/{int(o.state.n_tunes)}  largest |Δ mean| {dev:.1e} sd")


def _time_call(f, *args, reps=5):
    out = jax.block_until_ready(f(*args))
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - t0)
    return best / args[1].shape[0] * 1e6, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--outside", action="store_true",
                    help="also compare whole streams with the tune in the step and deferred (the library's default)")
    ap.add_argument("--streams", type=int, default=6)
    a = ap.parse_args()
    print(describe())
    W = a.window
    cases = (("GP (zero mean)", 2, lambda d: gp_window(d, W, mean="zero")), ("kernel regression", 1, lambda d: kernel_regression(d, W)))
    print(f"W = {W}; a stretch of {a.items} stable items (no learning, no tune) of a thesis stream per learner; µs per item")
    for label, d, make in cases:
        inner = make(d)
        machine = adaptive(inner, W)._replace(deferred=None)  # the tune's branch in every step
        name, X, Y, start = _stable_stretch(machine, d, a.items, a.seed)
        s0 = progressive_validation(machine, machine.init(), X[:start], Y[:start]).state
        seg = (X[start:start + a.items], Y[start:start + a.items])
        print(f"\n{label}, d = {d}, stream {name}, items {start}..{start + a.items}")
        trivial = adaptive(inner._replace(tune=_trivial_tune), W)._replace(deferred=None)
        for row, lrn in (("machine, its tune", machine), ("machine, trivial tune", trivial),
                         ("machine, tune=False", adaptive(inner, W, tune=False))):
            us, st = _time(lrn, s0, *seg)
            print(f"  {row:24s} {us:7.2f}   (tunes {int(st.n_tunes) - int(s0.n_tunes)}, learned "
                  f"{int(st.n_learned) - int(s0.n_learned)} in the segment)")
        us, _ = _time(inner, s0.inner, *seg)
        print(f"  {'bare learner':24s} {us:7.2f}   (predicts and learns every item)")
    if a.outside:
        for label, d, make in cases:
            compare_outside(label, d, make, W, a.streams, a.seed)


if __name__ == "__main__":
    main()

"""Where a recommended learner's compile time goes: its layers compiled one at a time.

Run:  .venv/bin/python benchmarks/compile_breakdown.py [--family gp|kr|linear] [--opt-levels]

For the recommended GP (or kernel regression, or the forgetting linear learner) on 2 inputs,
each row traces, lowers and compiles ``lax.scan`` of ``step`` over 2,000 items (one stream,
as the grid runs the GP) for the learner built up layer by layer, the way
:mod:`onlinejax.zoo` builds it: the bare learner, its ``tune`` alone, the state machine
(:func:`onlinejax.wrappers.adaptive.adaptive`), ``standardize`` with and without the warm-up (whose
refit learns the warm-up items again with a second copy of the inner learner's code), and
the whole ``calibrated`` stack; then the evaluation's per-item scores of the learner's
prediction type. A layer's cost is its row minus the row below it. ``--opt-levels`` also
compiles the whole stack with XLA's ``xla_backend_optimization_level`` 0 and 1 (default 2)
and runs it once, so the compile-time saving is set against the run time lost.
Prints the machine; compile seconds are those of this process (no persistent cache).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402

N, D = 2000, 2


def compile_seconds(fn, *args, options=None) -> tuple[float, float, object]:
    """``(trace + lower s, XLA compile s, executable)`` of ``jax.jit(fn)`` at ``args``."""
    t0 = time.perf_counter()
    lowered = jax.jit(fn).trace(*args).lower()
    t1 = time.perf_counter()
    exe = lowered.compile(compiler_options=options)
    return t1 - t0, time.perf_counter() - t1, exe


def scan_of_steps(learner):
    """``(fn, args)``: ``lax.scan`` of ``learner.step`` over ``N`` items from ``init()``."""
    X, Y = jnp.linspace(0.0, 1.0, N * D).reshape(N, D), jnp.sin(jnp.arange(N, dtype=jnp.float32))

    def fn(s, X, Y):
        return jax.lax.scan(lambda s, xy: learner.step(s, *xy), s, (X, Y))

    return fn, (learner.init(), X, Y)


def layers(family: str) -> list:
    """``[(label, learner, what)]`` from the bare learner to the recommended stack (``what``: scan or tune)."""
    from onlinejax.wrappers.adaptive import MachineOptions, adaptive
    from onlinejax.wrappers.calibration import calibrated
    from onlinejax.learners.gp import gp_window
    from onlinejax.learners.kernel_regression import kernel_regression
    from onlinejax.learners.linear import ThesisFeatures, bayesian_map_forgetting
    from onlinejax.wrappers.standardize import StandardizeOptions, standardize
    from onlinejax.zoo import (RECOMMENDED_NAIVE_ALARM, RECOMMENDED_WARMUP, RECOMMENDED_WINDOW, both_maps,
                               configurations)

    W, F = RECOMMENDED_WINDOW, RECOMMENDED_WARMUP
    if family == "linear":
        def bare_of(m):
            return bayesian_map_forgetting(m, forgetting_factor=0.01, features=ThesisFeatures(intercept=True),
                                           alpha=float(m))

        return [("bare learner: step", both_maps(D, lambda inner: inner, bare_of), "scan"),
                ("standardize(...) (no warm-up)", both_maps(D, lambda inner: standardize(inner, options=StandardizeOptions(clip=5.0)),
                                                                   bare_of),
                 "scan"),
                ("RecommendedForgettingLinear: calibrated(...)", configurations()["RecommendedForgettingLinear"].make(D),
                 "scan")]
    make = (lambda: gp_window(D, W, mean="average")) if family == "gp" else (lambda: kernel_regression(D, W))
    options = MachineOptions(naive_alarm=RECOMMENDED_NAIVE_ALARM, learn_shock=False, skip_repeats=True)
    machine = lambda: adaptive(make(), W, options=options)  # noqa: E731
    name = {"gp": "RecommendedGP", "kr": "RecommendedKernelRegression"}[family]
    return [("bare learner: step", make(), "scan"), ("bare learner: tune alone", make(), "tune"),
            ("adaptive(...): the state machine", machine(), "scan"),
            ("standardize(adaptive(...)), no warm-up", standardize(machine(), options=StandardizeOptions(clip=5.0)),
             "scan"),
            (f"standardize(adaptive(...)), warm-up {F}",
             standardize(machine(), options=StandardizeOptions(clip=5.0, warmup=F)), "scan"),
            (f"{name}: calibrated(...)", configurations()[name].make(D), "scan")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=("gp", "kr", "linear"), default="gp")
    ap.add_argument("--opt-levels", action="store_true", help="also compile the whole stack at XLA opt levels 0 and 1")
    a = ap.parse_args()
    print(describe())
    print(f"{'layer':52s} {'trace+lower s':>14s} {'compile s':>10s} {'HLO lines':>10s}")
    whole = None
    for label, learner, what in layers(a.family):
        fn, args = scan_of_steps(learner) if what == "scan" else (learner.tune, (learner.init(),))
        tl, c, _ = compile_seconds(fn, *args)
        lines = jax.jit(fn).trace(*args).lower().as_text().count("\n")
        print(f"{label:52s} {tl:14.1f} {c:10.1f} {lines:10d}", flush=True)
        whole = (fn, args)
    from onlinejax.evaluation.metrics import item_quantities

    fn, args = whole
    pred = jax.eval_shape(lambda s, x: layers(a.family)[-1][1].predict(s, x), args[0], args[1][0])
    preds = jax.tree_util.tree_map(lambda l: jnp.ones((N,), l.dtype), pred)
    tl, c, _ = compile_seconds(jax.vmap(lambda p, y: item_quantities(y, p, 0.95)), preds, args[2])
    print(f"{'scores of a ' + type(pred).__name__ + ' (item_quantities)':52s} {tl:14.1f} {c:10.1f}", flush=True)
    if a.opt_levels:
        print(f"{'XLA backend optimisation level':52s} {'compile s':>14s} {'run s':>10s}")
        for level in (0, 1, 2):
            _, c, exe = compile_seconds(fn, *args, options={"xla_backend_optimization_level": level})
            jax.block_until_ready(exe(*args))
            t0 = time.perf_counter()
            jax.block_until_ready(exe(*args))
            print(f"{level:<52d} {c:14.1f} {time.perf_counter() - t0:10.2f}", flush=True)


if __name__ == "__main__":
    main()

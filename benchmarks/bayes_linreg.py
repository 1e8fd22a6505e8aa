"""Throughput of conjugate Bayesian linear regression: onlinejax vs River vs numpy.

Run:  .venv/bin/python benchmarks/bayes_linreg.py [--n 100000] [--river-n 20000] [--cpu-sync-dispatch]

Prints items/s of progressive validation (predict with a distribution, then
learn) for d = 8 and d = 45, for
  * onlinejax in one ``lax.scan`` (compile time excluded, reported separately),
  * onlinejax driven item by item from a Python loop, reading every prediction
    back (``StatefulLearner.step``: one compiled call per item) — and the
    functional ``learner.step`` that leaves predictions on the device,
  * River's ``BayesianLinearRegression`` (``predict_one(with_dist=True)`` + ``learn_one``),
  * a plain numpy Sherman–Morrison loop,
on the same stream in the same run, with ratios, plus 576 streams × 2000
items vmapped in one program.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402

import onlinejax as oj  # noqa: E402
from onlinejax.evaluation import progressive_validation  # noqa: E402


def stream(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    return X, (X @ rng.normal(size=d) + 0.3 * rng.normal(size=n)).astype(np.float32)


def time_scan(lrn, X, Y, reps=7):
    t0 = time.perf_counter()
    jax.block_until_ready(progressive_validation(lrn, lrn.init(), X, Y))
    first = time.perf_counter() - t0
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(progressive_validation(lrn, lrn.init(), X, Y))
        best = min(best, time.perf_counter() - t0)
    return best, first - best


def time_python_loop(lrn, X, Y):
    """Functional fused step from Python; predictions stay on the device (no readback)."""
    s = lrn.init()
    s, p = lrn.step(s, X[0], float(Y[0]))  # compile
    jax.block_until_ready(s)
    t0 = time.perf_counter()
    for x, y in zip(X, Y):
        s, p = lrn.step(s, x, float(y))
    jax.block_until_ready(s)
    return (time.perf_counter() - t0) / len(Y)


def time_stateful_loop(lrn, X, Y):
    """StatefulLearner.step from Python, reading each prediction back as floats (like River)."""
    m = oj.StatefulLearner(lrn)
    m.step(X[0], float(Y[0]))
    t0 = time.perf_counter()
    for x, y in zip(X, Y):
        p = m.step(x, float(y))
        float(p.mean), float(p.var)
    return (time.perf_counter() - t0) / len(Y)


def time_numpy(X, Y, alpha=1.0, beta=1.0):
    d = X.shape[1]
    X = X.astype(np.float64)
    S = np.eye(d) / alpha
    m = np.zeros(d)
    t0 = time.perf_counter()
    for x, y in zip(X, Y):
        mu = x @ m
        Sx = S @ x
        v = 1 / beta + x @ Sx
        k = Sx / v
        S = S - np.outer(k, Sx)
        m = m + k * (y - mu)
    return (time.perf_counter() - t0) / len(Y)


def time_river(X, Y):
    try:
        from river import linear_model
    except ImportError:
        return None
    model = linear_model.BayesianLinearRegression(alpha=1.0, beta=1.0)
    dicts = [dict(enumerate(map(float, x))) for x in X]
    t0 = time.perf_counter()
    for x, y in zip(dicts, Y):
        model.predict_one(x, with_dist=True)
        model.learn_one(x, float(y))
    return (time.perf_counter() - t0) / len(Y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--river-n", type=int, default=20_000, help="items timed for River (it is slow)")
    ap.add_argument("--loop-n", type=int, default=5_000, help="items timed for the Python-loop paths")
    ap.add_argument("--cpu-sync-dispatch", action="store_true",
                    help="run jitted calls on the calling thread (jax_cpu_enable_async_dispatch=False)")
    a = ap.parse_args()
    if a.cpu_sync_dispatch:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    print(describe() + f"; cpu async dispatch {'off' if a.cpu_sync_dispatch else 'on (default)'}")
    print(f"dtype {jnp.zeros(()).dtype}; n = {a.n} (River on the first {a.river_n}, Python loops on the first {a.loop_n})")
    for d in (8, 45):
        X, Y = stream(a.n, d)
        fast = oj.bayes_linreg(d, alpha=1.0, beta=1.0, options=oj.BayesOptions(tunable=False))
        full = oj.bayes_linreg(d, alpha=1.0, beta=1.0)
        scan_s, comp = time_scan(fast, X, Y)
        us_scan = scan_s / a.n * 1e6
        us_full = time_scan(full, X, Y)[0] / a.n * 1e6
        us_loop = time_python_loop(fast, X[: a.loop_n], Y[: a.loop_n]) * 1e6
        us_sl = time_stateful_loop(fast, X[: a.loop_n], Y[: a.loop_n]) * 1e6
        us_np = time_numpy(X[: a.loop_n], Y[: a.loop_n]) * 1e6
        r = time_river(X[: a.river_n], Y[: a.river_n])
        print(f"\nd = {d}")
        print(f"  onlinejax scan (tunable=False)  {us_scan:9.3f} us/item {1e6 / us_scan:13,.0f} items/s  (compile {comp:.2f} s)")
        print(f"  onlinejax scan (default, +stats){us_full:9.3f} us/item {1e6 / us_full:13,.0f} items/s")
        print(f"  python loop, StatefulLearner    {us_sl:9.3f} us/item {1e6 / us_sl:13,.0f} items/s  (prediction read back each item)")
        print(f"  python loop, learner.step       {us_loop:9.3f} us/item {1e6 / us_loop:13,.0f} items/s  (predictions left on device)")
        print(f"  numpy Sherman-Morrison loop     {us_np:9.3f} us/item {1e6 / us_np:13,.0f} items/s")
        if r is not None:
            us_r = r * 1e6
            print(f"  River BayesianLinearRegression  {us_r:9.3f} us/item {1e6 / us_r:13,.0f} items/s")
            print(f"  scan vs River: {us_r / us_scan:.1f}x   default scan vs River: {us_r / us_full:.1f}x   "
                  f"StatefulLearner loop vs River: {us_r / us_sl:.2f}x   learner.step loop vs River: {us_r / us_loop:.2f}x   "
                  f"scan vs numpy: {us_np / us_scan:.1f}x")
        else:
            print(f"  (River not installed)   scan vs numpy: {us_np / us_scan:.1f}x")
    # 576 streams x 2000 items in one vmapped program
    S, n, d = 576, 2000, 8
    rng = np.random.default_rng(1)
    Xs = rng.normal(size=(S, n, d)).astype(np.float32)
    Ys = (np.einsum("snd,sd->sn", Xs, rng.normal(size=(S, d))) + 0.3 * rng.normal(size=(S, n))).astype(np.float32)
    lrn = oj.bayes_linreg(d, options=oj.BayesOptions(tunable=False))
    run = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions))
    t0 = time.perf_counter()
    jax.block_until_ready(run(Xs, Ys))
    comp = time.perf_counter() - t0
    best = min(_timed(run, Xs, Ys) for _ in range(3))
    print(f"\n576 streams x 2000 items, d = 8, vmapped: {best:.3f} s after compile ({S * n / best:,.0f} items/s; "
          f"first call incl. compile {comp:.2f} s)")


def _timed(f, *args):
    t0 = time.perf_counter()
    jax.block_until_ready(f(*args))
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()

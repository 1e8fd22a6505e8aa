"""Time-efficiency metrics (thesis 6.1.5 and eq. 6.4–6.5).

APT/HPT/TPT: average, highest and total prediction time; AUT/HUT/TUT: the
same for updates (``learn``); ATT/HTT/TTT: for ``tune``; TT = TPT + TUT + TTT;
ATPI = TT / n (eq. 6.4); DRmax = 1 / ATPI (eq. 6.5), the highest stream rate
the learner keeps up with. Single calls are the jitted ``learner.predict`` /
``learn`` / ``tune`` timed with ``block_until_ready`` from Python (so they
include JAX's dispatch cost, which dominates for small learners); the first
call of each (compilation) is excluded and reported separately. The scan-mode
throughput of :func:`~onlinejax.evaluation.progressive_validation` on the
same stream is reported next to them.
"""
from __future__ import annotations

import time
from typing import Optional

import jax
import numpy as np

from ..core.base import Learner
from .progressive import progressive_validation

__all__ = ["timing_report"]


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, (time.perf_counter() - t0) * 1e3


def timing_report(learner: Learner, X, Y, state=None, *, tune_interval: Optional[int] = None,
                  verbose: bool = True) -> dict:
    """Time predict / learn / tune item by item, and the scan mode, on one stream.

    Args:
      learner: any learner.
      X: ``[n, d]``; Y: ``[n]``.
      state: initial state (default ``learner.init()``).
      tune_interval: call ``learner.tune`` after every ``tune_interval`` items (None: never).
      verbose: print the report.
    Returns:
      dict with the thesis's metrics in milliseconds (``APT, HPT, TPT, AUT, HUT,
      TUT, ATT, HTT, TTT, TT, ATPI``), ``DRmax`` in items per second,
      ``compile_ms`` and ``scan_us_per_item``.
    """
    X = np.asarray(X)
    Y = np.asarray(Y)
    n = len(Y)
    if X.ndim != 2 or X.shape[0] != n or n < 2:
        raise ValueError(f"X, Y: expected shapes [n, d] and [n] with n >= 2, got {X.shape} and {Y.shape}")
    if tune_interval is not None and (learner.tune is None or int(tune_interval) < 1):
        raise ValueError("tune_interval: needs a learner with tune and a value >= 1")
    s = learner.init() if state is None else state
    # compile outside the timings
    _, c1 = _timed(learner.predict, s, X[0])
    s1, c2 = _timed(learner.learn, s, X[0], Y[0])
    c3 = _timed(learner.tune, s1)[1] if tune_interval else 0.0
    pt, ut, tt = [], [], []
    for i in range(n):
        _, dt_p = _timed(learner.predict, s, X[i])
        s, dt_u = _timed(learner.learn, s, X[i], Y[i])
        pt.append(dt_p)
        ut.append(dt_u)
        if tune_interval and (i + 1) % tune_interval == 0:
            s, dt_t = _timed(learner.tune, s)
            tt.append(dt_t)
    res = progressive_validation(learner, learner.init() if state is None else state, X, Y)  # compile
    jax.block_until_ready(res)
    t0 = time.perf_counter()
    jax.block_until_ready(progressive_validation(learner, learner.init() if state is None else state, X, Y))
    scan_us = (time.perf_counter() - t0) / n * 1e6
    pt, ut, tt = np.array(pt), np.array(ut), np.array(tt) if tt else np.zeros(0)
    out = {
        "APT": pt.mean(), "HPT": pt.max(), "TPT": pt.sum(),
        "AUT": ut.mean(), "HUT": ut.max(), "TUT": ut.sum(),
        "ATT": tt.mean() if tt.size else 0.0, "HTT": tt.max() if tt.size else 0.0, "TTT": tt.sum(),
    }
    out["TT"] = out["TPT"] + out["TUT"] + out["TTT"]
    out["ATPI"] = out["TT"] / n
    out["DRmax"] = 1e3 / out["ATPI"]
    out["compile_ms"] = c1 + c2 + c3
    out["scan_us_per_item"] = scan_us
    out = {k: float(v) for k, v in out.items()}
    if verbose:
        print(f"timing over {n} items (single jitted calls, ms):")
        for k in ("APT", "HPT", "TPT", "AUT", "HUT", "TUT", "ATT", "HTT", "TTT", "TT", "ATPI"):
            print(f"  {k:5s} {out[k]:12.4f}")
        print(f"  DRmax {out['DRmax']:12.1f} items/s   (1/ATPI, eq. 6.5)")
        print(f"  compile {out['compile_ms']:.1f} ms;  scan mode {scan_us:.3f} us/item "
              f"({1e6 / scan_us:,.0f} items/s)")
    return out

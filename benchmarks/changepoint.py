"""BOCPD against other drift detectors, and after a drift against the CUSUM state machine.

Part A: River's annotated change-point series (``river.drift.datasets``, from TCPDBench), each
standardised by its first 20 values. Detectors: River's ``ADWIN`` and ``PageHinkley`` on the
values; onlinejax's CUSUM state machine (:func:`onlinejax.wrappers.adaptive.adaptive` around a 32-item
window of a constant-mean Bayesian linear model: an alarm is an item whose mode becomes high
error); BOCPD (:func:`onlinejax.wrappers.changepoint.bocpd` over a constant-mean Bayesian linear model:
an alarm where the most probable run length drops, placed at the run's start), and BOCPD over runs
that learn their level, slope and noise (:func:`onlinejax.learners.linear.nig_linreg` with a trend and
forgetting 0.98). Scores: F1 with a
margin of 5 items, averaged over the annotators (TCPDBench's "F1"), the mean delay from an
annotated change to the first alarm within the next 10 items, and false alarms (alarms farther
than 5 items from every annotation, counted against the union of annotations).

Part B: thesis-grid streams with a concept drift (CD): SMSE and mean log predictive density
over the 64 items after the drift, and over the whole stream, for ``RecommendedBOCPD`` against
``RecommendedWindowedLinear`` (the CUSUM state machine over the windowed mapped linear model)
and ``RecommendedForgettingLinear``, run in one ``run_grid`` call.

    python benchmarks/changepoint.py [--streams 24] [--n 2000]
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import onlinejax as oj
from onlinejax.wrappers.adaptive import HIGH_ERROR, adaptive, record_mode
from onlinejax.wrappers.changepoint import bocpd
from onlinejax.evaluation import progressive_validation

from _machine import describe

MARGIN, DELAY_HORIZON, AFTER = 5, 10, 64


def river_series():
    """``{name: (values [n], {annotator: [change indices]})}`` for the univariate annotated series."""
    from river.drift import datasets

    out = {}
    for cls in (datasets.AirlinePassengers, datasets.BrentSpotPrice, datasets.UKCoalEmploy, datasets.Bitcoin,
                datasets.Apple, datasets.RunLog):
        ds = cls()
        values = []
        for x, y in ds:
            v = y if y is not None else x
            if isinstance(v, dict):  # multivariate series: the first numeric field
                v = next(u for u in v.values() if isinstance(u, (int, float)))
            values.append(float(v))
        out[cls.__name__] = (np.asarray(values), {k: list(v) for k, v in ds.annotations.items()})
    return out


def _f1(alarms, truth, n):
    """TCPDBench's F1 with margin: the start (index 0) counts as a change for both."""
    a = sorted(set([0] + list(alarms)))
    t = sorted(set([0] + [c for c in truth if c < n]))
    used, tp = set(), 0
    for c in t:
        hit = [x for x in a if abs(x - c) <= MARGIN and x not in used]
        if hit:
            used.add(hit[0])
            tp += 1
    prec, rec = tp / len(a), tp / len(t)
    return 0.0 if tp == 0 else 2 * prec * rec / (prec + rec)


def scores(alarms, annotations, n):
    union = sorted({c for v in annotations.values() for c in v})
    f1 = np.mean([_f1(alarms, v, n) for v in annotations.values()])
    delays = []
    for c in union:
        after = [a - c for a in alarms if 0 <= a - c <= DELAY_HORIZON]
        if after:
            delays.append(min(after))
    false = sum(all(abs(a - c) > MARGIN for c in union) for a in alarms)
    return f1, (np.mean(delays) if delays else float("nan")), len(delays), false


def river_alarms(detector, z):
    alarms = []
    for i, v in enumerate(z):
        detector.update(float(v))
        if detector.drift_detected:
            alarms.append(i)
    return alarms


def _constant_mean(beta):
    return oj.bayes_linreg(1, alpha=1.0, beta=beta, options=oj.BayesOptions(tunable=False))


def cusum_alarms(z, beta):
    lrn = adaptive(oj.windowed_bayes_linreg(1, 32, alpha=1.0, beta=beta), 32)
    res = progressive_validation(lrn, lrn.init(), np.ones((len(z), 1)), z, record=record_mode)
    modes = np.asarray(res.records)
    return [i for i in range(1, len(z)) if modes[i] == HIGH_ERROR and modes[i - 1] != HIGH_ERROR]


def _map_run_length(s):
    return s.run_length[jnp.argmax(s.log_weights)]


def bocpd_alarms(z, beta, hazard=1 / 100):
    lrn = bocpd(_constant_mean(beta), 32, hazard=hazard)
    res = progressive_validation(lrn, lrn.init(), np.ones((len(z), 1)), z, record=_map_run_length)
    r = np.asarray(res.records)
    return sorted({int(i - r[i] + 1) for i in range(1, len(z)) if r[i] < r[i - 1]})


def learning_runs(beta):
    """Runs that learn their level, slope and noise (the noise's prior guess ``1/beta``), forgetting over ~50 items."""
    return oj.nig_linreg(0, trend=50.0, forgetting=0.98, prior=oj.NIGPrior(1.0 / beta, 1.0 / beta))


def bocpd_learning_alarms(z, beta, hazard=1 / 100):
    lrn = bocpd(learning_runs(beta), 32, hazard=hazard)
    res = progressive_validation(lrn, lrn.init(), np.zeros((len(z), 0)), z, record=_map_run_length)
    r = np.asarray(res.records)
    return sorted({int(i - r[i] + 1) for i in range(1, len(z)) if r[i] < r[i - 1]})


def part_a():
    from river import drift

    print("\nA. River's annotated series (standardised by the first 20 values): F1 (margin 5, mean over "
          "annotators) / mean delay (items, changes found within 10) / false alarms")
    print(f"{'series':16s} {'n':>5s} {'changes':>8s}   " + "  ".join(f"{d:>20s}" for d in
                                                                 ("ADWIN", "PageHinkley", "CUSUM (adaptive)", "BOCPD",
                                                                  "BOCPD, runs learn")))
    totals = {}
    for name, (y, ann) in river_series().items():
        z = (y - y[:20].mean()) / (y[:20].std() + 1e-12)
        beta = 1.0 / max(np.var(z[:20]), 1e-6)  # noise precision: the first 20 values' spread taken as noise
        dets = {"ADWIN": river_alarms(drift.ADWIN(), z), "PageHinkley": river_alarms(drift.PageHinkley(), z),
                "CUSUM (adaptive)": cusum_alarms(z, beta), "BOCPD": bocpd_alarms(z, beta),
                "BOCPD, runs learn": bocpd_learning_alarms(z, beta)}
        union = sorted({c for v in ann.values() for c in v})
        cells = []
        for k, al in dets.items():
            f1, delay, found, false = scores(al, ann, len(z))
            totals.setdefault(k, []).append((f1, false))
            cells.append(f"{f1:.2f} / {delay:4.1f} ({found}) / {false:3d}")
        print(f"{name:16s} {len(z):5d} {len(union):8d}   " + "  ".join(f"{c:>20s}" for c in cells))
    print(f"{'mean F1, false':16s} {'':5s} {'':8s}   " + "  ".join(
        f"{np.mean([t[0] for t in v]):>11.2f} / {np.mean([t[1] for t in v]):6.1f}" for v in totals.values()))


def part_b(n_streams: int, n: int):
    from onlinejax import zoo
    from onlinejax.data import grid_streams, thesis_grid

    names = [g.name for g in grid_streams(n) if g.drift]
    names = list(np.random.default_rng(0).choice(names, n_streams, replace=False))
    groups = thesis_grid(jax.random.key(0), names, size=n)
    learners = ("RecommendedBOCPD", "RecommendedWindowedLinear", "RecommendedForgettingLinear")
    print(f"\nB. {n_streams} thesis-grid drift streams x {n} items (d = 1, 2, 4; drift at n/2); each prediction "
          f"scored by its own distribution. Means over streams:")
    print(f"{'learner':30s} {'SMSE after':>11s} {'LPD after':>10s} {'ICR after':>10s} {'SMSE all':>9s} "
          f"{'LPD all':>8s} {'ICR all':>8s} {'s':>5s}")
    for name in learners:
        t0, out = time.perf_counter(), []
        for g in groups:
            lrn = zoo.configurations()[name].make(g.X.shape[-1])
            run = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions))
            p = run(g.X, g.Y)
            lp = np.asarray(p.log_prob(g.Y), np.float64)
            lo, hi = (np.asarray(v, np.float64) for v in p.interval(0.95))
            y, m = np.asarray(g.Y, np.float64), np.asarray(p.mean, np.float64)
            for i, cp in enumerate(np.asarray(g.change_points)):
                sl, cov = slice(cp, cp + AFTER), (y[i] >= lo[i]) & (y[i] <= hi[i])
                v = np.var(y[i])
                out.append((np.mean((y[i, sl] - m[i, sl]) ** 2) / v, lp[i, sl].mean(), cov[sl].mean(),
                            np.mean((y[i] - m[i]) ** 2) / v, lp[i].mean(), cov.mean()))
        r = np.mean(out, axis=0)
        print(f"{name:30s} {r[0]:11.4f} {r[1]:10.3f} {r[2]:10.3f} {r[3]:9.4f} {r[4]:8.3f} {r[5]:8.3f} "
              f"{time.perf_counter() - t0:5.0f}")
    print(f"(after: the {AFTER} items from the drift on; SMSE over the stream's variance; s: wall time incl. compile)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=24)
    p.add_argument("--n", type=int, default=2000)
    a = p.parse_args()
    print(describe())
    part_a()
    if a.streams:
        part_b(a.streams, a.n)


if __name__ == "__main__":
    main()

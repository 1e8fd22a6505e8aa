"""BOCPD against other drift detectors, and after a drift against the CUSUM state machine.

Part A: River's annotated change-point series (``river.drift.datasets``, from TCPDBench), each
standardised by its first 20 values. Detectors: River's ``ADWIN`` and ``PageHinkley`` on the
values; onlinejax's CUSUM state machine (:func:`onlinejax.adaptive.adaptive` around a 32-item
window of a constant-mean Bayesian linear model: an alarm is an item whose mode becomes high
error); BOCPD (:func:`onlinejax.changepoint.bocpd` over a constant-mean Bayesian linear model:
an alarm where the most probable run length drops, placed at the run's start). Scores: F1 with a
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
from onlinejax.adaptive import HIGH_ERROR, adaptive, record_mode
from onlinejax.changepoint import bocpd
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
    return oj.bayes_linreg(1, alpha=1.0, beta=beta, tunable=False)


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


def part_a():
    from river import drift

    print("\nA. River's annotated series (standardised by the first 20 values): F1 (margin 5, mean over "
          "annotators) / mean delay (items, changes found within 10) / false alarms")
    print(f"{'series':16s} {'n':>5s} {'changes':>8s}   " + "  ".join(f"{d:>20s}" for d in
                                                                 ("ADWIN", "PageHinkley", "CUSUM (adaptive)", "BOCPD")))
    totals = {}
    for name, (y, ann) in river_series().items():
        z = (y - y[:20].mean()) / (y[:20].std() + 1e-12)
        beta = 1.0 / max(np.var(z[:20]), 1e-6)  # noise precision: the first 20 values' spread taken as noise
        dets = {"ADWIN": river_alarms(drift.ADWIN(), z), "PageHinkley": river_alarms(drift.PageHinkley(), z),
                "CUSUM (adaptive)": cusum_alarms(z, beta), "BOCPD": bocpd_alarms(z, beta)}
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
    from onlinejax.data import parse_name, thesis_grid
    from onlinejax.evaluation import run_grid

    names = [s for s in (g.name for g in __import__("onlinejax.data", fromlist=["grid_streams"]).grid_streams(n))
             if parse_name(s).drift]
    rng = np.random.default_rng(0)
    names = list(rng.choice(names, n_streams, replace=False))
    groups = thesis_grid(jax.random.key(0), names, size=n)
    learners = [zoo.configurations()[k] for k in ("RecommendedBOCPD", "RecommendedWindowedLinear",
                                                  "RecommendedForgettingLinear")]
    t0 = time.perf_counter()
    res = run_grid(learners, groups, progress=False, keep_predictions=True)
    secs = time.perf_counter() - t0
    print(f"\nB. {n_streams} thesis-grid drift streams x {n} items (d = 1, 2, 4; drift at n/2), one run_grid call "
          f"{secs:.0f} s incl. compile. Means over streams:")
    print(f"{'learner':30s} {'SMSE after':>11s} {'MLPD after':>11s} {'SMSE all':>9s} {'MLPD all':>9s} {'ICR all':>8s}")
    for g in learners:
        rows = []
        for grp in groups:
            for i, s in enumerate(grp.names):
                m, v, _ = res.predictions[(g.name, s)]
                y = np.asarray(grp.Y[i], np.float64)
                cp = int(grp.change_points[i])
                sl = slice(cp, cp + AFTER)
                lp = -0.5 * (np.log(2 * np.pi * v) + (y - m) ** 2 / v)
                rows.append((np.mean((y[sl] - m[sl]) ** 2) / np.var(y), np.mean(lp[sl])))
        all_rows = [r for r in res.rows if r["learner"] == g.name]
        print(f"{g.name:30s} {np.mean([r[0] for r in rows]):11.4f} {np.mean([r[1] for r in rows]):11.3f} "
              f"{np.mean([r['smse'] for r in all_rows]):9.4f} {np.mean([r['mlpd'] for r in all_rows]):9.3f} "
              f"{np.mean([r['icr'] for r in all_rows]):8.3f}")
    print("(MLPD after: the Gaussian with the prediction's mean and variance; the table's MLPD uses each "
          "prediction's own density)")


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

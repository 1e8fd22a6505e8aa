"""Where the thesis's features are computed: from standardised inputs, raw ones, or both (as recommended).

Run:  .venv/bin/python benchmarks/mapped_features.py [--seeds 5,11] [--per-cell 2] [--maps standardised,raw,both]

"standardised": the recommended linear learners (``RecommendedForgettingLinear``, ``RecommendedWindowedLinear``)
as they were before 2026-11-30, which standardised the inputs, then mapped them
(:func:`onlinejax.learners.linear.thesis_features`: the inputs, their squares and products, ``sign·log1p|·|`` and
``sign·sqrt|·|``). The thesis maps the raw inputs, where log and square root mean the
log-linear and square-root growth of positive inputs. "raw" here maps the raw inputs first and standardises
the mapped features (``map_features(fm, calibrated(...))``), with everything else as recommended; "both"
(the recommended learners now, :func:`onlinejax.zoo.both_maps`) adds, behind the standardiser,
``sign·log1p|z|`` and ``sign·sqrt|z|`` of the standardised inputs ``z`` (the standardised map's odd
features; its quadratics span the same space as the raw ones). Printed,
per learner and map: the median and mean SMSE and mean log predictive density over ``--per-cell`` streams
of each of the thesis grid's 12 cells per seed (``stratified_names``, 2,000 items), then per cell (ND / D,
d) the median ratio raw (both) / standardised of SMSE and the mean change of MLPD (nats per item).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _machine import describe  # noqa: E402


def makers() -> dict:
    from onlinejax import calibrated, zoo
    from onlinejax.wrappers.adaptive import MachineOptions, adaptive
    from onlinejax.learners.linear import (MAP_WINDOWED, ThesisFeatures, bayesian_map_forgetting, bayesian_map_windowed,
                                           map_features, thesis_features)
    from onlinejax.wrappers.standardize import StandardizeOptions

    W, F = zoo.RECOMMENDED_WINDOW, zoo.RECOMMENDED_WARMUP

    def windowed(learner):
        options = MachineOptions(naive_alarm=zoo.RECOMMENDED_NAIVE_ALARM, learn_shock=False, skip_repeats=True,
                                 min_moves=zoo.RECOMMENDED_MIN_MOVES, follow_inputs=zoo.RECOMMENDED_FOLLOW_MARGIN)
        return calibrated(adaptive(learner, W, options=options),
                          standardization=StandardizeOptions(clip=5.0, warmup=F, keep=W))

    def forgetting_raw(d):
        fm = thesis_features(d)
        return map_features(fm, calibrated(bayesian_map_forgetting(
            fm.n_out, forgetting_factor=0.01, features=ThesisFeatures(intercept=True), alpha=zoo.unit_prior_alpha(d))))

    def windowed_raw(d):
        fm = thesis_features(d)
        return map_features(fm, windowed(bayesian_map_windowed(
            fm.n_out, W, features=ThesisFeatures(intercept=True), alpha=zoo.unit_prior_alpha(d),
            options=MAP_WINDOWED._replace(prior_floor=zoo.RECOMMENDED_PRIOR_FLOOR))))

    def forgetting_standardised(d):
        return calibrated(bayesian_map_forgetting(d, forgetting_factor=0.01, features=ThesisFeatures(True, True),
                                                  alpha=zoo.unit_prior_alpha(d)))

    def windowed_standardised(d):
        return windowed(bayesian_map_windowed(d, W, features=ThesisFeatures(True, True), alpha=zoo.unit_prior_alpha(d),
                                              options=MAP_WINDOWED._replace(prior_floor=zoo.RECOMMENDED_PRIOR_FLOOR)))

    conf = zoo.configurations()
    return {("RecommendedForgettingLinear", "standardised"): forgetting_standardised,
            ("RecommendedForgettingLinear", "raw"): forgetting_raw,
            ("RecommendedWindowedLinear", "standardised"): windowed_standardised,
            ("RecommendedWindowedLinear", "raw"): windowed_raw,
            ("RecommendedForgettingLinear", "both"): conf["RecommendedForgettingLinear"].make,
            ("RecommendedWindowedLinear", "both"): conf["RecommendedWindowedLinear"].make}


def run(make, groups) -> tuple:
    from onlinejax.evaluation import evaluate_streams

    smse, mlpd = [], []
    for g in groups:
        r = evaluate_streams(make(g.X.shape[-1]), g.X, g.Y)
        smse += list(np.asarray(r.metrics["smse"]))
        mlpd += list(np.asarray(r.metrics["mlpd"]))
    return np.array(smse), np.array(mlpd)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="5,11", help="comma-separated stream-sample seeds")
    ap.add_argument("--per-cell", type=int, default=2, help="streams per grid cell and seed")
    ap.add_argument("--maps", default="standardised,raw,both", help="comma-separated maps to run")
    args = ap.parse_args(argv)
    import jax
    from onlinejax.data.grid import stratified_names, thesis_grid

    print(describe())
    streams = [(int(s), stratified_names(args.per_cell, seed=int(s))) for s in args.seeds.split(",")]
    data = [thesis_grid(jax.random.PRNGKey(seed), names) for seed, names in streams]
    # thesis_grid orders streams by (n, d) within a sample; stratified_names lists them cell by cell
    names = [n for _, ns in streams for n in sorted(ns, key=lambda s: int(s.split("_")[4]))]
    out = {}
    for (learner, where), make in makers().items():
        if where not in args.maps.split(","):
            continue
        t = time.time()
        res = [run(make, groups) for groups in data]
        out[learner, where] = tuple(np.concatenate(a) for a in zip(*res))
        sm, lp = out[learner, where]
        print(f"{learner:28s} {where:12s} median SMSE {np.median(sm):.4f} mean {np.mean(sm):.4f} "
              f"MLPD {np.mean(lp):.3f} ({time.time() - t:.0f} s)", flush=True)
    cells = [(n.split("_")[1], int(n.split("_")[4])) for n in names]
    for learner, where in [(a, b) for a in ("RecommendedForgettingLinear", "RecommendedWindowedLinear")
                           for b in ("raw", "both") if (a, b) in out and (a, "standardised") in out]:
        (s0, l0), (s1, l1) = out[learner, "standardised"], out[learner, where]
        for cell in sorted(set(cells)):
            i = np.array([c == cell for c in cells])
            r = s1[i] / s0[i]
            print(f"{learner:28s} {where:5s} {cell[0]:2s} d={cell[1]} SMSE /standardised median {np.median(r):.2f} "
                  f"[{r.min():.2f}, {r.max():.2f}]  MLPD {np.mean(l1[i] - l0[i]):+.2f}")


if __name__ == "__main__":
    main()

"""Calibration and proper scores of the recommended learners: a thesis-grid sample and real streams fed raw.

Prints, per recommended configuration:

* on a stratified thesis-grid sample (``--per-cell K`` streams per cell, seed
  ``--seed``): the share of streams whose 95 % interval covers within
  [92, 97] %, the share with log-score skill over climatology > 0, the
  smallest skill, the median SMSE next to the median SMSE of the family's
  best thesis configuration at the same window (W = 64), and the number of
  non-finite or non-positive-variance predictions;
* on real streams shipped inside River and scikit-learn, features fed raw
  (lagged targets as features for the series): coverage, skill, SMSE, MLPD
  and CRPS, next to River's BayesianLinearRegression's SMSE.

Usage::

    python benchmarks/calibration.py [--per-cell 8] [--seed 7] [--real-only | --grid-only | --full-only] [--full-check]

``--full-check`` also runs the recommended configurations and their yardsticks on
all 576 grid streams: non-finite and non-positive variances, coverage, skill
and median SMSE (run it once with ``JAX_ENABLE_X64=1`` too).
"""
from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _machine import describe  # noqa: E402

import onlinejax as oj  # noqa: E402
from onlinejax import zoo  # noqa: E402
from onlinejax.evaluation import progressive_validation  # noqa: E402
from onlinejax.evaluation import ReplayOptions, use_cpu_cores  # noqa: E402
from onlinejax.runner import replay_combination, run_grid  # noqa: E402
from onlinejax.core.registry import REGISTRY  # noqa: E402
from onlinejax.evaluation.metrics import log_score_skill, prequential, score  # noqa: E402

zoo.register_all()  # the configurations are looked up by name

#: the best thesis configuration at W = 64 per recommended family (the SMSE yardstick)
THESIS_AT_64 = {
    "RecommendedGP": ["GPRegressionZeroMean_WS64", "GPRegressionAvgMean_WS64", "GPRegressionOLSMean_WS64"],
    "RecommendedKernelRegression": ["KernelRegression_WS64"],
    "RecommendedWindowedLinear": ["BayesianMAPWindowedMapped_WS64", "BayesianMAPWindowed_WS64",
                                  "BayesianMLEWindowedMapped_WS64", "BayesianMLEWindowed_WS64"],
    "RecommendedForgettingLinear": [f"Bayesian{f}Forgetting{m}_FF{ff:g}" for f in ("MLE", "MAP")
                                    for m in ("", "Mapped") for ff in zoo.THESIS_FORGETTING],
}


def real_streams() -> dict:
    """``{name: (X, y)}``: real streams fed raw (River's and scikit-learn's shipped data)."""
    out = {}
    days, X, y, _ = oj.data.trump_approval()
    out["TrumpApproval"] = (np.column_stack([days, X]), y)  # the ordinal date (~7.4e5) as a raw feature
    Xc, yc, _ = oj.data.chick_weights()
    out["ChickWeights"] = (Xc, yc)
    out["AirlinePassengers_lag12"] = oj.data.lagged(oj.data.airline_passengers(), 12)
    out["WaterFlow_lag6"] = oj.data.lagged(oj.data.water_flow(), 6)
    try:
        from sklearn.datasets import load_diabetes

        Xd, yd = load_diabetes(return_X_y=True, scaled=False)
        out["Diabetes"] = (Xd, yd)
    except ImportError:
        pass
    return out


def river_blr_smse(X, y) -> float:
    from river import linear_model

    m = linear_model.BayesianLinearRegression()
    preds = []
    for x, t in zip(X, y):
        xd = {f"x{j}": float(v) for j, v in enumerate(x)}
        preds.append(m.predict_one(xd))
        m.learn_one(xd, float(t))
    preds = np.asarray(preds, np.float64)
    return float(np.mean((y - preds) ** 2) / np.var(y))


def stream_scores(learner, X, y) -> dict:
    p = progressive_validation(learner, learner.init(), X, y).predictions
    dt = p.mean.dtype
    m = {k: float(v) for k, v in score(prequential(0.95), np.asarray(y, dt), p).items()}
    m.update({k: float(v) for k, v in log_score_skill(np.asarray(y, dt), p).items() if k != "n_nonfinite"})
    var = np.asarray(p.var)
    m["bad_var"] = int(np.sum(~np.isfinite(var) | (var <= 0)) + np.sum(~np.isfinite(np.asarray(p.mean))))
    return m


def run_real(names) -> None:
    print("\n## Real streams, features fed raw (progressive validation, 95 % intervals)")
    print(f"{'stream':26s} {'n':>5s} {'d':>3s} {'learner':28s} {'cover':>6s} {'skill':>7s} {'SMSE':>8s} "
          f"{'MLPD':>8s} {'CRPS':>9s} {'bad':>4s}")
    for sname, (X, y) in real_streams().items():
        n, d = X.shape
        for name in names:
            t0 = time.perf_counter()
            m = stream_scores(REGISTRY[name].make(d), X, y)
            print(f"{sname:26s} {n:5d} {d:3d} {name:28s} {m['icr']:6.3f} {m['skill']:7.3f} {m['smse']:8.4f} "
                  f"{m['mlpd']:8.3f} {m['crps']:9.4f} {m['bad_var']:4d}   ({time.perf_counter() - t0:.1f} s)",
                  flush=True)
            # each learner's programs stay in jit's cache; a hundred of them exhausted LLVM's memory mappings
            jax.clear_caches()
        try:
            print(f"{sname:26s} {n:5d} {d:3d} {'River BayesianLinearRegression':28s} {'':6s} {'':7s} "
                  f"{river_blr_smse(X, y):8.4f}", flush=True)
        except ImportError:
            pass


def evaluate(names, groups):
    """Grid rows and kept predictions of ``names`` and their yardsticks; the combination replayed from its members."""
    direct = [n for n in names if n != zoo.RECOMMENDED_COMBINATION]
    yard = sorted({t for n in names for t in THESIS_AT_64.get(n, [])})
    res = run_grid([REGISTRY[n] for n in direct + yard], groups, keep_predictions=True, progress=False)
    if zoo.RECOMMENDED_COMBINATION in names:  # from its members' kept predictions, as the main command does
        rule, rc, mc = zoo.default_combination_rule()
        res = replay_combination(res, groups, zoo.RECOMMENDED_COMBINATION, zoo.RECOMMENDED_MEMBERS, rule,
                                 options=ReplayOptions(recalibrate=rc, correct=mc, after_spread=True,
                                                       wrap=zoo.calibrate_combination))
    return res


def print_table(res, names) -> None:
    """Per configuration: coverage and skill shares, smallest skill, median SMSE against its yardstick, bad predictions."""
    rows = res.rows
    print(f"{'learner':28s} {'cover in [92,97]':>16s} {'skill > 0':>10s} {'min skill':>10s} {'median SMSE':>12s} "
          f"{'best thesis W64':>40s} {'bad':>5s}")
    for name in names:
        rs = [r for r in rows if r["learner"] == name]
        icr = np.array([r["icr"] for r in rs])
        skill = np.array([r["skill"] for r in rs])
        smse = np.median([r["smse"] for r in rs])
        bad = sum(int(np.sum(~np.isfinite(v) | (v <= 0)) + np.sum(~np.isfinite(m)))
                  for (lab, _), (m, v, *_) in res.predictions.items() if lab == name)
        best = ""
        if name in THESIS_AT_64:
            meds = {t: np.median([r["smse"] for r in rows if r["learner"] == t]) for t in THESIS_AT_64[name]}
            t = min(meds, key=meds.get)
            best = f"{t} {meds[t]:.4f}"
        print(f"{name:28s} {np.mean((icr >= 0.92) & (icr <= 0.97)):16.3f} {np.mean(skill > 0):10.3f} "
              f"{np.min(skill):10.3f} {smse:12.4f} {best:>40s} {bad:5d}")
        worst = sorted(rs, key=lambda r: r["skill"])[:3]
        print("   lowest skill: " + "; ".join(f"{r['stream']} skill {r['skill']:.2f} cover {r['icr']:.3f}"
                                                for r in worst), flush=True)


def run_sample(names, per_cell: int, seed: int) -> None:
    snames = oj.data.stratified_names(per_cell, size=2000, seed=seed)
    t0 = time.perf_counter()
    res = evaluate(names, oj.data.thesis_grid(jax.random.key(seed), snames))
    print(f"\n## Thesis-grid sample: {len(snames)} streams (stratified_names({per_cell}, seed={seed})), "
          f"{time.perf_counter() - t0:.0f} s incl. compile")
    print_table(res, names)


def run_full_check(names) -> None:
    """All 576 grid streams (key 0): the same table."""
    t0 = time.perf_counter()
    res = evaluate(names, oj.data.thesis_grid(jax.random.key(0), oj.data.grid_names(2000)))
    print(f"\n## All 576 grid streams, {jax.numpy.zeros(()).dtype} ({time.perf_counter() - t0:.0f} s incl. compile)")
    print_table(res, names)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-cell", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--real-only", action="store_true")
    p.add_argument("--grid-only", action="store_true")
    p.add_argument("--full-check", action="store_true")
    p.add_argument("--full-only", action="store_true", help="only the 576-stream check")
    p.add_argument("--learners", default=",".join(zoo.RECOMMENDED_MEMBERS + (zoo.RECOMMENDED_COMBINATION,)))
    a = p.parse_args(argv)
    use_cpu_cores()
    names = [n.strip() for n in a.learners.split(",") if n.strip()]
    print(f"# Calibration of the recommended learners — {describe()}")
    print(f"command: python benchmarks/calibration.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    if not (a.grid_only or a.full_only):
        run_real(names)
    if not (a.real_only or a.full_only):
        run_sample(names, a.per_cell, a.seed)
    if a.full_check or a.full_only:
        run_full_check(names)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The pinned grid sample: which configurations and streams, how to record them, how to compare.

``python tests/pinned_rows.py --record`` (under ``JAX_ENABLE_X64=1``) writes
``tests/data/pinned_rows_f64.json``; ``--check`` compares the current code's
rows with it bit for bit. :mod:`test_pinned_rows` runs the same sample and
allows a relative 1e-7 (another CPU may vectorise a float64 reduction
differently, and a tune or an ill-conditioned recursion amplifies the last
bit: the recommended GP's rows differ by 5e-9 between two of our machines, the
thesis's mapped MLE batch learner's by 3.5e-8 when XLA fuses its features
differently; a change of behaviour moves rows by orders of magnitude more,
and the state machine can amplify the last bit into an alarm one item
earlier, which would too).
"""
from __future__ import annotations

import json
import math
import os
import sys

import jax

PATH = os.path.join(os.path.dirname(__file__), "data", "pinned_rows_f64.json")
#: one or two configurations per family, the recommended set and its combination
NAMES = (
    "BayesianMLEForgettingMapped_FF0.05", "BayesianMAPForgetting_FF0", "BayesianMLEWindowed_WS32",
    "BayesianMAPWindowedMapped_WS64", "GPRegressionOLSMean_WS32",
    "KernelRegression_WS32", "BayesianMLEBatchMapped_TS32", "GPRegressionBatch_TS32", "KernelRegressionBatch_TS64",
    "Combination_EWASE_FF0.98_RC0.95_MC0.99",
    "RecommendedGP", "RecommendedKernelRegression", "RecommendedWindowedLinear", "RecommendedForgettingLinear",
    "RecommendedRandomFeatureGP", "RecommendedCombination", "Climatology",
)
SIZE, SEED, KEY = 300, 11, 7
#: timings are not behaviour
UNPINNED = ("learner", "stream", "family", "atpi", "drmax", "compile_s")


def compute_rows(names_: tuple = NAMES) -> dict:
    """``{"learner|stream": {metric: value}}`` of the sample (float64 when x64 is on), for the configurations ``names_``."""
    from onlinejax import zoo
    from onlinejax.data import stratified_names, thesis_grid
    from onlinejax.evaluation import registered_learners
    from onlinejax.runner import run_grid

    zoo.register_all() if hasattr(zoo, "register_all") else zoo.recommended_learners()
    # one input dimension, so each configuration is one compiled program (CI time)
    names = [n for n in stratified_names(2, size=SIZE, seed=SEED) if n.split("_")[4] == "4"]
    groups = thesis_grid(jax.random.key(KEY), names)
    res = run_grid(registered_learners(list(names_)), groups, progress=False)
    out = {}
    for r in res.rows:
        out[f"{r['learner']}|{r['stream']}"] = {k: float(v) for k, v in r.items()
                                                if k not in UNPINNED and isinstance(v, (int, float))}
    return out


def differences(got: dict, want: dict, rtol: float = 0.0, atol: float = 0.0) -> list[str]:
    """Rows or metrics that differ by more than ``atol + rtol·|want|`` (NaN equals NaN)."""
    bad = [f"missing row {k}" for k in want if k not in got] + [f"extra row {k}" for k in got if k not in want]
    for k in sorted(set(got) & set(want)):
        for m, w in want[k].items():
            g = got[k].get(m, math.nan)
            if math.isnan(w) and math.isnan(g):
                continue
            if not (g == w or abs(g - w) <= atol + rtol * abs(w)):
                bad.append(f"{k} {m}: {g!r} != {w!r}")
    return bad


if __name__ == "__main__":
    assert jax.config.jax_enable_x64, "run under JAX_ENABLE_X64=1"
    rows = compute_rows()
    if "--record" in sys.argv:
        with open(PATH, "w") as f:
            json.dump(rows, f, indent=0, sort_keys=True)
        print(f"recorded {len(rows)} rows to {PATH}")
    else:
        with open(PATH) as f:
            bad = differences(rows, json.load(f))
        print("\n".join(bad[:50]) or f"all {len(rows)} rows bitwise equal")
        sys.exit(1 if bad else 0)

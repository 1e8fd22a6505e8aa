"""First calls in a new process: a scikit-learn grid search and a River run, with the adapters' compilation cache.

Run:  .venv/bin/python benchmarks/first_calls.py

Each case runs in a fresh Python process three ways: with ``ONLINEJAX_COMPILE_CACHE`` pointing at an
empty folder (cold: every program compiled, then stored), again with the same folder (warm: what a
restarted notebook or a second script meets), and with ``ONLINEJAX_COMPILE_CACHE=none`` (the cache
off). Cases: ``GridSearchCV(OnlineRegressor(), {"init_params__alpha": [0.1, 1.0]},
cv=TimeSeriesSplit(3))`` on 300 rows × 4 features, and ``river.evaluate.progressive_val_score`` of
``RiverRegressor()`` on TrumpApproval (1001 items). Printed: seconds of the call itself (imports excluded).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from _machine import describe

SKLEARN = """
import time, numpy as np
from sklearn.model_selection import GridSearchCV, TimeSeriesSplit
from onlinejax.adapters.sklearn import OnlineRegressor
rng = np.random.default_rng(0)
X = rng.normal(size=(300, 4)); y = X @ rng.normal(size=4) + rng.normal(size=300)
t = time.perf_counter()
GridSearchCV(OnlineRegressor(), {"init_params__alpha": [0.1, 1.0]}, cv=TimeSeriesSplit(3)).fit(X, y)
print(time.perf_counter() - t)
"""

RIVER = """
import time
from river import datasets, evaluate, metrics
from onlinejax.adapters.river import RiverRegressor
t = time.perf_counter()
evaluate.progressive_val_score(datasets.TrumpApproval(), RiverRegressor(), metrics.MAE())
print(time.perf_counter() - t)
"""


def seconds(code: str, cache: str) -> float:
    env = dict(os.environ, ONLINEJAX_COMPILE_CACHE=cache)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    print(describe())
    print(f"{'case':32s} {'cold s':>7s} {'warm s':>7s} {'off s':>7s}")
    for name, code in (("GridSearchCV(OnlineRegressor())", SKLEARN), ("River TrumpApproval run", RIVER)):
        with tempfile.TemporaryDirectory() as folder:
            cold, warm = seconds(code, folder), seconds(code, folder)
        print(f"{name:32s} {cold:7.2f} {warm:7.2f} {seconds(code, 'none'):7.2f}", flush=True)


if __name__ == "__main__":
    main()

"""Recovery of the recommended learners from the pathologies of real streams.

For each learner (the recommended members, ``RecommendedBOCPD`` and the
adapters' default ``calibrated_bayes_linreg``) and each pathology of
:mod:`onlinejax.data.hostile`, on several seeds (all vmapped in one program
per learner): non-finite predictions and variances <= 0, and, from the item
where the pathology ended, the items until

* the 95 % interval's coverage over the next 500 items is back in [90, 98] %;
* the MSE over the next 500 items is back within 1.5x the clean stream's
  over the same items;

and, after that recovery, the largest ratio of a later 500-item window's MSE to
the clean stream's over the same items (whether it stays recovered).

Printed per pathology and learner: the worst seed's counts ("never" when it
did not recover before the stream's last 500 items) and largest later ratio.
A pathology may carry its size after a colon: a constant run's or a stuck feature's length in items
(``constant_start:500``), an outlier's magnitude in noise standard deviations
(``outlier:1e6``), a covariate shift's or a trend's size.

    python benchmarks/robustness.py [--items 3000] [--seeds 3] [--learners RecommendedGP,...]
                                    [--pathologies constant_start:10,outlier:1e6,...] [--x64]
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import _machine


def _recovery(ok: np.ndarray, end: int, horizon: int = 500) -> int | None:
    """Items after ``end`` until the ``horizon``-item window starting there is ``ok``.

    ``ok``: ``[n - horizon + 1]`` bool, one per window start (:func:`window_means`'s); ``None`` when no window
    from ``end`` on is, the last one starting ``horizon`` items before the stream's end.
    """
    for k in range(0, ok.shape[0] - end):
        if ok[end + k]:
            return k
    return None


def window_means(a: np.ndarray, horizon: int = 500) -> np.ndarray:
    """``[n - horizon + 1]`` means of ``a`` over every window of ``horizon`` items."""
    c = np.concatenate([[0.0], np.cumsum(a, dtype=np.float64)])
    return (c[horizon:] - c[:-horizon]) / horizon


_SIZED_BY_LENGTH = ("constant_start", "constant_middle", "stuck_feature", "duplicates")


def hostile_kwargs(spec: str) -> tuple[str, dict]:
    """``"constant_start:500"`` -> ``("constant_start", {"length": 500})``; ``"outlier:1e6"`` -> magnitude 1e6."""
    name, _, size = spec.partition(":")
    if not size:
        return name, {}
    return name, ({"length": int(size)} if name in _SIZED_BY_LENGTH else {"magnitude": float(size)})


def run(names, pathologies, n_items, seeds, d=2):
    import onlinejax as oj
    from onlinejax import zoo
    from onlinejax.wrappers.calibration import calibrated_bayes_linreg
    from onlinejax.data import hostile_stream

    makers = {n: zoo.configurations()[n].make for n in names if n in zoo.configurations()}
    if "calibrated_bayes_linreg" in names:
        makers["calibrated_bayes_linreg"] = lambda d: calibrated_bayes_linreg(d)
    streams = {(p, s): hostile_stream(s, hostile_kwargs(p)[0], n_items, d, **hostile_kwargs(p)[1])
               for p in ("clean",) + tuple(pathologies) for s in seeds}
    keys = list(streams)
    X = jnp.asarray(np.stack([streams[k][0] for k in keys]))
    Y = jnp.asarray(np.stack([streams[k][1] for k in keys]))
    rows = []
    for name, make in makers.items():
        lrn = make(d)

        @jax.jit
        def go(X, Y):
            def one(X, Y):
                return jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y))[1]
            p = jax.vmap(one)(X, Y)
            lo, hi = p.interval(0.95)
            return p.mean, p.var, lo, hi

        t0 = time.perf_counter()
        mean, var, lo, hi = map(np.asarray, jax.block_until_ready(go(X, Y)))
        secs = time.perf_counter() - t0
        y = np.asarray(Y)
        for p in pathologies:
            worst = {"bad": 0, "cov": 0, "mse": 0, "later": 0.0}
            for s in seeds:
                i, c = keys.index((p, s)), keys.index(("clean", s))
                end = streams[(p, s)][2]
                bad = int(np.sum(~np.isfinite(mean[i]) | ~np.isfinite(var[i]) | (var[i] <= 0)))
                cov = window_means(((y[i] >= lo[i]) & (y[i] <= hi[i])).astype(float))
                se, se_clean = (mean[i] - y[i]) ** 2, (mean[c] - y[c]) ** 2
                ratio = window_means(se) / window_means(se_clean)
                mse_ok = ratio <= 1.5
                k_cov = _recovery((cov >= 0.90) & (cov <= 0.98), end)
                k_mse = _recovery(mse_ok, end)
                worst["bad"] = max(worst["bad"], bad)
                if k_mse is not None and worst["later"] is not None:
                    worst["later"] = max(worst["later"], float(np.max(ratio[end + k_mse:])))
                else:
                    worst["later"] = None
                for key, k in (("cov", k_cov), ("mse", k_mse)):
                    if worst[key] is not None:
                        worst[key] = None if k is None else max(worst[key], k)
            rows.append((p, name, worst["bad"], worst["cov"], worst["mse"], worst["later"], secs))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=3000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--learners", default="RecommendedGP,RecommendedKernelRegression,RecommendedWindowedLinear,"
                                          "RecommendedForgettingLinear,RecommendedBOCPD,calibrated_bayes_linreg")
    ap.add_argument("--pathologies", default="constant_start:10,constant_start:64,constant_start:500,"
                                             "constant_middle:10,constant_middle:64,constant_middle:500,"
                                             "outlier:1e3,outlier:1e6,heavy_tails,stuck_feature,covariate_shift,"
                                             "trend,wide_range,duplicates")
    ap.add_argument("--x64", action="store_true")
    a = ap.parse_args()
    if a.x64:
        jax.config.update("jax_enable_x64", True)
    print(_machine.describe())
    seeds = list(range(a.first_seed, a.first_seed + a.seeds))
    rows = run(a.learners.split(","), a.pathologies.split(","), a.items, seeds)
    fmt = lambda k: "never" if k is None else str(k)  # noqa: E731
    print(f"{a.items} items, seeds {seeds}, worst seed; items after the pathology ended until recovered")
    print("| pathology | learner | non-finite or var <= 0 | coverage in [90, 98] % | MSE <= 1.5x clean "
          "| largest later MSE / clean |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for p, name, bad, kc, km, later, _ in sorted(rows):
        print(f"| {p} | {name} | {bad} | {fmt(kc)} | {fmt(km)} | {'-' if later is None else f'{later:.2f}'} |")


if __name__ == "__main__":
    main()

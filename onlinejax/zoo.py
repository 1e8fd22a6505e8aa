"""Named learner configurations for the grid runner: the thesis's 52 online and 12 batch learners.

Thesis 6.2.1. Names follow the thesis (``BayesianMLEForgettingMapped_FF0.05``,
``GPRegressionOLSMean_WS64``, ``KernelRegression_WS96``, ...). The windowed
learners run inside the thesis's state machine (:func:`onlinejax.adaptive.adaptive`:
cold start, stable, high error, tune); the forgetting learners learn every
item. Batch learners (``*Batch_TS32`` …) learn their first ``TS`` items once
(:func:`onlinejax.baseline.train_once`) and are scored from item ``TS`` on.

Importing this module registers every configuration in
:data:`onlinejax.evaluation.grid.REGISTRY`; :func:`default_learners` is the
main command's small set (one or two per family).
"""
from __future__ import annotations

from .adaptive import adaptive
from .baseline import train_once
from .evaluation.grid import GridLearner, register_learner
from .gp import gp_window
from .kernel_regression import kernel_regression
from .linear import bayesian_map_forgetting, bayesian_map_windowed, bayesian_mle_forgetting, bayesian_mle_windowed

__all__ = ["THESIS_WINDOWS", "THESIS_FORGETTING", "THESIS_TRAIN_SIZES", "thesis_online_learners",
           "thesis_batch_learners", "default_learners"]

THESIS_WINDOWS = (32, 48, 64, 96, 128)
THESIS_FORGETTING = (0.0, 0.05, 0.1)
THESIS_TRAIN_SIZES = (32, 64, 128)
GP_MEANS = {"zero": "ZeroMean", "average": "AvgMean", "ols": "OLSMean"}


def _mapped(m: bool) -> str:
    return "Mapped" if m else ""


def thesis_online_learners() -> list[GridLearner]:
    """The 52 online configurations (6 + 10 + 6 + 10 + 15 + 5), registered."""
    out = []
    for fam, forgetting, windowed in (("BayesianMLE", bayesian_mle_forgetting, bayesian_mle_windowed),
                                      ("BayesianMAP", bayesian_map_forgetting, bayesian_map_windowed)):
        for m in (False, True):
            for ff in THESIS_FORGETTING:
                out.append(register_learner(f"{fam}Forgetting{_mapped(m)}_FF{ff:g}", fam,
                                            lambda d, f=forgetting, ff=ff, m=m: f(d, forgetting_factor=ff, mapped=m)))
            for W in THESIS_WINDOWS:
                out.append(register_learner(f"{fam}Windowed{_mapped(m)}_WS{W}", fam,
                                            lambda d, f=windowed, W=W, m=m: adaptive(f(d, W, mapped=m), W)))
    for mean, label in GP_MEANS.items():
        for W in THESIS_WINDOWS:
            out.append(register_learner(f"GPRegression{label}_WS{W}", "GPRegression",
                                        lambda d, W=W, mean=mean: adaptive(gp_window(d, W, mean=mean), W)))
    for W in THESIS_WINDOWS:
        out.append(register_learner(f"KernelRegression_WS{W}", "KernelRegression",
                                    lambda d, W=W: adaptive(kernel_regression(d, W), W)))
    return out


def thesis_batch_learners() -> list[GridLearner]:
    """The 12 batch configurations (MLE and mapped MLE, GP, kernel regression × TS 32/64/128), registered."""
    out = []
    for T in THESIS_TRAIN_SIZES:
        for m in (False, True):
            out.append(register_learner(f"BayesianMLEBatch{_mapped(m)}_TS{T}", "Batch",
                                        lambda d, T=T, m=m: train_once(bayesian_mle_windowed(d, T, mapped=m), T),
                                        score_from=T))
        out.append(register_learner(f"GPRegressionBatch_TS{T}", "Batch",
                                    lambda d, T=T: train_once(gp_window(d, T), T), score_from=T))
        out.append(register_learner(f"KernelRegressionBatch_TS{T}", "Batch",
                                    lambda d, T=T: train_once(kernel_regression(d, T), T), score_from=T))
    return out


_ONLINE = thesis_online_learners()
_BATCH = thesis_batch_learners()

#: The main command's default set: one or two configurations per family, window 64.
DEFAULT_NAMES = ("BayesianMLEForgettingMapped_FF0.05", "BayesianMAPForgettingMapped_FF0.05",
                 "BayesianMAPWindowedMapped_WS64", "GPRegressionOLSMean_WS64", "KernelRegression_WS64",
                 "KernelRegressionBatch_TS64")


def default_learners() -> list[GridLearner]:
    """The main command's learners (:data:`DEFAULT_NAMES`)."""
    from .evaluation.grid import REGISTRY

    return [REGISTRY[n] for n in DEFAULT_NAMES]

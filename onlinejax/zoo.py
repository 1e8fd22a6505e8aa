"""Named learner configurations for the grid runner: the thesis's 52 online and 12 batch learners.

Thesis 6.2.1. Names follow the thesis (``BayesianMLEForgettingMapped_FF0.05``,
``GPRegressionOLSMean_WS64``, ``KernelRegression_WS96``, ...). The windowed
learners run inside the thesis's state machine (:func:`onlinejax.wrappers.adaptive.adaptive`:
cold start, stable, high error, tune); the forgetting learners learn every
item. Batch learners (``*Batch_TS32`` …) learn their first ``TS`` items once
(:func:`onlinejax.wrappers.baseline.train_once`) and are scored from item ``TS`` on.

Configurations that differ only in values their state starts from share a
compiled program (``GridLearner.program``): the three GP means at one
window, the three forgetting factors of a forgetting family, and the five
windows of a windowed linear family (a buffer of capacity 128, the window
length in the state). ``REGISTRY[name].make(d).init()`` still builds that
configuration's own state (its defaults are its ``init_kwargs``).

:func:`register_all` registers every configuration in
:data:`onlinejax.core.registry.REGISTRY` (importing this module registers
nothing); :func:`thesis_default_learners`
is the thesis's small set (one or two per family) and
:func:`recommended_learners` the calibrated, scale-robust set that the main
command runs by default.

Recommended configurations
--------------------------
The thesis's configurations are kept as they are, for reproduction. The
recommended ones (names ``Recommended<Family>``, stable across versions)
wrap one learner per family so that it can be used on raw data:
:func:`onlinejax.wrappers.standardize.standardize` (inputs and targets of any scale
and offset; the windowed learners' statistics are those of the first
:data:`RECOMMENDED_WARMUP` items, then fixed, so that a model kept for
hundreds of items is read in the coordinates it was fitted in; an intercept
wherever the thesis's learner had none, since centred targets need one)
inside :func:`onlinejax.wrappers.calibration.conformal` (quantile
tracking after variance recalibration: the 95 % interval's long-run
coverage is guaranteed), returning a Student-t with 4 degrees of freedom
around that interval, so a surprise costs a few nats of log score, not
millions. The linear ones (the windowed and forgetting learners and BOCPD's
runs) see the thesis's features of the raw inputs, standardised, and the
standardised inputs' odd log and square root (:func:`both_maps`). On short
or signal-free series, wrap one in
:func:`onlinejax.wrappers.hedge.with_climatology` (not done by default: it costs
compile time and the first items' MSE; ``benchmarks/RESULTS.md``, "Short
real series").
``RecommendedCombination`` mixes the five calibrated members (the four
above and ``RecommendedRandomFeatureGP``, below) with the default combination
rule and calibrates the mixture the same way (:func:`calibrate_combination`).
``RecommendedBOCPD`` (family ``BOCPD``, not a member of the combination) is
Bayesian online changepoint detection (:func:`onlinejax.wrappers.changepoint.bocpd`)
over runs that learn their noise, level and slope (a Normal-inverse-gamma
linear model on those features, forgetting slowly), calibrated the same
way: besides following a slow drift it keeps 16 run-length hypotheses and
restarts from the prior where the data say a change happened.
``RecommendedRandomFeatureGP`` (family ``RandomFeatureGP``, the combination's
fifth member) is a GP whose memory is not a window: conjugate
Bayesian linear regression on random Fourier features
(:func:`onlinejax.learners.linear.random_feature_gp`), averaged over lengthscales and
forgetting factors, and with a local level, by the evidence, calibrated the same way.
"""
from __future__ import annotations

import functools
from functools import partial

from .wrappers.adaptive import MachineOptions, adaptive
from .wrappers.baseline import climatology, train_once
from .wrappers.calibration import calibrated, calibrated_combination
from .wrappers.changepoint import ReexpressRuns, bocpd
from .wrappers.combination import bma, combine, ewa_squared_error, fixed_share, mean_correction, stacking
from .learners.gp import GPHyper, GPTuneOptions, GPWindowOptions, gp_window
from .learners.gp.kernels import as_kernel, linear
from .learners.gp.likelihood import MEANS
from .learners.kernel_regression import KernelRegressionOptions, kernel_regression
from .learners.linear import (MAP_WINDOWED, MLE_WINDOWED, NIGPrior, ThesisFeatures, bayesian_map_forgetting,
                              bayesian_map_windowed, bayesian_mle_forgetting, bayesian_mle_windowed, map_features, nig_linreg,
                              odd_features, thesis_features)
from .learners.linear.bayes import forgetting_from_thesis
from .learners.linear.nig import NIGReexpress
from .learners.linear.random_features import RandomFeatureModels, random_feature_gp
from .core.registry import GridLearner, GridLearnerOptions, grid_learner, register
from .core.schedule import TunePlan
from .wrappers.standardize_state import StandardizeOptions

__all__ = [
    "THESIS_WINDOWS", "THESIS_FORGETTING", "THESIS_TRAIN_SIZES",
    "thesis_online_learners", "thesis_batch_learners", "combination_learners", "default_learners",
    "thesis_default_learners", "COMBINATION_MEMBERS", "DEFAULT_COMBINATION", "default_combination_rule",
    "recommended_learners", "RECOMMENDED_MEMBERS", "RECOMMENDED_COMBINATION", "RECOMMENDED_BOCPD",
    "RECOMMENDED_RANDOM_FEATURE_GP", "CLIMATOLOGY", "recommended_bocpd", "both_maps", "RECOMMENDED_FEATURE_CLIP",
    "RECOMMENDED_RANDOM_FEATURE_MODELS", "configurations", "register_all",
]

THESIS_WINDOWS = (32, 48, 64, 96, 128)
THESIS_FORGETTING = (0.0, 0.05, 0.1)
THESIS_TRAIN_SIZES = (32, 64, 128)
GP_MEANS = {"zero": "ZeroMean", "average": "AvgMean", "ols": "OLSMean"}
#: The thesis GPs read their mean from the state, so the three means share one program.
_BY_STATE = GPWindowOptions(mean_from_state=True)


def _mapped(m: bool) -> str:
    return "Mapped" if m else ""


def _on(m: bool) -> str:
    return " on the thesis's mapped features" if m else ""


_MACHINE = ", in the thesis's state machine (learn, stable, high error, tune)"
_LINEAR = {"BayesianMLE": "RLS from kI with the thesis's noise and bounds",
           "BayesianMAP": "conjugate Bayesian linear regression from the prior"}


def thesis_online_learners() -> list[GridLearner]:
    """The 52 online configurations (6 + 10 + 6 + 10 + 15 + 5).

    Their state machines tune at each learning phase's end (the thesis's rule); a runner's
    ``tune_plan`` (:class:`~onlinejax.core.schedule.TunePlan`, e.g. ``run_grid(..., tune_plan=TunePlan(every=32))``
    for many vmapped streams on an accelerator) changes that without changing their names.
    """
    out = []
    for fam, forgetting, windowed, opts in (
            ("BayesianMLE", bayesian_mle_forgetting, bayesian_mle_windowed, MLE_WINDOWED),
            ("BayesianMAP", bayesian_map_forgetting, bayesian_map_windowed, MAP_WINDOWED)):
        for m in (False, True):
            for ff in THESIS_FORGETTING:
                # the three factors share a compiled program: they differ only in init's (λ, β)
                lam, b = forgetting_from_thesis(ff, 1.0)
                out.append(grid_learner(f"{fam}Forgetting{_mapped(m)}_FF{ff:g}", fam,
                                            lambda d, f=forgetting, ff=ff, m=m: f(d, forgetting_factor=ff,
                                                                                 features=ThesisFeatures(mapped=m)),
                                            init_kwargs={"forgetting": lam, "beta": b},
                                            options=GridLearnerOptions(program=f"{fam}Forgetting{_mapped(m)}"),
                                            description=f"{_LINEAR[fam]}{_on(m)}, thesis forgetting factor {ff:g}"
                                                        f"{' (none)' if ff == 0 else ''}, learns every item"))
            for W in THESIS_WINDOWS:
                # the five windows share a compiled program: a buffer of the largest window, the
                # window length in the state (the per-item cost does not depend on the buffer's size)
                out.append(grid_learner(
                    f"{fam}Windowed{_mapped(m)}_WS{W}", fam,
                    lambda d, f=windowed, W=W, m=m, o=opts: adaptive(f(
                        d, W, features=ThesisFeatures(mapped=m), options=o._replace(capacity=max(THESIS_WINDOWS))), W),
                    init_kwargs={"window": W}, options=GridLearnerOptions(program=f"{fam}Windowed{_mapped(m)}"),
                    description=f"{_LINEAR[fam]}{_on(m)} over the last {W} items"
                                f"{', evidence-tuned' if fam == 'BayesianMAP' else ''}{_MACHINE}"))
    for mean, label in GP_MEANS.items():
        for W in THESIS_WINDOWS:
            # the three means at one window share a compiled program (the mean is read from the state);
            # with the OLS mean among them the tune in the step is the cheaper layout on XLA:CPU (no split)
            out.append(grid_learner(
                f"GPRegression{label}_WS{W}", "GPRegression",
                lambda d, W=W, mean=mean: adaptive(gp_window(d, W, mean=mean, window_options=_BY_STATE), W,
                                                   tune_plan=TunePlan(split=False)),
                init_kwargs={"mean": MEANS.index(mean)},
                options=GridLearnerOptions(program=f"GPRegression_WS{W}", vmap_bytes=1),
                description=f"GP regression (SE-ARD, {mean} mean) over the last {W} items, hyperparameters by "
                            f"type-II MAP at each tune{_MACHINE}"))
    for W in THESIS_WINDOWS:
        out.append(grid_learner(f"KernelRegression_WS{W}", "KernelRegression",
                                    lambda d, W=W: adaptive(kernel_regression(d, W), W),
                                    description=f"Nadaraya-Watson kernel regression over the last {W} items{_MACHINE}"))
    return out


def thesis_batch_learners() -> list[GridLearner]:
    """The 12 batch configurations (MLE and mapped MLE, GP, kernel regression × TS 32/64/128)."""
    out = []
    for T in THESIS_TRAIN_SIZES:
        for m in (False, True):
            out.append(grid_learner(f"BayesianMLEBatch{_mapped(m)}_TS{T}", "Batch",
                                        lambda d, T=T, m=m: train_once(bayesian_mle_windowed(
                                            d, T, features=ThesisFeatures(mapped=m)), T),
                                        options=GridLearnerOptions(score_from=T),
                                        description=f"{_LINEAR['BayesianMLE']}{_on(m)}, trained once on "
                                                    f"the first {T} items, scored after them"))
        out.append(grid_learner(f"GPRegressionBatch_TS{T}", "Batch",
                                    lambda d, T=T: train_once(gp_window(d, T, mean="zero"), T),
                                    options=GridLearnerOptions(score_from=T, vmap_bytes=1),
                                    description=f"GP regression (zero mean) trained and tuned once on the first {T} "
                                                "items, scored after them"))
        out.append(grid_learner(f"KernelRegressionBatch_TS{T}", "Batch",
                                    lambda d, T=T: train_once(kernel_regression(d, T), T),
                                    options=GridLearnerOptions(score_from=T),
                                    description=f"Nadaraya-Watson kernel regression trained once on the first {T} "
                                                "items, scored after them"))
    return out


#: Members of the default combination (issue: a windowed GP, a windowed kernel regression, a
#: windowed evidence-tuned linear learner on mapped features and a forgetting linear learner).
COMBINATION_MEMBERS = ("GPRegressionOLSMean_WS64", "KernelRegression_WS64", "BayesianMAPWindowedMapped_WS64",
                       "BayesianMLEForgettingMapped_FF0.05")

#: Weighting rules registered as ``Combination_<label>``: ``(rule, recalibrate, mean correction)``.
COMBINATION_RULES = {
    "EWASE_FF0.98_RC0.95_MC0.99": (lambda: ewa_squared_error(0.98, 1.0), 0.95, mean_correction(0.99, 100.0, 0.25)),
    "EWASE_FF0.95_RC0.95": (lambda: ewa_squared_error(0.95, 1.0), 0.95, None),
    "FixedShare0.05_RC0.95": (lambda: fixed_share(0.05), 0.95, None),
    "BMA_FF0.8": (lambda: bma(0.8), None, None),
    "BMA_FF0.99": (lambda: bma(0.99), None, None),
    "StackingCRPS_RC0.95": (lambda: stacking("crps"), 0.95, None),
}

#: The combination the main command runs next to its members (chosen on two 48-stream samples,
#: benchmarks/combination.py: the best SMSE against the best member of the rules tried; the mean
#: correction was then checked on a third, held-out sample).
DEFAULT_COMBINATION = "Combination_EWASE_FF0.98_RC0.95_MC0.99"


def combination_learners() -> list[GridLearner]:
    """The default members mixed by each rule of :data:`COMBINATION_RULES`."""

    def make(d, rule, rc, mc):
        return combine([configurations()[n].make(d) for n in COMBINATION_MEMBERS], rule(), recalibrate=rc, correct=mc)

    return [grid_learner(f"Combination_{label}", "Combination", lambda d, r=rule, rc=rc, mc=mc: make(d, r, rc, mc),
                         description=f"the mixture of {', '.join(COMBINATION_MEMBERS)} weighted by {label}")
            for label, (rule, rc, mc) in COMBINATION_RULES.items()]


#: The thesis's small set (``python -m onlinejax grid --thesis``): one configuration per family
#: (window 64), few enough that compiling them stays short. The command adds :data:`DEFAULT_COMBINATION` of four of them by
#: replaying their predictions (:func:`onlinejax.runner.replay_combination`).
DEFAULT_NAMES = ("BayesianMLEForgettingMapped_FF0.05", "BayesianMAPWindowedMapped_WS64", "GPRegressionOLSMean_WS64",
                 "KernelRegression_WS64", "BayesianMLEBatchMapped_TS64")


def default_combination_rule():
    """``(rule, recalibrate, mean correction)`` of :data:`DEFAULT_COMBINATION`."""
    rule, rc, mc = COMBINATION_RULES[DEFAULT_COMBINATION.removeprefix("Combination_")]
    return rule(), rc, mc


def thesis_default_learners() -> list[GridLearner]:
    """The thesis's small set (:data:`DEFAULT_NAMES`), the main command's ``--thesis`` learners."""
    return [configurations()[n] for n in DEFAULT_NAMES]


#: The recommended window (the thesis's middle one).
RECOMMENDED_WINDOW = 64

#: Members of ``RecommendedCombination``, one per family: three windowed learners, one that forgets and one
#: whose memory is unbounded (the random-feature GP lowered the combination's SMSE on every stream of the
#: main command's sample, ``benchmarks/RESULTS.md``, "The random-feature GP").
RECOMMENDED_MEMBERS = ("RecommendedGP", "RecommendedKernelRegression", "RecommendedWindowedLinear",
                       "RecommendedForgettingLinear", "RecommendedRandomFeatureGP")
RECOMMENDED_COMBINATION = "RecommendedCombination"
RECOMMENDED_BOCPD = "RecommendedBOCPD"
RECOMMENDED_RANDOM_FEATURE_GP = "RecommendedRandomFeatureGP"
CLIMATOLOGY = "Climatology"


#: Items whose statistics standardise a windowed recommended learner's data (then fixed, the learner refitted).
RECOMMENDED_WARMUP = 32
#: The standardisation of the recommended learners that stop learning or keep a window: statistics of the first
#: :data:`RECOMMENDED_WARMUP` items, then fixed, the standardised inputs clipped at 5 standard deviations.
RECOMMENDED_STANDARDIZATION = StandardizeOptions(clip=5.0, warmup=RECOMMENDED_WARMUP)

#: ``RecommendedRandomFeatureGP``'s models: the defaults and a local level forgetting at 0.95, which the evidence
#: weighs where the inputs explain little (``benchmarks/RESULTS.md``, "A local level among the random-feature GP's").
RECOMMENDED_RANDOM_FEATURE_MODELS = RandomFeatureModels(level=0.95)

#: The windowed recommended learners' state machine relearns its window when, over its recent stable items,
#: it lost to both naive forecasts on more than this share (:class:`~onlinejax.wrappers.adaptive.MachineOptions`'s
#: ``naive_alarm``): a window learned on a stuck sensor or around an outlier is replaced.
RECOMMENDED_NAIVE_ALARM = 0.7
#: The recommended GP's kernel: squared exponential (ARD) plus a linear term ``σ_lin² xᵀx'/d`` on the standardised
#: inputs, whose amplitude the tune sets (:func:`~onlinejax.learners.gp.kernels.linear`): the linear trend of an OLS mean,
#: best on the thesis's grid, without its extrapolation on real data (``benchmarks/RESULTS.md``, "A linear kernel
#: term in the recommended GP").
RECOMMENDED_KERNEL = as_kernel("se") + linear()
#: The recommended GP's hyperparameters before its first tune (on the warm-up's first 16 items,
#: :data:`~onlinejax.wrappers.standardize.WARMUP_TUNE_MIN`): noise of 0.3 times the standardised signal's
#: amplitude, not the default tenth, which interpolates a noisy real series' first items through its noise.
RECOMMENDED_GP_INITIAL = GPHyper(noise_std=0.3)
#: The recommended GP's tune: its second (its first on a whole window) also starts from
#: :data:`RECOMMENDED_GP_INITIAL`, since its first, on the warm-up's items, can settle where a window's cannot.
RECOMMENDED_GP_TUNE = GPTuneOptions(retune_from_initial=True)

#: ``RecommendedWindowedLinear``'s evidence tune keeps every raw weight's prior at most ``1/c`` times looser than
#: the unit prior (:class:`~onlinejax.learners.linear.WindowedOptions`'s ``prior_floor``): a window of repeated
#: inputs, in which a squared feature varies by 1e-4, would otherwise extrapolate it a thousandfold.
RECOMMENDED_PRIOR_FLOOR = 0.01

#: The windowed recommended learners' state machine learns on after a learning phase in which the input
#: moved on fewer than this many of its items (:class:`~onlinejax.wrappers.adaptive.MachineOptions`'s ``min_moves``): a
#: window of a few distinct inputs (rows repeated in runs of about ``W/8`` items or more) is not frozen.
RECOMMENDED_MIN_MOVES = 8


#: The windowed recommended learners learn a stable item whose standardised input lies more than this
#: (in standard deviations) beyond every input learned, the second such item in a row
#: (:class:`~onlinejax.wrappers.adaptive.MachineOptions`'s ``follow_inputs``): a linear trend steps about √12/W ≈ 0.05 sd
#: of a W-item window per item, while a slow creep to a new low (a river's recession, 1e-4 sd per item)
#: is no extrapolation.
RECOMMENDED_FOLLOW_MARGIN = 0.01


#: The recommended linear learners clip their standardised features at this many standard deviations (the
#: others at 5): the squares and products of raw inputs are heavy-tailed (a Gaussian input's square is beyond
#: 5 sd on 1 item in 200), and a clipped square misses the quadratic term where it matters most.
RECOMMENDED_FEATURE_CLIP = 20.0


def unit_prior_alpha(n_inputs: int) -> float:
    """Prior precision that gives the mapped linear model a prior function variance of about 1.

    On standardised inputs each of the ``m`` thesis features
    (:func:`~onlinejax.learners.linear.thesis_features`) is of order 1, so weights
    ``w ~ N(0, I/α)`` give ``Var f(x) ≈ m/α``; ``α = m`` matches the
    standardised targets' unit variance. ``α = 1`` let 85 features (d = 10)
    fit noise on real data.
    """
    return float(thesis_features(n_inputs).n_out)


def both_maps(n_inputs: int, wrap, make_linear):
    """The recommended linear learners' features: the thesis's map of the raw inputs, standardised, and more.

    ``map_features(thesis_features(d), wrap(map_features(odd, make_linear(m))))``: the
    thesis's features (:func:`~onlinejax.learners.linear.thesis_features`) are computed from the raw
    inputs, where the log and square root mean log-linear and square-root growth, then
    standardised by ``wrap`` (e.g. :func:`~onlinejax.wrappers.calibration.calibrated`); behind it
    :func:`~onlinejax.learners.linear.odd_features` appends the standardised inputs' odd log and
    square root, which turn sharply at the inputs' centre (the map of standardised inputs
    the recommended learners used alone before; ``benchmarks/RESULTS.md``, "Where the
    thesis's features are computed").

    Args:
      n_inputs: ``d``.
      wrap: ``Learner -> Learner``, the standardising wrapper; give its options ``log_first=d`` (the
        map's first ``d`` columns are the raw inputs: only those may be taken in log scale, not their squares).
      make_linear: ``m -> Learner`` for ``m = d + d(d+1)/2 + 4d`` features; give it the unit prior
        ``alpha = m`` (:func:`unit_prior_alpha`'s reasoning: ``m`` standardised features of order 1).
    """
    fm = thesis_features(n_inputs)
    odd = odd_features(fm.n_out, n_inputs)
    return map_features(fm, wrap(map_features(odd, make_linear(odd.n_out))))


def recommended_bocpd(n_features: int, *, n_runs: int = 16, hazard: float = 1 / 1000, forgetting: float = 0.995,
                      trend: float = 50.0, noise_var: float = 0.1):
    """``RecommendedBOCPD``: :func:`~onlinejax.wrappers.changepoint.bocpd` over runs that learn, calibrated.

    Each run-length hypothesis is a Normal-inverse-gamma linear regression
    (:func:`~onlinejax.learners.linear.nig_linreg`) on the recommended linear learners' features
    (:func:`both_maps`) with the unit prior (``m`` features: precision ``m``), a
    level and a slope in time (``trend`` items per unit), and forgetting ``λ`` (``forgetting``, 0.995:
    about 200 items): each run learns its noise level (prior guess ``noise_var``, a tenth of the
    standardised target's variance, 4 degrees of freedom; given the noise, the weights' prior is the
    unit prior in units of it) and follows a wandering level and relation, so that a trend or
    a random walk is not read as a stream of changes, and a change is judged against the run's own
    noise. Each run is carried into the moving standardisation's coordinates whenever its statistics move
    (:class:`~onlinejax.wrappers.changepoint.ReexpressRuns` of :class:`~onlinejax.learners.linear.nig.NIGReexpress`:
    exact for the standardised features, their odd maps keep their weights), so a run learned before the
    statistics moved predicts as it did; the calibration wrapper then fixes the scale of the run mixture's interval.
    """
    moves = ReexpressRuns(NIGReexpress(trend=trend is not None))
    return both_maps(n_features,
                     lambda runs: calibrated(bocpd(runs, n_runs, hazard=hazard),
                                             standardization=StandardizeOptions(clip=RECOMMENDED_FEATURE_CLIP,
                                                                                reexpress=moves, log_first=n_features)),
                     lambda m: nig_linreg(m, prior=NIGPrior(m * noise_var, noise_var, 4.0),
                                          forgetting=forgetting, trend=trend, intercept=True))


def _recommended_gp(n_inputs: int, window: int):
    return gp_window(n_inputs, window, mean="average", kernel=RECOMMENDED_KERNEL, initial=RECOMMENDED_GP_INITIAL,
                     tune_options=RECOMMENDED_GP_TUNE)


def _windowed(learner, tune_unmoved=True, clip=5.0, log_first=None):
    """A recommended windowed learner's wrappers: the state machine over a window, calibrated with fixed statistics."""
    # fixed statistics: the state machine keeps a model for hundreds of items without learning
    # an outlier is not learned into the window, and a window worse than the naive forecasts is relearned
    # and a stuck sensor's run adds one item to the window, not a window of copies
    # and a window of a few distinct inputs (duplicated rows) learns on instead of freezing
    # and a trending input is followed: learned while stable, rebased step by step on the whole window
    options = MachineOptions(naive_alarm=RECOMMENDED_NAIVE_ALARM, learn_shock=False, skip_repeats=True,
                             min_moves=RECOMMENDED_MIN_MOVES, tune_unmoved=tune_unmoved,
                             follow_inputs=RECOMMENDED_FOLLOW_MARGIN)
    W = RECOMMENDED_WINDOW
    standardization = RECOMMENDED_STANDARDIZATION._replace(clip=clip, keep=W, log_first=log_first)
    return calibrated(adaptive(learner, W, options=options), standardization=standardization)


def _recommended() -> list[GridLearner]:
    W, fixed, windowed = RECOMMENDED_WINDOW, RECOMMENDED_STANDARDIZATION, _windowed

    makers = {
        # the average mean and a linear kernel term (an OLS mean extrapolates wildly on real data, d = 6-10), and
        # no tune on a window of a few distinct inputs, where the marginal likelihood cannot place a lengthscale
        "RecommendedGP": ("GPRegression", lambda d: windowed(_recommended_gp(d, W), tune_unmoved=False), 1),
        # a local linear fit: the Nadaraya-Watson mean's bias on a slope cost it most of its grid error
        "RecommendedKernelRegression": ("KernelRegression", lambda d: windowed(
            kernel_regression(d, W, options=KernelRegressionOptions(local="linear"))), None),
        "RecommendedWindowedLinear": ("BayesianMAP", lambda d: both_maps(
            d, partial(windowed, clip=RECOMMENDED_FEATURE_CLIP, log_first=d),
            lambda m: bayesian_map_windowed(m, W, features=ThesisFeatures(intercept=True), alpha=float(m),
                                            options=MAP_WINDOWED._replace(prior_floor=RECOMMENDED_PRIOR_FLOOR))), None),
        # learns every item, so running statistics can follow the stream's scale; a memory of ~100 items
        # (the thesis's 0.05 forgets within ~20, too few for 2d + d(d+1)/2 + d + 1 weights on real data)
        "RecommendedForgettingLinear": ("BayesianLinear", lambda d: both_maps(
            d, partial(calibrated, standardization=StandardizeOptions(clip=RECOMMENDED_FEATURE_CLIP, log_first=d)),
            lambda m: bayesian_map_forgetting(m, forgetting_factor=0.01, features=ThesisFeatures(intercept=True),
                                              alpha=float(m))), None),
    }
    calib = "standardised and calibrated (Student-t 95 % interval)"
    about = {
        "RecommendedGP": f"GP regression over the last {W} items (squared-exponential plus linear kernel, "
                         f"window-average mean, type-II MAP tunes), {calib}{_MACHINE}",
        "RecommendedKernelRegression": f"local linear kernel regression (ridged) over the last {W} items, "
                                       f"bandwidth by leave-one-out, {calib}{_MACHINE}",
        "RecommendedWindowedLinear": f"Bayesian linear regression on the thesis's features (both maps) over the "
                                     f"last {W} items, evidence-tuned, {calib}{_MACHINE}",
        "RecommendedForgettingLinear": "Bayesian linear regression on the thesis's features (both maps) forgetting "
                                       f"over about 100 items, {calib}",
    }
    out = [grid_learner(name, fam, make, options=GridLearnerOptions(vmap_bytes=vb), description=about[name])
           for name, (fam, make, vb) in makers.items()]

    def combined(d):
        rule, rc, mc = default_combination_rule()
        return calibrate_combination(combine([configurations()[n].make(d) for n in RECOMMENDED_MEMBERS], rule,
                                             recalibrate=rc, correct=mc, after_spread=True))

    out.append(grid_learner(RECOMMENDED_COMBINATION, "Combination", combined,
                            description="the five recommended members mixed by the default rule, calibrated again"))
    out.append(grid_learner(RECOMMENDED_BOCPD, "BOCPD", recommended_bocpd,
                            description="Bayesian online changepoint detection over runs that learn their noise, "
                                        "level and slope (Normal-inverse-gamma linear regression on the mapped "
                                        f"features, forgetting; 16 run lengths), {calib}"))
    out.append(grid_learner(RECOMMENDED_RANDOM_FEATURE_GP, "RandomFeatureGP",
                            lambda d: calibrated(random_feature_gp(d, models=RECOMMENDED_RANDOM_FEATURE_MODELS),
                                                 standardization=fixed),
                            description="a GP with unbounded memory: Bayesian linear regression on 64 random Fourier "
                                        "feature pairs, its noise learned, lengthscale and forgetting averaged over "
                                        f"12 models and a local level by their evidence, {calib}"))
    out.append(grid_learner(CLIMATOLOGY, "Climatology", lambda d: climatology(d),
                            description="the baseline: the Student-t posterior predictive of the targets so far "
                                        "(ignores the inputs)"))
    return out


def calibrate_combination(learner):
    """``RecommendedCombination``'s outer wrapper: the mixture's moments calibrated as :func:`calibrated` does
    (no standardisation: its members are standardised already; :func:`~onlinejax.wrappers.calibration.calibrated_combination`),
    a Student-t output."""
    return calibrated_combination(learner, 0.95, df=4.0)



def recommended_learners(include_combination: bool = True) -> list[GridLearner]:
    """The recommended configurations, one per family, calibrated and scale-robust (module doc).

    Args:
      include_combination: also return ``RecommendedCombination`` (the
        default combination of the five members).
    Returns:
      :class:`~onlinejax.core.registry.GridLearner` s, in the order of
      :data:`RECOMMENDED_MEMBERS`, then ``RecommendedBOCPD``, then the combination.
    """
    names = RECOMMENDED_MEMBERS + (RECOMMENDED_BOCPD,) + ((RECOMMENDED_COMBINATION,) if include_combination else ())
    return [configurations()[n] for n in names]


def default_learners() -> list[GridLearner]:
    """The main command's learners: the recommended members and the climatology baseline.

    (The main command adds ``RecommendedCombination`` by replaying the members' predictions.)
    """
    return [configurations()[n] for n in RECOMMENDED_MEMBERS + (CLIMATOLOGY,)]


@functools.cache
def configurations() -> dict[str, GridLearner]:
    """Every configuration of this module, ``name -> GridLearner``, in registration order (built once)."""
    out = {}
    for gl in thesis_online_learners() + thesis_batch_learners() + combination_learners() + _recommended():
        out[gl.name] = gl
    return out


def register_all() -> list[GridLearner]:
    """Register every configuration (:func:`configurations`) in :data:`onlinejax.core.registry.REGISTRY`.

    Importing this module registers nothing; the command line and the
    adapters call this before they look names up.
    """
    return [register(gl) for gl in configurations().values()]

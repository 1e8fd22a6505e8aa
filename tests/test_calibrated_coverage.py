"""Well-specified streams: the state machine's false alarms under its detectors' design bounds, and
prequential intervals and PIT values calibrated both ways (scipy's binomial, Poisson and KS references)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

import onlinejax as oj
from onlinejax.wrappers.adaptive import PERSIST_ITEMS, RECENT_ITEMS, adaptive
from onlinejax.wrappers.detectors import CusumDetector, FrozenDetector, bocpd_detector, cusum, frozen
from onlinejax.evaluation.progressive import progressive_validation

from conftest import DTYPE

#: the tail probability each statistical check may fail with on correct code
ALPHA = 1e-4

# ---------------------------------------------------------------- false alarms of the state machine
D, W, N_ITEMS, N_STREAMS, CHANGE, SHIFT, DETECT_WITHIN = 2, 20, 3000, 16, 2000, 4.0, 30
#: CUSUM threshold: at the default 20 the guaranteed mean run length e^{θλ} (~340 items) is shorter
#: than a CUSUM without allowance takes to alarm (~λ²/Var r ≈ 200 items), so 30 separates the two
CUSUM = cusum(threshold=30.0)
#: BOCPD hazard: at the default 1/250 its bound (~1/21 alarms per stable item) is the most the machine can
#: raise (one per warmup + 1 stable items), a bound no detector can break
DETECTORS = {"cusum": CUSUM, "frozen": frozen(), "bocpd": bocpd_detector(hazard=1e-3)}


def _n_alarms(s):
    return s.n_alarms


def _alarm_streams():
    """``N_STREAMS`` linear-Gaussian streams drawn from the learner's prior (``w ~ N(0, I)``, unit
    noise), then as many whose targets jump by ``SHIFT`` noise sd at item ``CHANGE``."""
    r = np.random.default_rng(0)
    X = r.normal(size=(2 * N_STREAMS, N_ITEMS, D))
    Y = np.sum(X * r.normal(size=(2 * N_STREAMS, 1, D)), -1) + r.normal(size=(2 * N_STREAMS, N_ITEMS))
    Y[N_STREAMS:, CHANGE:] += SHIFT
    return jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)


def _alarms(detector):
    """``(alarms, stable items)`` pooled over the stationary streams, and per shifted stream whether it
    alarmed within ``DETECT_WITHIN`` items of the change.

    The inner learner keeps the true prior and noise (``tune=False``), so every frozen model's
    predictive is the exact posterior predictive of its window.
    """
    inner = oj.windowed_bayes_linreg(D, W, alpha=1.0, beta=1.0, options=oj.WindowedOptions(onestep_floor=False))
    lrn = adaptive(inner, W, detector=detector, tune=False)
    run = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y, record=_n_alarms)))
    res = run(*_alarm_streams())
    s, counts = res.state, np.asarray(res.records)
    alarms = int(np.sum(np.asarray(s.n_alarms)[:N_STREAMS]))
    stable = int(np.sum(np.asarray(s.n_seen - s.n_learned)[:N_STREAMS]))
    detected = counts[N_STREAMS:, CHANGE + DETECT_WITHIN - 1] > counts[N_STREAMS:, CHANGE - 1]
    return alarms, stable, detected


def _cusum_rate(drift, threshold):
    """False alarms per stable item of the relative CUSUM on calibrated residuals (``z² ~ χ²₁``)."""
    # Lorden: e^{θ·increment} is a likelihood ratio when E[e^{θ(χ²₁ - 1 - δ)}] = e^{-θ(1 + δ)}/√(1 - 2θ) = 1,
    # so θg is a log-likelihood CUSUM and its mean run length is >= e^{θλ} (the clip only lightens the tail)
    theta = brentq(lambda t: -t * (1.0 + drift) - 0.5 * np.log1p(-2.0 * t), 1e-9, 0.5 - 1e-12)
    return np.exp(-theta * threshold)


def _design_rate(o):
    """Each detector's false alarms per stable item on a calibrated stream, from its design."""
    if isinstance(o, CusumDetector):
        return _cusum_rate(o.drift, o.threshold)
    if isinstance(o, FrozenDetector):
        # |e| > f·(mean |e| of a W-item phase), e Gaussian of one scale (the learning phase's errors are no
        # smaller than the frozen model's): that mean is ~N(√(2/π), (1 - 2/π)/W) in units of the scale
        f, m = o.factor, np.sqrt(2.0 / np.pi)
        return 2.0 * stats.norm.cdf(-f * m / np.sqrt(1.0 + f * f * (1.0 - m * m) / W))
    # Markov on the run-length posterior's calibration: P(π > ½) <= 2E[π] = 2·P(change in the alarm's window)
    h = o.hazard
    return 2.0 * sum(h * (1.0 - h) ** (r - 1) for r in range(PERSIST_ITEMS, RECENT_ITEMS + 1))


def _alarm_bound(detector, stable):
    return stats.poisson.ppf(1.0 - ALPHA, _design_rate(detector) * stable)


@pytest.mark.parametrize("detector", sorted(DETECTORS))
def test_false_alarms_stay_under_the_detectors_design_bound_and_a_change_alarms(detector):
    """On stationary calibrated streams the alarm count is within the design's rate (Poisson upper
    quantile); on shifted streams most alarm within ``DETECT_WITHIN`` items, so the bound is no
    free pass for a detector that cannot alarm."""
    alarms, stable, detected = _alarms(DETECTORS[detector])
    # each learning phase (the cold start, then one per alarm) is W items: the rest is stable
    assert stable >= N_STREAMS * N_ITEMS - W * (N_STREAMS + alarms), (alarms, stable)
    assert alarms <= _alarm_bound(DETECTORS[detector], stable), (alarms, stable)
    # most, not all: a shift can meet a phase whose frozen reference exceeds it, or a run-length
    # posterior that dates the change a few items too early
    assert np.mean(detected) >= 0.75, detected


def test_cusum_without_its_allowance_breaks_that_bound():
    """With the allowance ``δ`` at 0 the CUSUM is a reflected zero-mean walk that reaches the
    threshold every few hundred items: the bound of the default ``δ`` then fails."""
    alarms, stable, _ = _alarms(cusum(threshold=CUSUM.threshold, drift=0.0))
    assert alarms > _alarm_bound(CUSUM, stable), (alarms, stable)


# ---------------------------------------------------------------- two-sided coverage and PIT uniformity
N_PRIOR_STREAMS, N_PRIOR_ITEMS, D_PRIOR, PRIOR_PRECISION, NOISE_PRECISION, PRIOR_DF = 100, 100, 4, 1.0, 4.0, 4.0


def _prior_stream(model, n_streams=N_PRIOR_STREAMS, n_items=N_PRIOR_ITEMS, seed=1):
    """Streams drawn from ``model``'s own prior (so its prequential PITs are i.i.d. uniform, Dawid
    1984) and the learner: ``"bayes"`` (known noise) or ``"nig"`` (noise variance ~ InvGamma)."""
    r = np.random.default_rng(seed)
    shape = (n_streams, 1)
    if model == "bayes":
        sd = np.full(shape, NOISE_PRECISION ** -0.5)
        lrn = oj.bayes_linreg(D_PRIOR, alpha=PRIOR_PRECISION, beta=NOISE_PRECISION)
    else:
        a0 = PRIOR_DF / 2.0
        sd = np.sqrt(stats.invgamma.rvs(a0, scale=a0 / NOISE_PRECISION, size=shape, random_state=r))
        lrn = oj.nig_linreg(D_PRIOR, prior=oj.NIGPrior(PRIOR_PRECISION, 1.0 / NOISE_PRECISION, PRIOR_DF))
    # w ~ N(0, I/α₀) under bayes_linreg, w | σ² ~ N(0, σ²I/α₀) under the NIG model
    w_sd = PRIOR_PRECISION ** -0.5 * (1.0 if model == "bayes" else sd[..., None])
    w = w_sd * r.normal(size=(n_streams, 1, D_PRIOR))
    X = r.normal(size=(n_streams, n_items, D_PRIOR))
    Y = np.sum(X * w, -1) + sd * r.normal(size=(n_streams, n_items))
    return lrn, jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)


@pytest.mark.parametrize("model", ["bayes", "nig"])
def test_prequential_intervals_cover_two_sided_and_pit_is_uniform_on_the_priors_own_data(model):
    """The 50 % and 95 % central intervals' pooled hits lie in the two-sided binomial interval of
    their level, and the PIT values pass a Kolmogorov–Smirnov test of uniformity."""
    lrn, X, Y = _prior_stream(model)
    preds = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions))(X, Y)
    for level in (0.5, 0.95):
        lo, hi = preds.interval(level)
        hits = int(jnp.sum((lo <= Y) & (Y <= hi)))
        lo_hits, hi_hits = stats.binom.interval(1.0 - ALPHA, Y.size, level)
        assert lo_hits <= hits <= hi_hits, (level, hits / Y.size)
    pit = np.asarray(preds.cdf(Y), np.float64).ravel()
    assert stats.kstest(pit, "uniform").pvalue > 1e-3


#: seeds (one stream each, its own weights and noise drawn from the prior) and items per seed
N_SEEDS, N_SEED_ITEMS = 12, 1000


@pytest.mark.parametrize("model", ["bayes", "nig"])
def test_each_seeds_95_percent_coverage_is_within_its_binomial_bound_and_pooled_pit_is_uniform(model):
    """Per seed, over long streams, the 95 % interval's hits lie in the two-sided binomial interval of
    its ``n`` items: a pooled count can pass while seeds over- and under-cover in turn (a predictive
    scale that misses each seed's own noise level), and a short stream hides errors the posterior only
    shows once it has concentrated. The pooled PITs pass a Kolmogorov–Smirnov test of uniformity."""
    lrn, X, Y = _prior_stream(model, N_SEEDS, N_SEED_ITEMS, seed=2)
    preds = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions))(X, Y)
    lo, hi = preds.interval(0.95)
    hits = np.sum(np.asarray((lo <= Y) & (Y <= hi)), axis=1)
    lo_hits, hi_hits = stats.binom.interval(1.0 - ALPHA, N_SEED_ITEMS, 0.95)
    assert np.all((lo_hits <= hits) & (hits <= hi_hits)), (hits, lo_hits, hi_hits)
    pit = np.asarray(preds.cdf(Y), np.float64).ravel()
    assert stats.kstest(pit, "uniform").pvalue > 1e-3

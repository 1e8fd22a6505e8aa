"""Hostile streams: every recommended learner and the adapters' default, vmapped over the pathologies.

No prediction is ever non-finite or has a variance <= 0; after a pathology
ends, coverage and MSE come back (windows of the stream after its end,
against the same seed's clean stream).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax import zoo
from onlinejax.wrappers.calibration import calibrated_bayes_linreg
from onlinejax.data import hostile_stream
from conftest import DTYPE

pytestmark = pytest.mark.float32_only  # float32 is the stress case of hostile streams

N, D, SEED = 2500, 2, 7
#: case -> (pathology, hostile_stream keywords); the ending ones are checked for recovery
CASES = {
    "clean": ("clean", {}),
    "constant_start": ("constant_start", {"length": 100}),
    "constant_start_10": ("constant_start", {"length": 10}),
    "constant_start_64": ("constant_start", {"length": 64}),
    "constant_start_500": ("constant_start", {"length": 500}),
    "constant_middle": ("constant_middle", {"at": 700, "length": 300}),
    "constant_middle_10": ("constant_middle", {"at": 700, "length": 10}),
    "constant_middle_64": ("constant_middle", {"at": 700, "length": 64}),
    "constant_middle_500": ("constant_middle", {"at": 700, "length": 500}),
    "outlier": ("outlier", {"at": 1000, "magnitude": 1e6}),
    "outlier_1e3": ("outlier", {"at": 1000, "magnitude": 1e3}),
    "covariate_shift": ("covariate_shift", {"at": 1000}),
    "covariate_shift_5": ("covariate_shift", {"at": 1000, "magnitude": 5.0}),  # 17 sd: beyond the clip, not SHIFT_Z
    "stuck_feature": ("stuck_feature", {"at": 800, "length": 200}),
    "heavy_tails": ("heavy_tails", {}),
    "trend": ("trend", {}),
    "trend_50": ("trend", {"magnitude": 50.0}),  # 50 periods of the sine: the input leaves every window's range
    "wide_range": ("wide_range", {}),
    "duplicates": ("duplicates", {"length": 5}),
    "duplicates_100": ("duplicates", {"length": 100}),
}
ENDING = [k for k, (p, _) in CASES.items() if p in ("constant_start", "constant_middle", "outlier", "covariate_shift",
                                                      "stuck_feature")]
LEARNERS = ("RecommendedGP", "RecommendedKernelRegression", "RecommendedWindowedLinear", "RecommendedForgettingLinear",
            "RecommendedBOCPD", "RecommendedRandomFeatureGP", "calibrated_bayes_linreg")


#: learners run on this many cases at a time (the others: all at once)
STREAMS_AT_ONCE = {"RecommendedRandomFeatureGP": 1}


@functools.cache
def _streams():
    out = {k: hostile_stream(SEED, p, N, D, dtype=np.dtype(DTYPE), **kw) for k, (p, kw) in CASES.items()}
    return out, np.stack([v[0] for v in out.values()]), np.stack([v[1] for v in out.values()])


@functools.cache
def _run(name):
    lrn = calibrated_bayes_linreg(D) if name == "calibrated_bayes_linreg" else zoo.configurations()[name].make(D)
    streams, X, Y = _streams()

    def one(X, Y):
        return jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y))[1]

    # the random-feature GP's state is 12 models' F × F square roots: vmapped over every case at once it
    # outgrows the CPU's cache, and two test workers doing so at once ran 10× slower
    width = STREAMS_AT_ONCE.get(name)
    p = jax.jit(jax.vmap(one) if width is None else lambda X, Y: jax.lax.map(lambda xy: one(*xy), (X, Y),
                                                                              batch_size=width))(X, Y)
    lo, hi = p.interval(0.95)
    return {k: tuple(np.asarray(a)[i] for a in (p.mean, p.var, lo, hi)) for i, k in enumerate(streams)}


@pytest.mark.parametrize("name", LEARNERS)
def test_no_nonfinite_prediction_and_no_variance_at_or_below_zero(name):
    for case, (mean, var, lo, hi) in _run(name).items():
        ok = np.isfinite(mean) & np.isfinite(var) & (var > 0) & np.isfinite(lo) & np.isfinite(hi)
        assert ok.all(), (case, np.flatnonzero(~ok)[:10])


@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("case", ENDING)
def test_coverage_and_mse_recover_after_the_pathology(name, case):
    streams = _streams()[0]
    res = _run(name)
    y, end = streams[case][1], streams[case][2]
    mean, _, lo, hi = res[case]
    covered = (y >= lo) & (y <= hi)
    # coverage over the 500 items from 300 after the end, MSE over the 500 items from 500 after it
    cov = covered[end + 300:end + 800].mean()
    assert 0.88 <= cov <= 0.99, cov
    w = slice(end + 500, end + 1000)
    y_clean, m_clean = streams["clean"][1], res["clean"][0]
    mse, mse_clean = np.mean((mean[w] - y[w]) ** 2), np.mean((m_clean[w] - y_clean[w]) ** 2)
    assert mse <= 1.5 * mse_clean + 0.05, (mse, mse_clean)


@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("case", ["duplicates_100", "trend"])
def test_no_stretch_of_a_lasting_pathology_is_silently_wrong(name, case):
    """Inputs repeated in blocks of 100 rows and a trending input last the whole stream: from item 500 every
    500-item window covers within [88, 99] % and no 100-item block's MSE exceeds 10x the clean stream's (a window
    of repeats once extrapolated a barely varying feature a thousandfold for a whole block)."""
    streams = _streams()[0]
    res = _run(name)
    y, (mean, _, lo, hi) = streams[case][1], res[case]
    cov = ((y >= lo) & (y <= hi))[500:].reshape(-1, 500).mean(1)
    assert ((cov >= 0.88) & (cov <= 0.99)).all(), cov
    mse_clean = np.mean((res["clean"][0][500:] - streams["clean"][1][500:]) ** 2)
    blocks = ((mean[500:] - y[500:]) ** 2).reshape(-1, 100).mean(1)
    assert blocks.max() <= 10.0 * mse_clean, (blocks.max(), mse_clean)


def _assert_every_window_within_1_5x_of_clean(name, case):
    """Every 500-item window of ``case`` (from item 0, every 250) has an MSE within 1.5x the clean stream's."""
    streams = _streams()[0]
    res = _run(name)
    y, mean = streams[case][1], res[case][0]
    y_clean, m_clean = streams["clean"][1], res["clean"][0]
    for a in range(0, N - 499, 250):
        w = slice(a, a + 500)
        mse, mse_clean = np.mean((mean[w] - y[w]) ** 2), np.mean((m_clean[w] - y_clean[w]) ** 2)
        assert mse <= 1.5 * mse_clean + 0.05, (a, mse, mse_clean)


@pytest.mark.parametrize("name", LEARNERS)
def test_inputs_spanning_twelve_decades_are_learned_in_log_scale(name):
    """Inputs log-uniform over [1e-6, 1e6], the target linear in their logarithms: once the standardiser has
    taken them in log scale (after 16 items, ``StandardizeOptions.log_spread``) every 500-item window from item
    500 has an SMSE below 0.05 and an MSE within 1.5x the clean stream's. Standardised raw, a few huge values
    among many near 0, they had SMSE 0.16-0.81; kernel regression's Nadaraya-Watson mean, whose bias grows
    with the function's slope (this target's variance is 25 times the clean stream's), stayed above 1.5x
    until its local linear fit."""
    streams = _streams()[0]
    res = _run(name)
    y, mean = streams["wide_range"][1], res["wide_range"][0]
    y_clean, m_clean = streams["clean"][1], res["clean"][0]
    for a in range(500, N - 499, 250):
        w = slice(a, a + 500)
        mse, mse_clean = np.mean((mean[w] - y[w]) ** 2), np.mean((m_clean[w] - y_clean[w]) ** 2)
        assert mse <= 0.05 * np.var(y[w]), (a, mse, np.var(y[w]))
        assert mse <= 1.5 * mse_clean + 0.05, (a, mse, mse_clean)


@pytest.mark.parametrize("name", LEARNERS)
def test_mse_on_rows_duplicated_in_blocks_is_back_within_500_items(name):
    """Inputs repeated in blocks of 100 rows for the whole stream: every 500-item window (from item 0, every 250)
    has an MSE within 1.5x the clean stream's over the same items. The windowed learners froze a window of one or
    two distinct inputs and predicted each new block from it until a detector alarmed, tens of items a block (on
    this stream kernel regression reached 1.80x, the windowed linear learner 2.03x); they now learn on after a
    phase whose input barely moved (``adaptive(min_moves=)``), the GP without tuning there
    (``tune_unmoved=False``: tuned on such windows its later windows reached 2.5x on other seeds)."""
    _assert_every_window_within_1_5x_of_clean(name, "duplicates_100")


def test_the_first_new_row_after_a_block_of_repeats_gets_an_interval_near_the_clean_streams():
    """Inputs repeated in blocks of 100 rows: the random-feature GP's 95 % interval on the first row of each new block
    is at most 1.5 times as wide as its intervals on the clean stream (medians, from item 500; 1.09 on this seed),
    and the blocks' first five rows are covered at about the nominal rate. Its forgetting models inflated every
    direction of their posterior at each repeat, so the new row's interval was 2.5 times as wide here (3-9 times on
    seeds 100-102; on those the blocks' first rows were all covered, and their log score was lower by 0.3-1.1
    nats); a repeat is now forgotten along its own direction only."""
    name, length = "RecommendedRandomFeatureGP", CASES["duplicates_100"][1]["length"]
    streams = _streams()[0]
    res = _run(name)
    y, (_, _, lo, hi) = streams["duplicates_100"][1], res["duplicates_100"]
    first = np.arange(500, N, length)
    width_clean = np.median((res["clean"][3] - res["clean"][2])[500:])
    ratio = np.median(hi[first] - lo[first]) / width_clean
    assert ratio <= 1.5, ratio
    starts = (first[:, None] + np.arange(5)).ravel()
    cov = np.mean((y[starts] >= lo[starts]) & (y[starts] <= hi[starts]))
    assert 0.85 <= cov <= 0.99, cov


@pytest.mark.parametrize("name", ["RecommendedGP", "RecommendedKernelRegression"])
def test_a_windowed_learner_follows_an_input_that_trends_out_of_every_window(name):
    """Input 0 over [0, 50] along the stream: every 500-item window (from item 0, every 250) has an MSE within 1.5x
    the clean stream's. A stable window extrapolated further with every item and the fixed statistics read the input
    as the clip for half the items (the GP never came back within 1.5x; kernel regression reached 3.6x); the stable
    machine now learns on while an input leaves its learned range (``adaptive(follow_inputs=)``) and the statistics
    are rebased step by step on the whole window (``StandardizeOptions(keep=)``)."""
    _assert_every_window_within_1_5x_of_clean(name, "trend_50")


@pytest.mark.parametrize("case", ["trend", "trend_50"])
def test_the_default_keeps_its_coefficients_in_todays_coordinates_on_a_trending_input(case):
    """The adapters' default on input 0 trending over [0, 10] and [0, 50]: every 500-item window within 1.5x the
    clean stream's MSE. Its moving statistics held the trending input near 1.7 sd while the coefficients, learned
    in the coordinates of the items' time, no longer matched them (4.2x and 8.6x on other seeds); the posterior is
    now carried into the new coordinates whenever the statistics move (``StandardizeOptions(reexpress=)``)."""
    _assert_every_window_within_1_5x_of_clean("calibrated_bayes_linreg", case)


def test_the_default_learns_a_rare_feature_that_arrives_late():
    """A 0/1 feature that is 1 on every 50th item from item 3,000 (weight 3, noise sd 0.5): each of its ones lies
    beyond 5 sd of its running statistics. The default carries its posterior into the statistics' new
    coordinates, where an item learned at the clip stays at the clip's raw value of its time: clipped at 5 sd,
    the rare rows' MSE stayed at 0.8 (3x the noise variance) with 70 % coverage (now 20 sd). Over items
    5,000-8,000 the rare rows' MSE is within 1.6x the noise variance and their intervals cover 85 % or more."""
    rng = np.random.default_rng(5)
    n = 8000
    X = rng.normal(size=(n, 2))
    X[:, 1] = 0.0
    rare = np.arange(3000, n, 50)
    X[rare, 1] = 1.0
    y = X @ np.array([1.0, 3.0]) + 0.5 * rng.normal(size=n)
    lrn = calibrated_bayes_linreg(2)
    p = jax.jit(lambda X, Y: jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y))[1])(
        jnp.asarray(X, DTYPE), jnp.asarray(y, DTYPE))
    lo, hi = (np.asarray(v) for v in p.interval(0.95))
    late = rare[rare >= 5000]
    assert np.mean((np.asarray(p.mean)[late] - y[late]) ** 2) <= 1.6 * 0.25
    assert np.mean((y[late] >= lo[late]) & (y[late] <= hi[late])) >= 0.85


@pytest.mark.parametrize("name", LEARNERS)
def test_integer_and_float16_inputs_predict_as_their_values_in_the_learners_dtype(name):
    """Integer readings (inputs ×1000, targets ×100, rounded: large integers) and float16 arrays are cast at the
    learner's boundary: the predictions equal those of the same values given in the learner's dtype, and none is
    non-finite or has a variance <= 0."""
    lrn = calibrated_bayes_linreg(D) if name == "calibrated_bayes_linreg" else zoo.configurations()[name].make(D)
    X, y, _ = hostile_stream(SEED + 1, "clean", 300, D, dtype=np.float64)
    for Xa, ya in ((np.round(X * 1000).astype(np.int32), np.round(y * 100).astype(np.int32)),
                   (X.astype(np.float16), y.astype(np.float16))):
        _, got = lrn.step(lrn.init(), Xa, ya)
        _, want = lrn.step(lrn.init(), Xa.astype(DTYPE), ya.astype(DTYPE))
        assert np.asarray(got.mean).dtype == DTYPE
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=str(Xa.dtype))
        assert np.isfinite(np.asarray(got.mean)).all() and (np.asarray(got.var) > 0).all(), Xa.dtype


@pytest.mark.slow
@pytest.mark.parametrize("name", LEARNERS)
def test_a_million_float32_items_stay_finite_calibrated_and_accurate(name):
    """10⁶ items of the clean stream in one float32 scan: no non-finite prediction or variance <= 0, coverage of the
    last 20,000 items in [92, 98] % and their MSE within 1.2× that of items 2,000-22,000 (running statistics that
    stopped counting or drifted in float32 would show here)."""
    n = 10 ** 6
    lrn = calibrated_bayes_linreg(D) if name == "calibrated_bayes_linreg" else zoo.configurations()[name].make(D)
    X, y, _ = hostile_stream(SEED + 2, "clean", n, D, dtype=np.float32)

    @jax.jit
    def run(X, Y):
        p = jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y))[1]
        lo, hi = p.interval(0.95)
        return p.mean, p.var, lo, hi

    mean, var, lo, hi = map(np.asarray, run(X, y))
    ok = np.isfinite(mean) & np.isfinite(var) & (var > 0) & np.isfinite(lo) & np.isfinite(hi)
    assert ok.all(), np.flatnonzero(~ok)[:10]
    last, early = slice(n - 20_000, n), slice(2_000, 22_000)
    cov = np.mean((y[last] >= lo[last]) & (y[last] <= hi[last]))
    assert 0.92 <= cov <= 0.98, cov
    mse = lambda w: np.mean((mean[w].astype(np.float64) - y[w]) ** 2)  # noqa: E731
    assert mse(last) <= 1.2 * mse(early), (mse(last), mse(early))


#: US consumer price index, 1959Q1-1996Q4 (statsmodels' ``macrodata``, from the US Bureau of Labor Statistics).
CPI = [28.98, 29.15, 29.35, 29.37, 29.54, 29.55, 29.75, 29.84, 29.81, 29.92, 29.98, 30.04, 30.21, 30.22, 30.38, 30.44,
       30.48, 30.69, 30.75, 30.94, 30.95, 31.02, 31.12, 31.28, 31.38, 31.58, 31.65, 31.88, 32.28, 32.45, 32.85, 32.9,
       33.1, 33.4, 33.7, 34.1, 34.4, 34.9, 35.3, 35.7, 36.3, 36.8, 37.3, 37.9, 38.5, 38.9, 39.4, 39.9, 40.1, 40.6, 40.9,
       41.2, 41.5, 41.8, 42.2, 42.7, 43.7, 44.2, 45.6, 46.8, 48.1, 49.3, 51.0, 52.3, 53.0, 54.0, 54.9, 55.8, 56.1, 57.0,
       57.9, 58.7, 60.0, 60.8, 61.6, 62.7, 63.9, 65.5, 67.1, 68.5, 70.6, 73.0, 75.2, 78.0, 80.9, 82.6, 84.7, 87.2, 89.1,
       91.5, 93.4, 94.4, 95.0, 97.5, 98.1, 97.9, 98.8, 99.8, 100.8, 102.1, 103.3, 104.1, 105.1, 105.7, 107.0, 107.7,
       108.5, 109.9, 108.7, 109.5, 110.2, 111.4, 112.7, 113.8, 115.0, 116.0, 117.2, 118.5, 119.9, 121.2, 123.1, 124.5,
       125.4, 127.5, 128.9, 130.5, 133.4, 134.7, 135.1, 136.2, 137.2, 138.3, 139.4, 140.5, 141.7, 142.8, 143.8, 144.5,
       145.6, 146.3, 147.2, 148.4, 149.4, 150.5, 151.8, 152.6, 153.5, 154.7, 156.1, 157.0, 158.2, 159.4, 159.9]


def test_the_recommended_gp_follows_a_smooth_trend_on_three_collinear_lags():
    """CPI's three lags: the tune gives the linear term the signal and the SE term almost none; with a noise floor
    on the SE term's amplitude alone the window's factor lost every digit in float32 (predictions of −10²⁰ for a
    CPI near 150). Now every prediction stays near the series and its MSE far below the running mean's."""
    from onlinejax.data import shipped
    from onlinejax.evaluation import progressive_validation

    X, y = (np.asarray(a, DTYPE) for a in shipped.lagged(np.asarray(CPI), 3))
    lrn = zoo.configurations()["RecommendedGP"].make(3)
    p = progressive_validation(lrn, lrn.init(), X, y).predictions
    mean, var = np.asarray(p.mean, np.float64)[2:], np.asarray(p.var, np.float64)[2:]
    y2 = y[2:].astype(np.float64)
    assert np.all(np.isfinite(mean)) and np.all(var > 0)
    assert np.max(np.abs(mean - y2)) < 0.25 * np.ptp(y2)
    running = np.cumsum(y.astype(np.float64))[1:-1] / np.arange(2, len(y))
    assert np.mean((mean - y2) ** 2) < 0.02 * np.mean((running - y2) ** 2)


def test_the_recommended_bocpd_covers_as_it_claims_on_a_smooth_trend():
    """CPI's three lags: as the moving standardisation's target scale grew 80-fold, the runs kept their early
    residuals and the prior's noise guess in the units of their time, and the run mixture's variance was
    mostly its change-now component's (weight 10⁻³, at the prior): the inner interval grew to 9 times the rms
    error, the calibrators trailed it, and the 95 % interval covered 98.6 %. With the runs' noise carried
    into today's units and the mixture judged by its interval it covers as it claims."""
    from onlinejax.data import shipped
    from onlinejax.evaluation import progressive_validation

    X, y = (np.asarray(a, DTYPE) for a in shipped.lagged(np.asarray(CPI), 3))
    lrn = zoo.configurations()["RecommendedBOCPD"].make(3)
    p = progressive_validation(lrn, lrn.init(), X, y).predictions
    lo, hi = (np.asarray(q, np.float64)[2:] for q in p.interval(0.95))
    y2 = y[2:].astype(np.float64)
    assert np.all(np.isfinite(lo)) and np.all(hi > lo)
    cover = np.mean((lo <= y2) & (y2 <= hi))
    assert 0.92 <= cover <= 0.97, cover


def test_the_recommended_gp_beats_the_climatology_on_the_niles_lags():
    """The Nile's two lags (98 items) carry little signal. Before its first tune (64 items) the GP interpolated
    them through the default noise of a tenth of the signal's amplitude: log-score skill −0.21 against the
    Student-t climatology, MSE 1.66 times the running mean's, an interval 8.5 times the climatology's. With
    a guess of 0.3 and tunes on the warm-up's first 16 and 32 items it scores above the climatology."""
    from scipy import stats

    from onlinejax.data import shipped
    from onlinejax.evaluation import progressive_validation

    X, y = (np.asarray(a, DTYPE) for a in shipped.lagged(shipped.nile(), 2))
    lrn = zoo.configurations()["RecommendedGP"].make(2)
    p = progressive_validation(lrn, lrn.init(), X, y).predictions
    y64 = y.astype(np.float64)
    n = np.arange(2, len(y))  # the climatology after n targets: t_{n-1}(mean, s·√(1 + 1/n)), float64
    m = np.array([y64[:k].mean() for k in n])
    s = np.array([y64[:k].std(ddof=1) for k in n]) * np.sqrt(1 + 1 / n)
    clim_lp = stats.t.logpdf(y64[2:], n - 1, m, s)
    lp = np.asarray(p.log_prob(y), np.float64)[2:]
    lo, hi = (np.asarray(a, np.float64)[2:] for a in p.interval(0.95))
    assert np.mean(lp - clim_lp) > 0.0
    assert np.mean((np.asarray(p.mean, np.float64)[2:] - y64[2:]) ** 2) < 1.0 * np.mean((m - y64[2:]) ** 2)
    assert 0.9 <= np.mean((lo <= y64[2:]) & (y64[2:] <= hi)) <= 0.99

"""A calibrated learner's first items: the calibrators leave out what was predicted without the targets' scale."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from onlinejax.wrappers.calibration import LOG_CHI2_MEAN, calibrated, calibrated_bayes_linreg, conformal
from onlinejax.learners.linear import bayes_linreg
from onlinejax.wrappers.standardize import standardize

from conftest import DTYPE


def _run(learner, X, Y):
    """``(predictions, states before each item)`` of predict-then-learn in one jitted scan."""
    def body(s, xy):
        s2, p = learner.step(s, *xy)
        return s2, (p, s)

    _, (p, states) = jax.jit(lambda X, Y: jax.lax.scan(body, learner.init(), (X, Y)))(X, Y)
    return p, states


def _climatology_width(y_seen: np.ndarray) -> float:
    """Width of the central 95 % interval of ``ȳ + s·sqrt(1 + 1/n)·T_{n-1}`` (BDA3 §3.2), float64."""
    n = len(y_seen)
    lo, hi = stats.t.interval(0.95, n - 1, y_seen.mean(), y_seen.std(ddof=1) * np.sqrt(1 + 1 / n))
    return hi - lo


def _stream(seed, n, scale, offset=1000.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    Y = scale * (offset + X @ np.array([0.5, -0.3]) + rng.standard_t(5, size=n))
    return jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)


def test_calibrators_leave_out_the_items_predicted_without_a_target_scale():
    """The first two labels (no target scale yet) and the first two after the standardisation starts again do not
    move the calibrators; the first item with a scale does. A bare conformal wrapper counts every label."""
    X, Y = _stream(5, 24, 1.0)
    _, states = _run(calibrated_bayes_linreg(2), X, Y)
    np.testing.assert_array_equal(np.asarray(states.recalibration.n)[:4], [0, 0, 0, 1])
    np.testing.assert_array_equal(np.asarray(states.n_skipped)[:4], [0, 1, 2, 2])
    # a level shift (OUTLIER_RUN far targets in a row) starts the statistics again: two more labels left out
    _, states = _run(calibrated_bayes_linreg(2), X, Y.at[10:].add(1e4))
    seen = np.asarray(states.inner.scaler.seen)
    restart = int(np.argmax((np.arange(24) > 2) & (seen == 0)))
    assert restart > 10
    rn, skipped = np.asarray(states.recalibration.n), np.asarray(states.n_skipped)
    assert skipped[restart + 2] - skipped[restart] == 2 and skipped[-1] == skipped[restart + 2]
    assert rn[restart + 2] == rn[restart] and rn[-1] > rn[restart + 2]
    # the prediction before the first item after the restart is centred on the new level, not on 0
    Y2 = Y.at[10:].add(1e4)
    p, _ = _run(calibrated_bayes_linreg(2), X, Y2)
    np.testing.assert_allclose(float(p.mean[restart]), float(Y2[restart - 1]), rtol=1e-5)
    bare = conformal(standardize(bayes_linreg(2, intercept=True)), method="quantile", recalibrate=0.99, df=4.0)
    _, states = _run(bare, X, Y)
    np.testing.assert_array_equal(np.asarray(states.recalibration.n)[:4], [0, 1, 2, 3])


def test_a_prediction_without_a_target_scale_is_as_wide_as_the_residuals_level():
    """After a restart on targets of scale 1e4 the two predictions made in the guessed unit have a variance of at
    least the recalibrator's residual level exp(L - E[log χ²₁]) (a unit variance would be 1e4 times too narrow)."""
    X, Y = _stream(7, 40, 1e4, offset=0.0)
    Y = Y.at[20:].add(1e6)
    p, states = _run(calibrated_bayes_linreg(2), X, Y)
    seen = np.asarray(states.inner.scaler.seen)
    later = np.flatnonzero((np.arange(40) > 2) & (seen < 2))
    assert len(later) == 2
    level = np.exp(np.asarray(states.recalibration.log_level, np.float64) - LOG_CHI2_MEAN)
    # the Student-t output's scale is the calibrated Gaussian's sd times t_ratio (the same 95 % interval)
    var = (np.asarray(p.scale, np.float64)[later] / np.asarray(states.t_ratio, np.float64)[later]) ** 2
    assert np.all(var >= level[later] * (1 - 1e-4))
    assert np.all(level[later] > 1e6)


@pytest.mark.parametrize("first_offset", [963.0, 0.0])
def test_a_first_target_far_from_the_prior_does_not_set_the_scale(first_offset):
    """Targets near 1000 (the Nile's flows) against a unit prior: the intervals are not wider than the targets'
    spread calls for, from the tenth item on and after the warm-up, and they cover."""
    rng = np.random.default_rng(11)
    y = 1000.0 + 150.0 * rng.standard_normal(120)
    y[0] += first_offset
    X = jnp.asarray(rng.normal(size=(120, 2)), DTYPE)
    p, _ = _run(calibrated(bayes_linreg(2, intercept=True)), X, jnp.asarray(y, DTYPE))
    lo, hi = (np.asarray(a, np.float64) for a in p.interval(0.95))
    ratio = np.array([(hi[i] - lo[i]) / _climatology_width(y[:i]) for i in range(10, 120)])
    assert ratio.max() < 3.0
    assert np.median(ratio[30:]) < 1.5
    cover = np.mean((lo[2:] <= y[2:]) & (y[2:] <= hi[2:]))
    assert 0.88 <= cover <= 1.0


def test_spread_of_the_labels_agrees_with_the_statistics_target_scale():
    """``SpreadState`` says "the targets differ" exactly when a scaler fed the same targets has their scale, over
    constant starts of several lengths and levels (1e-3 to 1e6), ties at the dtype's resolution included."""
    from onlinejax.wrappers.scaler import scaler_init, scaler_update, spread_init, spread_update, target_scale_known

    for level in (1e-3, 1.0, 963.0, 1e6):
        for run in (1, 2, 5):
            y = np.full(run + 3, level)
            y[run] = np.nextafter(np.asarray(level, DTYPE), np.inf)  # one ulp: no spread for either
            y[run + 1:] = level * 1.5
            y = jnp.asarray(y, DTYPE)
            sc, sp = scaler_init(1, dtype=DTYPE), spread_init(DTYPE)
            for t in range(len(y)):
                assert bool(sp.spread) == bool(target_scale_known(sc)), (level, run, t)
                sc = scaler_update(sc, jnp.zeros(1, DTYPE), y[t])
                sp = spread_update(sp, y[t])
            assert bool(sp.spread)


def _calibrated_pair():
    from onlinejax.wrappers.calibration import calibrated_combination
    from onlinejax.wrappers.combination import combine

    return calibrated_combination(combine([calibrated(bayes_linreg(2, intercept=True)),
                                           calibrated(bayes_linreg(2, intercept=True, forgetting=0.97))],
                                          recalibrate=0.95, after_spread=True))


def test_a_combination_of_calibrated_members_leaves_out_the_labels_without_a_target_scale():
    """Over members that standardise, the combination's recalibration and its outer calibrators wait for the
    labels to differ, as the members' own calibrators do: the first two labels move neither. Without
    ``after_spread`` (members in the targets' unit from the start) the recalibration counts every label."""
    X, Y = _stream(5, 24, 1.0)
    _, states = _run(_calibrated_pair(), X, Y)
    np.testing.assert_array_equal(np.asarray(states.recalibration.n)[:4], [0, 0, 0, 1])
    # an item whose input is missing counts for no scaler: the labels differ only from item 2 on
    _, gapped = _run(_calibrated_pair(), X.at[1, 0].set(jnp.nan), Y)
    np.testing.assert_array_equal(np.asarray(gapped.recalibration.n)[:5], [0, 0, 0, 0, 1])
    scale = np.asarray(states.inner.mix.var_scale)
    np.testing.assert_array_equal(scale[:3], 1.0)
    assert np.all(scale[3] != 1.0)
    # a constant start: nothing moves until the labels differ
    Yc = Y.at[:6].set(Y[0])
    _, states = _run(_calibrated_pair(), X, Yc)
    np.testing.assert_array_equal(np.asarray(states.recalibration.n)[:9], [0] * 8 + [1])
    np.testing.assert_array_equal(np.asarray(states.inner.mix.var_scale)[:8], 1.0)
    from onlinejax.wrappers.combination import combine

    plain = combine([bayes_linreg(2, intercept=True), bayes_linreg(2, intercept=True, forgetting=0.97)],
                    recalibrate=0.95)
    _, states = _run(plain, X, Y)
    assert np.all(np.asarray(states.mix.var_scale)[1] != 1.0)


def test_a_combination_of_calibrated_members_is_no_wider_than_its_members_on_the_first_items():
    """Targets near 1000 against the members' unit prior: from the third to the tenth item the mixture's 95 %
    interval is at most 1.5 times its widest member's (scoring the first two labels in the members' guessed unit
    made it about ten times as wide)."""
    from onlinejax.wrappers.calibration import calibrated_combination
    from onlinejax.wrappers.combination import combine

    rng = np.random.default_rng(3)
    y = jnp.asarray(1000.0 + 150.0 * rng.standard_normal(40), DTYPE)
    X = jnp.asarray(rng.normal(size=(40, 2)), DTYPE)
    members = [calibrated(bayes_linreg(2, intercept=True)), calibrated(bayes_linreg(2, intercept=True, forgetting=0.97))]
    p, _ = _run(calibrated_combination(combine(members, recalibrate=0.95, after_spread=True)), X, y)
    lo, hi = (np.asarray(a, np.float64) for a in p.interval(0.95))
    widest = np.max([np.subtract(*reversed([np.asarray(a, np.float64) for a in _run(m, X, y)[0].interval(0.95)]))
                     for m in members], axis=0)
    assert np.all((hi - lo)[2:10] <= 1.5 * widest[2:10])

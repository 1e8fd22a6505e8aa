"""A calibrated learner's first items: the calibrators leave out what was predicted without the targets' scale."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from onlinejax.calibration import LOG_CHI2_MEAN, calibrated, calibrated_bayes_linreg, conformal
from onlinejax.linear import bayes_linreg
from onlinejax.standardize import standardize

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

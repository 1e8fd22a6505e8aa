"""The calibrated interval's cap at k times the climatology's width, against scipy and float64 numpy references."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from onlinejax.core.base import Prediction, make_learner
from onlinejax.core.special import student_t_quantile_series
from onlinejax.wrappers.baseline import climatology_init, climatology_learn
from onlinejax.wrappers.calibration import WIDTH_CAP, QuantileOptions, width_cap_variance
from onlinejax.wrappers.calibration.factories import _calibrated, _recipe_options

from conftest import DTYPE, tol


@pytest.mark.parametrize("p", [0.8, 0.9, 0.95, 0.975, 0.995])
def test_the_series_quantile_is_scipys_exact_at_one_and_two_and_close_from_three(p):
    df = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 30.0, 100.0, 1e4, 2.0 ** 18])
    got = np.asarray(student_t_quantile_series(jnp.asarray(p, DTYPE), jnp.asarray(stats.norm.ppf(p), DTYPE),
                                               jnp.asarray(df, DTYPE)), np.float64)
    want = stats.t.ppf(p, df)
    np.testing.assert_allclose(got[:2], want[:2], rtol=tol(1e-12, 1e-5))
    bound = 1.3e-3 if p <= 0.975 else 8e-3
    rel = got[2:] / want[2:] - 1.0
    assert np.all(rel <= tol(1e-12, 1e-5)) and np.all(rel >= -bound), rel  # low, by at most the bound


def _reference_cap(y, alpha, ratio=WIDTH_CAP):
    """float64: the cap's variance before each item (module doc), +inf without a cap."""
    out = []
    z = stats.norm.ppf(1 - alpha / 2)
    for t in range(len(y)):
        past = y[:t]
        if t >= 2 and np.var(past) > 0:
            half = ratio * stats.t.ppf(1 - alpha / 2, t - 1) * np.std(past, ddof=1) * np.sqrt(1 + 1 / t)
            out.append((half / z) ** 2)
        else:
            out.append(np.inf)
    return np.array(out)


def test_the_cap_variance_matches_a_float64_reference_and_waits_for_two_distinct_targets():
    r = np.random.default_rng(3)
    # equal targets first (no cap), then targets of some spread, then a wider one
    y = np.concatenate([np.full(5, 2.0), 2.0 + r.standard_normal(100), 2.0 + 8.0 * r.standard_normal(60)])
    alpha = 0.1
    z = stats.norm.ppf(1 - alpha / 2)

    def body(s, yt):
        cap = width_cap_variance(s, jnp.asarray(alpha, DTYPE), jnp.asarray(z, DTYPE))
        return climatology_learn(s, yt), cap

    _, got = jax.lax.scan(body, climatology_init(dtype=DTYPE), jnp.asarray(y, DTYPE))
    got, want = np.asarray(got, np.float64), _reference_cap(y, alpha)
    assert np.all(np.isinf(got[:6])) and np.all(np.isinf(want[:6]))
    # the series quantile is low by at most 1.2e-3 (n - 1 ≥ 3; squared: 2.4e-3), the statistics to rounding
    np.testing.assert_allclose(got[6:], want[6:], rtol=tol(3e-3, 4e-3))


def _oracle():
    """A learner that predicts ``N(x[0], x[1])``: the stream sets every prediction."""
    return make_learner(init=lambda dtype=None: {"n": jnp.zeros((), dtype or DTYPE)},
                        learn_one=lambda s, x, y: {"n": s["n"] + 1.0},
                        predict_one=lambda s, x: Prediction(x[0], x[1]), n_features=2)


def _stream(n=400, seed=0):
    """Oracle inputs: a unit-noise stream whose stated variance is 400x too large on items 150-250."""
    r = np.random.default_rng(seed)
    mean = np.sin(np.arange(n) / 30.0)
    var = np.ones(n)
    var[150:250] = 400.0
    y = mean + r.standard_normal(n)
    return np.stack([mean, var], 1).astype(DTYPE), y.astype(DTYPE)


def _both():
    rc, cc = _recipe_options(0.95, QuantileOptions(), 0.99, 4.0)
    return _calibrated(_oracle(), rc, cc), _calibrated(_oracle(), rc, cc._replace(width_cap=None))


def _run(learner, X, Y):
    step = jax.jit(lambda s, X, Y: jax.lax.scan(lambda s, xy: learner.step(s, *xy), s, (X, Y)))
    return step(learner.init(), jnp.asarray(X), jnp.asarray(Y))


def test_the_issued_interval_is_within_the_cap_and_the_calibrators_judge_the_one_before_it():
    X, Y = _stream()
    with_cap, without = _both()
    s1, p1 = _run(with_cap, X, Y)
    s0, p0 = _run(without, X, Y)
    lo1, hi1 = (np.asarray(q, np.float64) for q in p1.interval(0.95))
    lo0, hi0 = (np.asarray(q, np.float64) for q in p0.interval(0.95))
    y = np.asarray(Y, np.float64)
    clim = np.array([np.inf, np.inf] + [2 * stats.t.ppf(0.975, t - 1) * np.std(y[:t], ddof=1) * np.sqrt(1 + 1 / t)
                                        for t in range(2, len(y))])
    w1, w0 = hi1 - lo1, hi0 - lo0
    assert np.all(w1[2:] <= WIDTH_CAP * (1 + tol(1e-9, 1e-5)) * clim[2:])
    assert np.max(w0[150:250] / clim[150:250]) > 10  # the uncapped interval is far wider there
    np.testing.assert_allclose(w1[:150], w0[:150], rtol=tol(1e-9, 1e-4))  # not binding on an honest learner
    # the calibrators judged the interval before the cap: their states agree with the uncapped wrapper's
    for a, b in zip(jax.tree.leaves((s1.recalibration, s1.conformal)), jax.tree.leaves((s0.recalibration, s0.conformal))):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol(1e-9, 1e-4))
    assert np.all(np.isfinite(np.asarray(p1.scale))) and np.all(np.asarray(p1.scale) > 0)


def test_update_with_a_capped_issued_prediction_learns_as_step_does():
    X, Y = _stream(300, seed=1)
    learner = _both()[0]
    s_step, preds = _run(learner, X, Y)

    def body(s, xy):
        x, y = xy
        issued = learner.predict(s, x)
        return learner.update(s, x, y, issued), issued

    s_upd, issued = jax.jit(lambda s: jax.lax.scan(body, s, (jnp.asarray(X), jnp.asarray(Y))))(learner.init())
    np.testing.assert_allclose(np.asarray(issued.scale), np.asarray(preds.scale), rtol=tol(1e-9, 1e-5))
    for a, b in zip(jax.tree.leaves(s_upd), jax.tree.leaves(s_step)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol(1e-9, 1e-4))


def test_constant_targets_leave_the_interval_uncapped_and_positive():
    X = np.stack([np.zeros(50), np.ones(50)], 1).astype(DTYPE)
    Y = np.full(50, 3.0, DTYPE)
    _, p = _run(_both()[0], X, Y)
    assert np.all(np.isfinite(np.asarray(p.scale))) and np.all(np.asarray(p.scale) > 0)

"""standardize(): online standardisation of inputs and targets around any learner."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.evaluation import progressive_validation
from onlinejax.wrappers.standardize import (StandardizeOptions, learn_one, predict_one, scaler_init, scaler_update, scales,
                                            standardize, to_inner)
from onlinejax.wrappers.standardize import init as standardize_init
from conftest import DTYPE, X64, tol


def _np_reference(X, y, alpha=1.0, beta=1.0, scale_inputs=True):
    """float64 numpy: running stats (population), BLR learned on items standardised at their arrival
    (with ``scale_inputs=False`` the targets only)."""
    n, d = X.shape
    P = alpha * np.eye(d)  # posterior precision
    b = np.zeros(d)
    mus, vs = [], []
    for t in range(n):
        seen = slice(0, t)
        if t == 0:
            xm, sx, ym, sy = np.zeros(d), np.ones(d), 0.0, 1.0
        else:
            xm, ym = X[seen].mean(0), y[seen].mean()
            sx = np.where(X[seen].var(0) > 0, X[seen].std(0), 1.0)
            sy = y[seen].std() if y[seen].var() > 0 else max(abs(ym), 1.0)  # no spread: the targets' magnitude
        xt = (X[t] - xm) / sx if scale_inputs else X[t]
        S = np.linalg.inv(P)
        mus.append(ym + sy * xt @ S @ b)
        vs.append(sy ** 2 * (1 / beta + xt @ S @ xt))
        sl = slice(0, t + 1)
        xm, ym = X[sl].mean(0), y[sl].mean()
        sx = np.where(X[sl].var(0) > 1e-300, X[sl].std(0), 1.0)
        sy = y[sl].std() if y[sl].var() > 1e-300 else max(abs(ym), 1.0)
        xt, yt = (X[t] - xm) / sx if scale_inputs else X[t], (y[t] - ym) / sy
        P += beta * np.outer(xt, xt)
        b += beta * xt * yt
    return np.array(mus), np.array(vs)


def test_matches_float64_reference(rng):
    n = 60
    X = np.column_stack([7.3e5 + np.arange(n), rng.uniform(1e-4, 2e-4, n)])
    y = 1000 + 3 * (X[:, 0] - 7.3e5) + 1e4 * X[:, 1] + rng.normal(size=n)
    lrn = standardize(oj.bayes_linreg(2))
    p = progressive_validation(lrn, lrn.init(), X, y).predictions
    mu, v = _np_reference(X, y)
    # float32 resolves the ordinal dates to 1/16 of a day, and the early scales come from 1-3 items
    k = 3 if X64 else 10  # a date spread of 1-3 days is 16-48 float32 steps at 7.3e5
    np.testing.assert_allclose(np.asarray(p.mean)[k:], mu[k:], rtol=tol(1e-8, 2e-3), atol=tol(1e-8, 0.5))
    np.testing.assert_allclose(np.asarray(p.var)[k:], v[k:], rtol=tol(1e-7, 5e-2))


def test_an_input_spanning_decades_is_taken_in_log_scale_and_the_learner_starts_again(rng):
    """Inputs log-uniform over [1e-6, 1e6]: on the 16th item (``LOG_ITEMS``) the input is taken as
    ``log(1 + x/c)``, ``c`` a thousandth of its smallest value so far (``LOG_FLOOR``), and the statistics and the
    learner start again, so from the 18th item on the predictions are the float64 reference's on the transformed
    inputs from the 17th (the 17th is centred on the last targets' mean instead of 0). An input with a value <= 0 among its first 16, or one of
    ordinary spread, stays raw; under jit and vmap each stream decides for itself."""
    from onlinejax.wrappers.standardize_state import LOG_FLOOR, LOG_ITEMS, log_scaled

    n = 70
    x0 = np.exp(rng.uniform(np.log(1e-6), np.log(1e6), n))
    X = np.column_stack([x0, rng.uniform(0.0, 1.0, n)])
    y = 2.0 * np.log(x0) + X[:, 1] + 0.3 * rng.normal(size=n)
    lrn = standardize(oj.bayes_linreg(2))
    run = jax.jit(lambda X, y: progressive_validation(lrn, lrn.init(), X, y))
    out = run(X.astype(DTYPE), y.astype(DTYPE))
    c = LOG_FLOOR * x0[:LOG_ITEMS].min()
    np.testing.assert_allclose(np.asarray(out.state.log_scale), [c, 0.0], rtol=tol(1e-12, 1e-6))
    Xt = np.column_stack([np.log1p(x0 / c), X[:, 1]])
    mu, v = _np_reference(Xt[LOG_ITEMS:], y[LOG_ITEMS:])
    k = LOG_ITEMS + 1
    np.testing.assert_allclose(np.asarray(out.predictions.mean)[k:], mu[1:], rtol=tol(1e-8, 2e-3), atol=tol(1e-8, 2e-3))
    np.testing.assert_allclose(np.asarray(out.predictions.var)[k:], v[1:], rtol=tol(1e-7, 5e-2))
    # a zero among the first 16, or the option off: raw inputs, as the reference on X
    X0 = X.copy()
    X0[3, 0] = 0.0
    for Xs, opts in ((X0, StandardizeOptions()), (X, StandardizeOptions(log_spread=None))):
        lr = standardize(oj.bayes_linreg(2), options=opts)
        o = progressive_validation(lr, lr.init(), Xs.astype(DTYPE), y.astype(DTYPE))
        assert not np.any(np.asarray(o.state.log_scale))
    both = jax.jit(jax.vmap(lambda X, y: progressive_validation(lrn, lrn.init(), X, y).predictions.mean))(
        np.stack([X, X0]).astype(DTYPE), np.stack([y, y]).astype(DTYPE))
    np.testing.assert_allclose(np.asarray(both[0]), np.asarray(out.predictions.mean), rtol=tol(1e-12, 1e-5),
                               atol=tol(1e-12, 1e-4))
    with pytest.raises(ValueError, match="log_spread"):
        standardize(oj.bayes_linreg(2), options=StandardizeOptions(log_spread=0.0))
    # only the first k inputs may be taken in log scale (a feature map's raw inputs before their squares)
    X2 = np.column_stack([X[:, 1], x0])
    lr = standardize(oj.bayes_linreg(2), options=StandardizeOptions(log_first=1))
    assert not np.any(np.asarray(progressive_validation(lr, lr.init(), X2.astype(DTYPE), y.astype(DTYPE)).state.log_scale))
    lr = standardize(oj.bayes_linreg(2), options=StandardizeOptions(log_first=2))
    assert np.asarray(progressive_validation(lr, lr.init(), X2.astype(DTYPE), y.astype(DTYPE)).state.log_scale)[1] > 0
    with pytest.raises(ValueError, match="log_first"):
        standardize(oj.bayes_linreg(2), options=StandardizeOptions(log_first=0))
    # inputs over 60 decades: |x|/c would overflow float32; the log scale stays finite and exact
    st = out.state._replace(log_scale=jnp.asarray([1e-32, 0.0], DTYPE))
    np.testing.assert_allclose(np.asarray(log_scaled(st, jnp.asarray([1e30, 2.0], DTYPE))),
                               [np.log1p(1e30 / 1e-32), 2.0], rtol=tol(1e-12, 1e-6))
    wide = np.column_stack([np.exp(rng.uniform(np.log(1e-30), np.log(1e30), n)), X[:, 1]])
    p = progressive_validation(lrn, lrn.init(), wide.astype(DTYPE), y.astype(DTYPE)).predictions
    assert np.all(np.isfinite(np.asarray(p.mean))) and np.all(np.asarray(p.var) > 0)


def test_inputs_standardised_upstream_reach_the_learner_as_given(rng):
    """``scale_inputs=False`` (River's scaler in front): only the targets are standardised; the inputs are
    learned as they come, clipped at ``clip``."""
    n = 80
    X = np.column_stack([1.7 + 0.01 * rng.normal(size=n), rng.normal(size=n)])  # a trend the scaler holds near 1.7
    y = 1000 + 300 * X[:, 0] - 20 * X[:, 1] + rng.normal(size=n)
    lrn = standardize(oj.bayes_linreg(2), options=StandardizeOptions(scale_inputs=False))
    p = progressive_validation(lrn, lrn.init(), X, y).predictions
    mu, v = _np_reference(X, y, scale_inputs=False)
    np.testing.assert_allclose(np.asarray(p.mean)[2:], mu[2:], rtol=tol(1e-9, 1e-4), atol=tol(1e-8, 1e-2))
    np.testing.assert_allclose(np.asarray(p.var)[2:], v[2:], rtol=tol(1e-8, 1e-3))
    clipped = standardize(oj.bayes_linreg(2), options=StandardizeOptions(clip=1.0, scale_inputs=False))
    Xc = X * [1.0, 3.0]
    q = progressive_validation(clipped, clipped.init(), Xc, y).predictions
    mu_c, _ = _np_reference(np.clip(Xc, -1.0, 1.0), y, scale_inputs=False)
    np.testing.assert_allclose(np.asarray(q.mean)[2:], mu_c[2:], rtol=tol(1e-9, 1e-4), atol=tol(1e-8, 1e-2))
    with pytest.raises(TypeError, match="scale_inputs"):
        standardize(oj.bayes_linreg(2), options=StandardizeOptions(scale_inputs="no"))


def test_affine_invariance(rng):
    """Predictions on (a·x + b, c·y + e) are the affine image of those on (x, y): scale no longer matters."""
    n = 200
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.normal(size=n)
    # offsets of 5-10 standard deviations: still resolved by float32
    a, b, c, e = np.array([1e-4, 3.0, 1e3]), np.array([5e-4, -2.0, 1e4]), 250.0, -1e3
    for make in (lambda: oj.bayes_linreg(3, intercept=True), lambda: oj.windowed_bayes_linreg(3, 32)):
        lrn = standardize(make())
        p = progressive_validation(lrn, lrn.init(), X, y).predictions
        q = progressive_validation(lrn, lrn.init(), a * X + b, c * y + e).predictions
        sl = slice(5, None)
        np.testing.assert_allclose(np.asarray(q.mean)[sl], (c * np.asarray(p.mean) + e)[sl],
                                   rtol=tol(1e-6, 1e-2), atol=tol(1e-6, 0.05 * c))
        np.testing.assert_allclose(np.asarray(q.var)[sl], (c * c * np.asarray(p.var))[sl], rtol=tol(1e-6, 5e-2))


def test_raw_ordinal_dates_float32_stay_sane(rng):
    """Ordinal-date features (~7e5) fed raw: the plain learner blows up, the standardised one tracks y."""
    n = 400
    days = 7.36e5 + np.arange(n, dtype=np.float64)
    X = np.column_stack([days, 40 + rng.normal(size=n), 45 + rng.normal(size=n)])
    y = 42 + 0.01 * (days - days[0]) + 0.5 * (X[:, 1] - 40) + 0.3 * rng.normal(size=n)
    lrn = standardize(oj.bayes_linreg(3, intercept=True, forgetting=0.99))
    p = progressive_validation(lrn, lrn.init(), X, y).predictions
    mu, var = np.asarray(p.mean, np.float64), np.asarray(p.var, np.float64)
    assert np.all(np.isfinite(mu)) and np.all(var > 0)
    err = (y - mu)[50:]
    assert np.mean(err ** 2) / np.var(y[50:]) < 0.2
    assert 0.85 < np.mean(np.abs(err) <= 1.96 * np.sqrt(var[50:])) <= 1.0


def test_scaler_update_is_welford_and_skips_nonfinite(rng):
    X = rng.normal(size=(50, 2)) * [1e-3, 1e3] + [5.0, -7.0]
    y = rng.normal(size=50) * 4 + 2
    s = scaler_init(2, dtype=jnp.float64 if X64 else jnp.float32)
    for x, t in zip(X, y):
        s = scaler_update(s, jnp.asarray(x, s.x_mean.dtype), jnp.asarray(t, s.x_mean.dtype))
    s2 = scaler_update(s, jnp.asarray([np.nan, 1.0], s.x_mean.dtype), jnp.asarray(1.0, s.x_mean.dtype))
    sx, sy = scales(s2)
    np.testing.assert_allclose(np.asarray(sx), X.std(0), rtol=tol(1e-10, 1e-4))
    assert float(sy) == pytest.approx(y.std(), rel=tol(1e-10, 1e-4))
    assert float(s2.n) == 50.0


@pytest.mark.parametrize("first, unit", [(None, 1.0), (1000.0, 1000.0), (-250.0, 250.0), (0.3, 1.0), (0.0, 1.0)])
def test_a_target_without_spread_is_read_in_the_unit_of_its_magnitude(first, unit):
    """Before the targets have a spread, ``s_y = max(|ȳ|, 1)``: the only scale the stream gave (1 before any
    target); the inputs' unit stays 1."""
    dt = jnp.float64 if X64 else jnp.float32
    s = scaler_init(1, dtype=dt)
    if first is not None:
        s = scaler_update(s, jnp.ones((1,), dt), jnp.asarray(first, dt))
    sx, sy = scales(s)
    assert float(sy) == unit and float(sx[0]) == 1.0


def test_the_second_item_of_a_level_far_from_zero_is_inside_the_interval():
    """A second target 10 % away from a level of 1000 is inside the standardised learner's 95 % interval (in a unit
    of 1 it was 50 prior standard deviations off)."""
    dt = jnp.float64 if X64 else jnp.float32
    lrn = standardize(oj.bayes_linreg(1))
    st = lrn.learn(lrn.init(), jnp.ones((1,), dt), jnp.asarray(1000.0, dt))
    lo, hi = lrn.predict(st, jnp.full((1,), 2.0, dt)).interval(0.95)
    assert float(lo) < 900.0 and 1100.0 < float(hi)


def test_the_provisional_unit_of_a_huge_target_leaves_room_for_the_variance():
    from onlinejax.wrappers.scaler import provisional_target_scale

    dt = jnp.float64 if X64 else jnp.float32
    big = float(jnp.finfo(dt).max) ** 0.5
    assert float(provisional_target_scale(jnp.asarray(big, dt))) == pytest.approx(float(jnp.finfo(dt).max) ** 0.25, rel=1e-6)
    lrn = standardize(oj.bayes_linreg(1))
    st = lrn.learn(lrn.init(), jnp.ones((1,), dt), jnp.asarray(big, dt))
    p = lrn.predict(st, jnp.full((1,), 2.0, dt))
    assert np.isfinite(float(p.var)) and float(p.var) > 0
    with pytest.raises(ValueError, match="y_mean"):
        provisional_target_scale(jnp.asarray(3, jnp.int32))


def test_scaler_keeps_exponentially_weighted_variances_that_survive_a_saturated_count(rng):
    """decay < 1: the statistics are the exponentially weighted mean and population variance (x_var, y_var);
    a float32 scaler whose count has saturated keeps its scales where float64 puts them."""
    dt = jnp.float64 if X64 else jnp.float32
    X = rng.normal(size=(400, 2)) * [0.5, 20.0] + [3.0, -100.0]
    y = rng.normal(size=400) * 4 + 2
    s = jax.lax.scan(lambda s, xy: (scaler_update(s, *xy), None), scaler_init(2, decay=0.98, dtype=dt),
                     (jnp.asarray(X, dt), jnp.asarray(y, dt)))[0]
    w = 0.98 ** np.arange(399, -1, -1)
    mx, my = w @ X / w.sum(), w @ y / w.sum()
    np.testing.assert_allclose(np.asarray(s.x_var), w @ (X - mx) ** 2 / w.sum(), rtol=tol(1e-10, 1e-4))
    assert float(s.y_var) == pytest.approx(w @ (y - my) ** 2 / w.sum(), rel=tol(1e-10, 1e-4))
    np.testing.assert_allclose(np.asarray(scales(s)[0]), np.sqrt(w @ (X - mx) ** 2 / w.sum()), rtol=tol(1e-10, 1e-4))
    # float32 at 2²⁴ items (n + 1 == n): 3000 more items leave the scales where they were
    f32 = jnp.float32
    s = scaler_init(1, dtype=f32)._replace(n=f32(2.0 ** 24), x_mean=jnp.full(1, 5.0, f32), x_var=jnp.full(1, 9.0, f32),
                                           y_mean=f32(-2.0), y_var=f32(0.25))
    Xn = 5.0 + 3.0 * rng.normal(size=(3000, 1))
    yn = -2.0 + 0.5 * rng.normal(size=3000)
    s = jax.lax.scan(lambda s, xy: (scaler_update(s, *xy), None), s, (jnp.asarray(Xn, f32), jnp.asarray(yn, f32)))[0]
    sx, sy = scales(s)
    assert float(sx[0]) == pytest.approx(3.0, rel=2e-2) and float(sy) == pytest.approx(0.5, rel=2e-2)


def test_jit_vmap_tune_evict_and_errors(rng):
    X = rng.normal(size=(4, 30, 2)) * 100 + 1e3
    Y = X.sum(-1) + rng.normal(size=(4, 30))
    lrn = standardize(oj.windowed_bayes_linreg(2, 8))
    pv = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y).predictions))
    p = pv(X, Y)
    assert p.mean.shape == (4, 30) and bool(jnp.all(p.var > 0))
    s = progressive_validation(lrn, lrn.init(), X[0], Y[0]).state
    assert lrn.tune(s).scaler == s.scaler
    assert int(s.inner.buffer.count) == 8 and int(lrn.evict(s).inner.buffer.count) == 7
    with pytest.raises(ValueError, match="decay"):
        standardize(oj.bayes_linreg(2), options=StandardizeOptions(decay=0.0))
    with pytest.raises(ValueError, match="decay"):
        standardize(oj.bayes_linreg(2)).init(decay=1.5)


def test_clip_bounds_standardised_inputs(rng):
    """A feature nearly constant for 50 items, then moving: without clip its first move is ~1e4 standard deviations out."""
    x = np.concatenate([np.full(50, 3.0) + 1e-4 * rng.normal(size=50), 3.0 + rng.normal(size=50)])
    y = rng.normal(size=100)
    seen = []
    probe = oj.bayes_linreg(1)
    # the prediction sees the input standardised before the item enters the statistics
    spy = probe._replace(predict=lambda s, x: (jax.debug.callback(lambda v: seen.append(np.asarray(v)), x),
                                               probe.predict(s, x))[1])
    for clip in (None, 4.0):
        seen.clear()
        lrn = standardize(spy, options=StandardizeOptions(clip=clip))
        s = lrn.init()
        for t in range(60):
            s = lrn.step(s, x[t:t + 1], y[t])[0]
        big = max(float(np.max(np.abs(np.asarray(v)))) for v in seen)
        assert (big > 1e3) if clip is None else (big <= 4.0)
    with pytest.raises(ValueError, match="clip"):
        standardize(oj.bayes_linreg(1), options=StandardizeOptions(clip=0.0))


def _windowed_reference(X, y, window, alpha=1.0, beta=1.0):
    """float64 numpy: BLR on the last ``window`` items (intercept appended), predictions before each item."""
    Z = np.column_stack([X, np.ones(len(X))])
    mus = []
    for t in range(len(X)):
        lo = max(0, t - window)
        P = np.diag(np.broadcast_to(alpha, Z.shape[1]).astype(float)) + beta * Z[lo:t].T @ Z[lo:t]
        mus.append(Z[t] @ np.linalg.solve(P, beta * Z[lo:t].T @ y[lo:t]))
    return np.array(mus)


def test_warmup_refits_in_the_final_coordinates(rng):
    """After the warm-up, predictions are those of the learner run from scratch on data standardised with
    the warm-up's statistics; within it, after its 2nd, 4th, 8th and 16th items, those of the learner run
    from scratch on the items so far in the statistics of then (float64 numpy reference)."""
    n, F, W = 120, 20, 16
    X = np.column_stack([rng.uniform(0, 100, n), 7.3e5 + rng.uniform(0, 50, n)])
    y = 1000 + X @ np.array([2.0, -3.0]) + rng.normal(size=n)
    untuned = oj.windowed_bayes_linreg(2, W, intercept=True)._replace(tune=None)  # the refits on 16 items or more would tune it
    lrn = standardize(untuned, options=StandardizeOptions(warmup=F))
    res = progressive_validation(lrn, lrn.init(), X, y)
    xm, xs, ym, ys = X[:F].mean(0), X[:F].std(0), y[:F].mean(), y[:F].std()
    ref = ym + ys * _windowed_reference((X - xm) / xs, (y - ym) / ys, W)
    mu = np.asarray(res.predictions.mean, np.float64)
    np.testing.assert_allclose(mu[F:], ref[F:], rtol=tol(1e-9, 1e-4), atol=tol(1e-8, 0.05))
    for t in (2, 4, 8, 16):  # refitted after t items: item t predicted from them in their own statistics
        xm, xs, ym, ys = X[:t].mean(0), X[:t].std(0), y[:t].mean(), y[:t].std()
        ref_t = ym + ys * _windowed_reference((X[:t + 1] - xm) / xs, (y[:t + 1] - ym) / ys, W)[t]
        assert abs(mu[t] - ref_t) < tol(1e-8, 1e-3) * np.std(y) + tol(0.0, 1e-6) * abs(ref_t), (t, mu[t], ref_t)
    moving = standardize(untuned)
    mu_moving = np.asarray(progressive_validation(moving, moving.init(), X[:F], y[:F]).predictions.mean)
    np.testing.assert_array_equal(mu[:2], mu_moving[:2])  # before the first refit it predicts as without a warm-up
    assert np.max(np.abs(mu[2:F] - mu_moving[2:F])) > 1e-3 * np.std(y)  # and then differs
    assert int(res.state.scaler.seen) == F and float(res.state.scaler.y_mean) == pytest.approx(ym, rel=1e-5)


def test_warmup_refits_on_16_items_or_more_are_tuned_each_from_the_init(rng):
    """The refits after the warm-up's 16th item and at its end are tuned: the inner GP then holds the
    hyperparameters of a GP that learned the items so far, from its init, in the statistics of then and was
    tuned; the 2nd-8th items' refits are not tuned (float64: to the digit)."""
    from onlinejax.learners.gp import gp_window
    from onlinejax.wrappers.standardize import WARMUP_TUNE_MIN, inner_coordinates

    n, F = 40, 32
    X = np.column_stack([rng.uniform(0, 10, n), 300 + rng.uniform(0, 50, n)])
    y = 50 * np.sin(X[:, 0]) + 0.5 * X[:, 1] + 10 * rng.normal(size=n)
    X, y = X.astype(DTYPE), y.astype(DTYPE)
    gp = gp_window(2, F)
    opts = StandardizeOptions(warmup=F)
    lrn = standardize(gp, options=opts)
    res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: (s.inner.params, s.inner.n_tunes, s.scaler))
    params, n_tunes, scalers = res.records
    leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(params)]
    init = [np.asarray(a) for a in jax.tree_util.tree_leaves(gp.init().params)]

    def at(t):
        return [a[t] for a in leaves]

    def tuned_from_init(t):  # a fresh GP on items 0..t in the statistics after item t, then tuned
        sc = jax.tree_util.tree_map(lambda a: a[t], scalers)
        ref = gp.init()
        for i in range(t + 1):
            ref = gp.learn(ref, *inner_coordinates(opts, sc, jnp.asarray(X[i]), jnp.asarray(y[i])))
        return jax.tree_util.tree_leaves(gp.tune(ref).params)

    k = WARMUP_TUNE_MIN - 1  # the item on which the statistics took their 16th
    for t in (0, 3, 7, k - 1):
        for a, b in zip(at(t), init):
            np.testing.assert_array_equal(a, b)
    for t in (k, F - 1):
        for a, b in zip(at(t), tuned_from_init(t)):
            np.testing.assert_allclose(a, np.asarray(b), rtol=tol(1e-8, 1e-3), atol=tol(1e-10, 1e-4))
    assert not all(np.array_equal(a, b) for a, b in zip(at(k), init))
    assert np.all(np.asarray(n_tunes)[:k] == 0) and np.all(np.asarray(n_tunes)[k:] == 1)


def test_warmup_skips_nonfinite_items_and_vmaps(rng):
    n, F = 40, 10
    X = rng.normal(size=(3, n, 2)) * 50 + 300
    Y = X.sum(-1) + rng.normal(size=(3, n))
    Y[1, 3] = np.nan  # stream 1's warm-up is one item longer
    lrn = standardize(oj.windowed_bayes_linreg(2, 8, intercept=True), options=StandardizeOptions(warmup=F))
    pv = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y)))
    res = pv(jnp.asarray(X), jnp.asarray(Y))
    one_stream = jax.jit(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y))  # jit: NaN is skipped
    for i in range(3):
        one = one_stream(X[i], Y[i])
        np.testing.assert_allclose(np.asarray(res.predictions.mean[i]), np.asarray(one.predictions.mean),
                                   rtol=tol(1e-10, 1e-4), atol=tol(1e-9, 1e-3))
    ok = np.isfinite(Y[1])
    # after the warm-up the buffer keeps the last F finite items, the oldest at the cursor
    kept = np.roll(np.asarray(res.state.kept.y[1]), -int(res.state.kept.head[1]))
    np.testing.assert_array_equal(kept, Y[1][ok][-F:].astype(res.state.kept.y.dtype))
    assert int(res.state.scaler.seen[1]) == F
    with pytest.raises(ValueError, match="warmup"):
        standardize(oj.bayes_linreg(2), options=StandardizeOptions(warmup=0))


def test_module_level_functions_equal_the_learner(rng):
    """``learn_one`` / ``predict_one`` with the inner learner and options passed by hand are the Learner's, bit for bit."""
    n, F = 40, 12
    X = jnp.asarray(rng.normal(size=(n, 2)) * [10.0, 0.01] + [300.0, 5.0])
    Y = jnp.asarray(np.asarray(X) @ np.array([0.5, 80.0]) + rng.normal(size=n))
    inner = oj.windowed_bayes_linreg(2, 8, intercept=True)
    opts = StandardizeOptions(decay=0.99, clip=4.0, warmup=F)
    lrn = standardize(inner, options=StandardizeOptions(decay=0.99, clip=4.0, warmup=F))

    def pure(s, xy):
        return learn_one(inner, opts, s, *xy), predict_one(inner, opts, s, xy[0])

    got = jax.jit(lambda s0: jax.lax.scan(pure, s0, (X, Y)))(standardize_init(inner, opts))
    want = jax.jit(lambda s0: jax.lax.scan(lambda s, xy: lrn.step(s, *xy), s0, (X, Y)))(lrn.init())
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # to_inner is (x - x̄)/s_x clipped, (y - ȳ)/s_y
    sc = got[0].scaler
    sx, sy = scales(sc)
    xt, yt = to_inner(sc, X[0], Y[0], 4.0)
    want_x = np.clip((np.asarray(X[0]) - np.asarray(sc.x_mean)) / np.asarray(sx), -4.0, 4.0)
    np.testing.assert_allclose(np.asarray(xt), want_x, rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(float(yt), (float(Y[0]) - float(sc.y_mean)) / float(sy), rtol=tol(1e-12, 1e-5))
    # init's decay overrides the options' default
    assert float(standardize_init(inner, opts, decay=0.5).scaler.decay) == 0.5


def test_a_warmup_of_constant_targets_starts_again_and_then_fixes_the_streams_scale():
    from onlinejax.wrappers.standardize import scales

    r = np.random.default_rng(3)
    n, F = 200, 16
    X = r.uniform(0.0, 1.0, (n, 2)).astype(DTYPE)
    y = (5.0 + 3.0 * r.normal(size=n)).astype(DTYPE)
    y[:40] = 7.0  # a stuck sensor through the first warm-up and into the second
    lrn = oj.standardize(oj.bayes_linreg(2, intercept=True), options=StandardizeOptions(warmup=F))
    res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: s.scaler.seen)
    seen = np.asarray(res.records)
    # the warm-ups on items 0-15 and 16-31 ended without spread and started again; items 32-47 have spread
    assert seen[F - 1] == 0 and seen[2 * F - 1] == 0 and seen[3 * F - 1] == F and seen[-1] == F
    np.testing.assert_allclose(float(scales(res.state.scaler)[1]), np.std(y[2 * F:3 * F]), rtol=tol(1e-9, 1e-4))


@pytest.mark.parametrize("keep", [None, 48])
def test_a_covariate_shift_beyond_the_clip_rebases_on_the_last_warmup_items(keep):
    """A jump waits ``F`` items beyond the clip and takes their statistics; with ``keep > F`` the items before it
    stay out of the refit and out of a later rebase."""
    r = np.random.default_rng(4)
    n, F = 600, 16
    X = r.uniform(0.0, 1.0, (n, 3))
    X[300:, 0] += 2.0  # feature 0 shifts by about 7 sd: clipped at 5, its variation would be lost
    X[450:470, 2] = 9.0  # feature 2 stuck far out for 20 items: loses nothing to the clip, starts nothing
    y = (3.0 * X[:, 0] - 2.0 * X[:, 1] + 0.1 * r.normal(size=n)).astype(DTYPE)
    X = X.astype(DTYPE)
    lrn = oj.standardize(oj.windowed_bayes_linreg(3, 32, intercept=True),
                         options=StandardizeOptions(clip=5.0, warmup=F, keep=keep))
    res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: (s.scaler.seen, s.outside, s.scaler.x_mean,
                                                                          s.kept.count))
    seen, outside, x_mean, kept = map(np.asarray, res.records)
    assert kept[315] == F and kept[-1] == (keep or F)  # the jump's last F, then the ring fills again
    assert np.all(seen[F - 1:] == F) and outside[299, 0] == 0
    # F items in a row outside the range (items 300-315): the statistics of those F items, fixed again
    assert outside[314, 0] == F - 1 and outside[315, 0] == 0
    np.testing.assert_allclose(x_mean[314], X[:F].mean(0), rtol=tol(1e-9, 1e-5))
    np.testing.assert_allclose(x_mean[315], X[300:316].mean(0), rtol=tol(1e-9, 1e-5))
    np.testing.assert_allclose(x_mean[-1], X[300:316].mean(0), rtol=tol(1e-9, 1e-5))
    m = np.asarray(res.predictions.mean)
    # a learner that saw feature 0 clipped at 5 would miss 3 x0's variation: MSE about 0.75 (noise: 0.01)
    assert np.mean((m[350:450] - y[350:450]) ** 2) < 0.03 and np.mean((m[500:] - y[500:]) ** 2) < 0.03


def test_a_trending_input_is_rebased_step_by_step_on_every_kept_item():
    """A trend leaves the fixed range step by step: ``DRIFT_RUN`` items beyond the clip rebase the statistics on
    all ``keep`` items kept (a jump waits for ``F`` and takes the last ``F``), and the inner learner is refitted on
    them (and tuned): the next prediction is a float64 window fit on the kept items in the new coordinates."""
    from onlinejax.wrappers.standardize import DRIFT_RUN

    r = np.random.default_rng(5)
    n, F, K, clip = 400, 16, 48, 5.0
    X = np.column_stack([np.linspace(0.0, 4.0, n), r.uniform(0.0, 1.0, n)])
    y = (2.0 * X[:, 0] - X[:, 1] + 0.1 * r.normal(size=n)).astype(DTYPE)
    X = X.astype(DTYPE)
    rec = lambda s: (s.scaler.x_mean, s.scaler.x_var, s.scaler.y_mean, s.scaler.y_var, s.inner.alpha,  # noqa: E731
                     s.inner.beta)
    lrn = oj.standardize(oj.windowed_bayes_linreg(2, K, intercept=True),
                         options=StandardizeOptions(clip=clip, warmup=F, keep=K))
    res = progressive_validation(lrn, lrn.init(), X, y, record=rec)
    x_mean, x_var, y_mean, y_var, alpha, beta = (np.asarray(a, np.float64) for a in res.records)
    Xd, yd = X.astype(np.float64), y.astype(np.float64)
    changes = np.flatnonzero(np.any(x_mean[1:] != x_mean[:-1], axis=1)) + 1
    first, second = changes[changes >= F][:2]  # the first two rebases after the warm-up: the buffer is then full
    assert first < K <= second
    old = slice(0, F)
    for t in (first, second):
        # the DRIFT_RUN items up to t lay beyond the clip of the statistics before, the one before them did not
        z0 = (Xd[:, 0] - Xd[old, 0].mean()) / Xd[old, 0].std()
        assert np.all(z0[t - DRIFT_RUN + 1:t + 1] > clip) and z0[t - DRIFT_RUN] <= clip
        kept = old = slice(max(0, t - K + 1), t + 1)
        np.testing.assert_allclose(x_mean[t], Xd[kept].mean(0), rtol=tol(1e-9, 1e-5))
        np.testing.assert_allclose(x_var[t], Xd[kept].var(0), rtol=tol(1e-9, 1e-4))
        np.testing.assert_allclose([y_mean[t], y_var[t]], [yd[kept].mean(), yd[kept].var()], rtol=tol(1e-9, 1e-4))
        xm, xs, ym, ys = Xd[kept].mean(0), Xd[kept].std(0), yd[kept].mean(), yd[kept].std()
        window = slice(kept.start, t + 2)  # the kept items, then the next one
        # refitted, then tuned (the evidence's alpha and beta, as the state holds them after item t)
        ref = ym + ys * _windowed_reference((Xd[window] - xm) / xs, (yd[window] - ym) / ys, K, alpha[t], beta[t])[-1]
        got = float(res.predictions.mean[t + 1])
        assert got == pytest.approx(ref, rel=tol(1e-9, 1e-4), abs=tol(1e-8, 1e-3)), (t, got, ref)
    # then the trend keeps being followed: the last item is within the clip of the last statistics
    assert abs(Xd[-1, 0] - x_mean[-1, 0]) <= clip * np.sqrt(x_var[-1, 0])
    with pytest.raises(ValueError, match="keep"):
        oj.standardize(oj.bayes_linreg(2), options=StandardizeOptions(keep=8))
    with pytest.raises(ValueError, match="keep"):
        oj.standardize(oj.bayes_linreg(2), options=StandardizeOptions(warmup=16, keep=8))


def test_a_rebase_of_a_state_machine_tunes_it_once():
    """A drift rebase refits the machine on the kept items; when they fill a phase, the phase's own tune is the
    one tune (no second one asked for on the next item); when they do not, the next item tunes."""
    from onlinejax.wrappers.adaptive import adaptive

    r = np.random.default_rng(6)
    n, F, W = 300, 8, 16
    X = np.column_stack([np.linspace(0.0, 3.0, n), r.uniform(0.0, 1.0, n)]).astype(DTYPE)
    y = (2.0 * X[:, 0] - X[:, 1] + 0.01 * r.normal(size=n)).astype(DTYPE)
    lrn = oj.standardize(adaptive(oj.windowed_bayes_linreg(2, W), W),
                         options=StandardizeOptions(clip=5.0, warmup=F, keep=W))
    res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: (s.scaler.x_mean, s.inner.n_tunes,
                                                                          s.inner.n_alarms, s.kept.count))
    x_mean, n_tunes, n_alarms, kept = (np.asarray(a) for a in res.records)
    rebases = np.flatnonzero(np.any(x_mean[1:] != x_mean[:-1], axis=1)) + 1
    rebases = rebases[rebases >= F]
    assert len(rebases) >= 3 and n_alarms[-1] == 0
    full = [t for t in rebases if kept[t] == W]
    assert full and all(n_tunes[t] == 1 and n_tunes[t + 1] == 1 for t in full), (full, n_tunes[full])


def test_a_drift_soon_after_a_jump_is_rebased_on_the_items_after_the_jump_only():
    """With ``keep > F``, the items before a jump leave the ring at its rebase: a drift rebase a few items later
    takes every kept item after the jump and none before it (float64 NumPy)."""
    from onlinejax.wrappers.standardize import DRIFT_RUN

    r = np.random.default_rng(9)
    n, F, K = 400, 16, 48
    X = r.uniform(0.0, 1.0, (n, 2))
    X[300:, 0] += 5.0  # a jump of about 17 sd, every item beyond the clip
    X[316:, 1] = X[315, 1] + 0.1 * np.arange(1, n - 315)  # then input 1 trends out of its range, 0.35 sd per item
    # (the targets move by less than OUTLIER_Z sd at the jump: no level shift)
    y = (0.1 * X[:, 0] - 0.05 * X[:, 1] + 0.05 * r.normal(size=n)).astype(DTYPE)
    X = X.astype(DTYPE)
    lrn = oj.standardize(oj.windowed_bayes_linreg(2, 32, intercept=True),
                         options=StandardizeOptions(clip=5.0, warmup=F, keep=K))
    res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: (s.scaler.x_mean, s.n_withheld))
    x_mean, n_withheld = np.asarray(res.records[0], np.float64), np.asarray(res.records[1])
    changes = np.flatnonzero(np.any(x_mean[1:] != x_mean[:-1], axis=1)) + 1
    jump, drift = changes[changes >= 300][:2]
    assert 300 + F - 1 <= jump <= 300 + F and drift - K + 1 < 300  # the ring still spans the jump then
    stored = np.flatnonzero(np.diff(n_withheld, prepend=0) == 0)  # a withheld target is not kept
    kept = np.r_[stored[stored <= jump][-F:], stored[(stored > jump) & (stored <= drift)]]
    assert kept[0] >= 300  # the jump's last F kept items, then every one after it
    np.testing.assert_allclose(x_mean[drift], X[kept].astype(np.float64).mean(0), rtol=tol(1e-9, 1e-5))


def test_a_jump_rebase_leaves_out_the_items_before_the_jump():
    """A run beyond the clip that begins with two items of an excursion, then a jump: the rebase's statistics are
    those of the last ``F`` items after the jump only (float64 NumPy), fixed at once, and the learner keeps up."""
    r = np.random.default_rng(3)
    n, F = 400, 16
    X = np.column_stack([r.uniform(0.0, 1.0, n), r.uniform(0.0, 1.0, n)])
    X[100:102, 0] = [2.0, 2.1]  # 5.2 and 5.5 sd from the warm-up's mean: the run begins here
    X[102:, 0] += 10.0
    y = (np.sin(6.0 * X[:, 0]) + X[:, 1] + 0.05 * r.normal(size=n)).astype(DTYPE)
    X = X.astype(DTYPE)
    lrn = oj.standardize(oj.windowed_bayes_linreg(2, 32, intercept=True),
                         options=StandardizeOptions(clip=5.0, warmup=F))
    res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: (s.scaler.x_mean, s.scaler.x_var,
                                                                          s.scaler.y_mean, s.scaler.seen))
    x_mean, x_var, y_mean, seen = (np.asarray(a, np.float64) for a in res.records)
    t = 100 + F - 1  # the F-th item of the run
    assert np.all(x_mean[t - 1] == x_mean[F - 1]) and np.any(x_mean[t] != x_mean[t - 1])
    after = slice(102, t + 1)
    Xd, yd = X.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(x_mean[t], Xd[after].mean(0), rtol=tol(1e-9, 1e-5))
    np.testing.assert_allclose(x_var[t], Xd[after].var(0), rtol=tol(1e-9, 1e-4))
    assert y_mean[t] == pytest.approx(yd[after].mean(), rel=tol(1e-9, 1e-5))
    # 14 items counted, and fixed: no second refit at an F-th
    assert np.all(seen[t:] == F) and np.all(x_mean[-1] == x_mean[t])
    m = np.asarray(res.predictions.mean)
    clean = lrn  # the same stream without the excursion, for the error it should reach
    X2 = X.copy()
    X2[100:102, 0] = X[99, 0]
    m2 = np.asarray(progressive_validation(clean, clean.init(), X2, y).predictions.mean)
    assert np.mean((m[200:] - y[200:]) ** 2) <= 1.5 * np.mean((m2[200:] - y[200:]) ** 2)


def test_a_short_warmup_still_withholds_an_outlying_target():
    """A warm-up shorter than ``GATE_MIN`` fixes its statistics; they judge outliers from then on."""
    r = np.random.default_rng(0)
    n = 200
    X = r.uniform(0.0, 1.0, (n, 2)).astype(DTYPE)
    y = (X @ np.array([3.0, -2.0]) + 0.1 * r.normal(size=n)).astype(DTYPE)
    y[150] = 1e6
    lrn = oj.standardize(oj.windowed_bayes_linreg(2, 16, intercept=True),
                         options=StandardizeOptions(clip=5.0, warmup=4))
    res = progressive_validation(lrn, lrn.init(), X, y)
    m = np.asarray(res.predictions.mean)
    assert int(res.state.n_withheld) >= 1 and np.all(np.abs(m[151:] - y[151:]) < 2.0)


def test_a_rebase_waits_for_a_window_that_moved_before_it_tunes_a_machine_that_does_not_tune_unmoved():
    """``tune_unmoved=False`` (no tune on a window of a few distinct rows) holds for the tune a rebase asks for:
    rows repeated in blocks, the input trending block by block, rebased again and again, never tuned; the same
    machine with ``tune_unmoved=True`` tunes at each."""
    from onlinejax.wrappers.adaptive import MachineOptions, adaptive
    from onlinejax.learners.gp import gp_window

    r = np.random.default_rng(5)
    W, F, n, B = 16, 16, 240, 4  # 4 distinct rows per window: fewer than min_moves = 8
    nb = n // B
    x0 = np.repeat(np.r_[r.uniform(0.0, 1.0, 4), 1.0 + 0.1 * np.arange(nb - 4)], B)
    X = np.column_stack([x0, np.repeat(r.uniform(0.0, 1.0, nb), B)]).astype(DTYPE)
    y = (np.sin(X[:, 0]) + X[:, 1] + 0.3 * r.normal(size=n)).astype(DTYPE)
    tunes = {}
    for unmoved in (False, True):
        inner = adaptive(gp_window(2, W, mean="average"), W, options=MachineOptions(min_moves=8, tune_unmoved=unmoved))
        lrn = oj.standardize(inner, options=StandardizeOptions(clip=5.0, warmup=F, keep=W))
        res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: (s.scaler.x_mean, s.inner.n_tunes))
        x_mean, n_tunes = (np.asarray(a) for a in res.records)
        rebases = np.flatnonzero(np.any(x_mean[F + 1:] != x_mean[F:-1], axis=1)) + F + 1
        assert len(rebases) >= 3
        # a refit starts the machine's counters again: the rebases after which the refit or the next item tuned
        tunes[unmoved] = sum(int(n_tunes[t] > 0 or n_tunes[min(t + 1, n - 1)] > 0) for t in rebases)
    assert tunes[False] == 0 and tunes[True] == len(rebases), tunes


def test_without_a_warmup_a_shift_beyond_the_clip_is_held_out_then_starts_again_but_a_new_input_does_not():
    from onlinejax.wrappers.standardize import SHIFT_RUN

    r = np.random.default_rng(8)
    n, at = 1400, 600
    X = r.uniform(0.0, 1.0, (n, 3))
    X[at:, 0] += 5.0  # about 17 input sd: beyond the clip of 5, far below SHIFT_Z
    X[:900, 2] = 0.0  # a new input: 0 for 900 items, then on for good (a new sensor, a one-hot category)
    X[900:, 2] = 1.0
    y = (0.3 * X[:, 0] - X[:, 1] + 0.5 * X[:, 2] + 0.1 * r.normal(size=n)).astype(DTYPE)  # a jump of 1.5: 5 y sd
    X = X.astype(DTYPE)
    lrn = oj.standardize(oj.bayes_linreg(3, intercept=True), options=StandardizeOptions(clip=5.0))
    res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: (s.scaler.seen, s.scaler.x_mean))
    seen, x_mean = map(np.asarray, res.records)
    # the shifted items after the first are held out of feature 0's statistics (the other inputs take them) ...
    np.testing.assert_allclose(x_mean[at + SHIFT_RUN - 2, 0], X[:at + 1, 0].mean(), rtol=tol(1e-9, 1e-5))
    np.testing.assert_allclose(x_mean[at + SHIFT_RUN - 2, 1], X[:at + SHIFT_RUN - 1, 1].mean(), rtol=tol(1e-9, 1e-5))
    # ... until the SHIFT_RUN-th starts the statistics and the learner again
    assert seen[at + SHIFT_RUN - 2] == at + SHIFT_RUN - 1 and seen[at + SHIFT_RUN - 1] == 0
    # the new input, 30 sd out of its short-lived spread for its first items, starts nothing
    assert np.all(np.diff(seen[at + SHIFT_RUN:]) == 1)
    m = np.asarray(res.predictions.mean)
    # noise variance 0.01; a learner still fitted in the coordinates of before the shift: MSE 0.16 and 0.14
    assert np.mean((m[at + 100:900] - y[at + 100:900]) ** 2) < 0.015
    assert np.mean((m[1000:] - y[1000:]) ** 2) < 0.025


def test_one_outlying_target_is_withheld_and_a_level_shift_is_learned():
    from onlinejax.wrappers.standardize import OUTLIER_RUN, scales

    r = np.random.default_rng(6)
    n = 400
    X = r.uniform(0.0, 1.0, (n, 1)).astype(DTYPE)
    y = (2.0 * X[:, 0] + 0.1 * r.normal(size=n)).astype(DTYPE)
    y[100] = 1e6  # one outlier
    y[300:] += 50.0  # a level shift
    lrn = oj.standardize(oj.bayes_linreg(1, intercept=True, forgetting=0.95))
    res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: (s.n_withheld, scales(s.scaler)[1]))
    withheld, sy = map(np.asarray, res.records)
    # the outlier and the first OUTLIER_RUN items of the shift are withheld; then the statistics start again
    assert withheld[100] == 1 and withheld[99] == 0 and withheld[-1] == 1 + OUTLIER_RUN
    np.testing.assert_allclose(sy[299], np.std(np.delete(y[:300], 100)), rtol=tol(1e-9, 1e-4))
    m = np.asarray(res.predictions.mean)
    assert np.mean((m[101:300] - y[101:300]) ** 2) < 0.05
    assert np.mean((m[350:] - y[350:]) ** 2) < 0.1

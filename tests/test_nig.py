"""Bayesian linear regression that learns its noise (onlinejax.learners.linear.nig) against float64 closed forms."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax.evaluation import progressive_validation
from onlinejax.learners.linear import NIGPrior, nig_linreg
from conftest import tol


def _features(X, intercept, tau):
    n = X.shape[0]
    cols = [X] + ([np.ones((n, 1))] if intercept else []) + ([np.arange(1, n + 1)[:, None] / tau] if tau else [])
    return np.concatenate(cols, axis=1)


def closed_form(Z, y, alpha0, a0, b0, lam):
    """Per item the Student-t predictive ``(loc, scale, df)`` from the λ-weighted batch posterior of the items
    before it (Normal-inverse-gamma, Murphy 2012 eq. 7.69-7.76; the prior precision and ``b₀`` discounted like
    the data, the prior count ``a₀`` kept: the forgetting step after every item; a NaN target is a gap, not
    learned, its time step taken)."""
    out = []
    for t in range(len(y)):
        seen = ~np.isnan(y[:t])
        P, wts, ys = Z[:t][seen], (lam ** np.arange(t, 0, -1.0))[seen], y[:t][seen]
        prec = lam ** t * alpha0 * np.eye(Z.shape[1]) + (P.T * wts) @ P
        S = np.linalg.inv(prec)
        m = S @ (P.T @ (wts * ys))
        a = a0 + 0.5 * wts.sum()
        b = lam ** t * b0 + 0.5 * (wts @ ys ** 2 - m @ prec @ m)
        out.append((Z[t] @ m, np.sqrt(b / a * (1.0 + Z[t] @ S @ Z[t])), 2.0 * a))
    return np.array(out)


@pytest.mark.parametrize("forgetting,trend", [(None, None), (None, 20.0), (0.7, None), (0.9, 10.0)])
def test_every_prediction_equals_the_closed_form(rng, forgetting, trend):
    """Every item's Student-t against the closed form on the features ``[x, 1, t/τ]`` (the trend kept in the
    next item's coordinates must give the same predictions), with a gap (a NaN target) at item 6. λ = 0.7
    over 15 items: before the prior's variance, forgotten, reaches its float32 cap (0.7⁻²² ≈ 1/√eps times
    it), where the windup clamp departs from the closed form."""
    n, alpha0, noise_var, prior_df = (40 if forgetting is None else 15), 0.5, 0.3, 5.0
    X = rng.normal(size=(n, 2))
    y = X @ np.array([1.5, -0.7]) + 0.02 * np.arange(n) + 1.0 + 0.4 * rng.normal(size=n)
    y[6] = np.nan
    L = nig_linreg(2, forgetting=forgetting, trend=trend, intercept=True,
                   prior=NIGPrior(prior_precision=alpha0, noise_var=noise_var, prior_df=prior_df))
    res = progressive_validation(L, L.init(), X, y)
    a0 = prior_df / 2
    ref = closed_form(_features(X, True, trend), y, alpha0, a0, a0 * noise_var, forgetting or 1.0)
    p = res.predictions
    rtol = tol(1e-9, 2e-4)
    np.testing.assert_allclose(np.asarray(p.mean), ref[:, 0], rtol=rtol, atol=tol(1e-9, 2e-4))
    np.testing.assert_allclose(np.asarray(p.scale), ref[:, 1], rtol=rtol)
    np.testing.assert_allclose(np.asarray(p.df), ref[:, 2], rtol=rtol)
    assert (int(res.state.n_seen), int(res.state.n_skipped)) == (n - 1, 1)


def test_the_trend_follows_a_line_in_time_and_the_noise_is_learned(rng):
    """A level plus a slope in time and noise of sd 2: the trend model's mean error falls to the noise's
    while the constant-mean model falls ever further behind; both learn the noise level (the predictive
    variance ≈ 4, ``df`` = 2a₀ + n)."""
    n = 2000
    y = 3.0 + 0.01 * np.arange(n) + 2.0 * rng.normal(size=n)
    X = np.zeros((n, 0))
    trend = nig_linreg(0, intercept=True, trend=100.0)
    level = nig_linreg(0, intercept=True)
    pt = progressive_validation(trend, trend.init(), X, y).predictions
    pl = progressive_validation(level, level.init(), X, y).predictions
    late = slice(1500, None)
    assert np.mean((np.asarray(pt.mean) - y)[late] ** 2) < 4.6
    assert np.mean((np.asarray(pl.mean) - y)[late] ** 2) > 20.0
    assert 3.5 < float(pt.var[-1]) < 4.6
    np.testing.assert_allclose(float(pt.df[-1]), 4.0 + n - 1, rtol=1e-6)


def test_forgetting_over_long_float32_streams_keeps_a_variance():
    """20,000 items, λ = 0.95, a trend; one input is zero for 5,000 items at a time, so its direction's variance
    grows until the windup clamp sets it back to the prior's: every prediction finite with a positive
    variance, and the model follows a random-walk level."""
    rng = np.random.default_rng(7)
    n = 20000
    X = rng.normal(size=(n, 2)).astype(np.float32)
    X[(np.arange(n) // 5000) % 2 == 1, 1] = 0.0
    level = np.cumsum(0.05 * rng.normal(size=n))
    y = (X @ np.array([1.0, 2.0]) + level + 0.3 * rng.normal(size=n)).astype(np.float32)
    L = nig_linreg(2, trend=50.0, forgetting=0.95, prior=NIGPrior(prior_precision=0.5), dtype=jnp.float32)
    res = progressive_validation(L, L.init(), X, y)
    p, var = res.predictions, np.asarray(res.predictions.var)
    assert np.all(np.isfinite(np.asarray(p.mean))) and np.all(np.isfinite(var)) and np.all(var > 0)
    assert np.mean((np.asarray(p.mean) - y)[1000:] ** 2) < 0.3
    S = np.asarray(res.state.cov_sqrt, np.float64) @ np.asarray(res.state.cov_sqrt, np.float64).T
    assert S[1, 1] <= (1.0 + 1e-3) / 0.5 * np.finfo(np.float32).eps ** -0.5  # the unexcited input: capped


def test_a_skipped_item_is_not_learned_and_gradients_stay_finite():
    L = nig_linreg(2, intercept=True, forgetting=0.9)
    s = L.learn(L.init(), jnp.array([0.3, -0.2]), 1.0)
    s2 = jax.jit(L.learn)(s, jnp.array([jnp.nan, 1.0]), 2.0)
    assert (int(s2.n_seen), int(s2.n_skipped)) == (1, 1)
    np.testing.assert_array_equal(np.asarray(s2.mean), np.asarray(s.mean))
    S, S2 = (np.asarray(v.cov_sqrt, np.float64) @ np.asarray(v.cov_sqrt, np.float64).T for v in (s, s2))
    np.testing.assert_allclose(S2, S / 0.9, rtol=tol(1e-12, 1e-5))  # time passed: forgotten, not learned

    @jax.jit
    def loss(noise_var):
        st = L.init(noise_var=noise_var)
        st, _ = L.step(st, jnp.array([jnp.inf, 0.0]), 1.0)
        st, p = L.step(st, jnp.array([0.5, 0.1]), 0.4)
        return -p.log_prob(jnp.asarray(0.4, p.mean.dtype))

    assert np.isfinite(float(jax.grad(loss)(jnp.asarray(0.7, jnp.zeros(()).dtype))))


def test_vmapped_streams_equal_one_stream_at_a_time(rng):
    n = 60
    X = rng.normal(size=(3, n, 1)).astype(np.float32)
    y = (2.0 * X[..., 0] + rng.normal(size=(3, n))).astype(np.float32)
    L = nig_linreg(1, intercept=True, forgetting=0.8)
    states = jax.vmap(lambda v: L.init(noise_var=v))(jnp.array([0.5, 1.0, 2.0], jnp.float32))
    run = lambda s, X, y: jax.lax.scan(lambda s, xy: L.step(s, *xy), s, (X, y))[1]  # noqa: E731
    batched = jax.vmap(run)(states, X, y)
    for i, v in enumerate((0.5, 1.0, 2.0)):
        one = run(L.init(noise_var=v), X[i], y[i])
        np.testing.assert_allclose(np.asarray(batched.mean[i]), np.asarray(one.mean), rtol=tol(1e-12, 1e-5),
                                   atol=tol(1e-12, 1e-5))
        np.testing.assert_allclose(np.asarray(batched.scale[i]), np.asarray(one.scale), rtol=tol(1e-12, 1e-5))


@pytest.mark.parametrize("kwargs,name", [(dict(prior=NIGPrior(prior_df=2.0)), "prior.prior_df"),
                                         (dict(forgetting=0.0), "forgetting"), (dict(trend=0.0), "trend"),
                                         (dict(prior=NIGPrior(noise_var=-1.0)), "prior.noise_var"),
                                         (dict(prior=NIGPrior(prior_precision=0.0)), "prior.prior_precision")])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        nig_linreg(1, **kwargs)


def test_no_features_and_unknown_init_keywords_are_refused():
    with pytest.raises(ValueError, match="n_inputs"):
        nig_linreg(0)
    with pytest.raises(TypeError, match="beta"):
        nig_linreg(1).init(beta=2.0)
    with pytest.raises(TypeError, match="time_scale"):
        nig_linreg(1, forgetting=0.9).init(time_scale=3.0)


def test_float32_noise_count_stops_and_the_noise_estimate_stays_a_running_mean():
    """From a state at the count's stop (``a = a_max``, as after 65,536 items of unit noise), 200,000 items of
    noise variance 4: ``b/a`` follows the documented recursion (``a`` and ``b`` scaled back by
    ``a_max/(a_max + 1/2)`` after each item, a running mean over ``2a_max`` items) computed in float64 to 0.5 %,
    and ``df`` stays ``2a_max``. A count that kept growing would give the exact posterior's 3.26 instead of the
    recursion's 3.86; one that stalled in float32 (at 2²³) would let ``b/a`` grow without bound."""
    from onlinejax.learners.linear.nig import max_count
    n, a_max = 200_000, max_count(jnp.float32)
    assert a_max == 2.0 ** 15
    y = (2.0 * np.random.default_rng(3).normal(size=n)).astype(np.float32)
    L = nig_linreg(0, intercept=True, prior=NIGPrior(prior_precision=1e-6), dtype=jnp.float32)
    s0 = L.init()._replace(a=jnp.float32(a_max), b=jnp.float32(a_max))
    s, _ = jax.lax.scan(lambda s, yi: (L.learn(s, jnp.zeros((0,), jnp.float32), yi), None), s0, jnp.asarray(y))
    a, b, m = a_max, a_max, 0.0
    resid = np.empty(n)
    for t in range(n):  # the reference: the weights' posterior is a running mean here, its residuals exact
        resid[t] = y[t] - m
        m += (y[t] - m) / (t + 1.0 + 1e-6)
    for r, g in zip(resid, 1.0 / (1.0 + 1.0 / (np.arange(n) + 1e-6))):
        stop = a_max / (a + 0.5)
        a, b = a_max, (b + 0.5 * r * r * g) * stop
    np.testing.assert_allclose(float(s.b / s.a), b / a, rtol=5e-3)
    assert abs(b / a - 3.86) < 0.05 and float(s.a) == a_max


@pytest.mark.parametrize("level", [0.0, 3.0])
def test_a_long_run_of_equal_targets_keeps_a_positive_variance(level):
    """Forgetting takes ``b`` to 0 over 20,000 equal targets (``λ^n`` underflows in float32): every predictive
    variance stays at least the floor ``eps·loc² + sqrt(tiny)`` and every log density is finite."""
    n = 20000
    L = nig_linreg(0, intercept=True, forgetting=0.95, dtype=jnp.float32)
    y = np.full(n, level, np.float32)
    p = progressive_validation(L, L.init(), np.zeros((n, 0), np.float32), y).predictions
    fi = np.finfo(np.float32)
    floor = fi.eps * level ** 2 + np.sqrt(fi.tiny)
    assert np.all(np.asarray(p.var) >= 0.999 * floor)
    assert np.all(np.isfinite(np.asarray(p.log_prob(jnp.asarray(y)))))


def test_reexpress_keeps_every_raw_prediction_and_commutes_with_learning(rng):
    """A forgetting model with a trend learned 40 items of three inputs standardised by statistics ``A`` and one
    feature that no standardisation touches; :class:`NIGReexpress` into statistics ``B``: every raw-unit
    predictive (location, scale, degrees of freedom) is unchanged; learning 10 more items in ``B`` equals learning
    them in ``A`` and moving after; the identity returns the state bit for bit."""
    from onlinejax.learners.linear.nig import NIGReexpress

    n, d = 50, 3
    X = rng.normal(size=(n + 5, d)) * [1.0, 5.0, 0.2] + [3.0, -1.0, 10.0]
    e = np.sin(np.arange(n + 5.0))[:, None]
    y = X @ np.array([0.5, -0.2, 2.0]) + 1.5 * e[:, 0] + 4.0 + 0.01 * np.arange(n + 5) + 0.3 * rng.normal(size=n + 5)
    mu_a, s_a, my_a, sy_a = X.mean(0), X.std(0), y.mean(), y.std()
    mu_b, s_b, my_b, sy_b = mu_a + [0.4, -2.0, 0.1], s_a * [1.3, 0.7, 2.0], my_a - 1.5, sy_a * 0.6
    lrn = nig_linreg(d + 1, forgetting=0.97, trend=10.0, prior=NIGPrior(2.0, 0.5, 4.0))
    dt = lrn.init().mean.dtype

    def inputs(rows, mu, sd):
        return jnp.asarray(np.concatenate([(X[rows] - mu) / sd, e[rows]], axis=1), dt)

    def learn(s, rows, mu, sd, my, sy):
        return lrn.learn(s, inputs(rows, mu, sd), jnp.asarray((y[rows] - my) / sy, dt))

    move = NIGReexpress(trend=True)
    args = [jnp.asarray(v, dt) for v in (s_a / s_b, (mu_a - mu_b) / s_b, sy_a / sy_b, (my_a - my_b) / sy_b)]
    s = learn(lrn.init(), slice(0, 40), mu_a, s_a, my_a, sy_a)
    t = move(s, *args)
    fresh = slice(n, n + 5)
    pa, pb = lrn.predict(s, inputs(fresh, mu_a, s_a)), lrn.predict(t, inputs(fresh, mu_b, s_b))
    rt = tol(1e-10, 2e-4)
    np.testing.assert_allclose(np.asarray(pb.mean) * sy_b + my_b, np.asarray(pa.mean) * sy_a + my_a, rtol=rt)
    np.testing.assert_allclose(np.asarray(pb.scale) * sy_b, np.asarray(pa.scale) * sy_a, rtol=rt)
    np.testing.assert_array_equal(np.asarray(pb.df), np.asarray(pa.df))
    later = slice(40, n)
    then_b = learn(t, later, mu_b, s_b, my_b, sy_b)
    b_after = move(learn(s, later, mu_a, s_a, my_a, sy_a), *args)
    for got, want in zip(lrn.predict(then_b, inputs(fresh, mu_b, s_b)), lrn.predict(b_after, inputs(fresh, mu_b, s_b))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol(1e-9, 1e-3))
    one = jnp.ones((d,), dt)
    for a, b in zip(jax.tree_util.tree_leaves(move(s, one, 0.0 * one, one[0], 0.0 * one[0])),
                    jax.tree_util.tree_leaves(s)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert move == NIGReexpress(trend=True) and hash(move) == hash(NIGReexpress(trend=True))
    with pytest.raises(ValueError, match="level"):
        move(nig_linreg(d + 1).init(), *args)

"""The random-feature GP (onlinejax.learners.linear.random_features) against float64 NumPy/SciPy closed forms."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from onlinejax.wrappers.calibration import calibrated
from onlinejax.learners.linear import NIGPrior, RandomFeatureModels
from onlinejax.wrappers.standardize import StandardizeOptions
from onlinejax.learners.linear.random_features import _members, random_feature_gp
from conftest import tol


def _phi(x, freqs, ell):
    m, d = freqs.shape
    u = freqs @ x / ell
    return np.concatenate([np.cos(u) / np.sqrt(m), np.sin(u) / np.sqrt(m), x / np.sqrt(d), [1.0]])


def _model_phi(x, freqs, ell):
    """A model's features; ``ell=None``: the local level's, the constant feature alone."""
    if ell is None:
        return np.eye(2 * freqs.shape[0] + freqs.shape[1] + 1)[-1]
    return _phi(x, freqs, ell)


def _reference(X, y, freqs, ells, lams, alpha0, a0, b0, discount, level=None):
    """Each model's predictive from the λ-weighted batch closed form (Normal-inverse-gamma; the weights' prior
    precision and ``b₀`` discounted like the data, the prior count ``a₀`` kept; every learned item discounted once
    before the next prediction), then the evidence-weighted mixture's mean, variance and degrees of freedom, and
    each model's (location, scale, df), per item. ``level``: one more model on the constant feature alone."""
    models = [(e, l) for e in ells for l in lams] + ([] if level is None else [(None, level)])
    log_w = np.zeros(len(models))
    out = []
    for t in range(len(y)):
        locs, scales, dfs = [], [], []
        for ell, lam in models:
            F = 2 * freqs.shape[0] + freqs.shape[1] + 1
            P = np.array([_model_phi(X[i], freqs, ell) for i in range(t)]).reshape(t, F)
            wts = lam ** np.arange(t, 0, -1.0)
            prec = lam ** t * alpha0 * np.eye(F) + (P.T * wts) @ P
            S = np.linalg.inv(prec)
            m = S @ (P.T @ (wts * y[:t]))
            a = a0 + 0.5 * wts.sum()
            b = lam ** t * b0 + 0.5 * (wts @ y[:t] ** 2 - m @ prec @ m)
            q = _model_phi(X[t], freqs, ell)
            locs.append(q @ m)
            scales.append(np.sqrt(b / a * (1.0 + q @ S @ q)))
            dfs.append(2.0 * a)
        locs, scales, dfs = map(np.array, (locs, scales, dfs))
        w = np.exp(log_w - log_w.max())
        w /= w.sum()
        mean = w @ locs
        var = w @ (scales ** 2 * dfs / (dfs - 2.0) + (locs - mean) ** 2)
        out.append((mean, var, w @ dfs, locs, scales, dfs))
        log_w = discount * log_w + stats.t.logpdf(y[t], dfs, locs, scales)
    return out


@pytest.mark.parametrize("forgetting, level", [(None, None), ((1.0, 0.6), None), (None, 1.0), ((1.0, 0.6), 0.7)])
def test_every_prediction_equals_the_closed_form_mixture(rng, forgetting, level):
    """Every item: the mixture's mean, variance and df, and each model's Student-t (λ = 0.6: below 2/3, where a
    forgotten prior count would leave no variance; 15 items, before an unexcited direction's variance reaches
    its float32 cap, 0.6⁻¹⁶ ≈ 1/√eps times the prior's, and the windup guard departs from the closed form);
    ``level``: with the local level, a model of the constant feature alone."""
    d, n = 2, 30 if forgetting is None else 15
    X = rng.normal(size=(n, d))
    y = np.sin(2.0 * X[:, 0]) + 0.3 * rng.normal(size=n)
    ells = (0.6, 2.0)
    lrn = random_feature_gp(d, 6, models=RandomFeatureModels(ells, forgetting, 0.95, level),
                            prior=NIGPrior(0.5, 0.4), seed=3)
    state = lrn.init()
    got, models = [], []
    for x, t in zip(X, y):
        _, _, loc, scale2, df = _members(state, jnp.asarray(x, state.mean.dtype))
        models.append(np.stack([loc, np.sqrt(scale2), df]))
        state, p = lrn.step(state, x, t)
        got.append((float(p.mean), float(p.var), float(p.df)))
    ref = _reference(X, y, np.asarray(state.freqs, np.float64), ells, forgetting or (1.0,), 0.5, 2.0, 0.8, 0.95,
                     level)
    got, mix = np.array(got), np.array([r[:3] for r in ref])
    assert np.max(np.abs(got[:, 0] - mix[:, 0]) / np.sqrt(mix[:, 1])) < tol(1e-9, 2e-3)
    assert np.max(np.abs(got[:, 1] / mix[:, 1] - 1.0)) < tol(1e-9, 2e-3)
    assert np.max(np.abs(got[:, 2] - mix[:, 2])) < tol(1e-9, 1e-3)
    for g, r in zip(models, ref):
        assert np.max(np.abs(g[0] - r[3]) / r[4]) < tol(1e-9, 2e-3)  # locations, in scales
        assert np.max(np.abs(g[1] / r[4] - 1.0)) < tol(1e-9, 2e-3)
        assert np.max(np.abs(g[2] - r[5])) < tol(1e-9, 1e-3)


def _reference_recursive(X, y, freqs, ells, lams, alpha0, a0, b0, discount):
    """Each model's covariance recursion in float64, item by item: predict, absorb, then forget, along the input's
    own direction only after an input equal to the one before (``S ← S + (1/λ - 1)SφφᵀS/φᵀSφ``, Kulhavý 1987),
    every direction otherwise (``S ← S/λ``); the noise statistics forgotten either way. Returns the mixture's
    (mean, variance) per item."""
    models = [(e, l) for e in ells for l in lams]
    F = 2 * freqs.shape[0] + freqs.shape[1] + 1
    S = [np.eye(F) / alpha0 for _ in models]
    m = [np.zeros(F) for _ in models]
    a, b = [a0] * len(models), [b0] * len(models)
    log_w, out = np.zeros(len(models)), []
    for t in range(len(y)):
        phis = [_phi(X[t], freqs, ell) for ell, _ in models]
        q = np.array([p @ Sk @ p for p, Sk in zip(phis, S)])
        locs = np.array([p @ mk for p, mk in zip(phis, m)])
        dfs, scale2 = 2.0 * np.array(a), np.array(b) / np.array(a) * (1.0 + q)
        w = np.exp(log_w - log_w.max())
        w /= w.sum()
        mean = w @ locs
        out.append((mean, w @ (scale2 * dfs / (dfs - 2.0) + (locs - mean) ** 2)))
        log_w = discount * log_w + stats.t.logpdf(y[t], dfs, locs, np.sqrt(scale2))
        repeat = t > 0 and np.array_equal(X[t], X[t - 1])
        for k, ((_, lam), p) in enumerate(zip(models, phis)):
            Sp = S[k] @ p
            e = y[t] - p @ m[k]
            m[k] = m[k] + Sp * e / (1.0 + q[k])
            S[k] = S[k] - np.outer(Sp, Sp) / (1.0 + q[k])
            a[k], b[k] = lam * (a[k] + 0.5) + (1.0 - lam) * a0, lam * (b[k] + e * e / (2.0 * (1.0 + q[k])))
            Sp = S[k] @ p
            S[k] = S[k] + (1.0 / lam - 1.0) * np.outer(Sp, Sp) / (p @ Sp) if repeat else S[k] / lam
    return np.array(out)


def test_a_repeated_input_is_forgotten_along_its_own_direction_only(rng):
    """Rows repeated in a block: the predictions equal the reference recursion's, in which a repeat forgets only the
    direction it excites. Forgetting every direction after each of the 8 repeats let a λ = 0.6 model's variance
    away from the repeated input grow 0.6⁻⁸ ≈ 60-fold, so the first new row after the block got an interval many
    times as wide as its error."""
    d = 2
    X = rng.normal(size=(16, d))
    X[5:13] = X[5]  # a block of 8 identical rows, fresh targets
    y = np.sin(2.0 * X[:, 0]) + 0.3 * rng.normal(size=16)
    ells, lams = (0.6, 2.0), (1.0, 0.6)
    lrn = random_feature_gp(d, 6, models=RandomFeatureModels(ells, lams, 0.95), prior=NIGPrior(0.5, 0.4), seed=3)
    state, got = lrn.init(), []
    for x, t in zip(X, y):
        state, p = lrn.step(state, x, t)
        got.append((float(p.mean), float(p.var)))
    got = np.array(got)
    ref = _reference_recursive(X, y, np.asarray(state.freqs, np.float64), ells, lams, 0.5, 2.0, 0.8, 0.95)
    assert np.max(np.abs(got[:, 0] - ref[:, 0]) / np.sqrt(ref[:, 1])) < tol(1e-9, 2e-3)
    assert np.max(np.abs(got[:, 1] / ref[:, 1] - 1.0)) < tol(1e-9, 2e-3)


def test_the_features_estimate_the_squared_exponential_kernel():
    """φ(x)ᵀφ(x') → exp(-|x - x'|²/2ℓ²) + x·x'/d + 1 as M grows (Rahimi & Recht 2007), with error ~ 1/√M."""
    from onlinejax.learners.linear.random_features import features
    rng = np.random.default_rng(0)
    x, x2 = rng.normal(size=3), rng.normal(size=3)
    freqs = jax.random.normal(jax.random.PRNGKey(1), (20000, 3))
    ell = 1.5
    k = float(features(jnp.asarray(x), freqs, ell) @ features(jnp.asarray(x2), freqs, ell))
    exact = np.exp(-np.sum((x - x2) ** 2) / (2 * ell ** 2)) + x @ x2 / 3 + 1.0
    assert abs(k - exact) < 0.03


def test_the_evidence_picks_the_lengthscale_that_fits(rng):
    """On a function of lengthscale ~0.3 the short-lengthscale model ends with nearly all the weight."""
    n = 400
    X = rng.uniform(-2, 2, size=(n, 1))
    y = np.sin(5.0 * X[:, 0]) + 0.1 * rng.normal(size=n)
    lrn = random_feature_gp(1, 64, models=RandomFeatureModels((0.25, 4.0), None))
    state = lrn.learn(lrn.init(), X, y)
    w = np.asarray(jax.nn.softmax(state.log_weight))
    assert w[0] > 0.99


def test_forgetting_follows_a_change_that_memory_would_average(rng):
    n = 600
    X = rng.uniform(-1, 1, size=(n, 1))
    y = np.where(np.arange(n) < 300, 2.0, -2.0) * X[:, 0] + 0.1 * rng.normal(size=n)
    errs = {}
    for forgetting in (None, (1.0, 0.95)):
        lrn = random_feature_gp(1, 16, models=RandomFeatureModels(forgetting=forgetting))
        _, p = jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (jnp.asarray(X), jnp.asarray(y)))
        errs[forgetting is None] = float(np.mean((np.asarray(p.mean)[400:] - y[400:]) ** 2))
    assert errs[False] < 0.1 < errs[True]


def test_vmapped_streams_equal_one_at_a_time_through_the_windup_guard(rng):
    """λ = 0.8 on a 1-d input: the long lengthscale's features span few directions, so its unexcited variance
    reaches the cap within ~40 items and the model gets the prior's precision back, on different items in
    different streams (a skipped item delays the next step by one)."""
    lrn = calibrated(random_feature_gp(1, 8, models=RandomFeatureModels((0.3, 3.0), (1.0, 0.8))),
                     standardization=StandardizeOptions(clip=5.0, warmup=8))
    X = rng.normal(size=(3, 300, 1))
    Y = np.sin(2.0 * X[..., 0]) + 0.1 * rng.normal(size=(3, 300))
    Y[1, 20] = Y[2, 30] = Y[2, 31] = np.nan

    def run(X, Y):
        return jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y))

    batched_state, batched = jax.jit(jax.vmap(run))(X, Y)
    for i in range(3):
        state, one = jax.jit(run)(X[i], Y[i])
        for a, b in ((batched.mean[i], one.mean), (batched.var[i], one.var)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol(1e-9, 1e-4), atol=tol(1e-12, 1e-5))
    # the guard ran: no model's variance is above its cap, and a guarded one sits near the prior's
    inner = state.inner.inner
    var = np.sum(np.asarray(inner.cov_sqrt, np.float64) ** 2, axis=-1)  # [K, F] marginal variances / σ²
    assert np.max(var) <= float(np.finfo(inner.cov_sqrt.dtype).eps) ** -0.5 / float(inner.prior_precision) * 1.01
    assert np.max(var[3]) > 0.5 / float(inner.prior_precision)  # long lengthscale, λ = 0.8: back near the prior
    # the guard's bound is one: each model's largest marginal variance is at most its bound
    assert np.all(np.max(var, axis=-1) <= np.asarray(inner.variance_bound, np.float64) * (1.0 + tol(1e-9, 1e-4)))


def test_gradients_pass_the_windup_guard(rng):
    """λ = 0.7: the guard runs from item 23 in float32 (51 in float64); the gradient of the log score by the
    lengthscales stays finite, and over the first 18 items, before it, equals a central difference (the
    guard's step is taken as the identity only where it runs)."""
    X, Y = jnp.asarray(rng.normal(size=(60, 1))), jnp.asarray(rng.normal(size=60))
    lrn = random_feature_gp(1, 6, models=RandomFeatureModels((0.5, 2.0), (0.7,)))

    def loss(log_ell, n):
        _, p = jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(lengthscales=jnp.exp(log_ell)), (X[:n], Y[:n]))
        return jnp.sum(p.log_prob(Y[:n]))

    x0 = jnp.log(jnp.asarray([0.5, 2.0], X.dtype))
    g = np.asarray(jax.grad(loss)(x0, 60))
    assert np.all(np.isfinite(g)) and np.all(g != 0.0)
    h = 1e-5 if X.dtype == jnp.float64 else 3e-3
    g18 = np.asarray(jax.grad(loss)(x0, 18))
    fd = [(float(loss(x0.at[i].add(h), 18)) - float(loss(x0.at[i].add(-h), 18))) / (2 * h) for i in range(2)]
    np.testing.assert_allclose(g18, fd, rtol=tol(1e-5, 2e-2), atol=tol(1e-7, 2e-2))
    state = jax.lax.scan(lambda s, xy: (lrn.step(s, *xy)[0], None), lrn.init(), (X, Y))[0]
    assert np.all(np.asarray(state.variance_bound) < 0.7 ** -40 / 0.1)  # it ran: the bound started again


def test_a_nonfinite_item_is_skipped_and_counted_inside_jit(rng):
    lrn = random_feature_gp(2, 4)
    s = lrn.learn(lrn.init(), rng.normal(size=(5, 2)), rng.normal(size=5))
    with pytest.raises(ValueError, match="x"):  # outside jit: an error naming the argument
        lrn.learn(s, [np.nan, 1.0], 1.0)
    s2 = jax.jit(lrn.learn)(s, jnp.asarray([np.nan, 1.0]), 1.0)
    s3 = jax.jit(lrn.learn)(s, jnp.asarray([1.0, 1.0]), jnp.inf)
    for t in (s2, s3):
        assert int(t.n_skipped) == 1 and int(t.n_seen) == 5
        for a, b in zip(jax.tree.leaves(t._replace(n_skipped=s.n_skipped)), jax.tree.leaves(s)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_gradients_stay_finite_after_a_skipped_item(rng):
    lrn = random_feature_gp(2, 4)
    X = jnp.asarray(rng.normal(size=(20, 2))).at[5, 0].set(jnp.nan)
    Y = jnp.asarray(rng.normal(size=20))

    def loss(noise_var):
        _, p = jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(noise_var=noise_var), (X, Y))
        return jnp.nansum(p.log_prob(Y))

    assert np.isfinite(float(jax.grad(loss)(0.5)))


def test_a_constant_target_never_gives_a_variance_at_or_below_zero():
    lrn = random_feature_gp(1, 4)
    X = jnp.linspace(0.0, 1.0, 3000)[:, None]
    _, p = jax.jit(lambda X, Y: jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y)))(X, jnp.zeros(3000))
    assert np.all(np.asarray(p.var) > 0) and np.all(np.isfinite(np.asarray(p.var)))


@pytest.mark.float32_only
def test_float32_long_run_stays_finite_and_calibrated():
    """20,000 float32 items of a stationary stream: no NaN, no variance <= 0, 95 % coverage and the noise's MSE."""
    rng = np.random.default_rng(5)
    n = 20000
    X = rng.uniform(0, 1, size=(n, 2)).astype(np.float32)
    y = (3.0 * X[:, 1] + np.sin(2 * np.pi * X[:, 0]) + rng.normal(size=n)).astype(np.float32)
    lrn = calibrated(random_feature_gp(2), standardization=StandardizeOptions(clip=5.0, warmup=32))
    _, p = jax.jit(lambda X, Y: jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (X, Y)))(X, y)
    mean, var = np.asarray(p.mean), np.asarray(p.var)
    assert np.all(np.isfinite(mean)) and np.all(var > 0)
    lo, hi = map(np.asarray, p.interval(0.95))
    assert 0.93 <= np.mean((y[1000:] >= lo[1000:]) & (y[1000:] <= hi[1000:])) <= 0.97
    assert np.mean((mean[10000:] - y[10000:]) ** 2) < 1.1  # the noise variance is 1


@pytest.mark.parametrize("kwargs, name", [
    ({"models": RandomFeatureModels(lengthscales=(1.0, -1.0))}, "models.lengthscales"),
    ({"prior": NIGPrior(prior_precision=0.0)}, "prior.prior_precision"),
    ({"prior": NIGPrior(noise_var=float("nan"))}, "prior.noise_var"),
    ({"models": RandomFeatureModels(discount=1.5)}, "models.discount"),
    ({"models": RandomFeatureModels(forgetting=(1.0, 0.0))}, "models.forgetting"),
    ({"models": RandomFeatureModels(forgetting=())}, "models.forgetting"),
    ({"models": RandomFeatureModels(lengthscales=())}, "models.lengthscales"),
    ({"prior": NIGPrior(prior_df=2.0)}, "prior.prior_df"),
    ({"models": RandomFeatureModels(level=1.5)}, "models.level"),
    ({"models": RandomFeatureModels(level=0.0)}, "models.level"),
    ({"models": RandomFeatureModels(forgetting=None, level=0.9)}, "models.level"),
])
def test_bad_hyperparameters_name_the_field(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        random_feature_gp(2, **kwargs)


def test_init_keeps_the_models_count_and_refuses_forgetting_when_built_without():
    lrn = random_feature_gp(2, 4, models=RandomFeatureModels((0.5, 1.0), (1.0, 0.9)))
    assert lrn.init(lengthscales=(0.7, 2.0)).lengthscale.shape == (4,)
    with pytest.raises(ValueError, match="lengthscales"):
        lrn.init(lengthscales=(0.7, 2.0, 3.0))
    with pytest.raises(TypeError, match="forgetting"):
        random_feature_gp(2, 4, models=RandomFeatureModels(forgetting=None)).init(forgetting=0.9)
    with pytest.raises(TypeError, match="level"):  # built without forgetting, a level could not forget
        random_feature_gp(2, 4, models=RandomFeatureModels(forgetting=None, level=1.0)).init(level=0.9)
    one = random_feature_gp(2, 4, models=RandomFeatureModels(0.5, 0.9))  # scalars: one model
    assert one.init().lengthscale.shape == (1,) and float(one.init(prior_df=6.0).a[0]) == 3.0


def test_the_local_level_takes_the_weight_where_the_inputs_explain_nothing(rng):
    """Targets a random walk's level plus noise, inputs unrelated to them: the local level (the constant feature
    alone, forgetting 0.9) ends with most of the weight and scores the items better than the same models without
    it, whose flexible members fit the noise; on a smooth function of the inputs the level's weight vanishes."""
    n = 300
    X = rng.normal(size=(n, 2))
    y = np.cumsum(0.3 * rng.normal(size=n)) + rng.normal(size=n)
    run = {}
    for level in (None, 0.9):
        lrn = random_feature_gp(2, 16, models=RandomFeatureModels(forgetting=(1.0, 0.9), level=level))
        state, p = jax.lax.scan(lambda s, xy: lrn.step(s, *xy), lrn.init(), (jnp.asarray(X), jnp.asarray(y)))
        run[level] = (state, np.asarray(p.log_prob(jnp.asarray(y, p.mean.dtype)))[20:].mean())
    w = np.asarray(jax.nn.softmax(run[0.9][0].log_weight))
    assert w[-1] > 0.5 and bool(run[0.9][0].level_only[-1]), w
    assert run[0.9][1] > run[None][1] + 0.02, (run[0.9][1], run[None][1])
    y2 = np.sin(2.0 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=n)
    lrn = random_feature_gp(2, 16, models=RandomFeatureModels(forgetting=(1.0, 0.9), level=0.9))
    state = lrn.learn(lrn.init(), X, y2)
    assert float(jax.nn.softmax(state.log_weight)[-1]) < 1e-3

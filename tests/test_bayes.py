import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

import onlinejax as oj
from onlinejax.learners.linear import bayes
from onlinejax.learners.linear.evidence import SufficientStats, evidence_fixed_point, log_evidence
from conftest import X64, tol
from reference import blr_posterior, log_evidence as np_log_evidence, predictive, rel_err


def _data(rng, n=200, d=4, noise=0.3):
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    return X, X @ w + noise * rng.normal(size=n)


def _cov(state):
    W = np.asarray(state.cov_sqrt, np.float64)
    return W @ W.T


@pytest.mark.parametrize("alpha", [0.3, 1.0, 7.0, np.array([0.5, 2.0, 3.0, 0.1])])
def test_sequential_equals_direct_solve(rng, alpha):
    X, Y = _data(rng)
    beta = 4.0
    lrn = oj.bayes_linreg(4, alpha=alpha, beta=beta)
    s = lrn.init()
    for x, y in zip(X, Y):
        s = lrn.learn(s, x, y)
    m, S = blr_posterior(X, Y, alpha, beta)
    assert rel_err(s.mean, m) < tol(1e-10, 1e-4)
    assert rel_err(_cov(s), S) < tol(1e-10, 1e-4)
    # predictive variance is the variance (not the std) of Bishop eq. 3.59
    Xq = rng.normal(size=(7, 4))
    p = lrn.predict(s, Xq)
    rm, rv = predictive(m, S, beta, Xq)
    assert rel_err(p.mean, rm) < tol(1e-10, 1e-4)
    assert rel_err(p.var, rv) < tol(1e-10, 1e-5)
    p1 = lrn.predict(s, Xq[0])
    assert p1.mean.shape == () and float(p1.var) == pytest.approx(rv[0], rel=tol(1e-10, 1e-5))


@pytest.mark.parametrize("alpha", [0.05, 1.0, 9.0])
@pytest.mark.parametrize("forgetting", [1.0, 0.97])
def test_minibatch_equals_sequential(rng, alpha, forgetting):
    X, Y = _data(rng, n=120)
    lrn = oj.bayes_linreg(4, alpha=alpha, beta=2.0, forgetting=forgetting)
    seq = lrn.init()
    for x, y in zip(X, Y):
        seq = lrn.learn(seq, x, y)
    bat = lrn.init()
    for chunk in np.array_split(np.arange(120), [16, 17, 50, 90]):  # uneven batch sizes, one of size 1
        bat = lrn.learn(bat, X[chunk], Y[chunk])
    assert rel_err(bat.mean, seq.mean) < tol(1e-10, 2e-4)
    assert rel_err(_cov(bat), _cov(seq)) < tol(1e-10, 2e-4)
    for a, b in zip(jax.tree_util.tree_leaves(bat.stats), jax.tree_util.tree_leaves(seq.stats)):
        assert rel_err(a, b) < tol(1e-10, 1e-4)
    assert int(bat.n_seen) == int(seq.n_seen) == 120


@pytest.mark.parametrize("lam", [0.9, 0.99])
def test_forgetting_equals_exponentially_weighted_least_squares(rng, lam):
    X, Y = _data(rng, n=150)
    alpha, beta = 0.5, 3.0
    lrn = oj.bayes_linreg(4, alpha=alpha, beta=beta, forgetting=lam)
    s = lrn.init()
    for x, y in zip(X, Y):
        s = lrn.learn(s, x, y)
    n = len(Y)
    w = lam ** (n - 1 - np.arange(n))
    m, S = blr_posterior(X, Y, alpha, beta, weights=w, prior_scale=lam ** n)
    assert rel_err(s.mean, m) < tol(1e-9, 1e-4)
    assert rel_err(_cov(s), S) < tol(1e-9, 1e-4)


def test_blog_smoothing_equals_forgetting(rng):
    """The blog's RobustBayesLinReg update, written with explicit inverses, is our λ = γ, β·(1-γ)."""
    X, Y = _data(rng, n=80, d=2)
    gamma, alpha, beta = 0.8, 2.0, 25.0
    cov_inv = alpha * np.eye(2)
    mean = np.zeros(2)
    for x, y in zip(X, Y):  # verbatim from the blog post
        new_inv = gamma * cov_inv + (1 - gamma) * beta * np.outer(x, x)
        mean = np.linalg.inv(new_inv) @ (gamma * cov_inv @ mean + (1 - gamma) * beta * y * x)
        cov_inv = new_inv
    lam, b = oj.forgetting_from_smoothing(gamma, beta)
    lrn = oj.bayes_linreg(2, alpha=alpha, beta=b, forgetting=lam)
    s = lrn.init()
    for x, y in zip(X, Y):
        s = lrn.learn(s, x, y)
    assert rel_err(s.mean, mean) < tol(1e-9, 1e-4)
    assert rel_err(_cov(s), np.linalg.inv(cov_inv)) < tol(1e-9, 1e-4)


def test_learn_then_downdate_is_identity(rng):
    X, Y = _data(rng, n=60)
    for lam in (1.0, 0.95):
        lrn = oj.bayes_linreg(4, alpha=1.5, beta=2.0, forgetting=lam)
        s = lrn.init()
        for x, y in zip(X[:50], Y[:50]):
            s = lrn.learn(s, x, y)
        s2 = s
        for x, y in zip(X[50:], Y[50:]):
            s2 = lrn.learn(s2, x, y)
        for x, y in zip(X[50:][::-1], Y[50:][::-1]):
            s2 = lrn.downdate(s2, x, y)
        assert rel_err(s2.mean, s.mean) < tol(1e-9, 1e-3)
        assert rel_err(_cov(s2), _cov(s)) < tol(1e-9, 1e-3)


def test_evidence_fixed_point_maximises_log_evidence(rng):
    X, Y = _data(rng, n=300, d=5, noise=0.5)
    Xd = jnp.asarray(X, jnp.zeros(()).dtype)
    Yd = jnp.asarray(Y, Xd.dtype)
    st = SufficientStats(Xd.T @ Xd, Xd.T @ Yd, Yd @ Yd, jnp.asarray(300.0, Xd.dtype))
    a, b = evidence_fixed_point(st, 1.0, 1.0, n_iter=200)
    res = optimize.minimize(lambda p: -np_log_evidence(X, Y, np.exp(p[0]), np.exp(p[1])), [0.0, 0.0], method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 5000})
    a_ref, b_ref = np.exp(res.x)
    assert float(a) == pytest.approx(a_ref, rel=tol(1e-4, 2e-3))
    assert float(b) == pytest.approx(b_ref, rel=tol(1e-4, 2e-3))
    assert float(log_evidence(st, a, b)) == pytest.approx(np_log_evidence(X, Y, float(a), float(b)), rel=tol(1e-9, 1e-4))


def test_tune_rebuilds_posterior_with_learned_hyperparameters(rng):
    X, Y = _data(rng, n=300, d=3, noise=0.5)
    lrn = oj.bayes_linreg(3, alpha=1.0, beta=1.0)
    s = lrn.learn(lrn.init(), X, Y)
    t = lrn.tune(s)
    a, b = float(t.alpha[0]), float(t.beta)
    assert b == pytest.approx(1 / 0.25, rel=0.25)  # noise std 0.5
    m, S = blr_posterior(X, Y, a, b)
    assert rel_err(t.mean, m) < tol(1e-8, 1e-4)
    assert rel_err(_cov(t), S) < tol(1e-8, 1e-4)


def test_nonfinite_items_are_skipped_inside_jit(rng):
    lrn = oj.bayes_linreg(3, alpha=1.0, beta=1.0)
    s = lrn.learn(lrn.init(), rng.normal(size=(5, 3)), rng.normal(size=5))
    learn = jax.jit(lrn.learn)
    s2 = learn(s, jnp.array([1.0, jnp.nan, 0.0]), 1.0)
    s3 = learn(s, jnp.array([1.0, 2.0, 0.0]), jnp.inf)
    for t in (s2, s3):
        assert int(t.n_skipped) == 1 and int(t.n_seen) == 5
        np.testing.assert_array_equal(t.mean, s.mean)
        np.testing.assert_array_equal(t.cov_sqrt, s.cov_sqrt)
    # a batch with one bad row equals the batch without it
    Xb = rng.normal(size=(4, 3))
    Yb = rng.normal(size=4)
    Xbad = Xb.copy()
    Xbad[2, 0] = np.nan
    sb = jax.jit(lrn.learn)(s, Xbad, Yb)
    sg = lrn.learn(s, Xb[[0, 1, 3]], Yb[[0, 1, 3]])
    assert rel_err(sb.mean, sg.mean) < tol(1e-12, 1e-5) and int(sb.n_skipped) == 1


@pytest.mark.parametrize("tunable", [True, False])
@pytest.mark.parametrize("intercept", [False, True])
def test_shared_step_is_predict_then_learn(rng, tunable, intercept):
    """d >= BLAS_MIN_FEATURES: the factory's step shares Wᵀx between prediction and update
    (bayes.step_one); each prediction is the float64 predictive of the items before it."""
    d, n, beta = 20, 60, 3.0
    X, Y = _data(rng, n=n, d=d)
    lrn = oj.bayes_linreg(d, alpha=0.7, beta=beta, intercept=intercept, options=oj.BayesOptions(tunable))
    res = oj.evaluation.progressive_validation(lrn, lrn.init(), X, Y)
    Xf = np.hstack([X, np.ones((n, 1))]) if intercept else X
    for t in (0, 1, 17, n - 1):
        m, S = blr_posterior(Xf[:t], Y[:t], 0.7, beta) if t else (np.zeros(Xf.shape[1]), np.eye(Xf.shape[1]) / 0.7)
        rm, rv = predictive(m, S, beta, Xf[t])
        assert float(res.predictions.mean[t]) == pytest.approx(rm, rel=tol(1e-9, 1e-4), abs=tol(1e-12, 1e-5))
        assert float(res.predictions.var[t]) == pytest.approx(rv, rel=tol(1e-9, 1e-4))
    m, S = blr_posterior(Xf, Y, 0.7, beta)
    assert rel_err(res.state.mean, m) < tol(1e-9, 1e-4)
    assert rel_err(_cov(res.state), S) < tol(1e-9, 1e-4)
    if tunable:
        assert rel_err(res.state.stats.gram, Xf.T @ Xf) < tol(1e-12, 1e-6)
        assert rel_err(res.state.stats.xty, Xf.T @ Y) < tol(1e-12, 1e-6)
        assert float(res.state.stats.n) == n


def test_shared_step_skips_like_learn_one(rng):
    """bayes.step_one on unusable items: the state of learn_one, the prediction of predict_one."""
    d = 16
    s = bayes.learn_batch(bayes.init(d, 1.0, 2.0), rng.normal(size=(30, d)), rng.normal(size=30), forget=False)
    x = rng.normal(size=d)
    nan_x, big_x = x.copy(), x.copy()
    nan_x[3] = np.nan
    big_x[5] = 1e30  # finite, too large to square in float32 (and learnable() uses the dtype's limit)
    big_x = big_x if not X64 else big_x * 1e150
    step = jax.jit(lambda s, x, y: bayes.step_one(s, x, y, forget=False))
    learn = jax.jit(lambda s, x, y: bayes.learn_one(s, x, y, forget=False))
    for xi, yi in ((x, 0.5), (nan_x, 0.5), (big_x, 0.5), (x, np.inf), (x, np.nan)):
        got, pred = step(s, xi, yi)
        want = learn(s, xi, yi)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol(1e-12, 1e-6),
                                       atol=tol(1e-12, 1e-6))
        ref = bayes.predict_one(s, xi)
        np.testing.assert_allclose(np.asarray(pred.mean), np.asarray(ref.mean), rtol=tol(1e-12, 1e-6))
        np.testing.assert_allclose(np.asarray(pred.var), np.asarray(ref.var), rtol=tol(1e-12, 1e-6))
    assert int(step(s, nan_x, 0.5)[0].n_skipped) == 1 and np.isnan(float(step(s, nan_x, 0.5)[1].mean))


def test_bad_input_raises_value_error_naming_argument(rng):
    lrn = oj.bayes_linreg(3)
    s = lrn.init()
    with pytest.raises(ValueError, match="^x"):
        lrn.learn(s, [1.0, np.nan, 0.0], 1.0)
    with pytest.raises(ValueError, match="^y"):
        lrn.learn(s, [1.0, 2.0, 0.0], float("inf"))
    with pytest.raises(ValueError, match="^x"):
        lrn.learn(s, [1.0, 2.0], 1.0)
    with pytest.raises(ValueError, match="^x"):
        lrn.predict(s, np.ones((2, 4)))
    with pytest.raises(ValueError, match="^y"):
        lrn.learn(s, np.ones((2, 3)), np.ones(3))
    for kw, name in [({"alpha": 0.0}, "alpha"), ({"alpha": -1.0}, "alpha"), ({"beta": 0.0}, "beta"),
                     ({"forgetting": 0.0}, "forgetting"), ({"forgetting": 1.01}, "forgetting")]:
        with pytest.raises(ValueError, match=name):
            oj.bayes_linreg(3, **kw)
        with pytest.raises(ValueError, match=name):
            oj.bayes_linreg(3, forgetting=0.9).init(**kw)
    with pytest.raises(ValueError, match="n_features"):
        oj.bayes_linreg(0)


def test_intercept_option_fits_offset(rng):
    X = rng.normal(size=(200, 2))
    Y = X @ [1.0, -2.0] + 5.0 + 0.01 * rng.normal(size=200)
    lrn = oj.bayes_linreg(2, alpha=1e-3, beta=1e4, intercept=True)
    s = lrn.learn(lrn.init(), X, Y)
    np.testing.assert_allclose(s.mean, [1.0, -2.0, 5.0], atol=tol(1e-2, 1e-2))
    assert lrn.n_features == 2 and s.mean.shape == (3,)


def test_vector_alpha_shape_checked():
    with pytest.raises(ValueError, match="alpha"):
        oj.bayes_linreg(3).init(alpha=np.ones(2))


def test_float64_state_when_asked():
    if not jax.config.jax_enable_x64:
        pytest.skip("float64 needs JAX_ENABLE_X64=1")
    s = oj.bayes_linreg(2, dtype=jnp.float64).init()
    assert s.mean.dtype == jnp.float64
    s = oj.bayes_linreg(2, dtype=jnp.float32).init()
    assert s.mean.dtype == jnp.float32
    s2 = oj.bayes_linreg(2, dtype=jnp.float32).learn(s, np.ones(2), 1.0)
    assert s2.mean.dtype == jnp.float32


def test_state_counters_are_int32_scalars():
    s = oj.bayes_linreg(2).init()
    assert s.n_seen.dtype == jnp.int32 and s.n_seen.shape == ()


def test_forgetting_windup_guard_keeps_unexcited_directions_finite(rng):
    """Inputs that never excite feature 2: S would grow like λ^-n and overflow float32 without the cap."""
    n = 4000
    X = np.zeros((n, 3))
    X[:, :2] = rng.normal(size=(n, 2))
    Y = X[:, 0] - X[:, 1] + 0.1 * rng.normal(size=n)
    lrn = oj.bayes_linreg(3, alpha=1.0, beta=100.0, forgetting=0.95)
    s = lrn.learn(lrn.init(), X, Y)
    s1 = s
    for x, y in zip(X[:300], Y[:300]):
        s1 = lrn.learn(s1, x, y)
    for t in (s, s1):
        S = _cov(t)
        assert np.all(np.isfinite(S)) and np.all(np.isfinite(np.asarray(t.mean)))
        assert S[2, 2] <= 1.0 / np.sqrt(np.finfo(np.asarray(t.mean).dtype).eps) * 1.0001
    np.testing.assert_allclose(np.asarray(s1.mean)[:2], [1.0, -1.0], atol=0.05)


def test_forgetting_on_repeated_inputs_keeps_what_it_learned_elsewhere(rng):
    """Inputs repeated in blocks of 200 identical rows (duplicated records): forgetting widens every
    direction the block does not excite until the windup cap binds. A cap that shrank rows of the
    covariance loosened the block's own direction too, and the next update's gain then moved the mean
    along directions no recent input had excited: the first item of a new block missed by ~1,000 noise sd.
    Checked against the same recursion in float64 numpy without any cap (exact exponential forgetting)."""
    d, n, block, lam, beta = 4, 3000, 200, 0.95, 100.0
    X = np.repeat(rng.uniform(-1, 1, (n // block, d)), block, axis=0)
    X[:, -1] = 1.0  # an intercept
    w = rng.normal(size=d)
    Y = X @ w + 0.1 * rng.normal(size=n)
    lrn = oj.bayes_linreg(d, alpha=1.0, beta=beta, forgetting=lam)
    step = jax.jit(lrn.step)
    s, got = lrn.init(), []
    for x, y in zip(X, Y):
        s, p = step(s, x, y)
        got.append(float(p.mean))
    P, m, ref = np.eye(d), np.zeros(d), []
    for x, y in zip(X, Y):
        P = P / lam
        ref.append(x @ m)
        g = P @ x / (1.0 / beta + x @ P @ x)
        m, P = m + g * (y - x @ m), P - np.outer(g, x @ P)
    starts = np.arange(block, n, block)
    err, err_ref = (np.asarray(got) - Y)[starts], (np.asarray(ref) - Y)[starts]
    assert np.max(np.abs(err_ref)) < 1.5  # the reference itself stays sane
    assert np.max(np.abs(err)) < 10 * 0.1 + 2 * np.max(np.abs(err_ref)), (err, err_ref)


def test_fast_path_matches_tunable_path(rng):
    X, Y = _data(rng, n=50)
    a = oj.bayes_linreg(4, alpha=0.5, beta=2.0, options=oj.BayesOptions(tunable=False))
    b = oj.bayes_linreg(4, alpha=0.5, beta=2.0, forgetting=1.0)
    sa, sb = a.init(), b.init()
    for x, y in zip(X, Y):
        sa, sb = a.learn(sa, x, y), b.learn(sb, x, y)
    assert a.tune is None and rel_err(sa.mean, sb.mean) < tol(1e-12, 1e-5)


# --- issue 23: the evidence tune with offset inputs in float32 -------------------------------------------------
def _np_evidence_optimum(X, Y, w):
    """Float64 scipy reference: (alpha, beta) maximising Bishop eq. 3.86 on the w-weighted data, within [1e-8, 1e8].

    From the SVD of the weighted design matrix and residuals computed item by item (no Gram matrix, whose
    condition number 1e10 at offset 1e4 cost even float64 ~1e-5 of the evidence)."""
    sw = np.sqrt(np.asarray(w, np.float64))
    Xw, Yw = np.asarray(X, np.float64) * sw[:, None], np.asarray(Y, np.float64) * sw
    N, d = sw @ sw, Xw.shape[1]
    U, S, Vt = np.linalg.svd(Xw, full_matrices=False)
    c = U.T @ Yw

    def neg(p):
        a, bt = np.exp(p)
        m = Vt.T @ (bt * S * c / (a + bt * S * S))
        r = Yw - Xw @ m
        return -(0.5 * d * np.log(a) + 0.5 * N * np.log(bt) - 0.5 * bt * r @ r - 0.5 * a * m @ m
                 - 0.5 * np.sum(np.log(a + bt * S * S)))

    # a coarse grid, then Nelder-Mead (the surface is badly scaled: L-BFGS-B stopped early)
    lo, hi = np.log(1e-8), np.log(1e8)
    grid = [(neg([la, lb]), [la, lb]) for la in np.linspace(lo, hi, 47) for lb in np.linspace(lo, hi, 47)]
    p0 = min(grid, key=lambda g: g[0])[1]
    res = optimize.minimize(lambda p: neg(np.clip(p, lo, hi)), p0, method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 10000})
    return np.exp(np.clip(res.x, lo, hi))


def _offset_case(seed, n, kind, offset=1e4):
    rng = np.random.default_rng(seed)
    U = rng.uniform(0, 1, size=(n + 20, 2))
    if kind == "noise":  # targets in [-2, 1] unrelated to the inputs
        Y = rng.uniform(-2, 1, size=n + 20)
    elif kind == "sum":  # along the common direction (the offset), which float32 resolves
        Y = 3 * (U[:, 0] + U[:, 1]) - 2 + 0.1 * rng.normal(size=n + 20)
    else:  # along the difference, 10⁻⁹ of the Gram matrix's scale at offset 10⁴
        Y = U[:, 0] - 2 * U[:, 1] + 0.1 * rng.normal(size=n + 20)
    return offset + U, Y


@pytest.mark.parametrize("n", [20, 50, 200, 1000])
def test_evidence_tune_with_offset_inputs_stays_sane(n):
    """Issue 23: two inputs x = 1e4 + U(0, 1), targets in [-2, 1]: in float32 the Gram matrix cannot hold the
    differences between the inputs, eigh returned noise for that direction, alpha landed on its floor and
    bayes_linreg(2, forgetting=0.98) predicted ±1e8 after tune (13 of 40 such streams)."""
    lrn = oj.bayes_linreg(2, forgetting=0.98)
    for seed in range(6):
        kind = ("noise", "sum", "difference")[seed % 3]
        X, Y = _offset_case(seed, n, kind)
        t = lrn.tune(lrn.learn(lrn.init(), X[:n], Y[:n]))
        p = lrn.predict(t, X[n:])
        m, v = np.asarray(p.mean, np.float64), np.asarray(p.var, np.float64)
        assert np.all(np.isfinite(v)) and np.all(v > 0) and np.max(v) < 10.0, (seed, v)
        assert np.max(np.abs(m - Y[n:])) < 5.0, (seed, kind, float(t.alpha[0]), float(t.beta))
        assert np.mean((m - Y[n:]) ** 2 / v) < 5.0  # the variance is honest about what is lost


@pytest.mark.parametrize("kind,offset", [("noise", 1e4), ("sum", 1e4), ("difference", 1e4), ("difference", 10.0)])
def test_evidence_optimum_with_offset_inputs_matches_float64(kind, offset):
    """The tuned (alpha, beta) against scipy's optimum of the float64 evidence of the same λ-weighted data. In
    float32 targets along the inputs' difference at offset 1e4 are out of reach (the float32 Gram matrix holds
    ~1e-7 of its scale, the information is 1e-9 below): there the tune keeps the prior in that direction."""
    n, lam = 300, 0.98
    X, Y = _offset_case(7, n, kind, offset)
    lrn = oj.bayes_linreg(2, forgetting=lam)
    t = lrn.tune(lrn.learn(lrn.init(), X[:n], Y[:n]), n_iter=300)
    a_ref, b_ref = _np_evidence_optimum(X[:n], Y[:n], lam ** np.arange(n)[::-1])
    if kind == "difference" and offset > 1e3 and not X64:
        assert float(t.alpha[0]) > 1.0 and float(t.beta) < b_ref  # prior kept, the lost signal counted as noise
        return
    assert float(t.beta) == pytest.approx(b_ref, rel=tol(1e-4, 1e-2))
    assert float(t.alpha[0]) == pytest.approx(a_ref, rel=tol(1e-3, 2e-2))


def test_shared_step_gradient_ignores_a_skipped_item(rng):
    """jax.grad through the d >= 12 scan (bayes.step_one) with a NaN item equals the gradient without it."""
    d = 14
    X, Y = _data(rng, n=40, d=d)
    lrn = oj.bayes_linreg(d, alpha=1.0, beta=2.0)
    Xn, Yn = X.copy(), Y.copy()
    Xn[7, 3] = np.nan

    def loss(log_beta, X, Y):
        s = lrn.init(beta=jnp.exp(log_beta))
        _, p = jax.lax.scan(lambda s, xy: lrn.step(s, *xy), s, (jnp.asarray(X), jnp.asarray(Y)))
        lp = p.log_prob(jnp.asarray(Y))
        return jnp.sum(jnp.where(jnp.isfinite(lp), lp, 0.0))

    b0 = jnp.log(jnp.asarray(2.0, jnp.zeros(()).dtype))
    g_nan = jax.grad(loss)(b0, Xn, Yn)
    keep = np.arange(40) != 7
    g_ref = jax.grad(loss)(b0, X[keep], Y[keep])
    assert np.isfinite(float(g_nan))
    assert float(g_nan) == pytest.approx(float(g_ref), rel=tol(1e-9, 1e-4))


def test_reexpress_keeps_every_raw_prediction_and_gives_the_new_coordinates_statistics(rng):
    """A forgetting model with an intercept learned 40 items in the coordinates ``A`` (inputs and target
    standardised by one set of statistics), then :func:`bayes.reexpress` into ``B``: every raw-unit predictive
    (mean and variance of ``y`` for fresh inputs) is unchanged, the sufficient statistics equal the λ-weighted sums
    computed in float64 from the items in ``B``, and evidence tuning from them equals tuning the reference
    statistics; with the identity it returns the state bit for bit."""
    n, d, lam = 40, 3, 0.95
    X = rng.normal(size=(n, d)) * [1.0, 5.0, 0.2] + [3.0, -1.0, 10.0]
    y = X @ np.array([0.5, -0.2, 2.0]) + 4.0 + 0.3 * rng.normal(size=n)
    mu_a, s_a, my_a, sy_a = X.mean(0), X.std(0), y.mean(), y.std()
    mu_b, s_b, my_b, sy_b = mu_a + [0.4, -2.0, 0.1], s_a * [1.3, 0.7, 2.0], my_a - 1.5, sy_a * 0.6
    lrn = oj.bayes_linreg(d, alpha=2.0, beta=3.0, forgetting=lam, intercept=True)
    s = lrn.init()
    for i in range(n):
        s = lrn.learn(s, (X[i] - mu_a) / s_a, (y[i] - my_a) / sy_a)
    r, c = s_a / s_b, (mu_a - mu_b) / s_b
    g, h = sy_a / sy_b, (my_a - my_b) / sy_b
    t = bayes.reexpress(s, *(jnp.asarray(v, s.mean.dtype) for v in (r, c, g, h)))
    Xn = rng.normal(size=(5, d)) * [1.0, 5.0, 0.2] + [3.0, -1.0, 10.0]
    pa, pb = lrn.predict(s, (Xn - mu_a) / s_a), lrn.predict(t, (Xn - mu_b) / s_b)
    rt = tol(1e-10, 2e-4)
    np.testing.assert_allclose(np.asarray(pb.mean) * sy_b + my_b, np.asarray(pa.mean) * sy_a + my_a, rtol=rt)
    np.testing.assert_allclose(np.asarray(pb.var) * sy_b ** 2, np.asarray(pa.var) * sy_a ** 2, rtol=rt)
    P = np.concatenate([(X - mu_b) / s_b, np.ones((n, 1))], axis=1)
    yb, w = (y - my_b) / sy_b, lam ** np.arange(n - 1, -1, -1.0)
    ref = SufficientStats(jnp.asarray((P.T * w) @ P), jnp.asarray(P.T @ (w * yb)), jnp.asarray(w @ yb ** 2),
                          jnp.asarray(w.sum()))
    for got, want in zip(t.stats, ref):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol(1e-9, 2e-3), atol=tol(1e-9, 2e-3))
    tuned = bayes.tune_evidence(t)
    want_a, want_b = evidence_fixed_point(ref, jnp.mean(t.alpha), t.beta, 100)
    np.testing.assert_allclose([float(tuned.alpha[0]), float(tuned.beta)], [float(want_a), float(want_b)],
                               rtol=tol(1e-8, 1e-2))
    one = jnp.ones((d,), s.mean.dtype)
    same = bayes.reexpress(s, one, 0.0 * one, one[0], 0.0 * one[0])
    for a, b in zip(jax.tree_util.tree_leaves(same), jax.tree_util.tree_leaves(s)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_reexpress_is_refused_where_it_has_no_meaning():
    """Without the constant feature the affine map is undefined; with fixed statistics (a warm-up) or inputs
    standardised upstream (River's scaler) there is nothing to carry, or the target must move with the inputs."""
    from onlinejax.wrappers.standardize import StandardizeOptions, standardize

    s = oj.bayes_linreg(3).init()
    with pytest.raises(ValueError, match="intercept"):
        bayes.reexpress(s, jnp.ones(3), jnp.zeros(3), 1.0, 0.0)
    lrn = oj.bayes_linreg(3, intercept=True)
    for kw in (dict(warmup=8), dict(scale_inputs=False)):
        with pytest.raises(ValueError, match="reexpress"):
            standardize(lrn, options=StandardizeOptions(reexpress=bayes.reexpress, **kw))

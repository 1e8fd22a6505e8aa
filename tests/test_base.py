import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from onlinejax import Prediction
from onlinejax.core.base import normal_quantile
from conftest import X64, tol


def test_interval_and_log_prob_match_scipy():
    mean = jnp.array([0.0, 1.5, -2.0])
    var = jnp.array([1.0, 0.25, 4.0])
    p = Prediction(mean, var)
    for level in (0.5, 0.95, 0.999):
        lo, hi = p.interval(level)
        rlo, rhi = stats.norm.interval(level, loc=np.asarray(mean, np.float64), scale=np.sqrt(np.asarray(var, np.float64)))
        np.testing.assert_allclose(lo, rlo, rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
        np.testing.assert_allclose(hi, rhi, rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    y = jnp.array([0.3, 1.0, 5.0])
    np.testing.assert_allclose(p.log_prob(y), stats.norm.logpdf(np.asarray(y), np.asarray(mean), np.sqrt(np.asarray(var))),
                               rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(p.std, np.sqrt([1.0, 0.25, 4.0]), rtol=tol(1e-12, 1e-6))


def test_scalar_prediction_interval_shapes():
    lo, hi = Prediction(jnp.asarray(1.0), jnp.asarray(4.0)).interval(0.95)
    assert lo.shape == () and hi.shape == ()
    assert float(hi - lo) == pytest.approx(2 * 1.959963984540054 * 2.0, rel=1e-5)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_bad_level_raises(bad):
    with pytest.raises(ValueError, match="level"):
        normal_quantile(bad)


def test_prediction_is_a_pytree_that_vmaps():
    p = jax.vmap(lambda m: Prediction(m, m * 0 + 1.0))(jnp.arange(3.0))
    assert p.mean.shape == (3,) and p.var.shape == (3,)


def test_check_int():
    from onlinejax.core.base import check_int

    assert check_int(np.int64(4), "window", 2) == 4 and check_int(4.0, "window", 2) == 4
    for bad in (True, 2.5, "4", None, 1):
        with pytest.raises(ValueError, match="window: must be an integer >= 2"):
            check_int(bad, "window", 2)


def test_student_t_prediction_matches_scipy():
    from scipy import integrate, stats

    from onlinejax.core.base import StudentTPrediction

    dt = jnp.zeros(()).dtype
    mu, sc, nu = 1.5, 2.0, 4.0
    p = StudentTPrediction(jnp.asarray([mu, mu], dt), jnp.asarray([sc, sc], dt), jnp.asarray(nu, dt))
    y = np.array([-3.0, 40.0])
    rt = 1e-9 if X64 else 2e-5
    np.testing.assert_allclose(np.asarray(p.log_prob(y)), stats.t.logpdf(y, nu, mu, sc), rtol=rt)
    lo, hi = p.interval(0.95)
    np.testing.assert_allclose(np.asarray(hi), mu + sc * stats.t.ppf(0.975, nu), rtol=1e-5 if not X64 else 1e-9)
    np.testing.assert_allclose(np.asarray(lo), mu - sc * stats.t.ppf(0.975, nu), rtol=1e-5 if not X64 else 1e-9)
    assert float(p.var[0]) == pytest.approx(stats.t.var(nu, mu, sc), rel=rt)
    for yy in y:  # CRPS = ∫ (F(x) - 1{x >= y})² dx
        f = lambda x, h: (stats.t.cdf(x, nu, mu, sc) - h) ** 2  # noqa: E731
        ref = integrate.quad(f, -np.inf, yy, args=(0.0,))[0] + integrate.quad(f, yy, np.inf, args=(1.0,))[0]
        got = float(StudentTPrediction(jnp.asarray(mu, dt), jnp.asarray(sc, dt), jnp.asarray(nu, dt)).crps(yy))
        assert got == pytest.approx(ref, rel=1e-7 if X64 else 1e-4)


def test_prediction_cdfs_match_scipy():
    """cdf of the Gaussian, the Student-t and the mixture (the PIT of the calibration figure)."""
    from scipy import stats

    from onlinejax.core.base import StudentTPrediction
    from onlinejax.wrappers.combination import mixture_prediction

    dt = jnp.zeros(()).dtype
    y = np.array([-2.0, 0.3, 4.0])
    rt = 1e-9 if X64 else 1e-5
    g = Prediction(jnp.full(3, 0.5, dt), jnp.full(3, 2.0, dt))
    np.testing.assert_allclose(np.asarray(g.cdf(y)), stats.norm.cdf(y, 0.5, np.sqrt(2.0)), rtol=rt)
    t = StudentTPrediction(jnp.full(3, 0.5, dt), jnp.full(3, 1.5, dt), jnp.full(3, 4.0, dt))
    np.testing.assert_allclose(np.asarray(t.cdf(y)), stats.t.cdf(y, 4.0, 0.5, 1.5), rtol=rt)
    w = np.array([0.3, 0.7])
    mix = mixture_prediction(jnp.asarray(np.log(w), dt), jnp.asarray([0.0, 2.0], dt), jnp.asarray([1.0, 0.25], dt))
    ref = w[0] * stats.norm.cdf(y, 0.0, 1.0) + w[1] * stats.norm.cdf(y, 2.0, 0.5)
    np.testing.assert_allclose(np.asarray(jax.vmap(mix.cdf)(jnp.asarray(y, dt))), ref, rtol=rt)


@pytest.mark.parametrize("x, y, name", [(np.array([1 + 1j, 2.0]), 1.0, "x"), ([1j, 2.0], 1.0, "x"),
                                        (jnp.array([1j, 2.0]), 1.0, "x"), ([1.0, 2.0], 1j, "y"),
                                        ([1.0, 2.0], np.complex64(1.0), "y")])
def test_complex_input_is_refused(x, y, name):
    """Complex x or y raises naming it (the cast would keep the real part silently), functional and stateful."""
    import onlinejax as oj

    lrn = oj.bayes_linreg(2)
    for call in (lambda: lrn.learn(lrn.init(), x, y), lambda: lrn.step(lrn.init(), x, y),
                 lambda: oj.StatefulLearner(lrn).step(x, y)):
        with pytest.raises(ValueError, match=f"^{name}: complex"):
            call()
    if name == "x":
        with pytest.raises(ValueError, match="^x: complex"):
            lrn.predict(lrn.init(), x)


@pytest.mark.parametrize("make", ["bayes_linreg", "sgd_linreg", "bayesian_mle_forgetting", "bayesian_map_forgetting"])
def test_linear_factories_refuse_a_fractional_n_features(make):
    """bayes_linreg(2.5) was d = 2 silently; 3.0 and NumPy integers stay accepted."""
    import onlinejax as oj

    with pytest.raises(ValueError, match="^n_features: "):
        getattr(oj, make)(2.5)
    assert getattr(oj, make)(np.int64(3)).n_features == getattr(oj, make)(3.0).n_features


@pytest.mark.parametrize("make", ["windowed_bayes_linreg", "bayesian_mle_windowed", "bayesian_map_windowed"])
def test_windowed_factories_refuse_a_fractional_n_features(make):
    import onlinejax as oj

    with pytest.raises(ValueError, match="^n_features: "):
        getattr(oj, make)(2.5, 5)
    with pytest.raises(ValueError, match="^n_features: "):
        getattr(oj, make)(True, 5)


def _huge_then_normal(make):
    """Two runs of one learner: with and without finite items too large to square in the dtype."""
    import onlinejax as oj  # noqa: F401

    L = make()
    big = float(np.sqrt(np.finfo(np.float64 if X64 else np.float32).max))  # ≈ 1.8e19 in float32
    rng = np.random.default_rng(7)
    X = rng.normal(size=(20, 2))
    Y = X @ np.array([1.0, -2.0]) + 0.1 * rng.normal(size=20)
    clean = dirty = L.init()
    for i in range(20):
        if i in (3, 11):
            dirty = L.learn(dirty, jnp.array([big * 1.5, 1.0]), 1.0)
            dirty = L.learn(dirty, jnp.array([1.0, 1.0]), big * 4)
        clean = L.learn(clean, X[i], Y[i])
        dirty = L.learn(dirty, X[i], Y[i])
    return L, clean, dirty


@pytest.mark.parametrize("name", ["bayes_linreg", "bayes_linreg_forgetting", "sgd_linreg", "windowed_bayes_linreg",
                                  "calibrated_bayes_linreg", "kernel_regression", "gp_window", "adhoc"])
def test_finite_items_too_large_to_square_are_skipped(name):
    """|x| beyond sqrt(max float) used to overflow xᵀx and leave the linear states NaN for good."""
    import onlinejax as oj
    from onlinejax.learners import gp
    from onlinejax.wrappers.calibration import calibrated_bayes_linreg
    from onlinejax.learners.kernel_regression import kernel_regression
    from onlinejax.learners.linear.thesis import bayesian_mle_forgetting

    makes = {"bayes_linreg": lambda: oj.bayes_linreg(2), "bayes_linreg_forgetting": lambda: oj.bayes_linreg(2, forgetting=0.99),
             "sgd_linreg": lambda: oj.sgd_linreg(2), "windowed_bayes_linreg": lambda: oj.windowed_bayes_linreg(2, window=8),
             "calibrated_bayes_linreg": lambda: calibrated_bayes_linreg(2),
             "kernel_regression": lambda: kernel_regression(2, window=8), "gp_window": lambda: gp.gp_window(2, window=8),
             "adhoc": lambda: bayesian_mle_forgetting(2)}
    L, clean, dirty = _huge_then_normal(makes[name])
    x = jnp.array([0.5, -1.0])
    pc, pd = L.predict(clean, x), L.predict(dirty, x)
    assert np.isfinite(float(pd.mean)) and float(pd.var) > 0
    np.testing.assert_allclose(float(pd.mean), float(pc.mean), rtol=tol(1e-9, 1e-4), atol=tol(1e-10, 1e-5))
    np.testing.assert_allclose(float(pd.var), float(pc.var), rtol=tol(1e-9, 1e-4))


def test_building_a_learner_again_reuses_its_compiled_programs():
    """Equal hashable arguments give the same learner object (a jitted call on it does not compile again);
    argument types, wrappers and lists count; arrays build afresh; a bad argument still raises."""
    import onlinejax as oj
    from onlinejax import zoo
    from onlinejax.wrappers.combination import combine, ewa_squared_error
    from onlinejax.evaluation import progressive_validation
    from onlinejax.wrappers.standardize import standardize

    a, b = oj.bayes_linreg(2, alpha=0.5), oj.bayes_linreg(2, alpha=0.5)
    assert a is b and standardize(a) is standardize(b)
    assert oj.bayes_linreg(2, alpha=0.5) is not oj.bayes_linreg(2, alpha=0.25)
    assert oj.bayes_linreg(2, alpha=1) is not oj.bayes_linreg(2, alpha=1.0)  # types are part of the key
    assert combine([a, standardize(a)], ewa_squared_error(0.9)) is combine([a, standardize(a)], ewa_squared_error(0.9))
    assert zoo.configurations()["RecommendedCombination"].make(2) is zoo.configurations()["RecommendedCombination"].make(2)
    from onlinejax.learners.kernel_regression import kernel_regression

    k1 = kernel_regression(2, 8, lengthscale=np.ones(2))
    assert k1 is not kernel_regression(2, 8, lengthscale=np.ones(2))  # unhashable: built afresh
    with pytest.raises(ValueError):
        oj.bayes_linreg(2, alpha=-1.0)
    X, y = np.ones((20, 2)), np.arange(20.0)
    from onlinejax.evaluation.progressive import _scan

    progressive_validation(a, a.init(), X, y)
    before = _scan._cache_size()
    c = oj.bayes_linreg(2, alpha=0.5)
    progressive_validation(c, c.init(), X, y)
    assert _scan._cache_size() == before  # no new program
    d = oj.bayes_linreg(2, alpha=0.25)
    progressive_validation(d, d.init(), X, y)
    assert _scan._cache_size() == before + 1  # another learner: one


def test_reprs_are_readable():
    """Learners printed as lists of function addresses, results as whole arrays, and
    help(kernel_regression) as a 195-element default array."""
    import inspect

    import onlinejax as oj
    from onlinejax.evaluation import metrics as M, progressive_validation
    from onlinejax.learners.kernel_regression import kernel_regression
    from onlinejax.wrappers.standardize import standardize

    L = oj.windowed_bayes_linreg(3, 16, intercept=True)
    assert repr(L) == "Learner(windowed_bayes_linreg(3, 16, intercept=True); n_features=3; with evict, tune)"
    assert repr(standardize(oj.gp.gp_window(2, window=8))).startswith("Learner(standardize(gp_window(2, window=8));")
    assert "0x" not in repr(oj.bayes_linreg(2)) and repr(oj.bayes_linreg(2)).startswith("Learner(bayes_linreg(2);")
    n = 3000
    B = oj.bayes_linreg(2)
    res = progressive_validation(B, B.init(), np.ones((n, 2)), np.arange(n, dtype=float), metrics=M.prequential())
    text = repr(res)
    assert len(text) < 800 and f"mean=float{64 if X64 else 32}[{n}]" in text and f"n_seen={n}" in text
    assert f"{float(res.metrics['mae']):.4g}" in text  # scalars by value
    s = oj.StatefulLearner(B)
    s.step(np.ones(2), 1.0)
    assert repr(s).startswith("StatefulLearner(Learner(bayes_linreg(2);") and "n_seen=1" in repr(s)
    sig = str(inspect.signature(kernel_regression))
    assert "array" not in sig and "alphas=None" in sig


@pytest.mark.parametrize("x, y", [([np.nan, 1.0], 0.5), ([1.0, 0.3], np.inf)])
def test_gradient_through_a_skipped_item_is_finite(x, y):
    """skip_nonfinite's where used to send a zero cotangent into the learning step at the NaN item: 0 · NaN = NaN."""
    import onlinejax as oj

    L = oj.windowed_bayes_linreg(2, 4)
    s = L.learn(L.init(), np.array([[0.1, 0.2], [0.3, -0.1]]), np.array([1.0, 0.5]))
    dt = s.beta.dtype

    def f(beta):
        t = jax.jit(L.learn)(s._replace(beta=beta), jnp.asarray(x, dt), jnp.asarray(y, dt))  # traced: skipped, not refused
        return L.predict(t, jnp.asarray([0.2, 0.4], dt)).var

    g = jax.grad(f)(jnp.asarray(2.0, dt))
    assert np.isfinite(float(g)) and float(g) != 0.0


def _dot_precisions(jaxpr) -> list:
    """Every dot_general's ``precision`` in a jaxpr and all its sub-jaxprs (scan, cond, while, pjit, custom rules)."""
    from jax.extend import core as jcore

    out = []

    def subs(v):
        if isinstance(v, jcore.ClosedJaxpr):
            yield v.jaxpr
        elif isinstance(v, jcore.Jaxpr):
            yield v
        elif isinstance(v, (tuple, list)):
            for u in v:
                yield from subs(u)

    def walk(j):
        for eqn in j.eqns:
            if eqn.primitive.name == "dot_general":
                out.append(eqn.params["precision"])
            for v in eqn.params.values():
                for sj in subs(v):
                    walk(sj)

    walk(jaxpr.jaxpr)
    return out


def test_learners_trace_their_matrix_products_in_full_precision():
    """make_learner traces every function under full_precision: no dot_general is left at JAX's default
    precision (TF32 for float32 on NVIDIA GPUs), also inside a user's jit, in derivatives (jvp; the GP's
    tune differentiates in reverse mode) and under a user's lower-precision context."""
    from onlinejax import bayes_linreg
    from onlinejax.wrappers.adaptive import adaptive
    from onlinejax.learners.gp import gp_window

    highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    x, y = jnp.linspace(-1.0, 1.0, 3), jnp.asarray(0.5)
    for lrn in (bayes_linreg(3), gp_window(3, 8), adaptive(gp_window(3, 8), 8)):
        s = lrn.init()
        for fn in (lambda s: lrn.step(s, x, y), lambda s: lrn.predict(s, x).mean,
                   lambda s: jax.jit(lrn.learn)(s, x, y),
                   lambda s: jax.jvp(lambda u: lrn.predict(lrn.learn(s, u, y), u).log_prob(y), (x,), (x,))[1]):
            with jax.default_matmul_precision("bfloat16"):
                precisions = _dot_precisions(jax.make_jaxpr(fn)(s))
            assert precisions and all(p == highest for p in precisions), (repr(lrn), precisions)
    g = gp_window(3, 8)
    s = g.learn(g.init(), jnp.ones((8, 3)) * jnp.arange(8.0)[:, None], jnp.arange(8.0))
    precisions = _dot_precisions(jax.make_jaxpr(g.tune)(s))
    assert precisions and all(p == highest for p in precisions)


# --- point masses, Student-t of any degrees of freedom, Welford's statistics -----------------------
def test_zero_variance_scores_as_a_point_mass():
    """var = 0 (scale = 0): a finite, very negative log density off the mean, a step CDF, CRPS = |y - μ|."""
    from onlinejax.core.base import StudentTPrediction

    dt = jnp.zeros(()).dtype
    fi = np.finfo(dt)
    mu, y = 1.5, np.array([1.5, 2.5, -7.0, 1e30])
    preds = (Prediction(jnp.full(4, mu, dt), jnp.zeros(4, dt)),
             StudentTPrediction(jnp.full(4, mu, dt), jnp.zeros(4, dt), jnp.full(4, 4.0, dt)))
    for p in preds:
        lp, cdf, crps = (np.asarray(f(jnp.asarray(y, dt)), np.float64) for f in (p.log_prob, p.cdf, p.crps))
        assert np.all(np.isfinite(lp)) and np.all(np.isfinite(cdf)) and np.all(np.isfinite(crps))
        np.testing.assert_array_equal(cdf, [0.5, 1.0, 0.0, 1.0])
        np.testing.assert_allclose(crps, np.abs(y - mu), rtol=tol(1e-12, 1e-6), atol=1e-18)
        assert np.all(lp[1:] < lp[0] - 40.0)
    # closed forms at the floor: N(μ, tiny) at the mean, and a miss whose squared residual overflows
    lp = np.asarray(preds[0].log_prob(jnp.asarray(y, dt)), np.float64)
    assert lp[0] == pytest.approx(-0.5 * np.log(2 * np.pi * float(fi.tiny)), rel=tol(1e-12, 1e-6))
    assert lp[3] == pytest.approx(-0.5 * float(fi.max), rel=1e-6)
    assert lp[1] < -1e30
    lt = np.asarray(preds[1].log_prob(jnp.asarray(y, dt)), np.float64)[:2]  # z² finite: the t's own density
    np.testing.assert_allclose(lt, stats.t.logpdf(y[:2], 4.0, mu, np.sqrt(float(fi.tiny))), rtol=tol(1e-9, 1e-5))


def test_point_mass_floor_changes_nothing_above_tiny(rng):
    """Above ``tiny`` the scores are bit for bit the unfloored Gaussian formulas."""
    dt = jnp.zeros(()).dtype
    mu = jnp.asarray(rng.normal(size=50), dt)
    var = jnp.asarray(10.0 ** rng.uniform(-30, 30, size=50), dt)
    y = jnp.asarray(rng.normal(size=50) * 10, dt)
    p = Prediction(mu, var)
    sd = jnp.sqrt(var)
    z = (y - mu) / sd
    want = {"log_prob": -0.5 * (jnp.log(2.0 * jnp.pi * var) + (y - mu) ** 2 / var),
            "cdf": jax.scipy.special.ndtr((y - mu) / sd),
            "crps": sd * (z * (2.0 * stats_norm_cdf(z) - 1.0) + 2.0 * jax.scipy.stats.norm.pdf(z) - 1 / np.sqrt(np.pi))}
    for k, v in want.items():
        np.testing.assert_array_equal(np.asarray(getattr(p, k)(y)), np.asarray(v), err_msg=k)


def stats_norm_cdf(z):
    return jax.scipy.stats.norm.cdf(z)


def test_gamma_ratio_excess_is_accurate_to_the_dtype_for_every_argument():
    """``log Γ(x + ½) - log Γ(x) - ½ log x`` against float64 scipy from 1e-3 to 1e8: absolute error a few float32
    ulps of the result's own size (not of ``log Γ(x)``'s, which a ``gammaln`` difference keeps and which differs
    between backends)."""
    from scipy import special

    from onlinejax.core.base import _log_gamma_ratio_excess

    dt = jnp.zeros(()).dtype
    x = np.concatenate([np.logspace(-3, 8, 200), [9.75, 9.9999, 10.0, 10.0001]])
    ref = special.gammaln(x + 0.5) - special.gammaln(x) - 0.5 * np.log(x)
    ref = np.where(x > 1e3, -1 / (8 * x) + 1 / (192 * x**3), ref)  # scipy's own difference cancels up there
    got = np.asarray(_log_gamma_ratio_excess(jnp.asarray(x, dt)))
    np.testing.assert_allclose(got, ref, rtol=tol(1e-12, 1e-6), atol=tol(2e-12, 4e-7))  # the reference: ~1e-12


@pytest.mark.parametrize("nu", [1.0, 1.5, 2.0, 3.0, 19.5, 25.0, 1e3, 1e5, 1e7])
def test_student_t_of_any_degrees_of_freedom_matches_scipy(nu):
    """Log density, CDF, interval, variance and CRPS for small ν (no variance, no mean) and large ν (the Gaussian
    limit), where a difference of gammaln cancels in float32."""
    from scipy import integrate, special

    from onlinejax.core.base import StudentTPrediction

    dt = jnp.zeros(()).dtype
    mu, sc = 2.0, 0.5
    y = np.array([-40.0, -1.0, 1.9, 2.0, 2.7, 5.0, 300.0])
    p = StudentTPrediction(jnp.full(y.shape, mu, dt), jnp.full(y.shape, sc, dt), jnp.full(y.shape, nu, dt))
    ref = stats.t(nu, mu, sc)
    np.testing.assert_allclose(np.asarray(p.log_prob(jnp.asarray(y, dt))), ref.logpdf(y), rtol=tol(1e-10, 1e-5))
    np.testing.assert_allclose(np.asarray(p.cdf(jnp.asarray(y, dt))), ref.cdf(y), rtol=tol(1e-9, 1e-4),
                               atol=tol(1e-13, 3e-7))
    for level, rt in ((0.5, 1e-5), (0.95, 1e-5), (0.999, 3e-4)):  # float32: F resolves 1 - p to ε only
        lo, hi = p.interval(level)
        half = ref.interval(level)[1] - mu
        np.testing.assert_allclose([mu - float(lo[0]), float(hi[0]) - mu], [half, half], rtol=tol(1e-9, rt))
    assert float(p.var[0]) == (np.inf if nu <= 2 else pytest.approx(ref.var(), rel=tol(1e-9, 1e-5)))
    crps = np.asarray(p.crps(jnp.asarray(y, dt)), np.float64)
    if nu <= 1:
        assert np.all(crps == np.inf)
        return
    # Jordan, Krüger & Lerch 2019 in float64 (scipy's betaln has no cancellation), checked by quadrature once
    z = (y - mu) / sc
    const = 2 * np.sqrt(nu) / (nu - 1) * np.exp(special.betaln(0.5, nu - 0.5) - 2 * special.betaln(0.5, nu / 2))
    want = sc * (z * (2 * stats.t.cdf(z, nu) - 1) + 2 * stats.t.pdf(z, nu) * (nu + z * z) / (nu - 1) - const)
    if nu < 100:
        f = lambda x, h: (ref.cdf(x) - h) ** 2  # noqa: E731
        quad = integrate.quad(f, -np.inf, 2.7, args=(0.0,), limit=400)[0] + integrate.quad(f, 2.7, np.inf, args=(1.0,),
                                                                                            limit=400)[0]
        assert want[4] == pytest.approx(quad, rel=1e-6)
    np.testing.assert_allclose(crps, want, rtol=tol(1e-8, 1e-4), atol=tol(1e-12, 1e-6))


def test_student_t_cdf_is_accurate_at_large_df():
    """Hill's approximation from ν = 20: the CDF and quantile stay on scipy's up to the Gaussian limit."""
    from onlinejax.core.base import student_t_cdf, student_t_quantile

    dt = jnp.zeros(()).dtype
    z = np.array([-1e3, -8.0, -3.0, -1.0, -0.01, 0.0, 0.5, 1.0, 3.0, 8.0, 1e3, np.inf, -np.inf])
    for nu in (19.9, 20.0, 50.0, 1e4, 1e6, 1e9, 1e30):
        np.testing.assert_allclose(np.asarray(student_t_cdf(jnp.asarray(z, dt), jnp.asarray(nu, dt))),
                                   stats.t.cdf(z, nu), rtol=tol(1e-9, 1e-4), atol=tol(1e-13, 3e-7), err_msg=str(nu))
        assert float(student_t_quantile(0.975, jnp.asarray(nu, dt))) == pytest.approx(stats.t.ppf(0.975, nu),
                                                                                       rel=tol(1e-9, 1e-5))
    assert np.isnan(float(student_t_cdf(jnp.asarray(np.nan, dt), jnp.asarray(30.0, dt))))
    # finite gradients on either side of the switch, also at z = 0
    for nu in (4.0, 30.0):
        g = jax.grad(lambda z: student_t_cdf(z, jnp.asarray(nu, dt)))(jnp.asarray(0.7, dt))
        assert float(g) == pytest.approx(stats.t.pdf(0.7, nu), rel=tol(1e-6, 1e-3))


def _welford64(n, mean, var, x, n_max):
    """float64 reference of the variance-form recursion, the count saturating at ``n_max``."""
    for v in np.asarray(x, np.float64):
        n = min(n + 1.0, n_max)
        d = v - mean
        mean += d / n
        var += (d * (v - mean) - var) / n
    return n, mean, var


def test_welford_at_a_saturated_float32_count(rng):
    """A float32 state whose count is already 2²⁴ (where n + 1 == n): a few thousand more items move the mean and
    variance as the float64 recursion does; a growing sum of squares would have drifted instead."""
    from onlinejax.core.base import welford_update

    f32 = jnp.float32
    n_max = 1.0 / (32.0 * float(np.finfo(np.float32).eps))
    x = np.asarray(5.0 + 3.0 * rng.normal(size=4000), np.float32)
    run = jax.jit(lambda s, x: jax.lax.scan(lambda s, v: (welford_update(*s, v), None), s, x)[0])
    n, mean, var = run((f32(2.0 ** 24), f32(5.0), f32(9.0)), jnp.asarray(x))
    n64, mean64, var64 = _welford64(2.0 ** 24, 5.0, 9.0, x, n_max)
    assert float(n) == n64 == n_max
    assert float(mean) == pytest.approx(mean64, abs=1e-5 * 3.0)  # each step rounds to half a unit of 5's last place
    assert float(var) == pytest.approx(var64, rel=1e-5)
    # the estimates moved by the weight of 4000 items, not more
    assert abs(float(var) - 9.0) < 0.5 and abs(np.sqrt(float(var)) - np.sqrt(var64)) / np.sqrt(var64) < 1e-5


def test_welford_float32_scan_of_a_million_items(rng):
    """10⁶ float32 items under lax.scan: the standard deviation within 1e-3 of float64 NumPy's."""
    from scipy.signal import lfilter

    from onlinejax.core.base import welford_update

    N = 10 ** 6
    x = np.asarray(1e3 + 3.0 * rng.normal(size=N), np.float32)
    z = jnp.zeros((), jnp.float32)
    n, mean, var = jax.jit(lambda x: jax.lax.scan(lambda s, v: (welford_update(*s, v), None), (z, z, z), x)[0])(
        jnp.asarray(x))
    # float64: exact statistics of the first n_max items, then the exponential weighting with memory n_max (lfilter)
    x64 = x.astype(np.float64)
    n_max = int(1.0 / (32.0 * float(np.finfo(np.float32).eps)))
    a = 1.0 / n_max
    m0, v0 = x64[:n_max].mean(), x64[:n_max].var()
    m = lfilter([a], [1.0, a - 1.0], x64[n_max:], zi=[(1.0 - a) * m0])[0]
    m_prev = np.concatenate([[m0], m[:-1]])
    v = lfilter([a], [1.0, a - 1.0], (x64[n_max:] - m_prev) * (x64[n_max:] - m), zi=[(1.0 - a) * v0])[0]
    assert float(n) == n_max
    # a new item's weight 2⁻¹⁸ moves a mean of 1000 by less than its float32 resolution: it freezes, close
    assert float(mean) == pytest.approx(m[-1], abs=0.01 * 3.0)
    assert np.sqrt(float(var)) == pytest.approx(np.sqrt(v[-1]), rel=1e-3)
    assert np.sqrt(float(var)) == pytest.approx(x64.std(), rel=1e-2)  # and the stream's own spread


def test_welford_with_decay_is_the_exponentially_weighted_mean_and_variance(rng):
    from onlinejax.core.base import welford_update

    dt = jnp.zeros(()).dtype
    x = 3.0 + 2.0 * rng.normal(size=(300, 2))
    z = jnp.zeros((2,), dt)
    n, mean, var = jax.lax.scan(lambda s, v: (welford_update(*s, v, 0.97), None), (jnp.zeros((), dt), z, z),
                                jnp.asarray(x, dt))[0]
    w = 0.97 ** np.arange(299, -1, -1)
    m = w @ x / w.sum()
    assert float(n) == pytest.approx(w.sum(), rel=tol(1e-12, 1e-5))
    np.testing.assert_allclose(np.asarray(mean), m, rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(np.asarray(var), w @ (x - m) ** 2 / w.sum(), rtol=tol(1e-10, 1e-4))


def _same_tree(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_wrappers_pass_tune_downdate_and_evict_through_exactly(rng):
    """Each wrapper's tune / downdate / evict is the inner learner's on the inner state, the rest kept."""
    import onlinejax as oj
    from onlinejax.wrappers.adaptive import adaptive
    from onlinejax.wrappers.calibration import recalibrate
    from onlinejax.wrappers.hedge import with_climatology
    from onlinejax.learners.linear import intercept_features, map_features
    from onlinejax.wrappers.standardize import standardize

    X, Y = rng.normal(size=(40, 2)), rng.normal(size=40)
    for inner in (oj.gp.gp_window(2, 8), oj.windowed_bayes_linreg(2, 8)):
        L = standardize(inner)
        s = L.learn(L.init(), X, Y)
        assert L.downdate is None
        _same_tree(L.evict(s), s._replace(inner=inner.evict(s.inner)))
    win = oj.windowed_bayes_linreg(3, 8)
    F = map_features(intercept_features(2), win)
    s = F.learn(F.init(), X, Y)
    _same_tree(F.evict(s), win.evict(s))
    _same_tree(F.tune(s, n_iter=5), win.tune(s, n_iter=5))
    win = oj.windowed_bayes_linreg(2, 8)
    for wrap in (standardize, recalibrate, with_climatology, lambda lrn: adaptive(lrn, 8)):
        L = wrap(win)
        s = L.learn(L.init(), X, Y)
        _same_tree(L.tune(s), s._replace(inner=win.tune(s.inner)))
    assert with_climatology(win).evict is None and adaptive(win, 8).evict is None  # only tune passes there
    # a downdate in the inner learner's coordinates: map_features' features
    blr = oj.bayes_linreg(3, alpha=0.5, beta=2.0)
    F = map_features(intercept_features(2), blr)
    s = F.learn(F.init(), X, Y)
    _same_tree(F.downdate(s, X[0], Y[0]), blr.downdate(s, np.append(X[0], 1.0), Y[0]))


def test_a_calibrated_downdate_undoes_learn(rng):
    """recalibrate(bayes_linreg): downdating the last items gives the posterior of the first, calibrators kept."""
    from onlinejax.wrappers.calibration import recalibrate
    from onlinejax.learners.linear import bayes_linreg

    alpha, beta = 0.5, 2.0
    X, Y = rng.normal(size=(40, 2)), rng.normal(size=40)
    inner = bayes_linreg(2, alpha=alpha, beta=beta)
    L = recalibrate(inner)
    s = L.learn(L.init(), X, Y)
    d = s
    for x, y in zip(X[30:][::-1], Y[30:][::-1]):
        d = L.downdate(d, x, y)
    assert d.recalibration == s.recalibration
    _same_tree(L.downdate(s, X[39], Y[39]).inner, inner.downdate(s.inner, X[39], Y[39]))
    precision = alpha * np.eye(2) + beta * X[:30].T @ X[:30]
    mean = np.linalg.solve(precision, beta * X[:30].T @ Y[:30])
    np.testing.assert_allclose(np.asarray(d.inner.mean), mean, rtol=tol(1e-9, 1e-4), atol=tol(1e-12, 1e-5))
    with pytest.raises(ValueError, match="one item"):
        L.downdate(s, X[:2], Y[:2])


def test_make_learner_refuses_a_downdate_or_evict_of_the_wrong_shape():
    from onlinejax.core.base import LearnerCores, make_learner

    parts = dict(init=lambda: jnp.zeros(()), learn_one=lambda s, x, y: s, predict_one=lambda s, x: Prediction(s, s),
                 n_features=1)
    with pytest.raises(TypeError, match=r"downdate: must take \(state, x, y\).*evict="):
        make_learner(**parts, cores=LearnerCores(downdate=lambda s: s))
    with pytest.raises(TypeError, match=r"evict: must take \(state\).*downdate="):
        make_learner(**parts, cores=LearnerCores(evict=lambda s, x, y: s))
    L = make_learner(**parts, cores=LearnerCores(downdate=lambda s, x, y: s + y, evict=lambda s: s - 1))
    assert float(L.downdate(L.init(), [1.0], 2.0)) == 2.0 and float(L.evict(L.init())) == -1.0


def _affine_cases():
    from onlinejax.core.base import StudentTPrediction
    from onlinejax.core.student_mixture import StudentTMixture
    from onlinejax.wrappers.combination import MixturePrediction
    dt = jnp.result_type(float)
    lw = jnp.log(jnp.asarray([0.7, 0.2, 0.1], dt))
    means, sds = jnp.asarray([0.3, -1.0, 2.5], dt), jnp.asarray([0.5, 2.0, 0.2], dt)
    w = np.exp(np.asarray(lw, np.float64))
    m = float(w @ np.asarray(means, np.float64))
    v = float(w @ (np.asarray(sds, np.float64) ** 2 + (np.asarray(means, np.float64) - m) ** 2))
    return [Prediction(jnp.asarray(0.3, dt), jnp.asarray(2.0, dt)),
            StudentTPrediction(jnp.asarray(0.3, dt), jnp.asarray(1.5, dt), jnp.asarray(3.5, dt)),
            StudentTMixture(lw, means, sds, jnp.asarray([3.0, 5.0, 30.0], dt)),
            MixturePrediction(jnp.asarray(m, dt), jnp.asarray(v, dt), lw, means, sds ** 2)]


@pytest.mark.parametrize("case", range(4))
def test_affine_is_the_law_of_the_moved_and_scaled_variable(case):
    # Y' = a + bY: F'(a + by) = F(y), p'(a + by) = p(y)/b, the moments and the interval moved alike
    pred = _affine_cases()[case]
    a, b = -40.0, 7.5
    moved = pred.affine(jnp.asarray(a, pred.mean.dtype), jnp.asarray(b, pred.mean.dtype))
    assert type(moved) is type(pred)
    ys = np.asarray([-3.0, -0.4, 0.3, 1.1, 4.0])
    rtol = tol(1e-10, 2e-5)
    for y in ys:
        y2 = jnp.asarray(a + b * y, pred.mean.dtype)
        np.testing.assert_allclose(float(moved.cdf(y2)), float(pred.cdf(jnp.asarray(y, pred.mean.dtype))), rtol=rtol,
                                   atol=tol(1e-12, 1e-6))
        np.testing.assert_allclose(float(moved.log_prob(y2)), float(pred.log_prob(jnp.asarray(y, pred.mean.dtype)))
                                   - np.log(b), rtol=rtol, atol=tol(1e-10, 1e-5))
    np.testing.assert_allclose(float(moved.mean), a + b * float(pred.mean), rtol=rtol)
    np.testing.assert_allclose(float(moved.var), b * b * float(pred.var), rtol=rtol)
    (lo, hi), (lo2, hi2) = pred.interval(0.9), moved.interval(0.9)
    np.testing.assert_allclose([float(lo2), float(hi2)], [a + b * float(lo), a + b * float(hi)], rtol=tol(1e-8, 1e-4))

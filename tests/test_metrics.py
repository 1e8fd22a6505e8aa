import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from onlinejax import Prediction
from onlinejax.evaluation import metrics as M
from conftest import tol


def _np_metrics(y, mu, var, w, level=0.95):
    """float64 numpy reference over stored predictions with per-item weights w."""
    y, mu, var, w = (np.asarray(a, np.float64) for a in (y, mu, var, w))
    sd = np.sqrt(var)
    z = stats.norm.ppf(0.5 + level / 2)
    err = y - mu
    zz = err / sd
    q = {
        "mae": np.abs(err), "mse": err ** 2, "icr": (np.abs(err) <= z * sd).astype(float), "aiw": 2 * z * sd,
        "mlpd": stats.norm.logpdf(y, mu, sd),
        "crps": sd * (zz * (2 * stats.norm.cdf(zz) - 1) + 2 * stats.norm.pdf(zz) - 1 / np.sqrt(np.pi)),
    }
    out = {k: np.sum(w * v) / np.sum(w) for k, v in q.items()}
    ym = np.sum(w * y) / np.sum(w)
    yv = np.sum(w * (y - ym) ** 2) / np.sum(w)
    out.update(rmse=np.sqrt(out["mse"]), smse=out["mse"] / yv, r2=1 - out["mse"] / yv, saiw=out["aiw"] / abs(ym),
               aiw_sd=out["aiw"] / np.sqrt(yv), crps_sd=out["crps"] / np.sqrt(yv))
    return out


def _stream(rng, n=300):
    y = 5 + rng.normal(size=n) * 2
    mu = y + rng.normal(size=n) * 0.7
    var = rng.uniform(0.2, 1.5, size=n)
    return y, mu, var


def _run(acc, y, mu, var, weights=None):
    dt = jnp.zeros(()).dtype
    ys, mus, vs = (jnp.asarray(a, dt) for a in (y, mu, var))
    ws = jnp.ones_like(ys) if weights is None else jnp.asarray(weights, dt)

    def body(s, a):
        s = acc.update(s, a[0], Prediction(a[1], a[2]), a[3])
        return s, acc.value(s)

    return jax.lax.scan(body, acc.init(), (ys, mus, vs, ws))[1]


def _check(values, ref, t, keys=M.METRICS):
    for k in keys:
        assert float(values[k][t]) == pytest.approx(ref[k], rel=tol(1e-9, 2e-4), abs=tol(1e-12, 1e-5)), k


def test_crps_matches_numerical_integral():
    mu, sd, y = 0.3, 1.7, 1.1
    from scipy import integrate

    f = lambda x, h: (stats.norm.cdf(x, mu, sd) - h) ** 2  # noqa: E731
    ref = integrate.quad(f, -np.inf, y, args=(0.0,), epsabs=1e-13)[0] + integrate.quad(f, y, np.inf, args=(1.0,), epsabs=1e-13)[0]
    q = M.item_quantities(jnp.asarray(y), Prediction(jnp.asarray(mu), jnp.asarray(sd ** 2)))
    assert float(q[5]) == pytest.approx(ref, rel=tol(1e-6, 1e-5))


def test_prequential_equals_numpy_at_several_points(rng):
    y, mu, var = _stream(rng)
    v = _run(M.prequential(0.9), y, mu, var)
    for t in (4, 99, 299):
        _check(v, _np_metrics(y[: t + 1], mu[: t + 1], var[: t + 1], np.ones(t + 1), 0.9), t)


def test_fading_equals_numpy(rng):
    y, mu, var = _stream(rng)
    delta = 0.97
    v = _run(M.fading(delta), y, mu, var)
    for t in (10, 150, 299):
        w = delta ** (t - np.arange(t + 1))
        _check(v, _np_metrics(y[: t + 1], mu[: t + 1], var[: t + 1], w), t)


def test_sliding_window_equals_numpy(rng):
    y, mu, var = _stream(rng)
    W = 25
    v = _run(M.sliding(W), y, mu, var)
    for t in (3, 24, 25, 180, 299):
        lo = max(0, t + 1 - W)
        _check(v, _np_metrics(y[lo: t + 1], mu[lo: t + 1], var[lo: t + 1], np.ones(t + 1 - lo)), t)


def test_exponential_is_the_blogs_recursion(rng):
    y, mu, var = _stream(rng)
    v = _run(M.exponential(0.1), y, mu, var)
    exp_mae = 0.0
    for t, (a, b) in enumerate(zip(y, mu)):
        exp_mae = 0.1 * abs(a - b) + 0.9 * exp_mae  # verbatim from the blog
        if t in (0, 50, 299):
            assert float(v["mae"][t]) == pytest.approx(exp_mae, rel=tol(1e-9, 1e-4))


def test_stable_only_variants(rng):
    y, mu, var = _stream(rng, 200)
    mask = M.stable_mask(200, 30, change_points=[100])
    assert mask.sum() == 200 - 60 and not mask[:30].any() and not mask[100:130].any() and mask[130:].all()
    v = _run(M.prequential(), y, mu, var, weights=mask)
    _check(v, _np_metrics(y[mask], mu[mask], var[mask], np.ones(mask.sum())), 199, keys=("rmse", "smse", "icr"))
    vf = _run(M.fading(0.99), y, mu, var, weights=mask)
    w = 0.99 ** (199 - np.arange(200)) * mask
    _check(vf, _np_metrics(y, mu, var, w), 199, keys=("rmse", "smse"))


def test_running_mean_of_any_loss(rng):
    y, mu, var = _stream(rng, 50)
    init, update, value = M.running_mean(lambda t, p: jnp.abs(t - p.mean) ** 3)
    s = init()
    for a, b, c in zip(y, mu, var):
        s = update(s, a, Prediction(jnp.asarray(b), jnp.asarray(c)))
    assert float(value(s)) == pytest.approx(np.mean(np.abs(y - mu) ** 3), rel=tol(1e-9, 1e-4))


def test_accumulators_vmap_over_streams(rng):
    ys, mus, vs = (np.stack(a) for a in zip(*[_stream(rng, 60) for _ in range(4)]))
    acc = M.prequential()
    out = jax.vmap(lambda a, b, c: jax.tree_util.tree_map(lambda v: v[-1], _run(acc, a, b, c)))(ys, mus, vs)
    for i in range(4):
        assert float(out["rmse"][i]) == pytest.approx(np.sqrt(np.mean((ys[i] - mus[i]) ** 2)), rel=tol(1e-9, 1e-4))


def test_bad_parameters():
    with pytest.raises(ValueError, match="delta"):
        M.fading(0.0)
    with pytest.raises(ValueError, match="alpha"):
        M.exponential(1.5)
    with pytest.raises(ValueError, match="window"):
        M.sliding(0)
    with pytest.raises(ValueError, match="level"):
        M.prequential(1.0)


# --- non-finite items, climatology and log-score skill -------------------------------------------
@pytest.mark.parametrize("make", [lambda: M.prequential(), lambda: M.fading(0.99), lambda: M.sliding(50)])
def test_nonfinite_items_are_skipped_and_counted(rng, make):
    """One NaN target, NaN mean or zero variance leaves every metric finite and equal to the run without it."""
    y, mu, var = _stream(rng, 120)
    bad_y, bad_mu, bad_var = y.copy(), mu.copy(), var.copy()
    bad_y[10], bad_mu[40], bad_var[90] = np.nan, np.nan, 0.0
    keep = np.ones(120, bool)
    keep[[10, 40, 90]] = False
    acc = make()
    got = {k: v[-1] for k, v in _run(acc, bad_y, bad_mu, bad_var).items()}
    want = {k: v[-1] for k, v in _run(acc, y, mu, var, weights=keep.astype(float)).items()}
    assert int(got["n_nonfinite"]) == 3 and int(want["n_nonfinite"]) == 0
    for k in M.METRICS:
        assert np.isfinite(float(got[k])), k
        assert float(got[k]) == pytest.approx(float(want[k]), rel=tol(1e-12, 1e-5), abs=tol(1e-12, 1e-6)), k


def _np_climatology(y, prior_var=1.0, eps=None):
    """float64 reference: predict y_t from y_<t: the Student-t posterior predictive (BDA3 §3.2).

    Returns ``(location, scale, df)``: ``ȳ``, ``s·sqrt(1 + 1/t)`` (``s²`` unbiased) and ``t - 1`` from ``t = 2``;
    before, ``(ȳ, sqrt(prior_var), 1/eps)`` (0 before the first target).
    """
    eps = np.finfo(jnp.zeros(()).dtype).eps if eps is None else eps
    mu, sc, df = np.zeros(len(y)), np.full(len(y), np.sqrt(prior_var)), np.full(len(y), 1.0 / eps)
    for t in range(len(y)):
        if t >= 1:
            mu[t] = y[:t].mean()
        if t >= 2:
            sc[t], df[t] = y[:t].std(ddof=1) * np.sqrt(1 + 1 / t), t - 1
    return mu, sc, df


def _np_climatology_logpdf(y, prior_var=1.0):
    mu, sc, df = _np_climatology(y, prior_var)
    return stats.t.logpdf(y, df, mu, sc)


def test_climatology_learner_matches_numpy(rng):
    from onlinejax.core.base import StudentTPrediction
    from onlinejax.wrappers.baseline import climatology
    from onlinejax.evaluation import progressive_validation

    y = 1e3 + 3.0 * rng.normal(size=200)
    X = rng.normal(size=(200, 2))
    clim = climatology(2)
    p = progressive_validation(clim, clim.init(), X, y).predictions
    assert isinstance(p, StudentTPrediction)
    mu, sc, df = _np_climatology(y)
    np.testing.assert_allclose(np.asarray(p.mean), mu, rtol=tol(1e-12, 1e-6))
    np.testing.assert_allclose(np.asarray(p.scale), sc, rtol=tol(1e-9, 2e-3))
    np.testing.assert_array_equal(np.asarray(p.df, np.float64), df)
    # a non-finite target inside jit is skipped: the state equals the run without it
    s = clim.init()
    s1 = jax.jit(lambda s, y: clim.learn(s, jnp.zeros(2), y))(s, jnp.asarray(jnp.nan, s.mean.dtype))
    assert int(s1.n_skipped) == 1 and float(s1.n) == 0.0


def test_log_score_skill_matches_numpy(rng):
    from onlinejax.core.base import StudentTPrediction

    y, mu, var = _stream(rng, 150)
    w = (rng.uniform(size=150) > 0.3).astype(float)
    dt = jnp.zeros(()).dtype
    got = M.log_score_skill(jnp.asarray(y, dt), Prediction(jnp.asarray(mu, dt), jnp.asarray(var, dt)), jnp.asarray(w, dt))
    np.testing.assert_allclose(np.asarray(M.climatology_log_density(jnp.asarray(y, dt)))[2:],
                               _np_climatology_logpdf(y)[2:], rtol=tol(1e-9, 1e-4))
    cm, cs, cdf = _np_climatology(y)
    lp = stats.norm.logpdf(y, mu, np.sqrt(var))
    lc = stats.t.logpdf(y, cdf, cm, cs)
    ww = w.copy()
    ww[:2] = 0
    assert float(got["skill"]) == pytest.approx(np.sum(ww * (lp - lc)) / ww.sum(), rel=tol(1e-9, 1e-4))
    assert float(got["mlpd_clim"]) == pytest.approx(np.sum(ww * lc) / ww.sum(), rel=tol(1e-9, 1e-4))
    assert float(got["mlpd_from"]) == pytest.approx(np.sum(ww * lp) / ww.sum(), rel=tol(1e-9, 1e-4))
    # a perfect-variance oracle beats climatology; climatology itself has skill 0
    assert float(got["skill"]) > 0
    own = M.log_score_skill(jnp.asarray(y, dt), StudentTPrediction(*(jnp.asarray(a, dt) for a in (cm, cs, cdf))))
    assert abs(float(own["skill"])) < tol(1e-9, 1e-4)


def test_log_score_skill_survives_nearly_equal_first_targets(rng):
    """Two nearly equal first targets of a unit-noise stream: climatology's third log density is a Cauchy's, not
    a Gaussian's of variance ~1e-12 (-10⁵ nats and more), so the skill averages tens of nats at most."""
    dt = jnp.zeros(()).dtype
    y = rng.normal(size=100)
    y[1] = y[0] + 1e-6
    y[2] = y[0] + 2.0
    lc = np.asarray(M.climatology_log_density(jnp.asarray(y, dt)), np.float64)
    assert np.all(np.isfinite(lc)) and lc[2] > -30.0
    assert lc[2] == pytest.approx(_np_climatology_logpdf(y)[2], rel=tol(1e-6, 0.1))
    sk = M.log_score_skill(jnp.asarray(y, dt), Prediction(jnp.zeros(100, dt), jnp.ones(100, dt)))
    assert abs(float(sk["skill"])) < 1.0 and int(sk["n_nonfinite"]) == 0


def test_student_t_predictions_are_scored_by_their_own_distribution(rng):
    from scipy import integrate

    from onlinejax.core.base import StudentTPrediction

    n, nu = 12, 4.0
    y, mu, var = _stream(rng, n)
    sc = np.sqrt(var)
    dt = jnp.zeros(()).dtype
    pred = StudentTPrediction(jnp.asarray(mu, dt), jnp.asarray(sc, dt), jnp.full((n,), nu, dt))
    got = M.score(M.prequential(0.9), jnp.asarray(y, dt), pred)
    half = sc * stats.t.ppf(0.95, nu)

    def crps(i):
        f = lambda x, h: (stats.t.cdf(x, nu, mu[i], sc[i]) - h) ** 2  # noqa: E731
        return integrate.quad(f, -np.inf, y[i], args=(0.0,))[0] + integrate.quad(f, y[i], np.inf, args=(1.0,))[0]

    ref = {"icr": np.mean(np.abs(y - mu) <= half), "aiw": np.mean(2 * half),
           "mlpd": np.mean(stats.t.logpdf(y, nu, mu, sc)), "crps": np.mean([crps(i) for i in range(n)])}
    for k, v in ref.items():
        assert float(got[k]) == pytest.approx(v, rel=tol(1e-7, 1e-4)), k


# --- predictions score themselves --------------------------------------------------------------------
@pytest.mark.slow  # a refactor's equivalence check (CI time); the mixture's scores are checked against scipy elsewhere
def test_metrics_on_a_mixture_equal_the_former_mixture_formulas(rng):
    """item_quantities on a MixturePrediction (now its own interval/log_prob/crps) equals, bit for bit, the
    formulas metrics applied to a mixture before: exact quantiles, mixture log density, vectorised mixture_crps."""
    from onlinejax.wrappers.combination import mixture_crps, mixture_prediction

    dt = jnp.zeros(()).dtype
    n, m = 30, 3
    mu = jnp.asarray(rng.normal(size=(n, m)) * 2, dt)
    var = rng.uniform(0.1, 2.0, (n, m))
    var[:, 2] = 1e12  # a clueless member with a small weight
    lw = jnp.log(jnp.asarray([0.6, 0.39, 0.01], dt))
    p = jax.vmap(lambda a, b: mixture_prediction(lw, a, b))(mu, jnp.asarray(var, dt))
    y = jnp.asarray(rng.normal(size=n), dt)

    def former(y, pred, level):
        err = y - pred.mean
        lo, hi = pred.interval(level, exact=True)
        cover = ((y >= lo) & (y <= hi)).astype(y.dtype)
        crps = jnp.vectorize(mixture_crps, signature="(m),(m),(m),()->()")(
            jnp.exp(pred.log_weights), pred.means, pred.vars, y)
        return jnp.stack([jnp.abs(err), err * err, cover, hi - lo, pred.log_prob(y), crps], axis=-1)

    for level in (0.9, 0.5):
        np.testing.assert_array_equal(np.asarray(M.item_quantities(y, p, level)), np.asarray(former(y, p, level)))
        np.testing.assert_array_equal(np.asarray(jax.jit(M.item_quantities, static_argnums=2)(y, p, level)),
                                      np.asarray(jax.jit(former, static_argnums=2)(y, p, level)))
    # and a whole-stream score is the mean of those quantities
    got = M.score(M.prequential(0.9), y, p)
    q = np.asarray(former(y, p, 0.9), np.float64)
    for k, i in (("mae", 0), ("icr", 2), ("aiw", 3), ("mlpd", 4), ("crps", 5)):
        assert float(got[k]) == pytest.approx(q[:, i].mean(), rel=tol(1e-12, 1e-5)), k


class _Laplace(tuple):
    """A non-Gaussian prediction the metrics know nothing about: Laplace(μ, b) with its own closed forms."""

    def __new__(cls, mean, scale):
        return super().__new__(cls, (mean, scale))

    mean = property(lambda self: self[0])
    scale = property(lambda self: self[1])

    def interval(self, level=0.95):
        half = -self.scale * np.log(1.0 - level)
        return self.mean - half, self.mean + half

    def log_prob(self, y):
        return -jnp.log(2.0 * self.scale) - jnp.abs(y - self.mean) / self.scale

    def crps(self, y):
        a = jnp.abs(y - self.mean) / self.scale
        return self.scale * (a + jnp.exp(-a) - 0.75)


def test_any_non_gaussian_prediction_is_scored_by_its_own_methods(rng):
    """metrics dispatch on Prediction only: anything else supplies interval, log_prob and crps."""
    from scipy import integrate

    dt = jnp.zeros(()).dtype
    y, mu, var = _stream(rng, 8)
    p = _Laplace(jnp.asarray(mu, dt), jnp.asarray(np.sqrt(var), dt))
    yy = jnp.asarray(y, dt)
    q = np.asarray(M.item_quantities(yy, p, 0.8))
    lo, hi = p.interval(0.8)
    np.testing.assert_array_equal(q[:, 2], np.asarray((yy >= lo) & (yy <= hi), q.dtype))
    np.testing.assert_array_equal(q[:, 3], np.asarray(hi - lo))
    np.testing.assert_array_equal(q[:, 4], np.asarray(p.log_prob(yy)))
    np.testing.assert_array_equal(q[:, 5], np.asarray(p.crps(yy)))
    # the Laplace closed forms themselves, so the check above compares real scores
    b = np.sqrt(var[0])
    F = lambda t: stats.laplace.cdf(t, mu[0], b)  # noqa: E731
    ref = (integrate.quad(lambda t: F(t) ** 2, -np.inf, y[0])[0] + integrate.quad(lambda t: (1 - F(t)) ** 2, y[0], np.inf)[0])
    assert float(q[0, 5]) == pytest.approx(ref, rel=tol(1e-8, 1e-5))
    assert float(q[0, 4]) == pytest.approx(stats.laplace.logpdf(y[0], mu[0], b), rel=tol(1e-12, 1e-5))


def test_metrics_do_not_know_the_combination():
    """evaluation/metrics.py imports nothing from onlinejax.wrappers.combination and recognises no mixture by its fields."""
    import ast
    import inspect

    src = inspect.getsource(M)
    mods = [n.module or "" for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom)]
    mods += [a.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in mods if "combination" in m], mods
    assert "log_weights" not in src and 'hasattr(pred' not in src


def test_scale_free_metrics_are_nan_not_infinite_on_constant_targets():
    """A 1-item (or constant) stream has Var[y] = 0: SMSE was -inf/inf and polluted summaries."""
    import onlinejax as oj
    from onlinejax.evaluation.metrics import prequential

    acc = prequential(level=0.95)
    s = acc.init()
    for _ in range(3):
        s = acc.update(s, jnp.asarray(2.0), oj.Prediction(jnp.asarray(1.0), jnp.asarray(1.0)))
    v = acc.value(s)
    assert np.isnan(float(v["smse"])) and np.isnan(float(v["r2"]))
    np.testing.assert_allclose(float(v["mse"]), 1.0, rtol=1e-6)
    np.testing.assert_allclose(float(v["saiw"]), 2 * 1.959963984540054 / 2.0, rtol=1e-5)
    s = acc.update(acc.init(), jnp.asarray(0.0), oj.Prediction(jnp.asarray(1.0), jnp.asarray(1.0)))
    assert np.isnan(float(acc.value(s)["saiw"]))

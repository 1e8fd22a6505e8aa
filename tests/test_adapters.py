"""River and scikit-learn adapters: River's own estimator checks, float64 closed-form references,
feature slots, pickling and cloning."""
import pickle
import warnings

import numpy as np
import pytest

from conftest import X64, tol
from reference import blr_posterior, predictive

river = pytest.importorskip("river")
pytest.importorskip("sklearn")
pytest.importorskip("pandas")
import pandas as pd  # noqa: E402
from river import checks  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402

import onlinejax as oj  # noqa: E402
from onlinejax.adapters.river import RiverRegressor  # noqa: E402
from onlinejax.adapters.sklearn import OnlineRegressor  # noqa: E402

pytestmark = pytest.mark.float32_only  # the adapters' plumbing (float32, their dtype)

ALPHA, BETA = 0.5, 4.0


def _stream(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ np.arange(1.0, d + 1) + rng.normal(0, 0.5, n)
    return X, y


def _dicts(X, names="abc"):
    return [{names[j]: float(v) for j, v in enumerate(row)} for row in X]


# --------------------------------------------------------------------------------------- River
def test_river_check_estimator_windowed():
    """River's own conformance suite (clone, pickling, emerging/disappearing features, learn_many
    = learn_one, predict_many = predict_one, bounded memory, ...) on a float32-safe learner."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the checks drop features on purpose
        checks.check_estimator(RiverRegressor("windowed_bayes_linreg", {"window": 32}))


@pytest.mark.skipif(not X64, reason="float32: on River's raw TrumpApproval features (scale ~40, nearly "
                    "collinear) sequential and batch float32 posteriors differ by ~3e-4 relative, above "
                    "the check's 1e-4; the float64 pass runs it")
def test_river_check_estimator_bayes_linreg():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        checks.check_estimator(RiverRegressor("bayes_linreg", {"intercept": True}, {"alpha": 1e-2}))


@pytest.mark.slow
@pytest.mark.parametrize("learner", ["gp_window", "kernel_regression"])
def test_river_check_estimator_kernel_learners(learner):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        checks.check_estimator(RiverRegressor(learner, {"window": 16}))


def test_river_matches_closed_form_posterior():
    """predict_one (before learning each item) equals Bishop eq. 3.58-3.59 by a float64 direct solve."""
    X, y = _stream()
    model = RiverRegressor("bayes_linreg", init_params={"alpha": ALPHA, "beta": BETA})
    for i, (x, yi) in enumerate(zip(_dicts(X), y)):
        dist = model.predict_one(x, with_dist=True)
        m, S = blr_posterior(X[:i], y[:i], ALPHA, BETA)
        mu, var = predictive(m, S, BETA, X[i])
        assert dist.mu == pytest.approx(mu, rel=tol(1e-9, 2e-4), abs=tol(1e-9, 2e-4))
        assert dist.sigma == pytest.approx(np.sqrt(var), rel=tol(1e-9, 2e-4))
        assert model.predict_one(x) == dist.mu
        model.learn_one(x, yi)
    assert int(model.state.n_seen) == len(y)


def test_river_reserved_slot_for_emerging_feature_is_exact():
    """A feature first seen at item 60 in a reserved slot = a column that was 0 before."""
    X, y = _stream()
    Xz = X.copy()
    Xz[:60, 2] = 0.0
    rows = [{k: v for k, v in r.items() if not (i < 60 and k == "c")} for i, r in enumerate(_dicts(Xz))]
    model = RiverRegressor("bayes_linreg", init_params={"alpha": ALPHA, "beta": BETA}, n_features=3)
    for x, yi in zip(rows, y):
        model.learn_one(x, yi)
    m, S = blr_posterior(Xz, y, ALPHA, BETA)
    q = {"a": 0.3, "b": -1.0, "c": 2.0}
    mu, var = predictive(m, S, BETA, np.array([0.3, -1.0, 2.0]))
    dist = model.predict_one(q, with_dist=True)
    assert dist.mu == pytest.approx(mu, rel=tol(1e-9, 1e-4))
    assert dist.sigma ** 2 == pytest.approx(var, rel=tol(1e-9, 1e-4))
    assert model.n_ignored_features == 0


def test_river_features_beyond_capacity_are_ignored_and_counted():
    """A learner that cannot grow (see tests/test_river_adapter.py for those that do) ignores them."""
    model = RiverRegressor("windowed_bayes_linreg", {"window": 8})
    model.learn_one({"a": 1.0, "b": 2.0}, 1.0)
    with pytest.warns(UserWarning, match="'c' arrived after all 2 input slots"):
        model.learn_one({"a": 1.0, "b": 2.0, "c": 5.0}, 1.0)
    assert model.n_ignored_features == 1
    assert model.learn_one({"b": 0.5, "a": 1.5}, 2.0) is None  # key order does not matter


def test_river_learn_many_predict_many():
    X, y = _stream(60)
    df = pd.DataFrame(X, columns=list("abc"), index=np.arange(100, 160))
    one = RiverRegressor("bayes_linreg", init_params={"alpha": ALPHA, "beta": BETA})
    many = one.clone()
    for x, yi in zip(_dicts(X[:40]), y[:40]):
        one.learn_one(x, yi)
    many.learn_many(df.iloc[:20], pd.Series(y[:20]))
    many.learn_many(df.iloc[20:40], pd.Series(y[20:40]))
    pred = many.predict_many(df.iloc[40:])
    assert list(pred.index) == list(df.index[40:])
    ref = [one.predict_one(x) for x in _dicts(X[40:])]
    np.testing.assert_allclose(pred.to_numpy(), ref, rtol=tol(1e-10, 1e-5), atol=tol(1e-10, 1e-5))
    dist = many.predict_many_dist(df.iloc[40:])
    m, S = blr_posterior(X[:40], y[:40], ALPHA, BETA)
    mu, var = predictive(m, S, BETA, X[40:])
    np.testing.assert_allclose(dist["mu"], mu, rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(dist["sigma"], np.sqrt(var), rtol=tol(1e-9, 1e-4))


def test_river_missing_values_count_as_zero():
    df = pd.DataFrame({"a": [1.0, np.nan], "b": [2.0, 3.0]})
    m1 = RiverRegressor("bayes_linreg")
    m1.learn_many(df, pd.Series([1.0, 2.0]))
    m2 = RiverRegressor("bayes_linreg")
    m2.learn_one({"a": 1.0, "b": 2.0}, 1.0)
    m2.learn_one({"a": None, "b": 3.0}, 2.0)
    assert m1.predict_one({"a": 1.0, "b": 1.0}) == pytest.approx(m2.predict_one({"a": 1.0, "b": 1.0}), rel=1e-6)


def test_river_pickle_mid_stream_resumes_bitwise():
    X, y = _stream(80)
    rows = _dicts(X)
    a = RiverRegressor("windowed_bayes_linreg", {"window": 16})
    for x, yi in zip(rows[:40], y[:40]):
        a.learn_one(x, yi)
    b = pickle.loads(pickle.dumps(a))
    for x, yi in zip(rows[40:], y[40:]):
        assert a.predict_one(x) == b.predict_one(x)
        a.learn_one(x, yi)
        b.learn_one(x, yi)


def test_river_tune_every_splits_batches_at_tune_points():
    """learn_many with tune_interval tunes after the same items as a learn_one loop."""
    X, y = _stream(50)
    df = pd.DataFrame(X, columns=list("abc"))
    one = RiverRegressor("windowed_bayes_linreg", {"window": 16}, tune_interval=16)
    many = one.clone()
    for x, yi in zip(_dicts(X), y):
        one.learn_one(x, yi)
    many.learn_many(df.iloc[:10], pd.Series(y[:10]))
    many.learn_many(df.iloc[10:], pd.Series(y[10:]))
    import jax
    for a, b in zip(jax.tree_util.tree_leaves(one.state), jax.tree_util.tree_leaves(many.state)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol(1e-10, 1e-4), atol=1e-6)
    # the tune moved alpha/beta away from their initial values
    assert float(one.state.beta) != 1.0 and not np.all(np.asarray(one.state.scale) == 1.0)


def test_models_of_one_spec_share_compiled_calls():
    a = RiverRegressor("bayes_linreg")
    a.learn_one({"a": 1.0, "b": 2.0}, 1.0)
    b = a.clone()
    b.learn_one({"a": 1.0, "b": 2.0}, 1.0)
    assert b._engine.learner is a._engine.learner and b._engine._sl._learn is a._engine._sl._learn
    X, y = _stream(20)
    s1, s2 = OnlineRegressor().fit(X, y), OnlineRegressor().fit(X, y)
    assert s1._engine._sl._learn is s2._engine._sl._learn


def test_river_bad_learner():
    with pytest.raises(ValueError, match="neither a function of onlinejax nor a registered"):
        RiverRegressor("no_such_learner")
    with pytest.raises(ValueError, match="takes none"):
        RiverRegressor("KernelRegression_WS32", {"window": 3}).learn_one({"a": 1.0}, 1.0)


def test_river_registered_configuration():
    """A zoo name works (here the thesis's windowed kernel regression in its state machine)."""
    X, y = _stream(40, d=2)
    model = RiverRegressor("KernelRegression_WS32")
    for x, yi in zip(_dicts(X, "ab"), y):
        model.learn_one(x, yi)
    assert np.isfinite(model.predict_one({"a": 0.0, "b": 0.0}))


# ------------------------------------------------------------------------------ scikit-learn
def test_sklearn_predict_matches_closed_form_and_partial_fit():
    X, y = _stream()
    model = OnlineRegressor("bayes_linreg", init_params={"alpha": ALPHA, "beta": BETA}).fit(X[:50], y[:50])
    model.partial_fit(X[50:100], y[50:100])
    mean, std = model.predict(X[100:], return_std=True)
    m, S = blr_posterior(X[:100], y[:100], ALPHA, BETA)
    mu, var = predictive(m, S, BETA, X[100:])
    np.testing.assert_allclose(mean, mu, rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(std, np.sqrt(var), rtol=tol(1e-9, 1e-4))
    lo, hi = model.predict_interval(X[100:], 0.95)
    np.testing.assert_allclose(hi - lo, 2 * 1.959963984540054 * std, rtol=1e-6)
    assert model.n_features_in_ == 3 and model.n_seen_ == 100
    # fit forgets what was learned before
    refit = model.fit(X[:50], y[:50])
    m, S = blr_posterior(X[:50], y[:50], ALPHA, BETA)
    np.testing.assert_allclose(refit.predict(X[100:]), predictive(m, S, BETA, X[100:])[0], rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))


def test_adapters_turn_on_the_persistent_compilation_cache_unless_told_not_to(tmp_path, monkeypatch):
    """The first learner an adapter builds turns the cache on in $ONLINEJAX_COMPILE_CACHE; 'none' opts out; a folder
    JAX already has is left as it is."""
    import jax
    from jax._src import compilation_cache

    from onlinejax.evaluation import ensure_compilation_cache

    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes")
    old = {k: getattr(jax.config, k) for k in keys}
    try:
        assert ensure_compilation_cache() == old["jax_compilation_cache_dir"]  # the suite's own folder: kept
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv("ONLINEJAX_COMPILE_CACHE", "none")
        assert ensure_compilation_cache() is None and jax.config.jax_compilation_cache_dir is None
        monkeypatch.setenv("ONLINEJAX_COMPILE_CACHE", str(tmp_path / "xla"))
        X, y = _stream()
        OnlineRegressor().fit(X[:20], y[:20])
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "xla") and (tmp_path / "xla").is_dir()
    finally:
        for k, v in old.items():
            jax.config.update(k, v)
        compilation_cache.reset_cache()


def test_sklearn_partial_fit_through_a_pipeline_keeps_the_fitted_transformers():
    """``partial_fit(pipe, ...)``: the first batch fits the scaler, later batches only pass through it, and the
    regressor equals the closed-form posterior of every row so far in the first batch's scaled coordinates."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    from onlinejax.adapters.sklearn import partial_fit

    X, y = _stream()
    X = X * [10.0, 0.1, 1.0] + 5.0
    pipe = make_pipeline(StandardScaler(), OnlineRegressor("bayes_linreg", init_params={"alpha": ALPHA, "beta": BETA}))
    assert partial_fit(pipe, X[:40], y[:40]) is pipe
    scaler = StandardScaler().fit(X[:40])
    partial_fit(pipe, X[40:100], y[40:100])
    np.testing.assert_array_equal(pipe[0].mean_, scaler.mean_)  # not refitted on the second batch
    Z = scaler.transform(X)
    m, S = blr_posterior(Z[:100], y[:100], ALPHA, BETA)
    mu, var = predictive(m, S, BETA, Z[100:])
    mean, std = pipe.predict(X[100:], return_std=True)
    np.testing.assert_allclose(mean, mu, rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(std, np.sqrt(var), rtol=tol(1e-9, 1e-4))
    assert pipe[-1].n_seen_ == 100
    with pytest.raises(TypeError, match="PolynomialFeatures.*partial_fit"):
        partial_fit(make_pipeline(StandardScaler(), PolynomialFeatures()), X, y)


def test_sklearn_probabilistic_scorers_match_scipy_and_pick_the_noise_level():
    """``log_score`` / ``neg_crps`` are the mean log density and minus the mean CRPS of the Gaussian predictive
    (scipy / closed form in float64); as a GridSearchCV scorer the log score picks the true noise precision,
    which a point score cannot (MAE picks the grid's edge)."""
    from scipy import stats
    from sklearn.model_selection import GridSearchCV, TimeSeriesSplit

    from onlinejax.adapters.sklearn import log_score, neg_crps

    X, y = _stream()
    model = OnlineRegressor("bayes_linreg", init_params={"alpha": ALPHA, "beta": BETA}).fit(X[:100], y[:100])
    mu, var = predictive(*blr_posterior(X[:100], y[:100], ALPHA, BETA), BETA, X[100:])
    sd = np.sqrt(var)
    assert log_score(model, X[100:], y[100:]) == pytest.approx(np.mean(stats.norm.logpdf(y[100:], mu, sd)),
                                                                rel=tol(1e-9, 1e-4))
    z = (y[100:] - mu) / sd
    crps = sd * (z * (2 * stats.norm.cdf(z) - 1) + 2 * stats.norm.pdf(z) - 1 / np.sqrt(np.pi))
    assert neg_crps(model, X[100:], y[100:]) == pytest.approx(-np.mean(crps), rel=tol(1e-9, 1e-4))
    rng = np.random.default_rng(4)
    Xs = rng.uniform(0, 10, (300, 3))
    ys = Xs @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.5, 300)  # noise precision 4
    grid = {"init_params__beta": [0.1, 1.0, 4.0, 100.0]}
    cv = TimeSeriesSplit(n_splits=3, test_size=50)
    best = GridSearchCV(OnlineRegressor("bayes_linreg", {"intercept": True}), grid, cv=cv, scoring=log_score).fit(Xs, ys)
    assert best.best_params_ == {"init_params__beta": 4.0}
    from sklearn.linear_model import Ridge
    with pytest.raises(TypeError, match="OnlineRegressor"):
        log_score(Ridge().fit(Xs, ys), Xs, ys)


def _mixture(n_features):
    """Two linear learners, one with a 4x wider noise, combined: a non-Gaussian mixture (module level: picklable)."""
    import onlinejax as oj

    return oj.combine([oj.bayes_linreg(n_features, alpha=ALPHA, beta=BETA),
                       oj.bayes_linreg(n_features, alpha=ALPHA, beta=BETA / 16, forgetting=0.9)])


@pytest.mark.parametrize("kind", ["student_t", "mixture"])
def test_sklearn_predict_interval_is_the_learners_own(kind):
    """``predict_interval`` is the learner's own central interval (Student-t or mixture quantiles, float64
    scipy references from the functional learner's predictions), not ``mean ± z·std``."""
    import onlinejax as oj
    from scipy import optimize, stats

    X, y = _stream(60, 2)
    lrn = oj.calibrated_bayes_linreg(2) if kind == "student_t" else _mixture(2)
    model = OnlineRegressor("calibrated_bayes_linreg" if kind == "student_t" else _mixture, tune_interval=0)
    model.fit(X[:40], y[:40])
    lo, hi = model.predict_interval(X[40:], 0.9)
    p = lrn.predict(lrn.learn(lrn.init(), X[:40], y[:40]), X[40:])
    if kind == "student_t":
        assert isinstance(p, oj.StudentTPrediction)
        ref = stats.t.ppf([[0.05], [0.95]], np.asarray(p.df, np.float64), np.asarray(p.mean, np.float64),
                          np.asarray(p.scale, np.float64))
    else:
        assert isinstance(p, oj.MixturePrediction)
        ref = np.empty((2, len(X) - 40))
        for i in range(ref.shape[1]):
            w, m, s = np.exp(np.asarray(p.log_weights[i], np.float64)), np.asarray(p.means[i], np.float64), np.sqrt(np.asarray(p.vars[i], np.float64))
            for j, q in enumerate((0.05, 0.95)):
                ref[j, i] = optimize.brentq(lambda t: np.sum(w * stats.norm.cdf(t, m, s)) - q, np.min(m - 40 * s),
                                            np.max(m + 40 * s), xtol=1e-14)
    np.testing.assert_allclose(lo, ref[0], rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(hi, ref[1], rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    mean, std = model.predict(X[40:], return_std=True)
    gauss = 1.6448536269514722 * std  # what mean ± z·std would give: the reference tells them apart
    assert np.max(np.abs((hi - lo) / 2 - gauss)) > 100 * tol(1e-9, 1e-4) * np.max(gauss)


def test_sklearn_clone_and_pickle_round_trip():
    X, y = _stream()
    model = OnlineRegressor("windowed_bayes_linreg", {"window": 32}, tune_interval=32).fit(X[:80], y[:80])
    c = clone(model)
    assert c.get_params() == model.get_params()
    assert not hasattr(c, "state_")
    with pytest.raises(NotFittedError):
        c.predict(X[:2])
    p = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(p.predict(X[80:]), model.predict(X[80:]))
    p.partial_fit(X[80:], y[80:])
    model.partial_fit(X[80:], y[80:])
    np.testing.assert_array_equal(p.predict(X[:10], return_std=True)[1], model.predict(X[:10], return_std=True)[1])
    # the clone fits to the same model
    np.testing.assert_array_equal(c.fit(X[:80], y[:80]).predict(X[80:]), clone(model).fit(X[:80], y[:80]).predict(X[80:]))


def _error(fn):
    """``(type, message)`` of what ``fn()`` raises."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test compares whatever is raised
        return type(e), str(e)
    raise AssertionError("did not raise")


def test_sklearn_bad_input_raises_what_sklearn_raises():
    """Each bad input raises the exception scikit-learn's own SGDRegressor (also online) raises, word for word."""
    from scipy import sparse
    from sklearn.linear_model import SGDRegressor
    from sklearn.utils.validation import check_array

    X, y = _stream(20)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    cases = {
        "too few features": lambda est: est.fit(X, y).predict(X[:, :2]),
        "partial_fit, too few features": lambda est: est.fit(X, y).partial_fit(X[:, :2], y),
        "inconsistent n": lambda est: est.fit(X, y[:5]),
        "1-d X": lambda est: est.fit(X[0], y[:1]),
        "1-d X to predict": lambda est: est.fit(X, y).predict(X[0]),
        "NaN": lambda est: est.fit(Xn, y),
        "complex": lambda est: est.fit(X + 1j, y),
        "empty": lambda est: est.fit(X[:0], y[:0]),
        "y None": lambda est: est.fit(X, None),
    }
    for what, call in cases.items():
        ours, ref = _error(lambda: call(OnlineRegressor())), _error(lambda: call(SGDRegressor()))
        assert ours[0] is ref[0] and issubclass(ours[0], ValueError), what
        assert ours[1] == ref[1].replace("SGDRegressor", "OnlineRegressor"), what
    ours = _error(lambda: OnlineRegressor().fit(sparse.csr_matrix(X), y))
    assert ours == _error(lambda: check_array(sparse.csr_matrix(X), accept_sparse=False, input_name="X"))
    assert ours[0] is TypeError


def test_default_sklearn_regressor_on_diabetes_matches_bayesian_ridge():
    """Raw diabetes features: the default (calibrated, intercept, tuned) is as accurate as BayesianRidge, and covers."""
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import BayesianRidge

    X, y = load_diabetes(return_X_y=True, scaled=False)
    idx = np.random.default_rng(3).permutation(len(y))
    tr, te = idx[:300], idx[300:]
    model = OnlineRegressor().fit(X[tr], y[tr])
    mae = np.mean(np.abs(y[te] - model.predict(X[te])))
    ref = np.mean(np.abs(y[te] - BayesianRidge().fit(X[tr], y[tr]).predict(X[te])))
    lo, hi = model.predict_interval(X[te])
    assert mae < 1.1 * ref
    assert 0.85 <= np.mean((y[te] >= lo) & (y[te] <= hi)) <= 1.0


def test_fits_of_any_length_share_one_learning_program():
    """The default learner tunes every 50 rows, so a fit learns in chunks up to 50 long: padded, every chunk
    length (25 and 50 in a 3-fold time-series split of 300 rows) runs one compiled call, and what is learned
    is the rows one by one."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(225, 4))
    y = X @ [1.0, -1.0, 0.5, 2.0] + rng.normal(size=225)
    model = OnlineRegressor().fit(X[:75], y[:75])
    programs = model._engine._sl._learn_first._cache_size()  # shared in the process: other tests may add some
    for n in (150, 225):
        model = OnlineRegressor().fit(X[:n], y[:n])
    assert model._engine._sl._learn_first._cache_size() == programs
    ref = oj.StatefulLearner(model._engine.learner)
    for i in range(225):
        ref.learn(X[i], y[i])
        if (i + 1) % 50 == 0:
            ref.tune()
    np.testing.assert_allclose(model.predict(X[:5]), np.asarray(ref.predict(X[:5]).mean, np.float64),
                               rtol=tol(1e-10, 1e-4))

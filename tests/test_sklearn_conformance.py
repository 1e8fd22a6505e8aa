"""scikit-learn conformance of :class:`onlinejax.adapters.sklearn.OnlineRegressor`: every check of
``check_estimator``, the nested hyperparameters in ``GridSearchCV`` (against Ridge and a manual
cross-validation loop), feature names (against Ridge's errors), and ``predict_interval`` at the
end of a ``Pipeline`` (against the closed-form Gaussian predictive)."""
import numpy as np
import pytest

from conftest import tol
from reference import blr_posterior, predictive

pytest.importorskip("sklearn")
pytest.importorskip("pandas")
from scipy.stats import norm  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import load_diabetes  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402
from sklearn.model_selection import GridSearchCV, KFold  # noqa: E402
from sklearn.pipeline import Pipeline, make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer, StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from onlinejax.adapters.sklearn import PREDICT_BLOCK, OnlineRegressor, predict_interval  # noqa: E402

pytestmark = pytest.mark.float32_only  # scikit-learn's API contracts (float32, the adapters' dtype)

ALPHAS = [0.1, 30.0, 3000.0]


def _diabetes(as_frame=False):
    """Diabetes with a centred target (the learners of the search have no intercept)."""
    X, y = load_diabetes(return_X_y=True, as_frame=as_frame)
    return X, y - y.mean()


@parametrize_with_checks([OnlineRegressor()])
def test_check_estimator(estimator, check):
    """Every check of scikit-learn's ``check_estimator``; none is declared as an expected failure."""
    check(estimator)


def test_nested_params_get_and_set():
    user = {"window": 8}
    model = OnlineRegressor("windowed_bayes_linreg", user)
    deep = model.get_params(deep=True)
    assert deep["learner_params__window"] == 8 and not any(k.startswith("init_params__") for k in deep)
    assert model.get_params(deep=False).items() <= deep.items()
    model.set_params(learner_params__window=16, init_params__alpha=2.0)  # init_params was None
    assert model.learner_params == {"window": 16} and model.init_params == {"alpha": 2.0}
    assert user == {"window": 8}, "the user's dict is not mutated"
    assert clone(model).get_params(deep=True) == model.get_params(deep=True)
    # a whole dict and one of its entries in one call: the entry wins
    model.set_params(init_params={"alpha": 1.0, "beta": 3.0}, init_params__alpha=5.0)
    assert model.init_params == {"alpha": 5.0, "beta": 3.0}
    with pytest.raises(ValueError, match="Invalid parameter"):
        model.set_params(no_such__alpha=1.0)
    with pytest.raises(TypeError, match="not a dict"):
        OnlineRegressor(init_params=3).set_params(init_params__alpha=1.0)
    # the set parameters are the ones used: same predictions as a model built with them
    X, y = _diabetes()
    a = model.set_params(init_params=None, init_params__alpha=2.0).fit(X, y).predict(X[:20])
    b = OnlineRegressor("windowed_bayes_linreg", {"window": 16}, {"alpha": 2.0}).fit(X, y).predict(X[:20])
    np.testing.assert_array_equal(a, b)


def _manual_cv_scores(X, y, alpha, cv):
    """R² of each fold: standardise on the training fold, then the posterior mean of Bayesian
    linear regression (prior precision ``alpha``, noise precision 1) by a direct solve."""
    scores = []
    for tr, te in cv.split(X):
        mu, sd = X[tr].mean(0), X[tr].std(0)
        m, _ = blr_posterior((X[tr] - mu) / sd, y[tr], alpha, 1.0)
        resid = y[te] - ((X[te] - mu) / sd) @ m
        scores.append(1.0 - resid @ resid / np.sum((y[te] - y[te].mean()) ** 2))
    return np.array(scores)


def test_grid_search_over_init_params_matches_ridge_and_a_manual_loop():
    X, y = _diabetes()
    cv = KFold(5)
    ours = GridSearchCV(make_pipeline(StandardScaler(), OnlineRegressor("bayes_linreg")),
                        {"onlineregressor__init_params__alpha": ALPHAS}, cv=cv).fit(X, y)
    # bayes_linreg's posterior mean with beta = 1 is Ridge's solution without intercept
    ridge = GridSearchCV(make_pipeline(StandardScaler(), Ridge(fit_intercept=False)),
                         {"ridge__alpha": ALPHAS}, cv=cv).fit(X, y)
    rename = {"param_ridge__alpha": "param_onlineregressor__init_params__alpha"}
    assert set(ours.cv_results_) == {rename.get(k, k) for k in ridge.cv_results_}
    assert ours.best_params_ == {"onlineregressor__init_params__alpha": ridge.best_params_["ridge__alpha"]}
    manual = np.array([_manual_cv_scores(X, y, a, cv) for a in ALPHAS])  # [alphas, folds]
    for i in range(cv.get_n_splits()):
        np.testing.assert_allclose(ours.cv_results_[f"split{i}_test_score"], manual[:, i], rtol=tol(1e-9, 1e-4))
        np.testing.assert_allclose(ridge.cv_results_[f"split{i}_test_score"], manual[:, i], rtol=1e-9)
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], manual.mean(1), rtol=tol(1e-9, 1e-4))
    assert len(set(np.round(manual.mean(1), 3))) == len(ALPHAS), "the alphas must score differently"
    assert ours.best_estimator_[-1].init_params == {"alpha": ours.best_params_["onlineregressor__init_params__alpha"]}
    assert np.all(np.isfinite(ours.best_estimator_.predict(X)))


def test_grid_search_over_learner_params():
    X, y = _diabetes()
    gs = GridSearchCV(make_pipeline(StandardScaler(), OnlineRegressor("windowed_bayes_linreg", {"window": 4})),
                      {"onlineregressor__learner_params__window": [8, 64]}, cv=3).fit(X, y)
    assert list(gs.cv_results_["param_onlineregressor__learner_params__window"]) == [8, 64]
    best = gs.best_params_["onlineregressor__learner_params__window"]
    assert gs.best_estimator_[-1].learner_params == {"window": best}
    assert np.all(np.isfinite(gs.best_estimator_.predict(X)))


def test_feature_names_are_checked_like_ridge():
    X, y = _diabetes(as_frame=True)
    model, ridge = OnlineRegressor().fit(X[:300], y[:300]), Ridge().fit(X[:300], y[:300])
    np.testing.assert_array_equal(model.feature_names_in_, ridge.feature_names_in_)
    assert model.n_features_in_ == X.shape[1]
    reordered, missing = X[300:][X.columns[::-1]], X[300:].drop(columns="bmi")
    for Xbad in (reordered, missing):
        with pytest.raises(ValueError) as ours:
            model.predict(Xbad)
        with pytest.raises(ValueError) as ref:
            ridge.predict(Xbad)
        assert str(ours.value) == str(ref.value)
        with pytest.raises(ValueError, match="feature names"):
            model.predict_interval(Xbad)
        with pytest.raises(ValueError, match="feature names"):
            clone(model).fit(X[:300], y[:300]).partial_fit(Xbad, y[300:])
    # put back in order, the columns give the predictions of the frame as fitted
    np.testing.assert_array_equal(model.predict(reordered[model.feature_names_in_]), model.predict(X[300:]))


def test_predictions_do_not_depend_on_the_batch():
    """Fixed-size predict blocks: a row predicts the same bits alone and in any batch, across blocks,
    and the predictions are the closed-form ones."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(PREDICT_BLOCK + 50, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.3, len(X))
    model = OnlineRegressor("calibrated_bayes_linreg").fit(X, y)
    full, std = model.predict(X, return_std=True)
    one = np.array([model.predict(x[None])[0] for x in X[PREDICT_BLOCK - 5:PREDICT_BLOCK + 5]])
    np.testing.assert_array_equal(one, full[PREDICT_BLOCK - 5:PREDICT_BLOCK + 5])
    np.testing.assert_array_equal(model.predict(X[::-1]), full[::-1])
    assert full.shape == std.shape == (len(X),)
    blr = OnlineRegressor("bayes_linreg", init_params={"alpha": 0.5, "beta": 4.0}).fit(X, y)
    m, S = blr_posterior(X, y, 0.5, 4.0)
    mu, var = predictive(m, S, 4.0, X)
    mean, sd = blr.predict(X, return_std=True)
    np.testing.assert_allclose(mean, mu, rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(sd, np.sqrt(var), rtol=tol(1e-9, 1e-4))


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_predict_interval_through_a_pipeline(level):
    X, y = _diabetes()
    model = OnlineRegressor("bayes_linreg", init_params={"alpha": 1.0, "beta": 1 / 3000})
    pipe = make_pipeline(StandardScaler(), model).fit(X, y)
    lo, hi = predict_interval(pipe, X[:50], level)
    z = norm.ppf(0.5 + level / 2)
    mean, std = pipe.predict(X[:50], return_std=True)  # Pipeline forwards return_std
    np.testing.assert_allclose(lo, mean - z * std, rtol=1e-6)
    np.testing.assert_allclose(hi, mean + z * std, rtol=1e-6)
    # the independent reference: the closed-form predictive on the standardised features
    Xs = (X - X.mean(0)) / X.std(0)
    m, S = blr_posterior(Xs, y, 1.0, 1 / 3000)
    mu, var = predictive(m, S, 1 / 3000, Xs[:50])
    np.testing.assert_allclose(lo, mu - z * np.sqrt(var), rtol=tol(1e-9, 1e-4))
    # a bare estimator, and a pipeline nested at the end of another
    np.testing.assert_array_equal(predict_interval(pipe[-1], pipe[0].transform(X[:50]), level)[1], hi)
    nested = Pipeline([("scale", StandardScaler()),
                       ("inner", make_pipeline(FunctionTransformer(), clone(pipe[-1])))]).fit(X, y)
    np.testing.assert_allclose(predict_interval(nested, X[:50], level)[0], lo, rtol=tol(1e-9, 1e-5))


def test_predict_interval_errors():
    X, y = _diabetes()
    with pytest.raises(TypeError, match="Ridge .* has no predict_interval"):
        predict_interval(make_pipeline(StandardScaler(), Ridge()).fit(X, y), X)
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        predict_interval(make_pipeline(StandardScaler(), OnlineRegressor()), X)
    with pytest.raises(ValueError, match="level"):
        predict_interval(OnlineRegressor().fit(X, y), X, 1.5)

"""The options of the linear learners, kernel regression and the random-feature GP as values (checked, hashable).

That the default records reproduce the learners as they were before the records is also what the float64 pinned
rows check (``tests/test_pinned_rows.py``: its thesis rows, windowed and forgetting, mapped or not, were recorded with
the keyword factories).
"""
import jax
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.evaluation import progressive_validation
from onlinejax.learners.kernel_regression import KernelRegressionOptions, kernel_regression
from onlinejax.learners.linear import (MAP_WINDOWED, MLE_WINDOWED, AdHocOptions, BayesOptions, NIGPrior, RandomFeatureModels,
                                       SGDOptions, ThesisFeatures, WindowedOptions)

pytestmark = pytest.mark.float32_only  # construction and equality; the bitwise check compares two equal programs


def _stream(rng, n, d=2):
    X = rng.uniform(-2, 2, size=(n, d))
    return X, X @ np.arange(1.0, d + 1.0) + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("field, bad", [
    ("bounds", "wide"), ("standardize", "yes"), ("tune_evidence", 1), ("capacity", 4), ("capacity", 9.5),
    ("onestep_floor", None), ("prior_floor", 0.0), ("prior_floor", 1.5),
])
def test_a_bad_windowed_field_is_a_value_error_naming_it(field, bad):
    # a switch that is not a bool is of the wrong type: a TypeError, also naming the field
    exc = TypeError if field in ("standardize", "tune_evidence", "onestep_floor") else ValueError
    with pytest.raises(exc, match=rf"^options\.{field}: "):
        oj.windowed_bayes_linreg(2, 8, options=WindowedOptions()._replace(**{field: bad}))
    with pytest.raises(exc, match=rf"^options\.{field}: "):
        oj.bayesian_map_windowed(2, 8, options=MAP_WINDOWED._replace(**{field: bad}))


@pytest.mark.parametrize("record, field, bad", [
    ("adhoc", "burn_in", -1), ("adhoc", "burn_in", 2.5), ("adhoc", "level", 1.0), ("adhoc", "floor", "tiny"),
    ("adhoc", "residual_forgetting", 0.0), ("features", "mapped", "yes"), ("features", "intercept", 1),
])
def test_a_bad_thesis_field_is_a_value_error_naming_it(record, field, bad):
    cls = {"adhoc": AdHocOptions, "features": ThesisFeatures}[record]
    exc = TypeError if record == "features" else ValueError  # the features are switches: bools
    for make in (oj.bayesian_mle_forgetting, oj.bayesian_map_forgetting):
        with pytest.raises(exc, match=rf"^{record}\.{field}: "):
            make(2, **{record: cls()._replace(**{field: bad})})


def test_a_record_is_given_as_a_record_and_old_keywords_are_gone():
    with pytest.raises(TypeError, match=r"^options: expected a WindowedOptions, got dict"):
        oj.windowed_bayes_linreg(2, 8, options={"capacity": 16})
    with pytest.raises(TypeError, match=r"^features: expected a ThesisFeatures, got tuple"):
        oj.bayesian_map_windowed(2, 8, features=(True, False))
    with pytest.raises(TypeError, match=r"^adhoc: expected an AdHocOptions, got int"):
        oj.bayesian_mle_forgetting(2, adhoc=50)
    for make, kw in ((oj.windowed_bayes_linreg, "capacity"), (oj.windowed_bayes_linreg, "bounds"),
                     (oj.bayesian_map_windowed, "mapped"), (oj.bayesian_mle_windowed, "onestep_floor"),
                     (oj.bayesian_map_forgetting, "burn_in"), (oj.bayesian_mle_forgetting, "intercept")):
        args = (2, 8) if "windowed" in make.__name__ else (2,)
        with pytest.raises(TypeError, match=kw):
            make(*args, **{kw: 1})


def test_a_thesis_windowed_record_keeps_the_thesis_model():
    """A record from scratch would carry the generic learner's bounds (and the MLE model's evidence tune):
    refused with the field named; the model's own record with a field changed is taken."""
    with pytest.raises(ValueError, match=r"^options\.bounds: the thesis's model has 'asymptotic'"):
        oj.bayesian_map_windowed(2, 8, options=oj.linear.WindowedOptions(capacity=16))
    with pytest.raises(ValueError, match=r"^options\.tune_evidence: "):
        oj.bayesian_mle_windowed(2, 8, options=MAP_WINDOWED)
    with pytest.raises(TypeError, match=r"^options: expected a WindowedOptions, got dict"):
        oj.bayesian_map_windowed(2, 8, options={"capacity": 16})
    buffer = jax.tree_util.tree_leaves(oj.bayesian_mle_windowed(2, 8, options=MLE_WINDOWED._replace(capacity=16)).init())[0]
    assert buffer.shape == (16, 2)  # the field changed, the thesis's model kept


def test_the_defaults_are_the_keyword_factorys():
    """The records' defaults are the values the factories' keywords had (a change here changes every learner)."""
    assert WindowedOptions() == ("bayes", True, True, None, True, None)
    assert MAP_WINDOWED == ("asymptotic", True, True, None, True, None)
    assert MLE_WINDOWED == ("asymptotic", True, False, None, True, None)
    assert ThesisFeatures() == (False, False)
    assert AdHocOptions() == (50, 0.95, "residual", 0.99)
    assert WindowedOptions().checked(8) == WindowedOptions(capacity=8)


def test_equal_records_build_the_same_learner():
    """The factory cache keys on the records' values, so a configuration built twice compiles once."""
    make = lambda: oj.bayesian_map_windowed(2, 8, features=ThesisFeatures(mapped=True),  # noqa: E731
                                            options=MAP_WINDOWED._replace(capacity=16, prior_floor=0.01))
    assert make() is make()
    assert oj.bayesian_mle_forgetting(2, adhoc=AdHocOptions(burn_in=5)) is oj.bayesian_mle_forgetting(
        2, adhoc=AdHocOptions(burn_in=5))
    assert oj.windowed_bayes_linreg(2, 8, options=WindowedOptions(capacity=16)) is not oj.windowed_bayes_linreg(2, 8)
    assert hash(WindowedOptions(prior_floor=0.01)) == hash(WindowedOptions(prior_floor=0.01))


def _run(lrn, X, Y, tune):
    s, preds = lrn.init(), []
    for lo in range(0, len(Y), 16):
        res = progressive_validation(lrn, s, X[lo:lo + 16], Y[lo:lo + 16])
        s = lrn.tune(res.state) if tune else res.state
        preds.append(res.predictions)
    return s, preds


@pytest.mark.parametrize("plain, spelled, tune", [
    (lambda: oj.windowed_bayes_linreg(2, 8, intercept=True),
     lambda: oj.windowed_bayes_linreg(2, 8, intercept=True,
                                      options=WindowedOptions("bayes", True, True, None, True, None)), True),
    (lambda: oj.bayesian_mle_windowed(2, 8),
     lambda: oj.bayesian_mle_windowed(2, 8, features=ThesisFeatures(False, False),
                                      options=WindowedOptions("asymptotic", True, False, None, True, None)), True),
    (lambda: oj.bayesian_map_windowed(1, 8, features=ThesisFeatures(mapped=True)),
     lambda: oj.bayesian_map_windowed(1, 8, features=ThesisFeatures(True, False),
                                      options=WindowedOptions("asymptotic", True, True, None, True, None)), True),
    (lambda: oj.bayesian_map_forgetting(2),
     lambda: oj.bayesian_map_forgetting(2, features=ThesisFeatures(False, False),
                                        adhoc=AdHocOptions(50, 0.95, "residual", 0.99)), False),
])
def test_default_records_are_the_default_learner_bitwise(rng, plain, spelled, tune):
    """Spelling the default records out gives the default learner's predictions (and tunes) bit for bit."""
    X, Y = _stream(rng, 80, d=2)
    a, b = plain(), spelled()
    X = X[:, :a.n_features]
    for u, v in zip(jax.tree_util.tree_leaves(_run(a, X, Y, tune)), jax.tree_util.tree_leaves(_run(b, X, Y, tune))):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


# The other short factories' records: BayesOptions, SGDOptions, KernelRegressionOptions, NIGPrior, RandomFeatureModels.


@pytest.mark.parametrize("make, record, bad, name", [
    (lambda o: oj.bayes_linreg(2, options=o), BayesOptions, {"tunable": "no"}, "options.tunable"),
    (lambda o: oj.sgd_linreg(2, options=o), SGDOptions, {"variance": "bogus"}, "options.variance"),
    (lambda o: kernel_regression(2, 8, options=o), KernelRegressionOptions, {"bounds": "wide"}, "options.bounds"),
    (lambda o: kernel_regression(2, 8, options=o), KernelRegressionOptions, {"interval": "both"}, "options.interval"),
    (lambda o: kernel_regression(2, 8, options=o), KernelRegressionOptions, {"alphas": (0.1, 0.0)}, "options.alphas"),
    (lambda o: kernel_regression(2, 8, options=o), KernelRegressionOptions, {"alphas": ()}, "options.alphas"),
    (lambda o: oj.nig_linreg(2, prior=o), NIGPrior, {"prior_df": 2.0}, "prior.prior_df"),
    (lambda o: oj.nig_linreg(2, prior=o), NIGPrior, {"noise_var": 0.0}, "prior.noise_var"),
    (lambda o: oj.random_feature_gp(2, 4, prior=o), NIGPrior, {"prior_precision": -1.0}, "prior.prior_precision"),
    (lambda o: oj.random_feature_gp(2, 4, models=o), RandomFeatureModels, {"discount": 0.0}, "models.discount"),
    (lambda o: oj.random_feature_gp(2, 4, models=o), RandomFeatureModels, {"forgetting": (1.0, 1.1)},
     "models.forgetting"),
    (lambda o: oj.random_feature_gp(2, 4, models=o), RandomFeatureModels, {"lengthscales": ()}, "models.lengthscales"),
])
def test_a_bad_field_of_the_other_records_names_it(make, record, bad, name):
    with pytest.raises(TypeError if name == "options.tunable" else ValueError, match=rf"^{name}: "):
        make(record()._replace(**bad))
    with pytest.raises(TypeError, match=rf"^{name.split('.')[0]}: expected an? "):
        make(dict(bad))


def test_the_other_defaults_are_the_keyword_factorys():
    assert BayesOptions() == (True,) and SGDOptions() == ("running",)
    assert KernelRegressionOptions() == ("asymptotic", "prediction", None, "constant")
    assert NIGPrior() == (1.0, 1.0, 4.0)
    assert RandomFeatureModels() == (None, (1.0, 0.99, 0.95), 0.99, None)
    for make, kw in ((oj.bayes_linreg, "tunable"), (oj.sgd_linreg, "variance"), (oj.nig_linreg, "noise_var"),
                     (oj.random_feature_gp, "lengthscales"), (oj.random_feature_gp, "discount")):
        with pytest.raises(TypeError, match=kw):
            make(2, **{kw: 1.0})
    with pytest.raises(TypeError, match="alphas"):
        kernel_regression(2, 8, alphas=(0.5,))
    assert kernel_regression(2, 8, options=KernelRegressionOptions(alphas=(0.5, 1.0))) is kernel_regression(
        2, 8, options=KernelRegressionOptions(alphas=(0.5, 1.0)))
    assert oj.random_feature_gp(2, 4, models=RandomFeatureModels((0.5, 1.0))) is oj.random_feature_gp(
        2, 4, models=RandomFeatureModels((0.5, 1.0)))


@pytest.mark.parametrize("plain, spelled, tune", [
    (lambda: oj.bayes_linreg(2, forgetting=0.95),
     lambda: oj.bayes_linreg(2, forgetting=0.95, options=BayesOptions(True)), True),
    (lambda: oj.sgd_linreg(2), lambda: oj.sgd_linreg(2, options=SGDOptions("running")), False),
    (lambda: kernel_regression(2, 8), lambda: kernel_regression(2, 8, options=KernelRegressionOptions(
        "asymptotic", "prediction", None)), True),
    (lambda: oj.nig_linreg(2, intercept=True),
     lambda: oj.nig_linreg(2, intercept=True, prior=NIGPrior(1.0, 1.0, 4.0)), False),
    (lambda: oj.random_feature_gp(2, 4), lambda: oj.random_feature_gp(
        2, 4, models=RandomFeatureModels(None, (1.0, 0.99, 0.95), 0.99), prior=NIGPrior(0.1, 0.5, 4.0)), False),
])
def test_the_other_default_records_are_the_default_learner_bitwise(rng, plain, spelled, tune):
    X, Y = _stream(rng, 48, d=2)
    outs = [_run(make(), X, Y, tune) for make in (plain, spelled)]
    for u, v in zip(jax.tree_util.tree_leaves(outs[0]), jax.tree_util.tree_leaves(outs[1])):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))

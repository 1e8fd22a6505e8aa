import jax
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.evaluation import progressive_validation
from conftest import tol
from reference import rel_err
from test_progressive import count_compiles


@pytest.mark.parametrize("make", [lambda: oj.bayes_linreg(3, alpha=0.5, beta=2.0),
                                  lambda: oj.windowed_bayes_linreg(3, 5),
                                  lambda: oj.bayesian_mle_forgetting(3, adhoc=oj.AdHocOptions(burn_in=4))])
def test_stateful_step_equals_functional(rng, make):
    lrn = make()
    X = rng.normal(size=(30, 3))
    Y = X @ [1.0, 2.0, 3.0] + 0.1 * rng.normal(size=30)
    ref = progressive_validation(lrn, lrn.init(), X, Y)
    m = oj.StatefulLearner(lrn)
    preds = [m.step(x, y) for x, y in zip(X, Y)]
    assert rel_err([p.mean for p in preds], ref.predictions.mean) < tol(1e-12, 1e-5)
    assert rel_err([p.var for p in preds], ref.predictions.var) < tol(1e-12, 1e-5)
    # the packed state round-trips exactly, int32 counters included
    for a, b in zip(jax.tree_util.tree_leaves(m.state), jax.tree_util.tree_leaves(ref.state)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol(1e-12, 1e-5), atol=1e-6)
    p = m.predict(X[:4])
    assert p.mean.shape == (4,)
    m.learn(X[:4], Y[:4])
    assert count_compiles(lambda: [m.step(x, float(y)) for x, y in zip(X[:5], Y[:5])]) == 0


def test_stateful_bad_input():
    m = oj.StatefulLearner(oj.bayes_linreg(2))
    with pytest.raises(ValueError, match="x"):
        m.step([1.0, np.nan], 1.0)
    with pytest.raises(ValueError, match="x"):
        m.step([1.0, 2.0, 3.0], 1.0)
    with pytest.raises(ValueError, match="y"):
        m.step([1.0, 2.0], float("nan"))


@pytest.mark.parametrize("x, y", [(5.0, 1.0), ([5.0], 1.0), ([[1.0, 2.0]], 1.0), ([[1.0, 2.0]], [1.0])])
def test_stateful_step_rejects_non_items(x, y):
    """A scalar, length-1 or [1, d] x is refused (as the functional API does) and nothing is learnt."""
    lrn = oj.bayes_linreg(2)
    m = oj.StatefulLearner(lrn)
    before = [np.asarray(a).copy() for a in jax.tree_util.tree_leaves(m.state)]
    with pytest.raises(ValueError, match="^x: "):
        m.step(x, y)
    for a, b in zip(jax.tree_util.tree_leaves(m.state), before):
        np.testing.assert_array_equal(np.asarray(a), b)
    with pytest.raises(ValueError, match="^y: "):
        m.step([1.0, 2.0], [1.0])


def test_instances_of_one_learner_share_compiled_calls():
    """A second StatefulLearner of the same learner and state layout compiles nothing."""
    lrn = oj.bayes_linreg(3)
    a = oj.StatefulLearner(lrn)
    a.step(np.ones(3), 1.0)
    b = oj.StatefulLearner(lrn, lrn.init(alpha=2.0))
    assert b._step is a._step and b._learn is a._learn and b._predict is a._predict
    before = a._step._cache_size()
    b.step(np.ones(3), 1.0)
    assert a._step._cache_size() == before
    # and the states stay separate
    assert float(np.asarray(b.state.alpha)[0]) == 2.0 and float(np.asarray(a.state.alpha)[0]) == 1.0


@pytest.mark.parametrize("make", [lambda: oj.calibrated(oj.bayes_linreg(3, intercept=True)),
                                  lambda: oj.combine([oj.bayes_linreg(3), oj.windowed_bayes_linreg(3, 8)])])
def test_stateful_returns_the_learners_own_distribution(rng, make):
    """A Student-t or mixture learner's step and predict return that distribution (its type and every leaf), as
    progressive validation does, not a Gaussian of its variance."""
    lrn = make()
    X = rng.normal(size=(20, 3))
    Y = X @ [1.0, -1.0, 0.5] + 0.3 * rng.normal(size=20)
    ref = progressive_validation(lrn, lrn.init(), X, Y)
    m = oj.StatefulLearner(lrn)
    preds = [m.step(x, y) for x, y in zip(X, Y)]
    assert type(preds[0]) is type(ref.predictions) and type(preds[0]) is not oj.Prediction
    for i, p in enumerate(preds):
        for a, b in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(ref.predictions)):
            assert isinstance(a, np.ndarray) and a.shape == b.shape[1:]
            np.testing.assert_allclose(a, np.asarray(b[i]), rtol=tol(1e-12, 1e-5), atol=1e-7)
    lo, hi = m.predict(X[:4]).interval(0.95)
    ref_lo, ref_hi = lrn.predict(m.state, X[:4]).interval(0.95)
    np.testing.assert_allclose(np.asarray(lo), np.asarray(ref_lo), rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(np.asarray(hi), np.asarray(ref_hi), rtol=tol(1e-12, 1e-5))


def test_learn_padded_learns_the_rows_one_by_one_with_one_program(rng):
    """Blocks of every length up to ``size`` learn as the rows one at a time, and share one compiled call."""
    lrn = oj.calibrated_bayes_linreg(3)
    X = rng.normal(size=(40, 3))
    Y = X @ [1.0, -2.0, 0.5] + 0.3 * rng.normal(size=40)
    m = oj.StatefulLearner(lrn)
    s = lrn.init()
    m.learn_padded(X[:0 + 1], Y[:1], 16)  # the program for blocks of 16 (shared in the process: others may exist)
    s = lrn.learn(s, X[0], Y[0])
    programs = m._learn_first._cache_size()
    start = 1
    for n in (7, 16, 1, 15):
        m.learn_padded(X[start:start + n], Y[start:start + n], 16)
        for i in range(start, start + n):
            s = lrn.learn(s, X[i], Y[i])
        start += n
    for a, b in zip(jax.tree_util.tree_leaves(m.state), jax.tree_util.tree_leaves(s)):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol(1e-12, 1e-5),
                                   atol=tol(1e-12, 1e-6))
    assert m._learn_first._cache_size() == programs
    for bad in (X[:0], X[:17]):
        with pytest.raises(ValueError, match="learn_padded takes a batch of 1 to 16"):
            m.learn_padded(bad, Y[:len(bad)], 16)
    with pytest.raises(ValueError, match="size"):
        m.learn_padded(X[:2], Y[:2], 0)


def test_stateful_tune_is_the_learners_tune(rng):
    lrn = oj.calibrated_bayes_linreg(2)
    X = rng.normal(size=(60, 2))
    Y = X @ [1.0, 2.0] + 0.5 * rng.normal(size=60)
    m = oj.StatefulLearner(lrn).learn(X, Y)
    ref = lrn.tune(m.state)
    m.tune()
    for a, b in zip(jax.tree_util.tree_leaves(m.state), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol(1e-12, 1e-5))
    with pytest.raises(ValueError, match="this learner has no tune"):
        oj.StatefulLearner(oj.climatology(2)).tune()

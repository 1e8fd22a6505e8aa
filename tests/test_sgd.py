from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import onlinejax as oj
from onlinejax.learners.linear import sgd
from conftest import DTYPE, tol
from reference import rel_err


def test_sgd_matches_numpy_loop(rng):
    X = rng.normal(size=(200, 3))
    Y = X @ [1.0, -1.0, 0.5] + 2.0 + 0.1 * rng.normal(size=200)
    lr, decay, v0 = 0.05, 0.9, 2.0
    lrn = oj.sgd_linreg(3, optax.sgd(lr), noise_var=v0, decay=decay, intercept=True)
    s = lrn.init()
    w = np.zeros(4)
    v = v0
    for x, y in zip(X, Y):
        p = lrn.predict(s, x)
        xi = np.append(x, 1.0)
        assert float(p.mean) == pytest.approx(xi @ w, rel=tol(1e-9, 1e-3), abs=tol(1e-9, 1e-4))
        assert float(p.var) == pytest.approx(v, rel=tol(1e-9, 1e-4))
        r = y - xi @ w
        v = decay * v + (1 - decay) * r * r
        w = w + lr * r * xi
        s = lrn.learn(s, x, y)
    assert rel_err(s.weights, w) < tol(1e-9, 1e-4)


def test_fixed_variance_and_errors():
    lrn = oj.sgd_linreg(2, noise_var=0.3, options=oj.SGDOptions(variance="fixed"))
    s = lrn.learn(lrn.init(), np.ones((4, 2)), np.ones(4))
    assert float(lrn.predict(s, np.ones(2)).var) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="variance"):
        oj.sgd_linreg(2, options=oj.SGDOptions(variance="bogus"))
    with pytest.raises(ValueError, match="noise_var"):
        oj.sgd_linreg(2, noise_var=0.0)
    with pytest.raises(ValueError, match="decay"):
        oj.sgd_linreg(2, decay=1.0)


def test_module_functions_are_the_learners_core(rng):
    # the pure functions of the module, called directly, give the Learner's states and predictions
    opt = optax.adam(0.05)
    X, Y = jnp.asarray(rng.normal(size=(20, 2)), DTYPE), jnp.asarray(rng.normal(size=20), DTYPE)
    lrn = oj.sgd_linreg(2, opt, decay=0.9, intercept=False)
    s, t = lrn.init(), sgd.init(2, opt, decay=0.9)
    learn = jax.jit(partial(sgd.learn_one, optimizer=opt))
    for i in range(10):
        s, t = lrn.learn(s, X[i], Y[i]), learn(t, X[i], Y[i])
    s = lrn.learn(s, X[10:], Y[10:])
    t = jax.jit(partial(sgd.learn_batch, optimizer=opt))(t, X[10:], Y[10:])
    for u, v in zip(jax.tree.leaves(s), jax.tree.leaves(t)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-6))
    p, q = lrn.predict(s, X[:3]), sgd.predict_batch(t, X[:3])
    np.testing.assert_allclose(p.mean, q.mean, rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(p.var, q.var, rtol=tol(1e-12, 1e-5))
    assert float(sgd.predict_one(t, X[0]).var) == float(t.resid_var)


def test_nonfinite_item_and_batch_are_skipped(rng):
    lrn = oj.sgd_linreg(2, optax.sgd(0.1))
    s = lrn.learn(lrn.init(), rng.normal(size=(4, 2)), rng.normal(size=4))
    f = jax.jit(lrn.learn)
    t = f(s, jnp.asarray([np.nan, 1.0], DTYPE), jnp.asarray(0.5, DTYPE))  # one item: the boundary's skip
    assert int(t.n_skipped) == 1 and int(t.n_seen) == 4
    np.testing.assert_array_equal(t.weights, s.weights)
    X = jnp.asarray(rng.normal(size=(3, 2)), DTYPE)
    t = f(s, X, jnp.asarray([0.0, np.inf, 1.0], DTYPE))  # a batch is skipped whole by learn_batch
    assert int(t.n_skipped) == 3 and int(t.n_seen) == 4
    np.testing.assert_array_equal(t.weights, s.weights)


@pytest.mark.parametrize("make", [lambda: oj.sgd_linreg(2), lambda: oj.bayes_linreg(2),
                                  lambda: oj.windowed_bayes_linreg(2, 5)])
def test_empty_batch_is_a_no_op(make):
    """An empty mini-batch (``x: [0, d]``) leaves the state as it is (sgd's mean gradient would be 0/0)."""
    lrn = make()
    s = lrn.learn(lrn.init(), np.ones((3, 2)), np.arange(3.0))
    X0, Y0 = np.zeros((0, 2)), np.zeros(0)
    for new in (lrn.learn(s, X0, Y0), lrn.step(s, X0, Y0)[0]):
        for a, b in zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(s)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert lrn.step(s, X0, Y0)[1].mean.shape == (0,)


def test_sgd_learn_batch_core_skips_an_empty_batch():
    """The pure core too: inside jit an empty batch takes no step."""
    opt = optax.sgd(0.1)
    s = sgd.init(2, opt)
    new = jax.jit(partial(sgd.learn_batch, optimizer=opt))(s, jnp.zeros((0, 2)), jnp.zeros(0))
    assert np.isfinite(np.asarray(new.weights)).all() and int(new.n_seen) == 0

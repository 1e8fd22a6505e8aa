import numpy as np
import optax
import pytest

import onlinejax as oj
from conftest import tol
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
    lrn = oj.sgd_linreg(2, variance="fixed", noise_var=0.3)
    s = lrn.learn(lrn.init(), np.ones((4, 2)), np.ones(4))
    assert float(lrn.predict(s, np.ones(2)).var) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="variance"):
        oj.sgd_linreg(2, variance="bogus")
    with pytest.raises(ValueError, match="noise_var"):
        oj.sgd_linreg(2, noise_var=0.0)
    with pytest.raises(ValueError, match="decay"):
        oj.sgd_linreg(2, decay=1.0)

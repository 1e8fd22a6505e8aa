"""The GP's module-level anatomy (onlinejax.learners.gp.window): pure cores, the factory's binding, pair-kernel callables."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax.evaluation import progressive_validation
from onlinejax.learners.gp import GPTuneOptions, GPWindowOptions, gp_window, window as gpw
from onlinejax.learners.gp.kernels import KERNELS, gp_params, resolve_kernel, squared_exponential
from onlinejax.learners.gp.params import signal_var
from conftest import tol

pytestmark = pytest.mark.float32_only  # the GP's module structure


def _stream(rng, n, d=2):
    X = rng.uniform(0, 10, size=(n, d))
    return X, np.sin(X[:, 0]) + np.cos(X[:, -1]) + 0.1 * rng.normal(size=n)


def _same(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def _user_se(p, x1, x2):
    """SE-ARD written by a user for one pair (thesis eq. 4.27), not the library's function."""
    z = (x1 - x2) / jnp.exp(p.log_lengthscale)
    return jnp.exp(2.0 * p.log_signal_std) * jnp.exp(-0.5 * jnp.sum(z * z))


def test_builtin_function_as_callable_is_bitwise_the_named_kernel(rng):
    X, Y = _stream(rng, 60)
    named, func = gp_window(2, 16, kernel="se"), gp_window(2, 16, kernel=squared_exponential)
    a = progressive_validation(named, named.init(), X, Y)
    b = progressive_validation(func, func.init(), X, Y)
    _same(a, b)
    _same(named.tune(a.state), func.tune(b.state))


def test_user_pair_kernel_equal_to_se_gives_the_same_predictions(rng):
    """A user's callable takes the vmapped path (cross/gram lift it); its predictions and tune equal ``kernel="se"``."""
    X, Y = _stream(rng, 60)
    named, user = gp_window(2, 16, kernel="se"), gp_window(2, 16, kernel=_user_se)
    a = progressive_validation(named, named.init(), X, Y)
    b = progressive_validation(user, user.init(), X, Y)
    np.testing.assert_allclose(np.asarray(b.predictions.mean), np.asarray(a.predictions.mean), rtol=tol(1e-10, 1e-4),
                               atol=tol(1e-10, 1e-4))
    np.testing.assert_allclose(np.asarray(b.predictions.var), np.asarray(a.predictions.var), rtol=tol(1e-10, 1e-4))
    ta, tb = named.tune(a.state), user.tune(b.state)
    pa, pb = named.predict(ta, X[:5]), user.predict(tb, X[:5])
    np.testing.assert_allclose(np.asarray(pb.mean), np.asarray(pa.mean), rtol=tol(1e-6, 1e-2), atol=tol(1e-6, 1e-2))


@pytest.mark.parametrize("bad", ["rbf2", 3, None, lambda p, x: 1.0, lambda p, x1, x2: x1 - x2,
                                 lambda p, x1, x2: jnp.ones(3) @ x1])
def test_bad_kernel_raises_naming_kernel(bad):
    with pytest.raises(ValueError, match="kernel"):
        gp_window(2, 8, kernel=bad)


def test_resolve_kernel():
    assert resolve_kernel("matern32", 3) is KERNELS["matern32"]
    assert resolve_kernel(_user_se, 3) is _user_se


def test_module_cores_are_the_learner(rng):
    """init / step_one / predict_one / evict / tune at module level, with the factory's static options,
    give the learner's states and predictions bit for bit."""
    X, Y = _stream(rng, 30)
    lrn = gp_window(2, 8, kernel="matern52", mean="ols")
    opts = dict(kernel=KERNELS["matern52"], mean="ols")
    s_l, s_m = lrn.init(), gpw.init(2, 8, mean="ols")
    _same(s_l, s_m)
    step = jax.jit(lambda s, x, y: gpw.step_one(s, x, y, **opts))
    for x, y in zip(X, Y):
        s_l, p_l = lrn.step(s_l, x, y)
        s_m, p_m = step(s_m, jnp.asarray(x, s_m.y.dtype), jnp.asarray(y, s_m.y.dtype))
        _same((s_l, p_l), (s_m, p_m))
    predict = jax.jit(lambda s, x: gpw.predict_one(s, x, kernel=opts["kernel"]))
    _same(lrn.predict(s_l, X[0]), predict(s_m, jnp.asarray(X[0], s_m.y.dtype)))
    _same(lrn.evict(s_l), jax.jit(lambda s: gpw.evict(s, mean="ols"))(s_m))
    _same(lrn.tune(s_l), jax.jit(lambda s: gpw.tune(s, **opts))(s_m))


@pytest.mark.parametrize("freeze, mean", [(False, "ols"), (True, "average")])
def test_boundary_skips_nonfinite_items(rng, freeze, mean):
    """Inside jit the boundary (make_learner(skip_nonfinite=True)) leaves the state unchanged except n_skipped.
    An infinite input reaches the OLS mean's SVD fallback, which LAPACK never returned from; it is NaN now."""
    X, Y = _stream(rng, 12)
    lrn = gp_window(2, 8, mean=mean, window_options=GPWindowOptions(freeze_when_full=freeze))
    s = lrn.learn(lrn.init(), X[:6], Y[:6])
    step = jax.jit(lrn.step)
    for x, y in ((np.array([np.nan, 1.0]), 1.0), (np.array([-np.inf, 1.0]), 1.0), (X[7], np.inf)):
        t, p = step(s, x, y)
        _same(t._replace(n_skipped=s.n_skipped), s)
        assert int(t.n_skipped) == int(s.n_skipped) + 1
        assert p.mean.shape == () and p.var.shape == ()
    t = jax.jit(lrn.learn)(s, np.where(np.arange(12)[:, None] == 3, np.inf, X), Y)  # a batch with one bad row
    assert int(t.n_skipped) == 1 and int(t.n_seen) == (8 if freeze else 17)


def test_tune_hyperparameters_is_its_named_pieces(rng):
    """tune_hyperparameters = tune_window -> tune_objective -> tune_start -> tune_restart (each) -> select_restart."""
    W = 24
    X, Y = _stream(rng, W)
    X, Y, valid = jnp.asarray(X), jnp.asarray(Y), jnp.arange(W) >= 3
    X, Y = X.astype(jnp.zeros(()).dtype), Y.astype(jnp.zeros(()).dtype)
    kern, p0 = KERNELS["se"], gp_params(2, 1.0, 0.3, 2.0)
    opts = GPTuneOptions(noise_floor=1e-3, lengthscale_prior=2.0)
    kw = opts._asdict()

    @jax.jit
    def pieces(p):
        w = gpw.tune_window("average", X, Y, valid, kw["noise_floor"], p.log_noise_std.dtype)
        loss = lambda t: gpw.tune_objective(t, w, kern, kw["lengthscale_prior"])  # noqa: E731
        base = gpw.tune_start(loss, w, p, True)
        starts = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), base)
        starts = starts._replace(log_lengthscale=starts.log_lengthscale.at[1].add(jnp.where(w.spread, jnp.log(0.3), 0.0)),
                                 log_noise_std=starts.log_noise_std.at[1].add(jnp.log(10.0)))
        active = jnp.asarray([True, True])
        ps, ls, l_starts = jax.lax.map(lambda a: gpw.tune_restart(loss, *a, steps=20), (starts, active))
        return gpw.select_restart(w, ps, ls, l_starts[0], active, base, p)

    whole = jax.jit(lambda p: gpw.tune_hyperparameters(kern, "average", p, X, Y, valid, tune_options=opts))(p0)
    _same(pieces(p0), whole)
    assert float(jnp.exp(2 * whole.log_noise_std)) >= kw["noise_floor"] * float(jnp.var(Y[3:])) * (1 - tol(1e-9, 1e-4))
    assert float(signal_var(whole)) > 0

"""Kernels with hyperparameters of their own: the periodic kernel, sums and products (tinygp style: written for
one pair of points, lifted by ``vmap``), checked against float64 numpy and used by the sliding-window GP."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax.evaluation import progressive_validation
from onlinejax.learners.gp import GPHyper, GPTuneOptions, GPWindowOptions, as_kernel, gp_window, linear, periodic
from onlinejax.learners.gp.kernels import cross, gp_params, gram
from onlinejax.learners.gp.params import SUMMED_TERMS_FLOOR_SHARE, noise_floor_rel
from conftest import DTYPE, tol
from reference import gp_predict

LS = np.array([0.7, 1.9])
SF = 1.3
REL_SIGNAL, REL_LS = 0.4, np.array([0.2, -0.3])  # the right-hand term's own amplitude and lengthscales (logs)


def _np_se(A, B, sv, ls):
    return sv * np.exp(-0.5 * (((A[:, None] - B[None]) / ls) ** 2).sum(-1))


def _np_matern32(A, B, sv, ls):
    r = np.sqrt((((A[:, None] - B[None]) / ls) ** 2).sum(-1))
    return sv * (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)


def _np_periodic(A, B, sv, period, lam):
    return sv * np.exp(-2.0 * ((np.sin(np.pi * (A[:, None] - B[None]) / period) / lam) ** 2).sum(-1))


PERIOD, LAM = 3.0, 0.8
CASES = {
    "periodic": (lambda: periodic(PERIOD, LAM), lambda A, B: _np_periodic(A, B, SF**2, PERIOD, LAM)),
    "se+periodic": (lambda: as_kernel("se") + periodic(PERIOD, LAM),
                    lambda A, B: _np_se(A, B, SF**2, LS) + _np_periodic(A, B, SF**2 * np.exp(2 * REL_SIGNAL), PERIOD, LAM)),
    "se*periodic": (lambda: as_kernel("se") * periodic(PERIOD, LAM),
                    lambda A, B: _np_se(A, B, SF**2, LS) * _np_periodic(A, B, 1.0, PERIOD, LAM)),
    "linear": (lambda: linear(), lambda A, B: SF**2 * (A @ B.T) / A.shape[1]),
    "se+linear": (lambda: as_kernel("se") + linear(),
                  lambda A, B: _np_se(A, B, SF**2, LS) + SF**2 * np.exp(2 * REL_SIGNAL) * (A @ B.T) / A.shape[1]),
    "matern32+se": (lambda: "matern32" + as_kernel("se"),
                    lambda A, B: _np_matern32(A, B, SF**2, LS)
                    + _np_se(A, B, SF**2 * np.exp(2 * REL_SIGNAL), LS * np.exp(REL_LS))),
}


def _params(kern):
    """Parameters with the right-hand term's own amplitude and lengthscales away from their 0 start."""
    p = gp_params(2, SF, 0.1, jnp.asarray(LS, DTYPE), DTYPE, kernel=kern)
    if isinstance(p.extra, tuple) and len(p.extra) == 2:  # a sum or product: (left's, the right term's own)
        left, own = p.extra
        if "log_rel_lengthscale" in own:
            own = dict(own, log_rel_lengthscale=jnp.asarray(REL_LS, DTYPE))
        if "log_rel_signal_std" in own:
            own["log_rel_signal_std"] = jnp.asarray(REL_SIGNAL, DTYPE)
        p = p._replace(extra=(left, own))
    return p


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_matches_the_float64_reference_pair_by_pair_and_as_a_matrix(case, rng):
    make, ref = CASES[case]
    kern = make()
    p = _params(kern)
    X1 = rng.uniform(0, 4, (6, 2))
    X2 = np.concatenate([X1[:2], rng.uniform(0, 4, (3, 2))])  # duplicates: r = 0
    A, B = jnp.asarray(X1, DTYPE), jnp.asarray(X2, DTYPE)
    K_ref = ref(X1, X2)
    lifted = lambda q: jax.vmap(lambda a: jax.vmap(lambda b: kern(q, a, b))(B))(A)  # noqa: E731  one pair, lifted
    np.testing.assert_allclose(np.asarray(lifted(p)), K_ref, rtol=tol(1e-12, 2e-5), atol=tol(1e-13, 1e-6))
    np.testing.assert_allclose(np.asarray(gram(kern, p, A, B)), K_ref, rtol=tol(1e-12, 2e-5), atol=tol(1e-13, 1e-6))
    np.testing.assert_allclose(np.asarray(cross(kern, p, A, B[3])), K_ref[:, 3], rtol=tol(1e-12, 2e-5),
                               atol=tol(1e-13, 1e-6))
    G = jnp.asarray(rng.normal(size=K_ref.shape), DTYPE)  # the matrix path differentiates like the pair kernel
    g1 = jax.grad(lambda q: jnp.sum(G * gram(kern, q, A, B)))(p)
    g2 = jax.grad(lambda q: jnp.sum(G * lifted(q)))(p)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        assert np.all(np.isfinite(np.asarray(a)))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol(1e-10, 1e-4), atol=tol(1e-11, 1e-4))
    K = np.asarray(gram(kern, p, A, A), np.float64)
    assert np.linalg.eigvalsh(0.5 * (K + K.T)).min() > -tol(1e-12, 1e-5) * np.abs(K).max()  # a covariance


@pytest.mark.parametrize("case", ["se+periodic", "se*periodic", "se+linear"])
def test_gp_with_a_composed_kernel_predicts_as_a_direct_solve(case, rng):
    """Every prediction of ``gp_window`` equals a float64 solve on its window with the same kernel matrix."""
    make, ref = CASES[case]
    kern, W = make(), 12
    lrn = gp_window(2, W, kernel=kern, mean="zero", initial=GPHyper(noise_std=0.3),
                    window_options=GPWindowOptions(adapt_scale=False))
    s0 = lrn.init(signal_std=SF, lengthscale=jnp.asarray(LS, DTYPE))
    s0 = s0._replace(params=_params(kern)._replace(log_noise_std=s0.params.log_noise_std))
    X = rng.uniform(0, 4, (30, 2))
    Y = np.sin(X[:, 0] * 2.0) + 0.3 * rng.normal(size=30)
    res = progressive_validation(lrn, s0, jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)).predictions
    summed = SF**2 * np.exp(2 * REL_SIGNAL) if "+" in case else 0.0  # a sum's other term counts in the floor
    nv = 0.09 + noise_floor_rel(DTYPE) * (SF**2 + SUMMED_TERMS_FLOOR_SHARE * summed)
    for t in range(1, 30):
        lo = max(0, t - W)
        K = ref(X[lo:t], X[lo:t]) + nv * np.eye(t - lo)
        ks = ref(X[lo:t], X[t:t + 1])[:, 0]
        mu = ks @ np.linalg.solve(K, Y[lo:t])
        var = ref(X[t:t + 1], X[t:t + 1])[0, 0] - ks @ np.linalg.solve(K, ks) + nv
        assert abs(float(res.mean[t]) - mu) < tol(1e-9, 2e-3), t
        assert abs(float(res.var[t]) - var) < tol(1e-9, 2e-3) * var, t


@pytest.mark.slow  # CI time: the getting-started guide's airline block makes the same comparison in every run
def test_a_seasonal_kernel_extrapolates_the_season(rng):
    """Tuned on four seasons of a trending seasonal series, SE + periodic predicts the next two seasons several
    times better than SE alone, and its tuned period stays at the true 12."""
    t = np.arange(72.0)
    y = 2.0 * np.sin(2 * np.pi * t / 12.0) + 0.05 * t + 0.2 * rng.normal(size=72)
    T = jnp.asarray(t[:, None], DTYPE)
    mse, tuned = {}, {}
    for name, kern in (("se", "se"), ("se+periodic", as_kernel("se") + periodic(12.0))):
        lrn = gp_window(1, 48, kernel=kern, mean="ols")
        s = lrn.tune(lrn.learn(lrn.init(), T[:48], jnp.asarray(y[:48], DTYPE)))
        mse[name] = float(np.mean((np.asarray(lrn.predict(s, T[48:]).mean) - y[48:]) ** 2))
        tuned[name] = s.params
    assert mse["se+periodic"] < 0.25 * mse["se"], mse
    assert mse["se+periodic"] < 0.5, mse  # noise variance 0.04, season amplitude 2 (variance 2)
    period = float(np.exp(tuned["se+periodic"].extra[1]["extra"]["log_period"][0]))
    assert abs(period - 12.0) < 0.5, period


@pytest.mark.float32_only  # the batching of the kernel's own hyperparameters; the numerics are tested in both
def test_composed_kernels_vmap_over_streams(rng):
    kern = as_kernel("se") + periodic(5.0)
    lrn = gp_window(1, 6, kernel=kern, tune_options=GPTuneOptions(steps=2, restarts=1))
    X = jnp.asarray(rng.uniform(0, 10, (2, 12, 1)), DTYPE)
    Y = jnp.sin(X[..., 0])

    def run(x, y):
        s = lrn.tune(lrn.learn(lrn.init(), x[:6], y[:6]))
        return s, progressive_validation(lrn, s, x[6:], y[6:]).predictions.mean

    states, together = jax.jit(jax.vmap(run))(X, Y)
    assert states.params.extra[1]["extra"]["log_period"].shape == (2, 1)
    for i in range(2):
        one_state, one = jax.jit(run)(X[i], Y[i])
        np.testing.assert_allclose(np.asarray(together[i]), np.asarray(one), rtol=tol(1e-12, 1e-4), atol=tol(1e-12, 1e-4))
        np.testing.assert_allclose(np.asarray(states.params.extra[1]["extra"]["log_period"][i]),
                                   np.asarray(one_state.params.extra[1]["extra"]["log_period"]), rtol=1e-4, atol=1e-5)


def test_kernel_arguments_are_checked():
    for bad in (0.0, -1.0, float("nan"), [1.0, 2.0]):
        with pytest.raises(ValueError, match="^period: "):
            periodic(bad)
        with pytest.raises(ValueError, match="^lengthscale: "):
            periodic(12.0, bad)
    with pytest.raises(ValueError, match="^kernel: "):
        as_kernel("rbf")
    with pytest.raises(ValueError, match="^kernel: "):
        as_kernel("se") + 1.0
    assert as_kernel("se") + periodic(12.0) == as_kernel("se") + periodic(12.0)  # equal kernels share programs
    assert hash(as_kernel("se") * periodic(12.0)) == hash(as_kernel("se") * periodic(12.0))
    assert as_kernel("se") + periodic(12.0) != as_kernel("se") + periodic(6.0)


def test_a_gp_with_the_linear_kernel_is_bayesian_linear_regression(rng):
    """``linear()`` alone, zero mean: the GP's predictive is Bayesian linear regression's through the origin with
    the weights' prior ``N(0, σ_f²/d I)`` and noise ``σ_n²`` (Bishop eqs. 3.53-3.54, 3.58-3.59), in float64 numpy."""
    W, d, sf, sn = 200, 3, 1.7, 0.4
    lrn = gp_window(d, W, kernel=linear(), mean="zero", initial=GPHyper(signal_std=sf, noise_std=sn),
                    window_options=GPWindowOptions(adapt_scale=False))
    X = rng.normal(size=(40, d))
    Y = X @ np.array([1.0, -2.0, 0.5]) + sn * rng.normal(size=40)
    res = progressive_validation(lrn, lrn.init(), jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)).predictions
    nv = sn**2 + noise_floor_rel(DTYPE) * sf**2
    alpha, beta = d / sf**2, 1.0 / nv
    for t in range(40):
        S = np.linalg.inv(alpha * np.eye(d) + beta * X[:t].T @ X[:t])
        m = beta * S @ X[:t].T @ Y[:t]
        mu, var = X[t] @ m, 1.0 / beta + X[t] @ S @ X[t]
        assert abs(float(res.mean[t]) - mu) < tol(1e-9, 2e-3) * max(1.0, abs(mu)), t
        assert abs(float(res.var[t]) - var) < tol(1e-9, 2e-3) * var, t


def test_kernels_print_as_they_are_built():
    assert repr(as_kernel("se") + linear()) == "as_kernel('se') + linear()"
    assert repr(as_kernel("matern32") * periodic(12.0, 0.5)) == "(as_kernel('matern32')) * (periodic(12.0, 0.5))"
    assert linear() == linear() and hash(as_kernel("se") + linear()) == hash(as_kernel("se") + linear())



def test_a_dominant_linear_term_on_collinear_trending_inputs_keeps_the_factor_accurate(rng):
    """The worst case of a ``linear()`` term: three lags of a saw-tooth trend over [-5, 5] (nearly collinear,
    several sd out), the SE term's amplitude near 0 and the linear one's 1. The noise floor counts the linear
    term's amplitude (``params.summed_terms_var``), and a step whose Schur complement shows a factor that lost its
    accuracy rebuilds it: every prediction within a fifth of the targets' spread of a float64 solve on the
    window, nearly all far closer (the factor's error reached 10¹⁹ times the spread with a floor on the SE
    term's amplitude alone, 12 times it without the rebuild)."""
    W, n = 64, 400
    t = np.arange(n + 2)
    u = (t / 40.0) % 10 - 5.0 + 0.01 * rng.normal(size=n + 2)
    X = np.stack([u[2:], u[1:-1], u[:-2]], 1)
    Y = X.sum(1) + 0.01 * rng.normal(size=n)
    kern = as_kernel("se") + linear()
    lrn = gp_window(3, W, kernel=kern, mean="zero", initial=GPHyper(signal_std=1e-4, noise_std=1e-6),
                    window_options=GPWindowOptions(adapt_scale=False))
    s0 = lrn.init()
    left, own = s0.params.extra
    s0 = s0._replace(params=s0.params._replace(extra=(left, dict(own, log_rel_signal_std=jnp.asarray(np.log(1e4), DTYPE)))))
    res = progressive_validation(lrn, s0, jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)).predictions
    sf2, sl2 = 1e-8, 1.0
    nv = 1e-12 + noise_floor_rel(DTYPE) * (sf2 + SUMMED_TERMS_FLOOR_SHARE * sl2)

    def k(A, B):
        return _np_se(A, B, sf2, np.ones(3)) + sl2 * (A @ B.T) / 3

    err = [abs(float(res.mean[i]) - (k(X[i:i + 1], X[i - W:i]) @ np.linalg.solve(k(X[i - W:i], X[i - W:i])
                                                                               + nv * np.eye(W), Y[i - W:i]))[0])
           for i in range(W, n)]
    assert max(err) < tol(1e-2, 0.2) * np.std(Y), max(err)  # float64: its floor is 1e-6, κ near 10⁹
    assert np.median(err) < tol(1e-6, 1e-3) * np.std(Y), np.median(err)

"""BOCPD (Adams & MacKay 2007) against a float64 NumPy reference of the run-length recursion."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import onlinejax as oj
from onlinejax.wrappers.changepoint import bocpd, changepoint_probability, expected_run_length
from onlinejax.evaluation import evaluate_streams, progressive_validation
from conftest import X64, tol

ALPHA, BETA = 0.5, 4.0


def _blr_predictive(X, Y, x):
    """Closed-form Bayesian linear regression on a run's items (Bishop eq. 3.53–3.59), float64."""
    d = x.shape[0]
    S = np.linalg.inv(ALPHA * np.eye(d) + BETA * X.T @ X)
    m = BETA * S @ X.T @ Y
    return float(m @ x), float(1.0 / BETA + x @ S @ x)


def _nig_predictive(X, Y, x, alpha0=0.5, a0=2.0, b0=1.0):
    """Closed-form Normal-inverse-gamma regression on a run's items (Murphy 2012 eq. 7.69-7.76), float64:
    the Student-t's ``(mean, variance, frozen scipy distribution)``."""
    prec = alpha0 * np.eye(x.shape[0]) + X.T @ X
    S = np.linalg.inv(prec)
    m = S @ X.T @ Y
    a, b = a0 + 0.5 * len(Y), b0 + 0.5 * (Y @ Y - m @ prec @ m)
    t = stats.t(2 * a, float(m @ x), np.sqrt(b / a * (1.0 + x @ S @ x)))
    return float(m @ x), float(t.var()), t


def _nig_trend_predictive(X, Y, x, tau=5.0):
    """:func:`_nig_predictive` on ``[x, 1, k/τ]``, ``k`` the item's index in its run (the run's own clock)."""
    n = len(Y)
    Z = np.column_stack([X, np.ones(n), np.arange(1, n + 1) / tau]) if n else np.zeros((0, X.shape[1] + 2))
    return _nig_predictive(Z, Y, np.concatenate([x, [1.0, (n + 1) / tau]]))


def _gaussian_predictive(X, Y, x):
    mu, var = _blr_predictive(X, Y, x)
    return mu, var, stats.norm(mu, np.sqrt(var))


def reference(X, Y, h, predictive=_gaussian_predictive):
    """Every run-length hypothesis kept: ``(log_weight, item indices of its run)``; per item the mixture
    moments, ``log p(y_t | data)`` (a mixture of the runs' own ``predictive`` distributions) and
    ``P(change at t | data)``."""
    hyps = [(0.0, [])]
    out = []
    for t in range(len(Y)):
        comps = [(np.log(h), [])] + [(np.log1p(-h) + lw, run) for lw, run in hyps]
        pred = [predictive(X[run].reshape(-1, X.shape[1]), Y[run], X[t]) for _, run in comps]
        lw = np.array([c[0] for c in comps])
        mu = np.array([p[0] for p in pred])
        var = np.array([p[1] for p in pred])
        w = np.exp(lw - logsumexp(lw))
        mean = w @ mu
        joint = lw + np.array([p[2].logpdf(Y[t]) for p in pred])
        ev = logsumexp(joint)
        out.append((mean, w @ (var + (mu - mean) ** 2), ev - logsumexp(lw), np.exp(joint[0] - ev)))
        hyps = [(j - ev, run + [t]) for j, (_, run) in zip(joint, comps)]
    return np.array(out), hyps


def _map_run_length(state):
    return state.run_length[jnp.argmax(state.log_weights)]


def _stream(rng, n, change=None):
    X = rng.normal(size=(n, 2))
    w1, w2 = rng.normal(size=2) * 2, rng.normal(size=2) * 2
    f = np.where(np.arange(n) < (change or n), X @ w1, X @ w2)
    return X, f + rng.normal(size=n) / np.sqrt(BETA)


@pytest.mark.parametrize("seed,runs", [(0, "gaussian"), (1, "gaussian"), (2, "nig"), (3, "nig-trend")])
def test_exact_recursion_while_nothing_is_pruned(seed, runs):
    """Runs of fixed noise (Gaussian predictives) and runs that learn their noise (Student-t predictives,
    :func:`~onlinejax.learners.linear.nig_linreg`), each weighed by its own density."""
    rng = np.random.default_rng(seed)
    n, h = 14, 0.2
    X, Y = _stream(rng, n, change=7)
    if runs == "nig":
        ref, hyps = reference(X, Y, h, _nig_predictive)
        inner = oj.nig_linreg(2, prior=oj.NIGPrior(0.5, 0.5, 4.0))
    elif runs == "nig-trend":  # every run's clock starts at its start
        ref, hyps = reference(X, Y, h, _nig_trend_predictive)
        inner = oj.nig_linreg(2, prior=oj.NIGPrior(0.5, 0.5, 4.0), trend=5.0)
    else:
        ref, hyps = reference(X, Y, h)
        inner = oj.bayes_linreg(2, alpha=ALPHA, beta=BETA, options=oj.BayesOptions(tunable=False))
    L = bocpd(inner, n_runs=n + 2, hazard=h)
    res = progressive_validation(L, L.init(), X, Y, record=changepoint_probability)
    rtol = tol(1e-9, 2e-4)
    np.testing.assert_allclose(np.asarray(res.predictions.mean), ref[:, 0], rtol=rtol, atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(np.asarray(res.predictions.var), ref[:, 1], rtol=rtol)
    np.testing.assert_allclose(np.asarray(res.predictions.log_prob(jnp.asarray(Y, res.predictions.mean.dtype))),
                               ref[:, 2], rtol=rtol, atol=tol(1e-9, 1e-4))
    np.testing.assert_allclose(np.asarray(res.records), ref[:, 3], rtol=tol(1e-8, 1e-3), atol=tol(1e-12, 1e-6))
    assert isinstance(res.predictions, oj.StudentTMixture if runs.startswith("nig") else oj.MixturePrediction)
    # the final run-length posterior: by run length, as the reference's hypotheses
    s = res.state
    got, want = {}, {}  # two hypotheses of one length (a change at the first item, or none) add up
    for r, w in zip(np.asarray(s.run_length), np.exp(np.asarray(s.log_weights, np.float64))):
        if w > 0:
            got[int(r)] = got.get(int(r), 0.0) + w
    for lw, run in hyps:
        want[len(run)] = want.get(len(run), 0.0) + np.exp(lw)
    assert set(got) == set(want)
    np.testing.assert_allclose([got[k] for k in sorted(want)], [want[k] for k in sorted(want)],
                               rtol=tol(1e-8, 1e-3), atol=tol(1e-12, 1e-6))
    np.testing.assert_allclose(float(expected_run_length(s)), sum(k * v for k, v in want.items()), rtol=tol(1e-8, 1e-3))


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_pruned_detector_finds_the_change_and_predicts_better_after_it(seed):
    rng = np.random.default_rng(seed)
    n, change = 300, 150
    X, Y = _stream(rng, n, change)
    base = oj.bayes_linreg(2, alpha=ALPHA, beta=BETA, options=oj.BayesOptions(tunable=False))
    L = bocpd(base, n_runs=8, hazard=1 / 100)
    res = progressive_validation(L, L.init(), X, Y, record=_map_run_length)
    r_map = np.asarray(res.records)  # after item t (0-based): the most probable run length
    assert 8 <= r_map[change + 9] <= 12  # the 10 items since the change
    assert np.mean(r_map[change - 40:change] >= 40) >= 0.9  # (almost) no false reset before it
    plain = progressive_validation(base, base.init(), X, Y)
    after = slice(change, change + 64)
    lp = np.asarray(res.predictions.log_prob(jnp.asarray(Y, res.predictions.mean.dtype)))[after]
    lp_plain = np.asarray(plain.predictions.log_prob(jnp.asarray(Y, plain.predictions.mean.dtype)))[after]
    assert lp.mean() > lp_plain.mean() + 1.0
    lo, hi = res.predictions.interval(0.95)
    covered = (Y >= np.asarray(lo)) & (Y <= np.asarray(hi))
    assert covered[change + 10:].mean() > 0.85


@pytest.mark.float32_only  # batching and differentiation of the hazard; the recursion's numerics run in both
def test_hazard_vmaps_without_recompiling_and_differentiates():
    rng = np.random.default_rng(0)
    X, Y = _stream(rng, 120, 60)
    L = bocpd(oj.bayes_linreg(2, alpha=ALPHA, beta=BETA, options=oj.BayesOptions(tunable=False)), n_runs=6)
    hazards = jnp.asarray([0.002, 0.01, 0.05])
    res = evaluate_streams(L, X[None], Y[None], hyper={"hazard": hazards})
    from onlinejax.evaluation.progressive import _scan

    one = [progressive_validation(L, L.init(hazard=float(hazards[0])), X, Y).predictions]
    compiled = _scan._cache_size()
    one += [progressive_validation(L, L.init(hazard=float(h)), X, Y).predictions for h in hazards[1:]]
    assert _scan._cache_size() == compiled  # the hazard is an array in the state: no recompilation
    for i, p in enumerate(one):
        want = float(np.mean(np.asarray(p.log_prob(jnp.asarray(Y, p.mean.dtype)))))
        np.testing.assert_allclose(float(res.metrics["mlpd"][i, 0]), want, rtol=tol(1e-9, 1e-4))

    def score(logit_h):
        s = L.init()._replace(logit_hazard=logit_h)
        p = progressive_validation(L, s, X, Y).predictions
        return jnp.mean(p.log_prob(jnp.asarray(Y, p.mean.dtype)))

    x0 = jnp.asarray(np.log(0.01 / 0.99), L.init().logit_hazard.dtype)
    g = float(jax.grad(score)(x0))
    eps = 1e-4 if X64 else 1e-2
    fd = (float(score(x0 + eps)) - float(score(x0 - eps))) / (2 * eps)
    assert np.isfinite(g)
    np.testing.assert_allclose(g, fd, rtol=tol(1e-5, 0.05), atol=tol(1e-8, 1e-3))


def test_nonfinite_items_are_skipped_and_inputs_checked():
    L = bocpd(oj.bayes_linreg(2, options=oj.BayesOptions(tunable=False)), n_runs=4)
    s = L.learn(L.init(), np.ones(2), 1.0)
    t = jax.jit(L.learn)(s, jnp.array([np.nan, 1.0]), 1.0)  # inside jit: skipped (outside: a ValueError)
    assert int(t.n_skipped) == 1 and int(t.n_seen) == 1
    for a, b in zip(jax.tree_util.tree_leaves(t.runs), jax.tree_util.tree_leaves(s.runs)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="^hazard: "):
        bocpd(oj.bayes_linreg(2), hazard=1.0)
    with pytest.raises(ValueError, match="^hazard: "):
        L.init(hazard=0.0)
    with pytest.raises(ValueError, match="^n_runs: "):
        bocpd(oj.bayes_linreg(2), n_runs=1)
    with pytest.raises(TypeError, match="^learner: "):
        bocpd("bayes_linreg")


def test_a_skipped_item_issues_a_nan_student_t_mixture():
    """Over Student-t runs the issued StudentTMixture of an item with a non-finite input is NaN, as ``predict``'s,
    not a mixture whose NaN weights read as absent components (mean 0, variance 0)."""
    L = bocpd(oj.nig_linreg(2, intercept=True), n_runs=4)
    s = L.learn(L.init(), np.ones(2), 1.0)
    x = jnp.array([np.nan, 1.0])
    _, p = jax.jit(L.step)(s, x, 1.0)
    q = jax.jit(L.predict)(s, x)
    for pred in (p, q):
        assert isinstance(pred, oj.StudentTMixture)
        for v in (pred.mean, pred.var, pred.cdf(1.0), pred.log_prob(1.0), pred.crps(1.0), *pred.interval(0.9)):
            assert np.isnan(float(v))


def test_scale_runs_recursion_matches_a_numpy_reference():
    """The residual-variance model of adaptive(detector=bocpd_detector()): InvGamma(1, 1) runs, exact while not
    pruned."""
    from onlinejax.wrappers.changepoint import recent_change_probability, scale_runs_init, scale_runs_update

    rng = np.random.default_rng(0)
    z = np.concatenate([rng.normal(size=8), 4.0 * rng.normal(size=6)])
    h = 0.05
    hyps = [(0.0, 1.0, 1.0, 0)]  # (log weight, a, b, run length)
    s = scale_runs_init(len(z) + 2, jnp.float64 if X64 else jnp.float32)
    for zi in z:
        comps = [(np.log(h), 1.0, 1.0, 0)] + [(np.log1p(-h) + lw, a, b, r) for lw, a, b, r in hyps]
        joint = np.array([lw + stats.t.logpdf(zi, 2 * a, 0.0, np.sqrt(b / a)) for lw, a, b, _ in comps])
        ev = logsumexp(joint)
        hyps = [(j - ev, a + 0.5, b + zi * zi / 2, r + 1) for j, (_, a, b, r) in zip(joint, comps)]
        s = scale_runs_update(s, jnp.asarray(zi * zi, s.rate.dtype), h)
        want = sum(np.exp(lw) for lw, _, _, r in hyps if r <= 3)
        np.testing.assert_allclose(float(recent_change_probability(s, 3)), want, rtol=tol(1e-9, 1e-4),
                                   atol=tol(1e-12, 1e-6))
    assert float(recent_change_probability(s, 6)) > 0.5  # the scale quadrupled 6 items ago


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adaptive_with_the_bocpd_detector_alarms_once_at_the_drift(seed):
    from onlinejax.wrappers.adaptive import HIGH_ERROR, adaptive, record_mode
    from onlinejax.wrappers.detectors import bocpd_detector

    rng = np.random.default_rng(seed)
    n, change = 900, 500
    X = rng.normal(size=(n, 2))
    w1, w2 = rng.normal(size=2) * 2, rng.normal(size=2) * 2
    Y = np.where(np.arange(n) < change, X @ w1, X @ w2) + 0.3 * rng.normal(size=n)
    L = adaptive(oj.windowed_bayes_linreg(2, 64), 64, detector=bocpd_detector())
    res = progressive_validation(L, L.init(), X, Y, record=record_mode)
    modes = np.asarray(res.records)
    alarms = [i for i in range(1, n) if modes[i] == HIGH_ERROR and modes[i - 1] != HIGH_ERROR]
    assert len(alarms) == 1 and change <= alarms[0] <= change + 5, alarms
    assert int(res.state.n_alarms) == 1
    with pytest.raises(ValueError, match="^hazard: "):
        bocpd_detector(hazard=0.0)


def test_reexpress_runs_moves_every_run_and_keeps_the_prior():
    """``ReexpressRuns(NIGReexpress(trend=True))``: each run is the inner map of that run alone (weights, factor
    and noise moved; counts as they were), the prior and the run-length weights untouched; a value."""
    from onlinejax.learners.linear import nig_linreg
    from onlinejax.learners.linear.nig import NIGReexpress
    from onlinejax.wrappers.changepoint import ReexpressRuns

    lrn = bocpd(nig_linreg(2, forgetting=0.99, trend=20.0), 4, hazard=0.1)
    r = np.random.default_rng(0)
    s = lrn.init()
    dt = s.log_weights.dtype
    for _ in range(12):
        s = lrn.learn(s, jnp.asarray(r.normal(size=2), dt), jnp.asarray(r.normal(), dt))
    args = [jnp.asarray(v, dt) for v in ([0.5, 2.0], [0.1, -0.3], 0.3, 5.0)]
    moved = ReexpressRuns(NIGReexpress(trend=True))(s, *args)
    for k in range(4):
        one = NIGReexpress(trend=True)(jax.tree_util.tree_map(lambda v: v[k], s.runs), *args)
        for a, b in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(
                jax.tree_util.tree_map(lambda v: v[k], moved.runs))):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol(1e-14, 1e-6))
    np.testing.assert_allclose(np.asarray(moved.runs.b), 0.09 * np.asarray(s.runs.b), rtol=tol(1e-14, 1e-6))
    for new, old in [(moved.runs.a, s.runs.a), (moved.prior.mean, s.prior.mean), (moved.prior.b, s.prior.b),
                     (moved.log_weights, s.log_weights)]:
        np.testing.assert_array_equal(np.asarray(new), np.asarray(old))
    assert not np.allclose(np.asarray(moved.runs.mean), np.asarray(s.runs.mean))
    assert ReexpressRuns(NIGReexpress(trend=True)) == ReexpressRuns(NIGReexpress(trend=True))
    assert hash(ReexpressRuns(NIGReexpress(trend=True))) == hash(ReexpressRuns(NIGReexpress(trend=True)))


def test_standardize_returns_the_run_mixture_on_the_raw_scale():
    """Behind a standardisation the run mixture stays a Student-t mixture (not the Gaussian of its moments):
    the inner mixture of the standardised input, every component moved by ``ȳ`` and scaled by ``s_y``."""
    from onlinejax.core.student_mixture import StudentTMixture
    from onlinejax.learners.linear import nig_linreg
    from onlinejax.wrappers.standardize import StandardizeOptions, standardize
    from onlinejax.wrappers.standardize_state import inner_coordinates, scales

    runs = bocpd(nig_linreg(1, intercept=True), 4, hazard=0.05)
    lrn = standardize(runs)
    r = np.random.default_rng(1)
    X = r.normal(size=(30, 1)) * 10.0 + 50.0
    y = 3.0 * X[:, 0] + r.normal(size=30) * 2.0 + 1000.0
    s = lrn.init()
    dt = s.scaler.y_mean.dtype
    for i in range(30):
        s = lrn.learn(s, jnp.asarray(X[i], dt), jnp.asarray(y[i], dt))
    x = jnp.asarray([55.0], dt)
    p = lrn.predict(s, x)
    assert isinstance(p, StudentTMixture)
    inner = runs.predict(s.inner, inner_coordinates(StandardizeOptions(), s.scaler, x))
    sy, ym = float(scales(s.scaler)[1]), float(s.scaler.y_mean)
    np.testing.assert_array_equal(np.asarray(p.log_weights), np.asarray(inner.log_weights))
    np.testing.assert_allclose(np.asarray(p.means), ym + sy * np.asarray(inner.means), rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(np.asarray(p.scales), sy * np.asarray(inner.scales), rtol=tol(1e-12, 1e-5))
    # its 90 % interval holds 90 % of its own probability (not a Gaussian's of the same variance)
    lo, hi = p.interval(0.9)
    np.testing.assert_allclose(float(p.cdf(hi)) - float(p.cdf(lo)), 0.9, atol=tol(1e-8, 1e-4))

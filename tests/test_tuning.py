"""tune_prequential: gradients of the prequential score, the grid search's optimum, non-finite items, bad input."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import onlinejax as oj
from conftest import DTYPE, X64, tol
from onlinejax.evaluation import (GradientOptions, PrequentialScoring, evaluate_streams, progressive_validation,
                                  prequential_score, tune_prequential)
from onlinejax.learners.gp import gp_window

pytestmark = pytest.mark.float32_only  # tuning's plumbing

GRID = np.linspace(0.70, 0.999, 32)  # forgetting factors of the grid search; spacing 0.00965


def _stream(seed, n=None):
    X, Y, _ = oj.data.drifting_linear_stream(jax.random.key(seed), dtype=DTYPE)
    return (X, Y) if n is None else (X[:n], Y[:n])


LEARNERS = {
    "bayes_linreg": (lambda: oj.bayes_linreg(2, forgetting=0.95), {"forgetting": 0.9, "beta": 10.0}),
    "windowed_bayes_linreg": (lambda: oj.windowed_bayes_linreg(2, 16), {"beta": 10.0, "alpha": 2.0}),
    "gp_window": (lambda: gp_window(2, 8), {"noise_std": 0.3, "lengthscale": 1.5}),
    "nig_linreg": (lambda: oj.nig_linreg(2, intercept=True), {"noise_var": 0.5, "prior_precision": 1.0, "prior_df": 5.0}),
}

#: Learners whose skipped items are not absent items (time passes in a gap: forgetting, a trend's level).
GAP_LEARNERS = {
    "nig_linreg, forgetting and trend": (lambda: oj.nig_linreg(2, forgetting=0.95, trend=30.0),
                                         {"forgetting": 0.9, "noise_var": 0.5, "time_scale": 30.0}),
}


def _central_differences(f, params, h):
    """``∂f/∂θ_k`` by central differences of relative step ``h``, each in float64 arithmetic of ``f``'s values."""
    out = {}
    for k, v in params.items():
        dv = h * v
        up, down = dict(params, **{k: v + dv}), dict(params, **{k: v - dv})
        out[k] = (float(f(up)) - float(f(down))) / (2 * dv)
    return out


@pytest.mark.parametrize("name", sorted(LEARNERS) + sorted(GAP_LEARNERS))
@pytest.mark.parametrize("score", ["log", "crps"])
def test_gradient_matches_central_differences(name, score):
    make, params = {**LEARNERS, **GAP_LEARNERS}[name]
    lrn = make()
    X, Y = _stream(0, n=60)
    f = jax.jit(lambda p: prequential_score(lrn, p, X, Y, scoring=PrequentialScoring(score, burn_in=5)))
    g = jax.grad(f)({k: jnp.asarray(v, DTYPE) for k, v in params.items()})
    fd = _central_differences(f, params, tol(1e-5, 3e-2))
    for k in params:
        assert np.isfinite(float(g[k]))
        # float32: the differences of a mean of 55 scores carry ~1e-6 rounding over a step of 3 %
        np.testing.assert_allclose(float(g[k]), fd[k], rtol=tol(1e-6, 5e-2), atol=tol(1e-9, 2e-3), err_msg=k)


def test_score_is_progressive_validations_mean_after_burn_in():
    lrn = oj.bayes_linreg(2, forgetting=0.9, beta=20.0)
    X, Y = _stream(3, n=80)
    preds = progressive_validation(lrn, lrn.init(), X, Y).predictions
    lp = np.asarray(preds.log_prob(Y), np.float64)
    crps = np.asarray(preds.crps(Y), np.float64)
    p = {"forgetting": 0.9}
    np.testing.assert_allclose(float(prequential_score(lrn, p, X, Y, scoring=PrequentialScoring(burn_in=10))), lp[10:].mean(),
                               rtol=tol(1e-12, 1e-5))
    np.testing.assert_allclose(float(prequential_score(lrn, p, X, Y, scoring=PrequentialScoring("crps"))), -crps.mean(), rtol=tol(1e-12, 1e-5))
    # several streams: the mean of their scores
    Xs, Ys = jnp.stack([X, X[::-1]]), jnp.stack([Y, Y[::-1]])
    two = [float(prequential_score(lrn, p, Xs[i], Ys[i])) for i in range(2)]
    np.testing.assert_allclose(float(prequential_score(lrn, p, Xs, Ys)), np.mean(two), rtol=tol(1e-12, 1e-5))


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_skipped_items_neither_score_nor_poison_the_gradient(name):
    """A NaN x and an inf y inside the scan: the learners skip them (jnp.where), and the gradient equals that
    of the stream without them — not NaN, as it was when the skip's discarded branch saw the NaN (double where)."""
    make, params = LEARNERS[name]
    lrn = make()
    X, Y = _stream(1, n=40)
    bad = X.at[7, 1].set(jnp.nan), Y.at[20].set(jnp.inf)
    keep = np.setdiff1d(np.arange(40), [7, 20])
    p = {k: jnp.asarray(v, DTYPE) for k, v in params.items()}
    v_bad, g_bad = jax.jit(jax.value_and_grad(lambda q: prequential_score(lrn, q, *bad, missing=True)))(p)
    v_ok, g_ok = jax.jit(jax.value_and_grad(lambda q: prequential_score(lrn, q, X[keep], Y[keep])))(p)
    np.testing.assert_allclose(float(v_bad), float(v_ok), rtol=tol(1e-10, 1e-5))
    for k in p:
        assert np.isfinite(float(g_bad[k])), k
        np.testing.assert_allclose(float(g_bad[k]), float(g_ok[k]), rtol=tol(1e-8, 1e-3), atol=tol(1e-12, 1e-6),
                                   err_msg=k)
    if name == "windowed_bayes_linreg":  # tune_prequential sees the non-finite items and takes the same path
        res = tune_prequential(lrn, params, *bad, options=GradientOptions(steps=3))
        assert res.n_nonfinite == 0 and np.isfinite(res.scores).all()
        assert res.n_skipped == 2 and tune_prequential(lrn, params, X, Y, options=GradientOptions(steps=3)).n_skipped == 0


def test_gp_step_still_predicts_nan_at_a_nan_input():
    lrn = gp_window(2, 8)
    s = lrn.learn(lrn.init(), np.array([[0.1, 0.2], [0.3, -0.1]]), np.array([1.0, 0.5]))
    t, pred = jax.jit(lrn.step)(s, jnp.asarray([np.nan, 1.0], DTYPE), jnp.asarray(0.3, DTYPE))
    assert np.isnan(float(pred.mean)) and np.isnan(float(pred.var))
    assert int(t.n_skipped) == int(s.n_skipped) + 1


def _grid_best(lrn, X, Y, metric):
    m = np.asarray(evaluate_streams(lrn, X, Y, hyper={"forgetting": GRID}).metrics[metric]).mean(axis=1)
    return GRID[np.argmax(m) if metric == "mlpd" else np.argmin(m)]


@pytest.mark.parametrize("seed", [1, 2])
def test_finds_the_grid_searchs_forgetting_factor(seed):
    lrn = oj.bayes_linreg(2, beta=25.0, forgetting=0.95)
    X, Y = _stream(seed)
    res = tune_prequential(lrn, {"forgetting": 0.95}, X, Y)
    best = _grid_best(lrn, X[None], Y[None], "mlpd")
    assert abs(res.params["forgetting"] - best) <= GRID[1] - GRID[0], (res.params, best)
    assert res.scores[res.best_step] == res.scores.max() > res.scores[0]
    assert res.history["forgetting"].shape == (101,) and res.history["forgetting"][0] == pytest.approx(0.95)


def test_finds_the_grid_searchs_forgetting_factor_on_several_streams_by_crps():
    lrn = oj.bayes_linreg(2, beta=25.0, forgetting=0.95)
    X, Y, _ = jax.vmap(lambda k: oj.data.drifting_linear_stream(k, dtype=DTYPE))(jax.random.split(jax.random.key(5), 3))
    res = tune_prequential(lrn, {"forgetting": 0.97}, X, Y, scoring=PrequentialScoring("crps"),
                           options=GradientOptions(steps=60, learning_rate=0.1))
    best = _grid_best(lrn, X, Y, "crps")
    assert abs(res.params["forgetting"] - best) <= GRID[1] - GRID[0], (res.params, best)
    # the score is minus the mean CRPS over the streams
    crps = np.asarray(evaluate_streams(lrn, X, Y, hyper={"forgetting": [res.params["forgetting"]]}).metrics["crps"])
    assert res.scores[res.best_step] == pytest.approx(-crps.mean(), rel=tol(1e-9, 1e-4))


def test_options_optimizer_steps_and_transforms():
    lrn = oj.windowed_bayes_linreg(2, 16)
    X, Y = _stream(0, n=60)
    res = tune_prequential(lrn, {"beta": 5.0, "alpha": np.array([1.0, 2.0])}, X, Y,
                           options=GradientOptions(steps=4, optimizer=optax.sgd(1e-3)), transforms={"alpha": "identity"})
    assert res.scores.shape == (5,) and res.history["alpha"].shape == (5, 2) and res.params["alpha"].shape == (2,)
    assert isinstance(res.params["beta"], float)
    lrn.init(**res.params)  # the tuned values go straight back into init


def test_bad_input_names_the_argument():
    lrn = oj.bayes_linreg(2, forgetting=0.95)
    X, Y = _stream(0, n=30)
    cases = [
        (dict(params={"forgetting": 0.9}, scoring=PrequentialScoring("mse")), r"^scoring\.score: "),
        (dict(params={}), "^params: "),
        (dict(params={"lengthscale": 1.0}), "^params: .*'lengthscale'"),
        (dict(params={"beta": float("nan")}), "^params: 'beta' must be a finite"),
        (dict(params={"forgetting": 1.0}), "^params: 'forgetting' = 1.0 maps to a non-finite"),
        (dict(params={"forgetting": 1.5}), "^forgetting: "),  # the learner's own range check
        (dict(params={"beta": 2.0}, transforms={"beta": "exp"}), "^transforms: 'beta': unknown"),
        (dict(params={"beta": 2.0}, transforms={"alpha": "log"}), "^transforms: names not in params"),
        (dict(params={"beta": 2.0}, scoring=PrequentialScoring(burn_in=30)), r"^scoring\.burn_in: "),
        (dict(params={"beta": 2.0}, options=GradientOptions(steps=0)), r"^options\.steps: "),
        (dict(params={"beta": 2.0}, options=GradientOptions(learning_rate=-1.0)), r"^options\.learning_rate: "),
        (dict(params={"beta": 2.0}, options=GradientOptions(learning_rate=0.1, optimizer=optax.adam(0.1))),
         r"^options\.learning_rate: "),
    ]
    for kw, match in cases:
        with pytest.raises(ValueError, match=match):
            tune_prequential(lrn, X=X, Y=Y, **kw)
    with pytest.raises(ValueError, match="^X, Y: "):
        tune_prequential(lrn, {"beta": 2.0}, X[:, :1], Y)
    with pytest.raises(ValueError, match="^transforms: no default bijection for 'window'"):
        tune_prequential(oj.windowed_bayes_linreg(2, 8), {"window": 4}, X, Y)


def test_converged_compares_the_last_tenth_of_the_steps_with_the_rest():
    from onlinejax.evaluation.tuning import converged

    rising = np.concatenate([np.linspace(-3.0, 0.0, 91), np.linspace(0.0, 0.02, 11)[1:]])  # +0.02 nats at the end
    assert not converged(rising) and converged(np.r_[rising[:91], np.full(10, 1e-4)])
    assert converged(np.zeros(5)) and converged(np.r_[0.0, 0.5, 1.0, 1.0, 1.0002])  # k = 1: the last step's gain
    # the CRPS is in the targets' unit: the same run, relative to its size, at any scale
    for scale in (1e-6, 1.0, 1e6):
        assert converged(-scale * np.r_[np.linspace(5.0, 1.0, 91), np.full(10, 0.9995)], "crps")
        assert not converged(-scale * np.r_[np.linspace(5.0, 1.0, 91), np.full(10, 0.99)], "crps")
    assert converged(np.r_[np.nan, 0.0, 0.0, np.inf * -1, 0.0]) and not converged(np.full(4, np.nan))
    with pytest.raises(ValueError, match="^score: "):
        converged(np.zeros(4), "mse")
    with pytest.raises(ValueError, match="^scores: "):
        converged(np.zeros(1))


def test_a_run_stopped_while_still_improving_says_so():
    lrn = oj.bayes_linreg(2, beta=25.0, forgetting=0.95)
    X, Y = _stream(0)
    with pytest.warns(RuntimeWarning, match="not converged"):
        short = tune_prequential(lrn, {"forgetting": 0.99}, X, Y, options=GradientOptions(steps=100))
    assert not short.converged
    longer = tune_prequential(lrn, {"forgetting": 0.99}, X, Y, options=GradientOptions(steps=400))
    assert longer.converged and longer.scores.max() > short.scores.max()
    best = _grid_best(lrn, X[None], Y[None], "mlpd")
    assert abs(longer.params["forgetting"] - best) <= GRID[1] - GRID[0] < abs(short.params["forgetting"] - best)


def test_bocpd_hazard_tunes_through_its_default_logit():
    """A mean that jumps every 100 items: the hazard tuned from 0.3 comes down to the order of 1/100."""
    rng = np.random.default_rng(3)
    n = 1200
    levels = np.repeat(rng.normal(0.0, 5.0, n // 100), 100)
    X = np.ones((n, 1))
    Y = levels + rng.normal(size=n)
    lrn = oj.bocpd(oj.bayes_linreg(1, alpha=0.04, beta=1.0), 16, hazard=0.3)
    res = tune_prequential(lrn, {"hazard": 0.3}, jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE),
                           options=GradientOptions(steps=150, learning_rate=0.2))
    assert 0.002 < res.params["hazard"] < 0.05 and res.scores[res.best_step] > res.scores[0] + 0.1

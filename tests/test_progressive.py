import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.evaluation import progressive_validation, running_metrics, summarize
from conftest import tol
from reference import rel_err


class _CompileCounter(logging.Handler):
    def __init__(self):
        super().__init__()
        self.n = 0

    def emit(self, record):
        if "Compiling" in record.getMessage():
            self.n += 1


def count_compiles(fn):
    h = _CompileCounter()
    lg = logging.getLogger("jax")
    lg.addHandler(h)
    try:
        with jax.log_compiles():
            fn()
    finally:
        lg.removeHandler(h)
    return h.n


LEARNERS = {
    "bayes": lambda: oj.bayes_linreg(3, alpha=0.5, beta=2.0),
    "forget": lambda: oj.bayes_linreg(3, alpha=0.5, beta=2.0, forgetting=0.95),
    "window": lambda: oj.windowed_bayes_linreg(3, 8),
    "mle_forget": lambda: oj.bayesian_mle_forgetting(3, adhoc=oj.AdHocOptions(burn_in=5)),
    "map_window_mapped": lambda: oj.bayesian_map_windowed(3, 16, features=oj.ThesisFeatures(True, True)),
    "sgd": lambda: oj.sgd_linreg(3),
}


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_scan_equals_python_loop(rng, name):
    lrn = LEARNERS[name]()
    X = rng.uniform(0.1, 2, size=(40, 3))
    Y = X @ [1.0, 2.0, -1.0] + 0.1 * rng.normal(size=40)
    res = progressive_validation(lrn, lrn.init(), X, Y)
    s, means, vars_ = lrn.init(), [], []
    for x, y in zip(X, Y):
        p = lrn.predict(s, x)
        means.append(float(p.mean))
        vars_.append(float(p.var))
        s = lrn.learn(s, x, y)
    assert rel_err(res.predictions.mean, means) < tol(1e-10, 1e-4)
    assert rel_err(res.predictions.var, vars_) < tol(1e-10, 1e-4)


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_no_recompile_for_any_input_type(rng, name):
    lrn = LEARNERS[name]()
    s = lrn.init()
    x_np = rng.normal(size=3)
    # warm up: one call of each entry point
    s = lrn.learn(s, x_np, 1.0)
    lrn.predict(s, x_np)
    s, _ = lrn.step(s, x_np, 1.0)

    ys = (0.5, 2, np.float32(0.25), np.float64(-1.0), jnp.asarray(3.0), jnp.asarray(1.0, jnp.float32))
    xs = (x_np, jnp.asarray(x_np), x_np.astype(np.float32), [0.1, 0.2, 0.3])  # made outside the count

    def calls():
        t = s
        for y in ys:
            for x in xs:
                t = lrn.learn(t, x, y)
                lrn.predict(t, x)
                t, _ = lrn.step(t, x, y)
        jax.block_until_ready(t)

    assert count_compiles(calls) == 0


def test_vmap_over_streams_and_hyperparameters_compiles_once(rng):
    lrn = oj.bayes_linreg(2, beta=4.0)
    S, H, n = 3, 5, 50
    Xs = rng.normal(size=(S, n, 2))
    Ys = np.einsum("snd,d->sn", Xs, [1.0, -2.0]) + 0.5 * rng.normal(size=(S, n))
    alphas = jnp.logspace(-2, 2, H)

    def pv(s, X, Y):
        return progressive_validation(lrn, s, X, Y).predictions

    run = jax.jit(jax.vmap(jax.vmap(pv, (0, None, None)), (None, 0, 0)))
    states = jax.vmap(lambda a: lrn.init(alpha=a))(alphas)
    preds = run(states, Xs, Ys)
    assert preds.mean.shape == (S, H, n)
    for si in (0, 2):
        for hi in (1, 4):
            one = progressive_validation(lrn, lrn.init(alpha=alphas[hi]), Xs[si], Ys[si]).predictions
            assert rel_err(preds.mean[si, hi], one.mean) < tol(1e-12, 1e-5)
            assert rel_err(preds.var[si, hi], one.var) < tol(1e-12, 1e-5)
    # other hyperparameter values and other data of the same shape reuse the executable
    states2 = jax.vmap(lambda a: lrn.init(alpha=a))(alphas * 3.0)
    assert count_compiles(lambda: jax.block_until_ready(run(states2, Xs * 2, Ys))) == 0
    # so does the un-vmapped entry point
    progressive_validation(lrn, lrn.init(alpha=0.5), Xs[0], Ys[0])
    assert count_compiles(lambda: jax.block_until_ready(progressive_validation(lrn, lrn.init(alpha=7.0), Xs[1], Ys[1]))) == 0


def test_running_metrics_and_summary_match_numpy(rng):
    lrn = oj.bayes_linreg(2, alpha=1.0, beta=4.0)
    X = rng.normal(size=(100, 2))
    Y = X @ [1.0, 1.0] + 0.5 * rng.normal(size=100)
    p = progressive_validation(lrn, lrn.init(), X, Y).predictions
    mu, sd = np.asarray(p.mean, np.float64), np.sqrt(np.asarray(p.var, np.float64))
    err = Y - mu
    k = np.arange(1, 101)
    rm = running_metrics(Y, p)
    np.testing.assert_allclose(rm["mae"], np.cumsum(np.abs(err)) / k, rtol=tol(1e-10, 1e-4))
    np.testing.assert_allclose(rm["rmse"], np.sqrt(np.cumsum(err ** 2) / k), rtol=tol(1e-10, 1e-4))
    z = 1.959963984540054
    cov = np.cumsum(np.abs(err) <= z * sd) / k
    assert np.max(np.abs(np.asarray(rm["coverage"]) - cov)) <= 1.0 / 100 + 1e-9  # a boundary item may flip in float32
    sm = summarize(Y, p)
    assert sm["mae"] == pytest.approx(np.mean(np.abs(err)))
    assert sm["width"] == pytest.approx(np.mean(2 * z * sd), rel=tol(1e-9, 1e-5))


def test_summarize_scores_a_student_t_by_its_own_interval():
    """A Student-t prediction's coverage and width are its own central interval's (scipy), not a Gaussian's of its variance."""
    from scipy import stats

    from onlinejax.core.base import StudentTPrediction

    rng = np.random.default_rng(3)
    n, df = 400, 3.0
    mu, sc = rng.normal(size=n), np.exp(rng.normal(size=n))
    Y = mu + sc * rng.standard_t(df, size=n)
    dt = jnp.zeros(()).dtype
    p = StudentTPrediction(jnp.asarray(mu, dt), jnp.asarray(sc, dt), jnp.full((n,), df, dt))
    lo, hi = stats.t.interval(0.95, df, mu, sc)
    sm = summarize(Y, p)
    assert sm["width"] == pytest.approx(np.mean(hi - lo), rel=tol(1e-9, 1e-4))
    inside = (lo <= Y) & (Y <= hi)
    assert abs(sm["coverage"] - np.mean(inside)) <= 2 / n  # an item on the boundary may flip in float32
    gauss = np.mean(np.abs(Y - mu) <= 1.959963984540054 * sc * np.sqrt(df / (df - 2)))
    assert abs(np.mean(inside) - gauss) > 2 / n  # the Gaussian of its variance covers otherwise


def test_progressive_validation_checks_shapes():
    lrn = oj.bayes_linreg(2)
    with pytest.raises(ValueError, match="X"):
        progressive_validation(lrn, lrn.init(), np.ones((5, 3)), np.ones(5))
    with pytest.raises(ValueError, match="Y"):
        progressive_validation(lrn, lrn.init(), np.ones((5, 2)), np.ones(4))
    with pytest.raises(ValueError, match="X"):
        progressive_validation(lrn, lrn.init(), np.ones(2), np.ones(1))


def test_metrics_argument_scores_in_item_order(rng):
    from onlinejax.evaluation import metrics as M

    lrn = oj.bayes_linreg(2, alpha=1.0, beta=4.0)
    X = rng.normal(size=(80, 2))
    Y = X @ [1.0, 1.0] + 0.5 * rng.normal(size=80)
    r = progressive_validation(lrn, lrn.init(), X, Y, metrics=M.sliding(20))
    err = Y[-20:] - np.asarray(r.predictions.mean, np.float64)[-20:]
    assert float(r.metrics["rmse"]) == pytest.approx(np.sqrt(np.mean(err ** 2)), rel=tol(1e-9, 1e-4))
    assert M.sliding(20) is M.sliding(20)  # cached: passing a fresh accumulator does not recompile


def _gapped_stream(seed=11, n=200, d=3):
    """A stream with missing targets and missing inputs, and the same stream with those items deleted."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = X @ rng.normal(size=d) + 0.4 * rng.standard_t(4, size=n)
    Xg, Yg = X.copy(), Y.copy()
    Yg[rng.choice(n, 20, replace=False)] = np.nan
    Xg[[7, 50, 51, 52, 130], 1] = np.nan
    Xg[90, 0] = np.inf
    keep = np.isfinite(Yg) & np.isfinite(Xg).all(1)
    return Xg, Yg, X[keep], Y[keep], keep


@pytest.mark.parametrize("make", [lambda: oj.bayes_linreg(3, alpha=0.5, beta=2.0, forgetting=0.97),
                                  lambda: oj.calibrated_bayes_linreg(3)], ids=["forgetting", "calibrated"])
def test_missing_values_are_skipped_as_if_the_items_were_not_there(make):
    """Items with a NaN/inf in x or y are neither learned nor scored: every other prediction and every
    metric equals the run on the stream with those items deleted (the learners' state is untouched by a skip)."""
    from onlinejax.evaluation import metrics

    lrn = make()
    Xg, Yg, Xk, Yk, keep = _gapped_stream()
    gap = progressive_validation(lrn, lrn.init(), Xg, Yg, metrics.prequential())
    ref = progressive_validation(lrn, lrn.init(), Xk, Yk, metrics.prequential())
    assert int(gap.n_skipped) == np.count_nonzero(~keep) == 26 and int(ref.n_skipped) == 0
    np.testing.assert_allclose(np.asarray(gap.predictions.mean)[keep], ref.predictions.mean, rtol=tol(1e-12, 1e-5))
    for m in ("mae", "smse", "icr", "mlpd", "crps"):
        np.testing.assert_allclose(gap.metrics[m], ref.metrics[m], rtol=tol(1e-12, 1e-5), err_msg=m)
    assert int(gap.metrics["n_nonfinite"]) == 0
    sg, sr = summarize(Yg, gap.predictions), summarize(Yk, ref.predictions)
    assert sg["n_skipped"] == 26 and sr["n_skipped"] == 0  # these learners predict NaN at a missing x
    rg, rr = running_metrics(Yg, gap.predictions), running_metrics(Yk, ref.predictions)
    for m in ("mae", "rmse", "coverage"):
        np.testing.assert_allclose(np.asarray(rg[m])[keep], rr[m], rtol=tol(1e-12, 1e-5), err_msg=m)
    assert np.all(np.isfinite(np.asarray(rg["mae"])[1:]))  # the value before a gap carries over it


def test_running_metrics_are_nan_until_the_first_scored_item():
    p = oj.Prediction(jnp.zeros(3), jnp.ones(3))
    rm = running_metrics(jnp.array([jnp.nan, 1.0, 2.0]), p)
    assert np.isnan(rm["mae"][0]) and float(rm["mae"][2]) == pytest.approx(1.5)
    assert summarize(np.full(3, np.nan), p)["n_skipped"] == 3

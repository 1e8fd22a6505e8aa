import datetime as dt

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import onlinejax as oj
from onlinejax import Prediction
from onlinejax.core.base import make_learner
from onlinejax.evaluation import metrics as M
from onlinejax.evaluation import progressive_validation
from onlinejax.evaluation.delayed import (
    ANSWER,
    QUESTION,
    delayed_progressive_validation,
    schedule_from_delays,
    schedule_from_times,
)
from conftest import X64, tol
from reference import rel_err

BLOG_TIMETABLE = [
    (dt.datetime(2020, 1, 1, 20, 0, 0), 900),
    (dt.datetime(2020, 1, 1, 20, 10, 0), 1800),
    (dt.datetime(2020, 1, 1, 20, 20, 0), 300),
    (dt.datetime(2020, 1, 1, 20, 45, 0), 400),
    (dt.datetime(2020, 1, 1, 20, 50, 0), 240),
    (dt.datetime(2020, 1, 1, 20, 55, 0), 450),
]
BLOG_OUTPUT = """\
2020-01-01 20:00:00 - trip #1 departs
2020-01-01 20:10:00 - trip #2 departs
2020-01-01 20:15:00 - trip #1 arrives after 900 seconds
2020-01-01 20:20:00 - trip #3 departs
2020-01-01 20:25:00 - trip #3 arrives after 300 seconds
2020-01-01 20:40:00 - trip #2 arrives after 1800 seconds
2020-01-01 20:45:00 - trip #4 departs
2020-01-01 20:50:00 - trip #5 departs
2020-01-01 20:51:40 - trip #4 arrives after 400 seconds
2020-01-01 20:54:00 - trip #5 arrives after 240 seconds
2020-01-01 20:55:00 - trip #6 departs
2020-01-01 21:02:30 - trip #6 arrives after 450 seconds"""


def test_blog_six_trip_timetable_order():
    dep = np.array([np.datetime64(d) for d, _ in BLOG_TIMETABLE])
    dur = np.array([s for _, s in BLOG_TIMETABLE])
    sch = schedule_from_times(dep, dep + dur.astype("timedelta64[s]"))
    lines = []
    for k, i, t in zip(sch.kind, sch.item, sch.time):
        when = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=float(t))
        if k == QUESTION:
            lines.append(f"{when} - trip #{i + 1} departs")
        else:
            lines.append(f"{when} - trip #{i + 1} arrives after {dur[i]} seconds")
    assert "\n".join(lines) == BLOG_OUTPUT


def _lin_stream(rng, n, d=3):
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + 0.2 * rng.normal(size=n)


@pytest.mark.parametrize("make", [lambda: oj.bayes_linreg(3, alpha=0.5, beta=4.0), lambda: oj.windowed_bayes_linreg(3, 16)])
def test_delay_zero_is_progressive_validation(rng, make):
    lrn = make()
    X, Y = _lin_stream(rng, 200)
    pv = progressive_validation(lrn, lrn.init(), X, Y)
    dv = delayed_progressive_validation(lrn, lrn.init(), X, Y, schedule_from_delays(np.zeros(200)))
    if X64:  # bitwise in float64
        np.testing.assert_array_equal(dv.predictions.mean, pv.predictions.mean)
        np.testing.assert_array_equal(dv.predictions.var, pv.predictions.var)
    else:
        assert rel_err(dv.predictions.mean, pv.predictions.mean) < 1e-5
    sch = schedule_from_delays(np.zeros(200))
    assert sch.n_slots == 1 and list(sch.kind[:4]) == [QUESTION, ANSWER, QUESTION, ANSWER]


def _recording_learner(n):
    """x[0] carries the item index; state records the event counter at which each item was learned."""

    def init():
        return (jnp.zeros((), jnp.int32), jnp.full((n,), -1, jnp.int32), jnp.zeros((), jnp.float32))

    def learn_one(s, x, y):
        i = x[0].astype(jnp.int32)
        return (s[0] + 1, s[1].at[i].set(jnp.where(s[1][i] >= 0, -100, s[0])), s[2])  # -100 marks a second learn

    def predict_one(s, x):
        return Prediction(jnp.sum(s[1] >= 0).astype(jnp.float32), jnp.ones((), jnp.float32))

    return make_learner(init=init, learn_one=learn_one, predict_one=predict_one, n_features=1)


def test_random_delays_no_leakage_and_each_label_once(rng):
    n = 300
    q = np.sort(rng.uniform(0, 100, size=n))
    a = q + rng.exponential(5.0, size=n) * (rng.uniform(size=n) > 0.2)  # 20 % answered instantly
    a[:5] = q[:5]
    sch = schedule_from_times(q, a)
    lrn = _recording_learner(n)
    X = np.arange(n, dtype=np.float32)[:, None]
    res = delayed_progressive_validation(lrn, lrn.init(), X, np.zeros(n, np.float32), sch)
    learned_at = np.asarray(res.state[1])
    assert np.all(learned_at >= 0) and len(set(learned_at.tolist())) == n  # each label learned exactly once
    # a prediction sees exactly the labels whose answer time is strictly before its question time
    # (at equal times questions go first), and nothing answered later: no leakage
    expect = np.array([np.sum(a < q[i]) for i in range(n)])
    np.testing.assert_array_equal(np.asarray(res.predictions.mean), expect)
    # answers are learned in answer-time order
    order = np.argsort(learned_at)
    assert np.all(np.diff(a[order]) >= 0)


def test_constant_delay_metrics_scored_at_answer(rng):
    lrn = oj.bayes_linreg(3, alpha=1.0, beta=4.0)
    X, Y = _lin_stream(rng, 120)
    d = 7
    res = delayed_progressive_validation(lrn, lrn.init(), X, Y, schedule_from_delays(np.full(120, d)),
                                         metrics=M.prequential())
    # reference: predict item i with a posterior of items 0..i-d-1 (answers at i'+d < i, ties: question first)
    from reference import blr_posterior, predictive

    for i in (0, 7, 8, 50, 119):
        k = max(0, i - d)
        if k == 0:
            m, S = np.zeros(3), np.eye(3)
        else:
            m, S = blr_posterior(X[:k], Y[:k], 1.0, 4.0)
        mu, var = predictive(m, S, 4.0, X[i])
        assert float(res.predictions.mean[i]) == pytest.approx(mu, rel=tol(1e-9, 1e-4), abs=1e-5)
        assert float(res.predictions.var[i]) == pytest.approx(var, rel=tol(1e-9, 1e-4))
    mu = np.asarray(res.predictions.mean, np.float64)
    assert float(res.metrics["mae"]) == pytest.approx(np.mean(np.abs(Y - mu)), rel=tol(1e-9, 1e-4))
    # the final state has learned every label
    m, _ = blr_posterior(X, Y, 1.0, 4.0)
    assert rel_err(res.state.mean, m) < tol(1e-9, 1e-4)


def test_vmap_over_streams_sharing_a_schedule(rng):
    lrn = oj.bayes_linreg(3)
    sch = schedule_from_delays(rng.integers(0, 10, size=80))
    Xs = rng.normal(size=(4, 80, 3))
    Ys = Xs.sum(-1)
    f = jax.vmap(lambda X, Y: delayed_progressive_validation(lrn, lrn.init(), X, Y, sch).predictions)
    out = f(Xs, Ys)
    one = delayed_progressive_validation(lrn, lrn.init(), Xs[2], Ys[2], sch).predictions
    assert rel_err(out.mean[2], one.mean) < tol(1e-12, 1e-5)


def test_schedule_rejects_nat_and_nan_times():
    """NaT (a finite int64 once cast) and NaN times are refused, naming the argument."""
    q = np.array(["2024-01-01T00:00", "NaT"], "datetime64[m]")
    a = np.array(["2024-01-01T01:00", "2024-01-01T02:00"], "datetime64[m]")
    with pytest.raises(ValueError, match="^question_times: .*NaT"):
        schedule_from_times(q, a)
    with pytest.raises(ValueError, match="^answer_times: .*NaT"):
        schedule_from_times(a, np.array(["2024-01-01T03:00", "NaT"], "datetime64[m]"))
    with pytest.raises(ValueError, match="^answer_times: "):
        schedule_from_times([0.0, 1.0], [1.0, np.nan])
    with pytest.raises(ValueError, match="^question_times: "):
        schedule_from_times([np.nan, 1.0], [1.0, 2.0])
    ok = schedule_from_times(a, a + np.timedelta64(5, "m"))
    np.testing.assert_allclose(np.asarray(ok.time)[:2], [1704070800.0, 1704071100.0])  # 01:00 asked, 01:05 answered


def test_schedule_errors():
    with pytest.raises(ValueError, match="answer_times"):
        schedule_from_times([0.0, 1.0], [0.5, 0.5])
    with pytest.raises(ValueError, match="answer_times"):
        schedule_from_times([0.0, 1.0], [1.0])
    with pytest.raises(ValueError, match="delays"):
        schedule_from_delays([1.0, -1.0])
    lrn = oj.bayes_linreg(2)
    with pytest.raises(ValueError, match="X, Y"):
        delayed_progressive_validation(lrn, lrn.init(), np.ones((3, 2)), np.ones(3), schedule_from_delays(np.zeros(4)))


# ----------------------------------------------------------------- non-Gaussian predictions
def _student_t_learner():
    return oj.calibrated(oj.bayes_linreg(3, alpha=0.5, beta=4.0))


def _mixture_learner():
    return oj.combine([oj.bayes_linreg(3, alpha=0.5, beta=4.0), oj.bayes_linreg(3, alpha=0.5, beta=4.0, forgetting=0.9)])


NON_GAUSSIAN = {"student_t": (_student_t_learner, oj.StudentTPrediction),
                "mixture": (_mixture_learner, oj.MixturePrediction)}


def _as64(p):
    return type(p)(*(np.asarray(v, np.float64) for v in p))


def _ref_quantities(y, p, level):
    """float64 scipy references ``(lpd, lo, hi, crps)`` of one item's Student-t or Gaussian mixture.

    CRPS by quadrature of ``∫ (F(t) - 1{t >= y})² dt`` (Gneiting & Raftery 2007, eq. 20), not the
    closed forms the library uses; a mixture's quantiles by root finding on its CDF.
    """
    from scipy import integrate, optimize, stats

    if isinstance(p, oj.StudentTPrediction):
        dist = stats.t(float(p.df), float(p.mean), float(p.scale))
        lpd, cdf = dist.logpdf(y), dist.cdf
        lo, hi = dist.ppf(0.5 - level / 2), dist.ppf(0.5 + level / 2)
        spread = float(p.scale)
    else:
        w, m, s = np.exp(p.log_weights), p.means, np.sqrt(p.vars)
        lpd = float(np.log(np.sum(w * stats.norm.pdf(y, m, s))))
        cdf = lambda t: float(np.sum(w * stats.norm.cdf(t, m, s)))  # noqa: E731
        a, b = float(np.min(m - 40 * s)), float(np.max(m + 40 * s))
        lo, hi = (optimize.brentq(lambda t, q=q: cdf(t) - q, a, b, xtol=1e-14) for q in (0.5 - level / 2, 0.5 + level / 2))
        spread = float(np.max(s))
    below = integrate.quad(lambda t: cdf(t) ** 2, -np.inf, y, epsabs=1e-12, limit=200)[0]
    above = integrate.quad(lambda t: (1.0 - cdf(t)) ** 2, y, np.inf, epsabs=1e-12, limit=200)[0]
    assert spread > 0
    return lpd, lo, hi, below + above


@pytest.mark.parametrize("kind", sorted(NON_GAUSSIAN))
def test_zero_delay_equals_progressive_validation_for_non_gaussian_predictions(rng, kind):
    """A zero-delay schedule keeps the learner's own prediction (Student-t, mixture) and scores it like
    progressive validation does, not as the Gaussian of its mean and variance."""
    make, cls = NON_GAUSSIAN[kind]
    lrn = make()
    X, Y = _lin_stream(rng, 120)
    acc = M.prequential(0.9)
    pv = progressive_validation(lrn, lrn.init(), X, Y, metrics=acc)
    dv = delayed_progressive_validation(lrn, lrn.init(), X, Y, schedule_from_delays(np.zeros(120)), metrics=acc)
    assert isinstance(dv.predictions, cls)
    for a, b in zip(dv.predictions, pv.predictions):
        np.testing.assert_allclose(a, b, rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))
    for m in M.METRICS:
        np.testing.assert_allclose(dv.metrics[m], pv.metrics[m], rtol=tol(1e-10, 1e-5), err_msg=m)
    # the Gaussian of the same moments scores differently: the comparison can tell the two apart
    gauss = M.score(acc, jnp.asarray(Y, dv.predictions.mean.dtype), Prediction(dv.predictions.mean, dv.predictions.var))
    assert abs(float(gauss["mlpd"]) - float(pv.metrics["mlpd"])) > 100 * tol(1e-10, 1e-5) * abs(float(pv.metrics["mlpd"]))


@pytest.mark.parametrize("kind", sorted(NON_GAUSSIAN))
def test_delayed_metrics_score_each_prediction_by_its_own_distribution(rng, kind):
    """Delay k: item i is predicted after learning items ``0..i-k-1`` (a Python loop of the learner's own
    predict and update, each label learned with the prediction issued at its question), and the metrics
    are the float64 scipy scores of those predictions."""
    make, cls = NON_GAUSSIAN[kind]
    lrn = make()
    n, k, level = 60, 4, 0.9
    X, Y = _lin_stream(rng, n)
    res = delayed_progressive_validation(lrn, lrn.init(), X, Y, schedule_from_delays(np.full(n, k)),
                                         metrics=M.prequential(level))
    st, preds, issued = lrn.init(), [], []
    for i in range(n):
        issued.append(lrn.predict(st, X[i]))
        preds.append(_as64(issued[-1]))
        if i >= k:  # item i - k is answered at time i, after item i's question
            st = lrn.update(st, X[i - k], Y[i - k], issued[i - k])
    assert isinstance(res.predictions, cls)
    for f, got in zip(cls._fields, res.predictions):
        want = np.stack([getattr(p, f) for p in preds])
        np.testing.assert_allclose(got, want, rtol=tol(1e-10, 1e-4), atol=tol(1e-10, 1e-4), err_msg=f)
    q = np.array([_ref_quantities(float(y), p, level) for y, p in zip(Y, preds)])
    lpd, lo, hi, crps = q.T
    mu = np.array([float(p.mean) for p in preds])
    r = tol(1e-7, 2e-4)
    np.testing.assert_allclose(res.metrics["mlpd"], lpd.mean(), rtol=r)
    np.testing.assert_allclose(res.metrics["crps"], crps.mean(), rtol=r)
    np.testing.assert_allclose(res.metrics["aiw"], (hi - lo).mean(), rtol=r)
    np.testing.assert_allclose(res.metrics["icr"], np.mean((Y >= lo) & (Y <= hi)), atol=tol(1e-12, 1.5 / n))  # a float32 bound may flip one item
    np.testing.assert_allclose(res.metrics["mae"], np.abs(Y - mu).mean(), rtol=r)
    np.testing.assert_allclose(res.metrics["smse"], np.mean((Y - mu) ** 2) / np.var(Y), rtol=r)


@pytest.mark.parametrize("k,student_t", [(1, False), (1, True), (3, False)], ids=["k1-gauss", "k1-t", "k3-gauss"])
def test_evaluate_streams_delay_k_equals_the_constant_delay_schedule(k, student_t):
    """``evaluate_streams(options=StreamsOptions(delay=k))`` predicts and scores like
    ``delayed_progressive_validation`` with ``schedule_from_delays(k)`` on every stream: means, variances, and the metrics, which are also
    recomputed in float64 with scipy (log density and the 95 % interval's hits) from those predictions.
    ``k = 1`` is the smallest delay, the one a ``delay`` read as "no delay" or off by one would change."""
    from scipy import stats

    from onlinejax.evaluation import StreamsOptions, evaluate_streams, prequential
    from onlinejax.evaluation.metrics import score

    r = np.random.default_rng(7)
    S, n = 3, 80
    X = r.normal(size=(S, n, 2))
    Y = X @ np.array([1.0, -2.0]) + 0.3 * r.normal(size=(S, n))
    lrn = oj.bayes_linreg(2, alpha=1.0, beta=4.0)
    lrn = oj.conformal(lrn, df=4.0) if student_t else lrn
    res = evaluate_streams(lrn, X, Y, options=StreamsOptions(delay=k), keep_predictions=True)
    Xj, Yj = jnp.asarray(X, res.predictions.mean.dtype), jnp.asarray(Y, res.predictions.mean.dtype)
    sched = schedule_from_delays(np.full(n, k))
    run = jax.vmap(lambda x, y: delayed_progressive_validation(lrn, lrn.init(), x, y, sched).predictions)
    want = jax.jit(run)(Xj, Yj)
    assert isinstance(res.predictions, oj.StudentTPrediction) == student_t == isinstance(want, oj.StudentTPrediction)
    close = dict(rtol=tol(1e-10, 1e-4), atol=tol(1e-10, 1e-4))
    np.testing.assert_allclose(res.predictions.mean, want.mean, **close)
    np.testing.assert_allclose(res.predictions.var, want.var, **close)
    ref = jax.vmap(lambda y, p: score(prequential(0.95), y, p))(Yj, want)
    for m in ("smse", "icr", "aiw", "mlpd", "crps"):
        np.testing.assert_allclose(res.metrics[m], ref[m], rtol=tol(1e-10, 2e-4), err_msg=m)
    mu = np.asarray(want.mean, np.float64)
    if student_t:
        dist = stats.t(np.asarray(want.df, np.float64), mu, np.asarray(want.scale, np.float64))
    else:
        dist = stats.norm(mu, np.sqrt(np.asarray(want.var, np.float64)))
    np.testing.assert_allclose(res.metrics["mlpd"], dist.logpdf(Y).mean(-1), rtol=tol(1e-8, 1e-4))
    lo, hi = dist.interval(0.95)
    np.testing.assert_allclose(res.metrics["icr"], np.mean((lo <= Y) & (Y <= hi), -1), atol=1.5 / n)

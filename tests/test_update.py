"""One prediction per item: ``update(state, x, y, pred)`` learns an item given the prediction issued for it.

References: ``step`` (which the protocol defines as ``predict`` then ``update``), the wrappers'
own calibrator and detector cores fed by hand, and closed-form posteriors of the inner learner.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import onlinejax as oj
from conftest import tol
from onlinejax import zoo
from onlinejax.wrappers.adaptive import MachineOptions, adaptive
from onlinejax.wrappers.calibration import calibrated, quantile_threshold
from onlinejax.wrappers.standardize import StandardizeOptions, standardize
from onlinejax.core.stateful import StatefulLearner

pytestmark = pytest.mark.float32_only  # the update protocol's plumbing


def _stream(n=150, d=2, seed=0, dtype=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ np.arange(1.0, d + 1) + 0.3 * rng.normal(size=n)
    dt = oj.core.base.default_float_dtype() if dtype is None else dtype
    return X.astype(dt), y.astype(dt)


def _max_diff(a, b) -> float:
    out = 0.0
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
        if u.size:
            with np.errstate(invalid="ignore"):
                rel = np.abs(u - v) / np.maximum(1.0, np.abs(u))
            rel = np.where(u == v, 0.0, rel)  # equal infinities
            out = max(out, float(np.max(np.nan_to_num(rel, nan=np.inf))))
    return out


def _learners():
    # the recommended stacks' shapes on small inner learners (compile time): a calibrated standardised state
    # machine, a calibrated mixture (BOCPD), the adapters' default and an uncalibrated stack
    options = MachineOptions(naive_alarm=0.7, learn_shock=False)
    return [("calibrated(adaptive)",
             lambda d: calibrated(adaptive(oj.windowed_bayes_linreg(d, 16), 16, options=options),
                                  standardization=StandardizeOptions(clip=5.0, warmup=16))),
            ("calibrated(bocpd)", lambda d: calibrated(oj.bocpd(oj.bayes_linreg(d, intercept=True), 4))),
            ("calibrated_bayes_linreg", oj.calibrated_bayes_linreg),
            ("standardize(adaptive)", lambda d: standardize(adaptive(oj.windowed_bayes_linreg(d, 16), 16)))]


@pytest.mark.parametrize("name, make", _learners(), ids=[n for n, _ in _learners()])
def test_step_is_predict_then_update(name, make):
    """``step`` and ``predict`` followed by ``update`` with that prediction reach the same states and predictions."""
    X, y = _stream(120)
    L = make(2)

    def by_update(s, xy):
        p = L.predict(s, xy[0])
        return L.update(s, *xy, p), p

    run = jax.jit(lambda f: jax.lax.scan(f, L.init(), (X, y)), static_argnums=0)
    (s_step, p_step), (s_upd, p_upd) = run(lambda s, xy: L.step(s, *xy)), run(by_update)
    assert type(p_upd) is type(p_step)
    # the calibrator recovers the inner prediction from the issued one: equal up to rounding
    assert _max_diff(s_step, s_upd) < tol(1e-9, 2e-4)
    assert _max_diff(p_step, p_upd) < tol(1e-9, 2e-4)


def _counting(base, calls):
    """``base`` whose ``predict`` and ``step`` count, at trace time, the predictions they issue."""
    def predict(s, x):
        calls.append("predict")
        return base.predict(s, x)

    def step(s, x, y):
        calls.append("step")
        return base.step(s, x, y)

    return base._replace(predict=predict, step=step)


@pytest.mark.parametrize("name, make, n_sites", [
    # one call site per member, or for the prior and the vmapped runs: each predicts once per item
    ("bocpd", lambda b: oj.bocpd(b, 4), 2),
    ("combine", lambda b: oj.combine([b, b]), 2),
    ("conformal(combine)", lambda b: zoo.calibrate_combination(oj.combine([b, b])), 2),
    ("with_climatology(conformal(combine))",
     lambda b: oj.with_climatology(zoo.calibrate_combination(oj.combine([b, b])), climatology_prior=0.1), 2),
    ("calibrated(adaptive)", lambda b: calibrated(adaptive(b, 16)), 1),
])
def test_step_predicts_each_inner_learner_once(name, make, n_sites):
    """A wrapper's ``step`` asks its inner learner for one prediction per item (traced: a ``vmap`` over the
    run-length hypotheses is one call). Before, BOCPD predicted its hypotheses in ``predict`` and again in
    ``learn``, and a calibrated combination's members predicted in the calibrator's ``predict`` and again in
    the combination's ``learn``."""
    calls = []
    L = make(_counting(oj.bayes_linreg(2, intercept=True), calls))
    jax.make_jaxpr(L.step)(L.init(), np.zeros(2, np.float32), np.float32(0.5))
    assert len(calls) == n_sites, calls


def test_update_learns_as_step_where_the_calibrators_floor_binds():
    """Where the recalibration's floor binds, the issued variance does not tell the inner one: ``update`` predicts
    it again, so it learns as ``step`` does (the inverse alone gave the state machine a larger variance, and the
    runs parted for good). The recommended windowed linear learner's stack on a thesis stream: its first tune
    (item 64) leaves a variance below the floor for about ten items."""
    from onlinejax.wrappers.calibration import _level_floor
    from onlinejax.data import thesis_grid
    from onlinejax.learners.linear import bayesian_map_windowed

    grp = thesis_grid(jax.random.key(0), ["SYNTH_ND_CD_2000_4_10_0_22"])[0]
    X, y = (np.asarray(a[0, :150], oj.core.base.default_float_dtype()) for a in (grp.X, grp.Y))
    linear = bayesian_map_windowed(4, 64, alpha=zoo.unit_prior_alpha(4), features=oj.ThesisFeatures(True, True))
    ad = adaptive(linear, 64,
                  options=MachineOptions(naive_alarm=zoo.RECOMMENDED_NAIVE_ALARM, learn_shock=False, skip_repeats=True))
    L = calibrated(ad, standardization=StandardizeOptions(clip=5.0, warmup=32))
    inner = standardize(ad, options=StandardizeOptions(clip=5.0, warmup=32))

    def by_update(s, xy):
        p = L.predict(s, xy[0])
        return L.update(s, *xy, p), p

    def by_step(s, xy):
        v = inner.predict(s.inner, xy[0]).var * s.recalibration.scale
        s2, p = L.step(s, *xy)
        return s2, (p, v < _level_floor(s.recalibration))

    run = jax.jit(lambda f: jax.lax.scan(f, L.init(), (X, y)), static_argnums=0)
    (s_step, (p_step, floored)), (s_upd, p_upd) = run(by_step), run(by_update)
    assert np.sum(floored) >= 5, np.sum(floored)
    assert _max_diff(s_step, s_upd) < tol(1e-9, 2e-4)
    assert _max_diff(p_step, p_upd) < tol(1e-9, 2e-4)


def test_batch_update_is_the_items_in_order():
    X, y = _stream(40)
    L = oj.calibrated_bayes_linreg(2)
    s0 = L.init()
    for i in range(10):
        s0 = L.learn(s0, X[i], y[i])
    preds = L.predict(s0, X[10:20])  # [b] leaves
    s_batch = L.update(s0, X[10:20], y[10:20], preds)
    s_seq = s0
    for i in range(10, 20):
        s_seq = L.update(s_seq, X[i], y[i], jax.tree_util.tree_map(lambda a, i=i: a[i - 10], preds))
    assert _max_diff(s_batch, s_seq) < tol(1e-12, 1e-5)


def test_calibrator_judges_the_issued_prediction_not_a_new_one():
    """The quantile tracker scores the prediction the caller received: a label inside the issued interval
    is no miss, even when a prediction made now (for a changed x) would have missed it, and vice versa."""
    X, y = _stream(100)
    L = calibrated(oj.bayes_linreg(2, alpha=1.0, beta=10.0))
    s = L.init()
    for i in range(100):
        s = L.learn(s, X[i], y[i])
    x_issued, x_now = np.array([0.0, 0.0], X.dtype), np.array([3.0, 3.0], X.dtype)
    issued = L.predict(s, x_issued)
    y_in = float(issued.mean)  # inside the issued interval, far outside the one for x_now (mean ≈ 9)
    judged = L.update(s, x_now, y_in, issued)
    re_predicted = L.learn(s, x_now, y_in)
    q0 = float(quantile_threshold(s.conformal))
    # a hit lowers the tracker's threshold, a miss raises it
    assert float(quantile_threshold(judged.conformal)) < q0 < float(quantile_threshold(re_predicted.conformal))
    # the inner learner learns the same item either way
    assert _max_diff(judged.inner, re_predicted.inner) < tol(1e-12, 1e-6)


def test_state_machine_judges_the_issued_prediction():
    """``adaptive``'s detector tests the prediction it is given: a wildly wrong issued prediction on a
    stable machine raises the alarm; the same item judged by a fresh prediction does not."""
    X, y = _stream(200)
    L = adaptive(oj.windowed_bayes_linreg(2, 16, alpha=1.0, beta=10.0), 16)
    s = L.init()
    for i in range(150):
        s = L.learn(s, X[i], y[i])
    assert int(s.mode) == oj.wrappers.adaptive.STABLE
    good = L.predict(s, X[150])
    bad = oj.Prediction(good.mean + 1e3, good.var)
    assert int(L.update(s, X[150], y[150], bad).n_alarms) == int(s.n_alarms) + 1
    assert int(L.update(s, X[150], y[150], good).n_alarms) == int(s.n_alarms)


def test_standardize_passes_the_issued_prediction_in_its_inner_coordinates():
    """The inner state machine sees the issued prediction's standardised residual ``(y - μ)/σ``."""
    X, y = _stream(120)
    L = standardize(adaptive(oj.windowed_bayes_linreg(2, 16, alpha=1.0, beta=10.0), 16),
                    options=StandardizeOptions(warmup=16))
    s = L.init()
    for i in range(100):
        s = L.learn(s, X[i], y[i])
    p = L.predict(s, X[100])
    # an issued prediction 10⁴ of its own sds away alarms whatever the targets' scale
    bad = oj.Prediction(p.mean + 1e4 * jnp.sqrt(p.var), p.var)
    assert int(L.update(s, X[100], y[100], bad).inner.n_alarms) == int(s.inner.n_alarms) + 1
    assert int(L.update(s, X[100], y[100], p).inner.n_alarms) == int(s.inner.n_alarms)


def test_update_checks_its_prediction():
    L = oj.calibrated_bayes_linreg(2)
    s = L.init()
    with pytest.raises(TypeError, match="pred"):
        L.update(s, [1.0, 2.0], 1.0, (0.0, 1.0))
    p = L.predict(s, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="pred"):
        L.update(s, [1.0, 2.0], 1.0, p)  # a batch's prediction for one item


def test_update_of_a_non_finite_item_is_skipped():
    L = adaptive(oj.windowed_bayes_linreg(2, 8), 8)
    s = L.init()
    p = L.predict(s, [1.0, 2.0])
    out = jax.jit(L.update)(s, jnp.array([jnp.nan, 2.0]), jnp.asarray(1.0), p)
    assert int(out.n_skipped) == 1 and int(out.n_seen) == 0


def test_stateful_update_equals_the_functional_update():
    X, y = _stream(30)
    L = oj.calibrated_bayes_linreg(2)
    model, s = StatefulLearner(L), L.init()
    for i in range(30):
        p = L.predict(s, X[i])
        s = L.update(s, X[i], y[i], p)
        model.update(X[i], y[i], p)
    assert _max_diff(model.state, s) < tol(1e-12, 1e-6)


# ------------------------------------------------------------------------ adapters
def _river_pair():
    pytest.importorskip("river")
    from onlinejax.adapters.river import RiverRegressor
    # standardization given: the adapter keeps the default as it is where the inputs move as behind a scaler
    from onlinejax.wrappers.calibration import CARRIED_STANDARDIZATION

    return (RiverRegressor("calibrated_bayes_linreg", {"standardization": CARRIED_STANDARDIZATION}, n_features=2,
                           tune_interval=0),
            oj.calibrated_bayes_linreg(2, standardization=CARRIED_STANDARDIZATION))


def test_river_learn_one_judges_the_prediction_issued_before_it():
    """River's pipelines call ``predict_one(x)`` and then ``learn_one(x', y)`` with ``x'`` transformed again:
    the adapter learns ``(x', y)`` with the prediction it issued for ``x``."""
    model, L = _river_pair()
    X, y = _stream(60)
    s = L.init()
    for i in range(60):
        x_issued = X[i] * 0.9  # a scaler in front moved between the calls
        issued = L.predict(s, x_issued)
        dist = model.predict_one({"a": float(x_issued[0]), "b": float(x_issued[1])}, with_dist=True)
        assert dist.mu == pytest.approx(float(issued.mean), rel=tol(1e-9, 1e-4), abs=tol(1e-9, 1e-4))
        model.learn_one({"a": float(X[i, 0]), "b": float(X[i, 1])}, float(y[i]))
        s = L.update(s, X[i], y[i], issued)
    assert _max_diff(model.state, s) < tol(1e-9, 1e-4)


def test_river_learn_one_predicts_now_when_the_issued_prediction_is_ambiguous():
    """Two predictions for other inputs and none for this one: the item is judged by a prediction made now."""
    model, L = _river_pair()
    X, y = _stream(20)
    s = L.init()
    for i in range(20):
        model.predict_one({"a": 5.0, "b": -5.0})
        model.predict_one({"a": -5.0, "b": 5.0})
        model.learn_one({"a": float(X[i, 0]), "b": float(X[i, 1])}, float(y[i]))
        s = L.learn(s, X[i], y[i])
    assert _max_diff(model.state, s) < tol(1e-9, 1e-4)


def test_river_delayed_labels_find_their_issued_predictions():
    """Labels that arrive later, for inputs seen before: each is learned with the prediction issued for it."""
    model, L = _river_pair()
    X, y = _stream(40)
    s, issued = L.init(), {}
    for i in range(40):
        model.predict_one({"a": float(X[i, 0]), "b": float(X[i, 1])})
        issued[i] = L.predict(s, X[i])
        if i >= 3:  # the label of item i - 3 arrives
            j = i - 3
            model.learn_one({"a": float(X[j, 0]), "b": float(X[j, 1])}, float(y[j]))
            s = L.update(s, X[j], y[j], issued.pop(j))
    assert _max_diff(model.state, s) < tol(1e-9, 1e-4)

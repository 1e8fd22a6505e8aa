"""The runner's tune plan: ``TunePlan`` reaches every state machine inside a learner, through the runners."""
import numpy as np
import pytest

from onlinejax import TunePlan, calibrated, combine, ewa_squared_error, standardize
from onlinejax.wrappers.adaptive import adaptive
from onlinejax.data import StreamGroup
from onlinejax.evaluation import (GridLearner, Scoring, delayed_progressive_validation, evaluate_streams,
                                  progressive_validation, schedule_from_delays)
from onlinejax.runner import run_grid
from onlinejax.runner.grid import _tune_plan_for
from onlinejax.learners.kernel_regression import kernel_regression
from onlinejax.learners.linear import bayes_linreg
from onlinejax.core.schedule import with_tune_plan

pytestmark = pytest.mark.float32_only  # the runners' plumbing: the same in float64

W = 16


def _drifting(seed: int, n: int = 240):
    """Two regimes, so the machine alarms, learns a new phase and tunes more than once."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    Y = np.where(np.arange(n) < n // 2, X[:, 0], 4.0 - 3.0 * X[:, 1]) + 0.1 * rng.normal(size=n)
    return X, Y


def test_with_tune_plan_rebuilds_every_state_machine_inside_its_wrappers():
    """The plan's fields are laid over ``adaptive``'s ``tune_plan`` inside wrappers and a combination's members; an
    empty plan, a learner without a machine, one built by hand and a record changed after it was built are
    returned as they are; equal plans give the same learner (so compiled programs are shared)."""
    machine = adaptive(kernel_regression(2, W), W)
    lrn = calibrated(standardize(machine))
    re = with_tune_plan(lrn, TunePlan(every=8, batch="all", split=False))
    assert re.description == (f"calibrated(standardize(adaptive(kernel_regression(2, {W}), {W}, "
                              "tune_plan=TunePlan(every=8, batch='all', split=False))))")
    assert re is with_tune_plan(lrn, TunePlan(every=8, batch="all", split=False))
    inner = re.factory_call.args[0].factory_call.args[0]
    assert inner.deferred is None and machine.deferred is not None  # split=False: no split step offered
    assert with_tune_plan(machine, TunePlan(every=1, split=True)) is machine  # adaptive's defaults already
    own = adaptive(kernel_regression(2, W), W, tune_plan=TunePlan(every=4))  # its other fields: the machine's own
    assert with_tune_plan(own, TunePlan(every=4, batch="auto", split=True)) is own
    assert "TunePlan(every=4, batch='all', split=True)" in with_tune_plan(own, TunePlan(batch="all")).description
    assert with_tune_plan(lrn, None) is lrn and with_tune_plan(lrn, TunePlan()) is lrn
    linear = calibrated(bayes_linreg(2))
    assert with_tune_plan(linear, TunePlan(every=8)) is linear
    by_hand = machine._replace(description=None, factory_call=None)  # as make_learner returns it
    with pytest.warns(RuntimeWarning, match="keeps its own schedule"):
        assert with_tune_plan(by_hand, TunePlan(every=8)) is by_hand
    changed = machine._replace(tune=None)  # a record changed after its factory returned it
    with pytest.warns(RuntimeWarning, match="keeps its own schedule"):
        assert with_tune_plan(changed, TunePlan(every=8)) is changed
    mix = combine([machine, bayes_linreg(2)], ewa_squared_error())
    members = with_tune_plan(mix, TunePlan(every=4)).factory_call.args[0]
    assert "TunePlan(every=4," in members[0].description and members[1] is mix.factory_call.args[0][1]


def test_tune_plan_values_are_checked():
    lrn = adaptive(kernel_regression(2, W), W)
    for plan, field in ((TunePlan(every=0), "tune_plan.every"), (TunePlan(batch="some"), "tune_plan.batch"),
                        (TunePlan(batch=0), "tune_plan.batch"), (TunePlan(split="yes"), "tune_plan.split")):
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            with_tune_plan(lrn, plan)
    with pytest.raises(ValueError, match="tune_plan: expected a TunePlan"):
        with_tune_plan(lrn, {"every": 8})
    with pytest.raises(ValueError, match="tune_plan"):
        run_grid({"kr": lambda d: lrn}, StreamGroup.from_arrays(np.zeros((1, 8, 2)), np.zeros((1, 8))),
                 tune_plan=8, progress=False)
    # the grid reads "auto" from its own devices: one stream's tune at a time on CPUs, the batch elsewhere
    assert _tune_plan_for(TunePlan(batch="auto"), True).batch == 1
    assert _tune_plan_for(TunePlan(batch="auto"), False).batch == "all"
    assert _tune_plan_for(TunePlan(), True) is None  # a plan that sets nothing is no plan
    # the factory checks its own plan the same way, and takes nothing else
    for plan, field in ((TunePlan(every=0), "tune_plan.every"), (TunePlan(batch="some"), "tune_plan.batch")):
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            adaptive(kernel_regression(2, W), W, tune_plan=plan)
    with pytest.raises(TypeError, match="tune_plan: expected a TunePlan"):
        adaptive(kernel_regression(2, W), W, tune_plan={"every": 8})
    with pytest.raises(TypeError, match="tune_every"):
        adaptive(kernel_regression(2, W), W, tune_every=8)  # the schedule's old keywords are gone


def test_progressive_validation_tunes_as_its_plan_says():
    """``tune_plan=TunePlan(every=k)``: every tune runs on an item count that is a multiple of ``k``, as with a
    machine built with ``tune_plan=TunePlan(every=k)`` (the same predictions); the default plan tunes at the
    phases' ends, which are not all multiples of ``k``. ``split`` changes the program, not the results."""
    lrn, k = adaptive(kernel_regression(2, W), W), 8
    X, Y = _drifting(0)
    rec = lambda s: (s.n_tunes, s.n_seen)  # noqa: E731
    plain = progressive_validation(lrn, lrn.init(), X, Y, record=rec)
    planned = progressive_validation(lrn, lrn.init(), X, Y, record=rec, tune_plan=TunePlan(every=k))
    built = adaptive(kernel_regression(2, W), W, tune_plan=TunePlan(every=k))
    direct = progressive_validation(built, built.init(), X, Y, record=rec)
    np.testing.assert_array_equal(np.asarray(planned.predictions.mean), np.asarray(direct.predictions.mean))

    def tuned_at(res):
        n_tunes, n_seen = (np.asarray(a) for a in res.records)
        return n_seen[np.diff(np.concatenate([[0], n_tunes])) > 0]

    assert len(tuned_at(planned)) >= 2 and np.all(tuned_at(planned) % k == 0)
    assert np.any(tuned_at(plain) % k != 0)
    # no split step: one loop with the tunes
    whole_lrn = adaptive(kernel_regression(2, W), W, tune_plan=TunePlan(split=False))
    split = progressive_validation(whole_lrn, whole_lrn.init(), X, Y, tune_plan=TunePlan(split=True))
    assert with_tune_plan(whole_lrn, TunePlan(split=True)).deferred is not None  # the segments' loop ran
    whole = progressive_validation(lrn, lrn.init(), X, Y, tune_plan=TunePlan(split=False))
    np.testing.assert_allclose(np.asarray(split.predictions.mean), np.asarray(whole.predictions.mean),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(split.predictions.mean), np.asarray(plain.predictions.mean),
                               rtol=1e-4, atol=1e-5)
    # delayed validation with a zero delay is progressive validation, under the same plan
    delayed = delayed_progressive_validation(lrn, lrn.init(), X, Y, schedule_from_delays(np.zeros(len(Y), int)),
                                             tune_plan=TunePlan(every=k))
    np.testing.assert_allclose(np.asarray(delayed.predictions.mean), np.asarray(planned.predictions.mean),
                               rtol=1e-4, atol=1e-5)


def test_run_grid_and_evaluate_streams_apply_the_plan_and_keep_the_names():
    """A grid row under ``TunePlan(every=k)`` keeps its configuration's name and equals ``evaluate_streams``
    under the same plan; ``batch`` (how many vmapped streams tune together) does not change the results."""
    k = 8
    streams = [_drifting(s) for s in (1, 2, 3)]
    X, Y = np.stack([s[0] for s in streams]), np.stack([s[1] for s in streams])
    make = lambda d: adaptive(kernel_regression(d, W), W)  # noqa: E731
    group = StreamGroup.from_arrays(X, Y)
    plan = TunePlan(every=k)
    res = run_grid([GridLearner("KR", "KernelRegression", make)], group, tune_plan=plan, progress=False,
                   scoring=Scoring(stable_window=0))
    assert [r["learner"] for r in res.rows] == ["KR"] * 3 and res.tune_plan == TunePlan(every=k)
    one_by_one = evaluate_streams(make(2), X, Y, tune_plan=plan._replace(batch=1))  # a CPU's "auto"
    np.testing.assert_allclose([r["smse"] for r in res.rows], one_by_one.metrics["smse"], rtol=1e-4)
    whole = evaluate_streams(make(2), X, Y, tune_plan=plan._replace(batch="all"))
    np.testing.assert_allclose(one_by_one.metrics["mlpd"], whole.metrics["mlpd"], rtol=1e-4, atol=1e-5)
    assert "TunePlan(every=8, batch='all'," in with_tune_plan(make(2), plan._replace(batch="all")).description

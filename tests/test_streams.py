"""The public vmap layer: evaluate_streams equals one progressive validation per (stream, setting)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax.wrappers.adaptive import adaptive
from onlinejax.evaluation import (ItemWeights, StreamsOptions, evaluate_streams, prequential, progressive_validation,
                                  stable_mask)
from onlinejax.evaluation.metrics import score
from onlinejax.evaluation.streams import hyper_states
from onlinejax.learners.kernel_regression import kernel_regression
from onlinejax.learners.linear import bayes_linreg, windowed_bayes_linreg

from conftest import tol

pytestmark = pytest.mark.float32_only  # the evaluation's layouts; float64 runs it through the pinned rows


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3, 120, 2))
    Y = X @ np.array([1.0, -2.0]) + 0.3 * rng.normal(size=(3, 120))
    Y[1, 60:] += 5.0  # a drift in one stream
    return X, Y


def test_metrics_equal_separate_runs_for_every_stream_and_setting(data):
    X, Y = data
    lrn = bayes_linreg(2, alpha=1.0, beta=1.0, forgetting=0.98)
    alphas = [0.1, 3.0]
    st_w = np.stack([stable_mask(120, 20, [60] if i == 1 else []) for i in range(3)])
    res = evaluate_streams(lrn, X, Y, hyper={"alpha": alphas}, weights=ItemWeights(stable=st_w),
                           keep_predictions=True)
    assert res.metrics["smse"].shape == (2, 3) and res.predictions.mean.shape == (2, 3, 120)
    for h, a in enumerate(alphas):
        for s in range(3):
            preds = progressive_validation(lrn, lrn.init(alpha=a), X[s], Y[s]).predictions
            ref = score(prequential(0.95), jnp.asarray(Y[s], preds.mean.dtype), preds)
            ref_st = score(prequential(0.95), jnp.asarray(Y[s], preds.mean.dtype), preds, jnp.asarray(st_w[s], preds.mean.dtype))
            for m in ("smse", "icr", "mlpd", "crps"):
                np.testing.assert_allclose(res.metrics[m][h, s], ref[m], rtol=tol(1e-10, 2e-4))
                np.testing.assert_allclose(res.metrics[m + "_st"][h, s], ref_st[m], rtol=tol(1e-10, 2e-4))
            np.testing.assert_allclose(res.predictions.mean[h, s], preds.mean, rtol=tol(1e-10, 1e-4), atol=tol(1e-10, 1e-4))


def test_without_hyper_metrics_are_per_stream_and_delay_is_applied(data):
    X, Y = data
    lrn = adaptive(kernel_regression(2, 16), 16)
    res = evaluate_streams(lrn, X, Y)
    assert res.metrics["smse"].shape == (3,) and res.predictions is None
    late = evaluate_streams(lrn, X, Y, options=StreamsOptions(delay=5))
    assert np.all(np.isfinite(late.metrics["smse"])) and not np.allclose(late.metrics["smse"], res.metrics["smse"])


def test_grouped_widths_equal_one_flat_vmap(data):
    """``evaluate_streams(options=StreamsOptions(vmap_width=k))`` (``streams_program(width=k)``): one pair at a time or groups of 4 of
    the 9 (stream, setting) pairs (the last group padded) give the flat vmap's metrics."""
    X, Y = data
    lrn = bayes_linreg(2, alpha=1.0, beta=1.0, forgetting=0.98)
    hyper = {"alpha": [0.1, 1.0, 10.0]}
    flat = evaluate_streams(lrn, X, Y, hyper)
    for width in (1, 4):
        grouped = evaluate_streams(lrn, X, Y, hyper, options=StreamsOptions(vmap_width=width))
        np.testing.assert_allclose(grouped.metrics["smse"], flat.metrics["smse"], rtol=tol(1e-12, 1e-5))
    with pytest.raises(ValueError, match=r"^options\.vmap_width: "):
        evaluate_streams(lrn, X, Y, hyper, options=StreamsOptions(vmap_width=0))


def test_bad_inputs_name_the_argument(data):
    X, Y = data
    lrn = bayes_linreg(2)
    with pytest.raises(ValueError, match="X, Y: expected shapes"):
        evaluate_streams(lrn, X[0], Y[0])
    with pytest.raises(ValueError, match="hyper"):
        evaluate_streams(lrn, X, Y, hyper={"alpha": [[1.0]]})
    with pytest.raises(ValueError, match=r"^options\.delay: "):
        evaluate_streams(lrn, X, Y, options=StreamsOptions(delay=0))
    for bad in (-1.0, np.nan, np.ones(3)):  # a negative weight gave plausible-looking metrics
        with pytest.raises(ValueError, match=r"^weights\.all: "):
            evaluate_streams(lrn, X, Y, weights=ItemWeights(all=bad))
    with pytest.raises(ValueError, match=r"^weights\.stable: "):
        evaluate_streams(lrn, X, Y, weights=ItemWeights(stable=-np.ones(Y.shape)))


def test_repeated_calls_reuse_the_compiled_program(data):
    from onlinejax.evaluation import streams

    X, Y = data
    lrn = bayes_linreg(2, alpha=1.0, beta=1.0)
    first = evaluate_streams(lrn, X, Y)
    misses = streams._compiled.cache_info().misses
    again = evaluate_streams(lrn, X, Y)
    assert streams._compiled.cache_info().misses == misses
    np.testing.assert_array_equal(first.metrics["smse"], again.metrics["smse"])


def test_learners_with_one_prediction_shape_share_the_compiled_scores(data):
    """Two learners whose predictions have one type and shape compile the scores once; the split program
    (predictions, then the shared scores) gives the rows of :func:`streams_program` in one program."""
    from onlinejax.evaluation import streams

    X, Y = data
    X = X[:, :37]  # a shape no other test compiles the scores for
    Y = Y[:, :37]
    w = np.ones(Y.shape, np.float32)
    first = bayes_linreg(2, alpha=1.0, beta=1.0)
    second = windowed_bayes_linreg(2, 16)
    stages = []
    for lrn in (first, second):
        states = hyper_states(lrn, None, np.float32)
        preds, present = jax.jit(streams.predictions_program(lrn))(states, X.astype(np.float32), Y.astype(np.float32))
        args = (Y.astype(np.float32), preds, present, w, w)
        exe, st = streams.compiled_scores(args, keep_moments=True)
        stages.append(st)
        split = exe(*args)
        whole = jax.jit(streams.streams_program(lrn, keep_predictions=True))(
            states, X.astype(np.float32), Y.astype(np.float32), w, w)
        for k, v in split.items():
            np.testing.assert_allclose(v, whole[k], rtol=tol(1e-12, 2e-6), atol=1e-30, err_msg=k)
    assert stages[0] is not None and stages[1] is None


def test_delay_equals_delayed_progressive_validation_stream_by_stream(data):
    """``delay=k`` is the schedule of constant delay ``k`` (item ``i`` answered at ``i + k``), for a Student-t
    learner scored by its own distribution; delays ``k ± 1`` give other predictions, so an off-by-one fails."""
    import onlinejax as oj
    from onlinejax.evaluation import delayed_progressive_validation, schedule_from_delays

    X, Y = data
    k, n = 3, X.shape[1]
    lrn = oj.conformal(bayes_linreg(2, alpha=1.0, beta=1.0), df=4.0)
    res = evaluate_streams(lrn, X, Y, options=StreamsOptions(delay=k), keep_predictions=True)
    run = lambda s, d: delayed_progressive_validation(  # noqa: E731
        lrn, lrn.init(), X[s], Y[s], schedule_from_delays(np.full(n, d))).predictions
    scored = jax.jit(score, static_argnums=0)  # one compile for the three streams
    for s in range(X.shape[0]):
        preds = run(s, k)
        assert isinstance(preds, oj.StudentTPrediction) and isinstance(res.predictions, oj.StudentTPrediction)
        y = jnp.asarray(Y[s], preds.mean.dtype)
        want = scored(prequential(0.95), y, preds)
        for m in ("smse", "icr", "aiw", "mlpd", "crps"):
            np.testing.assert_allclose(res.metrics[m][s], want[m], rtol=tol(1e-10, 2e-4), err_msg=m)
        np.testing.assert_allclose(res.predictions.mean[s], preds.mean, rtol=tol(1e-10, 1e-4), atol=tol(1e-10, 1e-4))
        np.testing.assert_allclose(res.predictions.cdf(Y)[s], preds.cdf(y), rtol=tol(1e-10, 1e-4), atol=tol(1e-10, 1e-4))
        for got, want in zip(res.predictions.interval(0.9), preds.interval(0.9)):  # the learner's own Student-t
            np.testing.assert_allclose(got[s], want, rtol=tol(1e-10, 1e-4), atol=tol(1e-10, 1e-4))
    for other in (k - 1, k + 1):
        gap = np.abs(np.asarray(run(0, other).mean) - np.asarray(res.predictions.mean[0]))
        assert np.max(gap) > 1e-2, other


@pytest.mark.parametrize("make, hyper, key", [
    (lambda: bayes_linreg(2), {"alpha": [1.0, 0.0]}, "alpha"),
    (lambda: bayes_linreg(2), {"alpha": [-1.0]}, "alpha"),
    (lambda: bayes_linreg(2), {"alpha": [1.0, np.nan]}, "alpha"),
    (lambda: bayes_linreg(2, forgetting=0.99), {"forgetting": [0.9, 1.5]}, "forgetting"),
    (lambda: bayes_linreg(2, forgetting=0.99), {"alpha": [1.0, 1.0], "forgetting": [0.9, 0.0]}, "forgetting"),
    (lambda: windowed_bayes_linreg(2, 8), {"window": [4, 0]}, "window"),
    (lambda: windowed_bayes_linreg(2, 8), {"window": [4, 2.5]}, "window"),
    (lambda: windowed_bayes_linreg(2, 8), {"window": [9]}, "window"),
])
def test_hyper_values_are_checked_as_init_checks_them(data, make, hyper, key):
    X, Y = data
    with pytest.raises(ValueError, match=rf"^hyper\['{key}'\]: "):
        evaluate_streams(make(), X, Y, hyper=hyper)


def test_valid_hyper_values_pass_and_traced_ones_are_not_checked(data):
    X, Y = data
    lrn = windowed_bayes_linreg(2, 8)
    a = evaluate_streams(lrn, X, Y, hyper={"window": [4, 8]})
    b = evaluate_streams(lrn, X, Y, hyper={"window": np.array([4.0, 8.0])})  # whole numbers promoted to floats
    np.testing.assert_array_equal(a.metrics["smse"], b.metrics["smse"])
    for h, w in enumerate((4, 8)):
        ref = evaluate_streams(lrn, X, Y, hyper={"window": [w]})
        np.testing.assert_allclose(a.metrics["smse"][h], ref.metrics["smse"][0], rtol=tol(1e-12, 1e-5))
    # inside jit the values are traced: init cannot check them, and hyper_states does not try
    blr = bayes_linreg(2)
    st = jax.jit(lambda al: hyper_states(blr, {"alpha": al}, al.dtype))(jnp.asarray([0.5, 2.0]))
    assert jax.tree_util.tree_leaves(st)[0].shape[0] == 2


def test_missing_values_are_skipped_and_counted(data):
    """A NaN in x or y: the item is neither learned nor scored, in every (stream, setting) pair and with a delay;
    the metrics equal progressive validation of the stream with those items deleted."""
    X, Y = data
    Xg, Yg = X.copy(), Y.copy()
    Yg[0, [3, 40, 41]] = np.nan
    Xg[2, 100, 1] = np.nan
    lrn = bayes_linreg(2, alpha=1.0, beta=1.0, forgetting=0.98)
    res = evaluate_streams(lrn, Xg, Yg, hyper={"alpha": [0.1, 3.0]})
    np.testing.assert_array_equal(res.metrics["n_skipped"], [[3, 0, 1]] * 2)
    assert np.all(np.asarray(res.metrics["n_nonfinite"]) == 0)
    for h, a in enumerate([0.1, 3.0]):
        for s in range(3):
            keep = np.isfinite(Yg[s]) & np.isfinite(Xg[s]).all(1)
            ref = progressive_validation(lrn, lrn.init(alpha=a), X[s][keep], Y[s][keep], prequential(0.95)).metrics
            for m in ("smse", "icr", "mlpd", "crps"):
                np.testing.assert_allclose(res.metrics[m][h, s], ref[m], rtol=tol(1e-12, 1e-5), err_msg=m)
    late = evaluate_streams(lrn, Xg, Yg, options=StreamsOptions(delay=2))
    np.testing.assert_array_equal(late.metrics["n_skipped"], [3, 0, 1])
    assert np.all(np.isfinite(np.asarray(late.metrics["mlpd"])))

"""The public vmap layer: evaluate_streams equals one progressive validation per (stream, setting)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax.adaptive import adaptive
from onlinejax.evaluation import evaluate_streams, prequential, progressive_validation, stable_mask
from onlinejax.evaluation.metrics import score
from onlinejax.evaluation.streams import streams_program, hyper_states
from onlinejax.kernel_regression import kernel_regression
from onlinejax.linear import bayes_linreg

from conftest import tol


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
    res = evaluate_streams(lrn, X, Y, hyper={"alpha": alphas}, stable_weights=st_w, keep_predictions=True)
    assert res.metrics["smse"].shape == (2, 3) and res.predictions["mean"].shape == (2, 3, 120)
    for h, a in enumerate(alphas):
        for s in range(3):
            preds = progressive_validation(lrn, lrn.init(alpha=a), X[s], Y[s]).predictions
            ref = score(prequential(0.95), jnp.asarray(Y[s], preds.mean.dtype), preds)
            ref_st = score(prequential(0.95), jnp.asarray(Y[s], preds.mean.dtype), preds, jnp.asarray(st_w[s], preds.mean.dtype))
            for m in ("smse", "icr", "mlpd", "crps"):
                np.testing.assert_allclose(res.metrics[m][h, s], ref[m], rtol=tol(1e-10, 2e-4))
                np.testing.assert_allclose(res.metrics[m + "_st"][h, s], ref_st[m], rtol=tol(1e-10, 2e-4))
            np.testing.assert_allclose(res.predictions["mean"][h, s], preds.mean, rtol=tol(1e-10, 1e-4), atol=tol(1e-10, 1e-4))


def test_without_hyper_metrics_are_per_stream_and_delay_is_applied(data):
    X, Y = data
    lrn = adaptive(kernel_regression(2, 16), 16)
    res = evaluate_streams(lrn, X, Y)
    assert res.metrics["smse"].shape == (3,) and res.predictions is None
    late = evaluate_streams(lrn, X, Y, delay=5)
    assert np.all(np.isfinite(late.metrics["smse"])) and not np.allclose(late.metrics["smse"], res.metrics["smse"])


def test_grouped_widths_equal_one_flat_vmap(data):
    X, Y = data
    lrn = bayes_linreg(2, alpha=1.0, beta=1.0, forgetting=0.98)
    states = hyper_states(lrn, {"alpha": [0.1, 1.0, 10.0]}, X.dtype if jax.config.jax_enable_x64 else np.float32)
    dt = jax.tree_util.tree_leaves(states)[0].dtype
    args = (jnp.asarray(X, dt), jnp.asarray(Y, dt), jnp.ones(Y.shape, dt), jnp.ones(Y.shape, dt))
    flat = jax.jit(streams_program(lrn))(states, *args)
    for width in (1, 4):
        grouped = jax.jit(streams_program(lrn, width=width))(states, *args)
        np.testing.assert_allclose(grouped["smse"], flat["smse"], rtol=tol(1e-12, 1e-5))


def test_bad_inputs_name_the_argument(data):
    X, Y = data
    lrn = bayes_linreg(2)
    with pytest.raises(ValueError, match="X, Y: expected shapes"):
        evaluate_streams(lrn, X[0], Y[0])
    with pytest.raises(ValueError, match="NaN"):
        evaluate_streams(lrn, X, np.where(np.arange(120) == 3, np.nan, Y))
    with pytest.raises(ValueError, match="hyper"):
        evaluate_streams(lrn, X, Y, hyper={"alpha": [[1.0]]})
    with pytest.raises(ValueError, match="delay"):
        evaluate_streams(lrn, X, Y, delay=0)


def test_repeated_calls_reuse_the_compiled_program(data):
    from onlinejax.evaluation import streams

    X, Y = data
    lrn = bayes_linreg(2, alpha=1.0, beta=1.0)
    first = evaluate_streams(lrn, X, Y)
    misses = streams._compiled.cache_info().misses
    again = evaluate_streams(lrn, X, Y)
    assert streams._compiled.cache_info().misses == misses
    np.testing.assert_array_equal(first.metrics["smse"], again.metrics["smse"])

"""The GP's options as values: GPHyper, GPTuneOptions and GPWindowOptions (checked, hashable, the old defaults).

That the defaults reproduce the learner as it was before the records is also what the float64 pinned rows check
(``tests/test_pinned_rows.py``: its GP rows were recorded with the keyword factory).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax.evaluation import progressive_validation
from onlinejax.learners.gp import GPHyper, GPTuneOptions, GPWindowOptions, gp_params, gp_window, tune_hyperparameters
from onlinejax.learners.gp.kernels import KERNELS

pytestmark = pytest.mark.float32_only  # construction and equality, no numerics


def _stream(rng, n, d=2):
    X = rng.uniform(0, 10, size=(n, d))
    return X, np.sin(X[:, 0]) + np.cos(X[:, -1]) + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("record, field, bad", [
    ("tune_options", "steps", -1), ("tune_options", "steps", 2.5), ("tune_options", "restarts", 0),
    ("tune_options", "retune_restarts", 0), ("tune_options", "method", "newton"),
    ("tune_options", "learning_rate", 0.0), ("tune_options", "noise_floor", -1e-3),
    ("tune_options", "noise_floor", float("inf")), ("tune_options", "lengthscale_prior", 0.0),
    ("tune_options", "from_data", "yes"), ("initial", "signal_std", 0.0), ("initial", "noise_std", -1.0),
    ("initial", "lengthscale", [1.0, 2.0, 3.0]), ("window_options", "freeze_when_full", 1),
    ("window_options", "mean_from_state", None), ("window_options", "adapt_scale", "no"),
])
def test_a_bad_field_is_a_value_error_naming_it(record, field, bad):
    cls = {"tune_options": GPTuneOptions, "initial": GPHyper, "window_options": GPWindowOptions}[record]
    # a switch that is not a bool is of the wrong type: a TypeError, also naming the field
    exc = TypeError if record == "window_options" or field == "from_data" else ValueError
    with pytest.raises(exc, match=rf"^{record}\.{field}: "):
        gp_window(2, 8, **{record: cls()._replace(**{field: bad})})


def test_a_record_is_given_as_a_record():
    with pytest.raises(TypeError, match=r"^tune_options: expected a GPTuneOptions, got dict"):
        gp_window(2, 8, tune_options={"steps": 8})
    with pytest.raises(TypeError, match=r"^initial: expected a GPHyper, got tuple"):
        gp_window(2, 8, initial=(1.0, 0.1, 1.0))
    with pytest.raises(ValueError, match=r"^tune_options\.method: "):
        tune_hyperparameters(KERNELS["se"], "zero", gp_params(1), jnp.zeros((4, 1)), jnp.zeros(4), jnp.ones(4, bool),
                             tune_options=GPTuneOptions(method="bfgs"))


def test_the_defaults_are_the_keyword_factorys():
    """The records' defaults are the values ``gp_window``'s keywords had (a change here changes every GP)."""
    assert GPHyper() == (1.0, 0.1, 1.0)
    assert GPTuneOptions() == (20, 2, 1, "lbfgs", 0.05, 1e-3, 2.0, True, False)
    assert GPWindowOptions() == (False, False, True)
    assert GPTuneOptions().checked() == GPTuneOptions()


def test_equal_records_build_the_same_learner():
    """The factory cache keys on the records' values, so a configuration built twice compiles once."""
    make = lambda: gp_window(2, 8, initial=GPHyper(noise_std=0.3, lengthscale=[1.0, 2.0]),  # noqa: E731
                             tune_options=GPTuneOptions(steps=8, method="adam"),
                             window_options=GPWindowOptions(adapt_scale=False))
    assert make() is make()
    assert hash(GPTuneOptions(steps=8)) == hash(GPTuneOptions(steps=8))
    assert gp_window(2, 8, tune_options=GPTuneOptions(steps=8)) is not gp_window(2, 8, tune_options=GPTuneOptions())


def test_default_records_are_the_default_learner_bitwise(rng):
    """Spelling the default records out gives the default learner's predictions and tunes bit for bit."""
    X, Y = _stream(rng, 48)
    plain = gp_window(2, 16, mean="ols")
    spelled = gp_window(2, 16, mean="ols", initial=GPHyper(1.0, 0.1, 1.0),
                        tune_options=GPTuneOptions(20, 2, 1, "lbfgs", 0.05, 1e-3, 2.0, True),
                        window_options=GPWindowOptions(False, False, True))
    outs = []
    for lrn in (plain, spelled):
        s, preds = lrn.init(), []
        for lo in range(0, 48, 16):  # tune after each block: the first tune and two later ones
            res = progressive_validation(lrn, s, X[lo:lo + 16], Y[lo:lo + 16])
            s = lrn.tune(res.state)
            preds.append(res.predictions)
        outs.append((s, preds))
    for u, v in zip(jax.tree_util.tree_leaves(outs[0]), jax.tree_util.tree_leaves(outs[1])):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))

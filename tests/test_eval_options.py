"""The evaluation entry points' options as values: a bad field is named, old keywords are refused, defaults hold.

That the default records reproduce the runners as they were before the records is also what the float64 pinned
rows check (``tests/test_pinned_rows.py``: ``run_grid`` with its defaults).
"""
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax.wrappers.combination import fixed_share
from onlinejax.data import StreamGroup
from onlinejax.evaluation import (GradientOptions, GridLayout, GridLearnerOptions, ItemWeights, PrequentialScoring,
                                  ReplayOptions, Scoring, SplitOptions, StreamsOptions, compare_evaluations,
                                  evaluate_streams, prequential_score, tune_prequential)
from onlinejax.runner import replay_combination, run_grid
from onlinejax.learners.linear import bayes_linreg
from onlinejax.core.registry import grid_learner

from conftest import tol


def _streams(S=2, n=40, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(S, n, d))
    return X, X @ np.arange(1.0, d + 1) + 0.1 * rng.normal(size=(S, n))


def test_the_defaults_are_the_old_keywords():
    """The records' defaults are the values the entry points' keywords had (a change here changes every run)."""
    assert Scoring() == (0.95, 128, None)
    assert GridLayout() == (None, None, None, None, None, 32)
    assert StreamsOptions() == (0.95, None, None)
    assert ItemWeights() == (None, None)
    assert ReplayOptions() == (None, None, False, None)
    assert PrequentialScoring() == ("log", 0)
    assert GradientOptions() == (100, None, None)
    assert SplitOptions() == (5, 0.25, 0)
    assert GridLearnerOptions() == (0, None, None)
    for rec in (Scoring(), GridLayout(devices=[1, 2]), StreamsOptions(), SplitOptions(), GridLearnerOptions()):
        assert rec.checked() == rec.checked().checked()
        hash(rec.checked())  # hashable once checked (devices become a tuple)


@pytest.mark.parametrize("arg, record, field, bad", [
    ("scoring", Scoring, "level", 1.0), ("scoring", Scoring, "stable_window", -1), ("scoring", Scoring, "delay", 2.5),
    ("layout", GridLayout, "chunk_size", 0), ("layout", GridLayout, "chunk_bytes", 0),
    ("layout", GridLayout, "vmap_bytes", 0), ("layout", GridLayout, "devices", []),
    ("layout", GridLayout, "compile_workers", 0), ("layout", GridLayout, "compile_batch", 0),
])
def test_run_grid_names_a_bad_field(arg, record, field, bad):
    X, Y = _streams()
    with pytest.raises(ValueError, match=rf"^{arg}\.{field}: "):
        run_grid({"blr": bayes_linreg}, StreamGroup.from_arrays(X, Y), progress=False,
                 **{arg: record()._replace(**{field: bad})})


def test_old_keywords_are_a_type_error_naming_them():
    X, Y = _streams()
    g = StreamGroup.from_arrays(X, Y)
    with pytest.raises(TypeError, match="chunk_size"):
        run_grid({"blr": bayes_linreg}, g, chunk_size=2)
    with pytest.raises(TypeError, match="stable_window"):
        run_grid({"blr": bayes_linreg}, g, stable_window=2)
    with pytest.raises(TypeError, match="vmap_width"):
        evaluate_streams(bayes_linreg(2), X, Y, vmap_width=1)
    with pytest.raises(TypeError, match="steps"):
        tune_prequential(bayes_linreg(2), {"beta": 1.0}, X, Y, steps=3)
    with pytest.raises(TypeError, match="burn_in"):
        prequential_score(bayes_linreg(2), {"beta": 1.0}, X[0], Y[0], burn_in=3)
    with pytest.raises(TypeError, match="test_size"):
        compare_evaluations(bayes_linreg(2), X[0], Y[0], test_size=0.5, verbose=False)
    with pytest.raises(TypeError, match="vmap_bytes"):
        grid_learner("a", "b", bayes_linreg, vmap_bytes=1)
    with pytest.raises(TypeError, match="^layout: expected a GridLayout, got dict"):
        run_grid({"blr": bayes_linreg}, g, layout={"chunk_size": 2})


def test_run_grid_default_records_are_the_defaults():
    X, Y = _streams(S=3, n=160)  # past the 128 items the *_st metrics leave out
    g = StreamGroup.from_arrays(X, Y)
    plain = run_grid({"blr": bayes_linreg}, g, progress=False)
    spelled = run_grid({"blr": bayes_linreg}, g, progress=False, scoring=Scoring(0.95, 128, None),
                       layout=GridLayout(None, None, None, None, None, 32))
    keys = ["mse", "smse", "smse_st", "icr", "mlpd", "crps"]
    np.testing.assert_array_equal([[r[k] for k in keys] for r in plain.rows], [[r[k] for k in keys] for r in spelled.rows])
    late = run_grid({"blr": bayes_linreg}, g, progress=False, scoring=Scoring(level=0.5, stable_window=4, delay=3))
    assert [r["mse"] for r in late.rows] != [r["mse"] for r in plain.rows]


def test_evaluate_streams_records():
    X, Y = _streams()
    lrn = bayes_linreg(2)
    plain = evaluate_streams(lrn, X, Y)
    spelled = evaluate_streams(lrn, X, Y, options=StreamsOptions(0.95, None, None), weights=ItemWeights(None, None))
    for k in plain.metrics:
        np.testing.assert_array_equal(np.asarray(plain.metrics[k]), np.asarray(spelled.metrics[k]))
    for field, bad in (("level", 0.0), ("delay", 0), ("vmap_width", 0)):
        with pytest.raises(ValueError, match=rf"^options\.{field}: "):
            evaluate_streams(lrn, X, Y, options=StreamsOptions()._replace(**{field: bad}))
    for field in ("all", "stable"):
        with pytest.raises(ValueError, match=rf"^weights\.{field}: "):
            evaluate_streams(lrn, X, Y, weights=ItemWeights()._replace(**{field: -np.ones(Y.shape)}))
    with pytest.raises(TypeError, match="^weights: expected an ItemWeights"):
        evaluate_streams(lrn, X, Y, weights=np.ones(Y.shape))


def test_replay_combination_records():
    X, Y = _streams(S=2)
    g = StreamGroup.from_arrays(X, Y)
    res = run_grid({"a": bayes_linreg, "b": lambda d: bayes_linreg(d, forgetting=0.95)}, g, keep_predictions=True,
                   progress=False)
    plain = replay_combination(res, g, "mix", ["a", "b"], fixed_share(0.05))
    spelled = replay_combination(res, g, "mix", ["a", "b"], fixed_share(0.05),
                                 options=ReplayOptions(None, None, False, None), scoring=Scoring(0.95, 128, None))
    assert [r["smse"] for r in plain.rows] == [r["smse"] for r in spelled.rows]
    for arg, rec, field, bad in (("options", ReplayOptions, "after_spread", "yes"), ("options", ReplayOptions, "wrap", 3),
                                 ("scoring", Scoring, "stable_window", -1), ("scoring", Scoring, "delay", 2)):
        with pytest.raises(TypeError if field == "after_spread" else ValueError, match=rf"^{arg}\.{field}: "):
            replay_combination(res, g, "mix", ["a", "b"], fixed_share(0.05), **{arg: rec()._replace(**{field: bad})})


@pytest.mark.filterwarnings("ignore:tune_prequential. not converged")
def test_prequential_records():
    X, Y = _streams(S=1, n=30)
    lrn = bayes_linreg(2, forgetting=0.95)
    p = {"beta": jnp.asarray(2.0)}
    assert float(prequential_score(lrn, p, X[0], Y[0])) == float(
        prequential_score(lrn, p, X[0], Y[0], scoring=PrequentialScoring("log", 0)))
    a = tune_prequential(lrn, {"beta": 2.0}, X[0], Y[0], options=GradientOptions(steps=3))
    b = tune_prequential(lrn, {"beta": 2.0}, X[0], Y[0], scoring=PrequentialScoring("log", 0),
                         options=GradientOptions(3, 0.05, None))
    np.testing.assert_allclose(a.scores, b.scores, rtol=tol(1e-12, 1e-6))
    for arg, rec, field, bad in (("scoring", PrequentialScoring, "score", "mse"),
                                 ("scoring", PrequentialScoring, "burn_in", -1),
                                 ("options", GradientOptions, "steps", 0),
                                 ("options", GradientOptions, "learning_rate", -1.0)):
        with pytest.raises(ValueError, match=rf"^{arg}\.{field}: "):
            tune_prequential(lrn, {"beta": 2.0}, X[0], Y[0], **{arg: rec()._replace(**{field: bad})})


def test_compare_evaluations_splits():
    X, Y = _streams(S=1, n=40)
    lrn = bayes_linreg(2)
    plain = compare_evaluations(lrn, X[0], Y[0], verbose=False)
    assert compare_evaluations(lrn, X[0], Y[0], splits=SplitOptions(5, 0.25, 0), verbose=False) == plain
    assert compare_evaluations(lrn, X[0], Y[0], splits=SplitOptions(test_size=10), verbose=False)[
        "temporal split"] == plain["temporal split"]  # a count: the last 10 of 40 items, as 0.25
    for field, bad in (("k", 1), ("test_size", 1.5), ("seed", -1)):
        with pytest.raises(ValueError, match=rf"^splits\.{field}: "):
            compare_evaluations(lrn, X[0], Y[0], splits=SplitOptions()._replace(**{field: bad}), verbose=False)


def test_grid_learner_options():
    assert grid_learner("a", "f", bayes_linreg) == grid_learner("a", "f", bayes_linreg,
                                                                options=GridLearnerOptions(0, None, None))
    gl = grid_learner("a", "f", bayes_linreg, init_kwargs={"beta": 1.0},
                      options=GridLearnerOptions(score_from=5, program="p", vmap_bytes=1))
    assert (gl.score_from, gl.program, gl.vmap_bytes) == (5, "p", 1)
    for field, bad in (("score_from", -1), ("vmap_bytes", 0)):
        with pytest.raises(ValueError, match=rf"^options\.{field}: "):
            grid_learner("a", "f", bayes_linreg, options=GridLearnerOptions()._replace(**{field: bad}))
    with pytest.raises(ValueError, match="hyper or init_kwargs/options.program"):
        grid_learner("a", "f", bayes_linreg, hyper={"beta": [1.0]}, options=GridLearnerOptions(program="p"))

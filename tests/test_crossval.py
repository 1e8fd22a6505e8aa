import jax
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.evaluation import SplitOptions, compare_evaluations
from onlinejax.evaluation import crossval as cv

from conftest import DTYPE, tol


def _no_leak(splits, n=None):
    out = list(splits)
    for tr, te in out:
        assert np.intersect1d(tr, te).size == 0
        if n is not None:
            assert tr.max(initial=-1) < n and te.max() < n
    return out


def test_kfold_partitions_the_items():
    splits = _no_leak(cv.kfold(23, 4), 23)
    assert len(splits) == 4
    np.testing.assert_array_equal(np.sort(np.concatenate([te for _, te in splits])), np.arange(23))
    for tr, te in splits:
        assert len(tr) + len(te) == 23
    sh = _no_leak(cv.kfold(23, 4, shuffle=True, seed=3))
    assert not all(np.all(np.diff(te) == 1) for _, te in sh)


def test_hblock_leaves_exactly_h_each_side():
    n, k, h = 40, 4, 3
    for tr, te in _no_leak(cv.hblock_kfold(n, k, h), n):
        lo, hi = te[0], te[-1]
        removed = set(range(n)) - set(tr) - set(te)
        want = set(range(max(0, lo - h), lo)) | set(range(hi + 1, min(n, hi + h + 1)))
        assert removed == want


def test_rolling_windows_have_constant_length_and_expanding_grow():
    rol = _no_leak(cv.rolling_window(30, 10, horizon=2, step=3))
    assert {len(tr) for tr, _ in rol} == {10} and all(te[0] == tr[-1] + 1 for tr, te in rol)
    exp = _no_leak(cv.expanding_window(30, 10, horizon=1))
    assert [len(tr) for tr, _ in exp] == list(range(10, 30))
    assert all(tr.max() < te.min() for tr, te in exp)


def test_temporal_split():
    (tr, te), = cv.temporal_split(10, 0.3)
    np.testing.assert_array_equal(te, [7, 8, 9])
    np.testing.assert_array_equal(tr, np.arange(7))
    with pytest.raises(ValueError, match="test_size"):
        list(cv.temporal_split(10, 0))


def test_stratified_folds_cover_the_target_range(rng):
    y = rng.exponential(size=200)
    splits = _no_leak(cv.stratified_kfold(y, k=5, n_bins=4))
    np.testing.assert_array_equal(np.sort(np.concatenate([te for _, te in splits])), np.arange(200))
    q = np.quantile(y, [0.25, 0.5, 0.75])
    for _, te in splits:
        counts = np.bincount(np.searchsorted(q, y[te], side="right"), minlength=4)
        assert counts.min() >= 8  # each fold has ~10 items of every quartile


def test_lag_matrix_arx():
    y = np.arange(10.0)
    x = np.arange(10.0) * 10
    Z, t = cv.lag_matrix(y, 2, x)
    np.testing.assert_array_equal(Z[0], [1.0, 0.0, 20.0])
    np.testing.assert_array_equal(t, y[2:])
    assert Z.shape == (8, 3)


def test_one_standard_error_rule_picks_simplest_within_one_se():
    means = [1.00, 0.80, 0.70, 0.69, 0.72]
    ses = [0.05, 0.05, 0.05, 0.04, 0.05]
    # best is index 3 (0.69 ± 0.04): within 0.73 are indices 2, 3, 4 -> simplest is 2
    assert cv.one_standard_error_rule(means, ses) == 2
    assert cv.one_standard_error_rule(means, ses, complexity=[5, 4, 3, 2, 1]) == 4


def test_cross_validate_linear_and_aic(rng):
    X = rng.normal(size=(120, 2))
    y = X @ [1.0, -1.0] + 0.5 + 0.1 * rng.normal(size=120)
    res = cv.cross_validate(cv.linear_fit, cv.linear_predict, X, y, cv.kfold(120, 5))
    assert res.scores.shape == (5,) and res.mean == pytest.approx(0.01, rel=0.5)
    assert res.se == pytest.approx(np.std(res.scores, ddof=1) / np.sqrt(5))
    rss = np.sum((y - cv.linear_predict(cv.linear_fit(X, y), X)) ** 2)
    assert cv.aic_linear(rss, 120, 3) == pytest.approx(120 * np.log(rss / 120) + 6)
    with pytest.raises(ValueError, match="splits"):
        cv.cross_validate(cv.linear_fit, cv.linear_predict, X, y, [(np.arange(5), np.arange(3, 8))])


def _held_out_scores(X, y, splits, loss):
    """Each split's held-out score: least squares with an intercept (``lstsq``) fitted on train, scored on test."""
    out = []
    for tr, te in splits:
        Z = np.column_stack([X, np.ones(len(X))])
        coef = np.linalg.lstsq(Z[tr], y[tr], rcond=None)[0]
        out.append(loss(y[te], Z[te] @ coef))
    return np.array(out)


@pytest.mark.parametrize("make_splits", [lambda n: cv.kfold(n, 5, shuffle=True, seed=1),
                                         lambda n: cv.expanding_window(n, 40, horizon=10, step=10),
                                         lambda n: cv.hblock_kfold(n, 4, 3)], ids=["kfold", "expanding", "hblock"])
def test_cross_validate_equals_a_held_out_loop(rng, make_splits):
    """Scores, mean and SE equal a hand-written fit-on-train, score-on-test loop, for the default and a given loss."""
    n = 100
    X = rng.normal(size=(n, 3))
    y = X @ [1.0, -1.0, 0.5] + 0.5 + 0.3 * rng.standard_t(3, size=n)
    mse = lambda a, b: np.mean((a - b) ** 2)
    mae = lambda a, b: np.mean(np.abs(a - b))
    for loss, want_loss in ((None, mse), (mae, mae)):
        res = cv.cross_validate(cv.linear_fit, cv.linear_predict, X, y, make_splits(n), loss=loss)
        want = _held_out_scores(X, y, list(make_splits(n)), want_loss)
        np.testing.assert_allclose(res.scores, want, rtol=1e-9)
        assert res.mean == pytest.approx(np.mean(want), rel=1e-9)
        assert res.se == pytest.approx(np.std(want, ddof=1) / np.sqrt(len(want)), rel=1e-7)


def test_linear_fit_with_a_ridge_is_the_penalised_normal_equations(rng):
    """``linear_fit(ridge=λ)`` solves ``(ZᵀZ + λI) β = Zᵀy``, ``Z = [X, 1]`` (the intercept penalised too)."""
    X = rng.normal(size=(30, 4))
    y = X @ [2.0, 0.0, -1.0, 0.5] + 3.0 + 0.2 * rng.normal(size=30)
    Z = np.column_stack([X, np.ones(30)])
    for lam in (0.0, 0.7, 50.0):
        want = np.linalg.solve(Z.T @ Z + lam * np.eye(5), Z.T @ y)
        np.testing.assert_allclose(cv.linear_fit(X, y, ridge=lam), want, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(cv.linear_predict(want, X[:7]), Z[:7] @ want, rtol=1e-12)


def _online_held_out_mae(lrn, X, y, splits):
    """Per split: a fresh state learns the training items one at a time, then predicts the held-out ones (MAE)."""
    learn = jax.jit(lrn.learn)
    out = []
    for tr, te in splits:
        s = lrn.init()
        for i in tr:
            s = learn(s, X[i:i + 1], y[i:i + 1])
        out.append(np.mean(np.abs(y[te] - np.asarray(lrn.predict(s, X[te]).mean, np.float64))))
    return np.array(out)


def test_compare_evaluations_splits_equal_an_item_by_item_held_out_loop():
    """The temporal split and shuffled K-fold scores of ``compare_evaluations`` (an online learner used as a
    batch model) equal learning each fold's training items one by one with ``learn`` and scoring the
    held-out items: the folds, the fresh state per fold and the held-out target all enter."""
    r = np.random.default_rng(3)
    n, k = 60, 4
    X = np.asarray(r.normal(size=(n, 2)), DTYPE)
    y = np.asarray(X @ [1.0, -2.0] + 0.5 * r.normal(size=n), DTYPE)
    lrn = oj.bayes_linreg(2, alpha=1.0, beta=4.0)
    got = compare_evaluations(lrn, X, y, splits=SplitOptions(k=k, test_size=0.25, seed=5), verbose=False)
    rtol = tol(1e-9, 1e-4)
    want_split = _online_held_out_mae(lrn, X, y, [(np.arange(45), np.arange(45, n))])  # the last quarter held out
    assert got["temporal split"] == pytest.approx(want_split[0], rel=rtol)
    want_cv = _online_held_out_mae(lrn, X, y, list(cv.kfold(n, k, shuffle=True, seed=5)))
    assert got[f"{k}-fold CV (shuffled)"] == pytest.approx(np.mean(want_cv), rel=rtol)

"""The thesis's 576-stream grid (6.2.2): names, determinism, and per-family statistics."""
import jax
import numpy as np
import pytest

from onlinejax.data import grid_names, grid_streams, parse_name, stratified_names, taxi_stream, thesis_grid, thesis_stream
from onlinejax.data.grid import GROWTH_CODES
from onlinejax.data.synthetic import growth
from onlinejax.evaluation import delayed_progressive_validation, schedule_from_times
from onlinejax.learners.linear import bayes_linreg


def test_exactly_576_distinct_names_with_the_thesis_counts():
    names = grid_names()
    assert len(names) == 576 and len(set(names)) == 576
    # thesis 6.2.2's per-group counts
    count = lambda pre: sum(n.startswith(pre) for n in names)  # noqa: E731
    for drift in ("NCD", "CD"):
        assert count(f"SYNTH_ND_{drift}_2000_1_") == 36 and count(f"SYNTH_D_{drift}_2000_1_") == 36
        for d in (2, 4):
            assert count(f"SYNTH_ND_{drift}_2000_{d}_") == 48 and count(f"SYNTH_D_{drift}_2000_{d}_") == 60
    # the thesis's own example names are in the grid
    for ex in ("SYNTH_ND_CD_2000_2_10_1_22", "SYNTH_D_CD_2000_4_10_1_24", "SYNTH_D_CD_2000_1_100_1_12",
               "SYNTH_D_CD_2000_1_50_3_23", "SYNTH_D_CD_2000_1_50_1_13"):
        assert ex in names


def test_parse_and_format_round_trip_and_errors():
    for s in grid_streams():
        assert parse_name(s.name) == s
    assert parse_name("SYNTH_D_CD_2000_1_50_3_2_3") == parse_name("SYNTH_D_CD_2000_1_50_3_23")
    for bad in ("SYNTH_D_CD_2000_3_50_3_23",  # d = 3
                "SYNTH_ND_CD_2000_1_50_3_44",  # 1-d uses one quadratic
                "SYNTH_D_CD_2000_2_50_3_21",  # pair not allowed (order)
                "SYNTH_ND_CD_2000_2_50_3_12",  # continuous: one growth
                "SYNTH_D_CD_2000_2_20_3_12", "SYNTH_D_CD_2000_2_10_2_12", "nonsense", 3):
        with pytest.raises(ValueError, match="stream name"):
            parse_name(bad)


def test_regenerating_a_name_is_bit_identical_and_independent_of_the_subset():
    key = jax.random.key(7)
    names = stratified_names(1, size=300)
    groups = thesis_grid(key, names)
    assert [g.X.shape[2] for g in groups] == [1, 2, 4] and sum(len(g.names) for g in groups) == 12
    for g in groups:
        for i, nm in enumerate(g.names):
            X, Y, F = thesis_stream(key, nm)
            np.testing.assert_array_equal(np.asarray(X), np.asarray(g.X[i]))
            np.testing.assert_array_equal(np.asarray(Y), np.asarray(g.Y[i]))
            np.testing.assert_array_equal(np.asarray(F), np.asarray(g.F[i]))
    X2, _, _ = thesis_stream(jax.random.key(8), names[0])
    assert not np.array_equal(np.asarray(X2), np.asarray(groups[0].X[0]))


@pytest.mark.parametrize("name", ["SYNTH_ND_NCD_2000_2_50_3_22", "SYNTH_D_CD_2000_4_100_5_24", "SYNTH_D_NCD_2000_1_10_1_13",
                                  "SYNTH_ND_CD_2000_4_10_0_44"])
def test_family_statistics(name):
    s = parse_name(name)
    X, Y, F = (np.asarray(a, np.float64) for a in thesis_stream(jax.random.key(3), name))
    n, d = X.shape
    assert (n, d) == (2000, s.dim)
    # inputs U(0, 1)·scale
    assert X.min() >= 0 and X.max() <= s.input_scale and X.max() > 0.97 * s.input_scale
    np.testing.assert_allclose(X.mean(), s.input_scale / 2, rtol=0.05)
    # the noise is the name's value used as a standard deviation
    resid = Y - F
    if s.noise_std == 0:
        assert np.abs(resid).max() <= 1e-6 * np.abs(F).max()
    else:
        np.testing.assert_allclose(resid.std(), s.noise_std, rtol=0.08)
    # F is made of the named growth functions with non-negative U(0, 10) coefficients; recover the
    # coefficients of each concept and piece by fitting, and check the drift position
    upper = X.sum(1) >= d * s.input_scale / 2 if s.discontinuous else np.zeros(n, bool)
    concept = (np.arange(n) >= n // 2) if s.drift else np.zeros(n, bool)
    coefs = {}
    for c in (False, True):
        for piece, g in ((False, s.growth1), (True, s.growth2)):
            m = (concept == c) & (upper == piece)
            if m.sum() < 10:
                continue
            kind = GROWTH_CODES[g]
            b = _fit_growth(kind, X[m], F[m])
            np.testing.assert_allclose([float(growth(kind, np.asarray(b), x)) for x in X[m][:20]], F[m][:20], rtol=1e-3,
                                       atol=1e-3)
            assert np.all(b > -1e-3) and np.all(b < 10 + 1e-3)
            coefs[(c, piece)] = b
    if s.drift:
        assert not np.allclose(coefs[(False, False)], coefs[(True, False)], rtol=1e-2)
    if s.discontinuous:
        assert set(k[1] for k in coefs) == {False, True}


def _fit_growth(kind, X, F):
    """Coefficients of one growth function from noise-free values (closed forms, float64)."""
    if kind == "linear":
        return np.linalg.lstsq(X, F, rcond=None)[0]
    if kind == "quadratic_sum":
        return np.linalg.lstsq(X ** 2, F, rcond=None)[0]
    if kind == "quadratic_dot":
        return np.linalg.lstsq(X, np.sqrt(np.maximum(F, 0)), rcond=None)[0]
    # s·log(s): invert per item by Newton on s, then linear least squares
    s = np.maximum(F, 1.0)
    for _ in range(60):
        s = s - (s * np.log(s) - F) / (np.log(s) + 1.0)
    return np.linalg.lstsq(X, s, rcond=None)[0]


def test_stratified_sample_covers_every_cell():
    names = stratified_names(2, seed=1)
    assert len(names) == 24 and len(set(names)) == 24
    cells = {(p.dim, p.discontinuous, p.drift) for p in map(parse_name, names)}
    assert len(cells) == 12
    assert stratified_names(2, seed=1) == names and stratified_names(2, seed=2) != names


def test_taxi_stream_runs_delayed_validation():
    t, X, dur = (np.asarray(a, np.float64) for a in taxi_stream(jax.random.key(0), 600))
    assert X.shape == (600, 3) and np.all(np.diff(t) >= 0) and np.all(dur > 60)
    np.testing.assert_allclose(X[:, 1] ** 2 + X[:, 2] ** 2, 1.0, rtol=1e-5)
    # durations grow with distance
    assert np.corrcoef(X[:, 0], dur)[0, 1] > 0.8
    sched = schedule_from_times(t, t + dur)
    assert sched.n_slots > 1  # trips overlap, so labels really are late
    lrn = bayes_linreg(3, alpha=1e-3, beta=1e-5)
    res = delayed_progressive_validation(lrn, lrn.init(), X, dur, sched)
    err = np.abs(np.asarray(res.predictions.mean) - dur)[300:]
    assert np.median(err) < 0.5 * np.median(np.abs(dur - dur.mean()))
    with pytest.raises(ValueError, match="mean_gap"):
        taxi_stream(jax.random.key(0), 10, mean_gap=0)

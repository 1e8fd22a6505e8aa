import jax
import jax.numpy as jnp
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.wrappers.adaptive import (COLD_START, HIGH_ERROR, STABLE, TUNE, AdaptiveOptions, DetectorState, MachineOptions,
                                         adaptive, record_mode, step_one)
from onlinejax.core.schedule import TunePlan
from onlinejax.wrappers.detectors import bocpd_detector, cusum, frozen
from onlinejax.wrappers.adaptive import init as adaptive_init
from onlinejax.core.batching import cond_if_any, computed_if_any
from onlinejax.data.synthetic import abrupt_drift_stream
from onlinejax.evaluation.progressive import progressive_validation
from onlinejax.learners.gp import gp_window
from onlinejax.learners.kernel_regression import kernel_regression
from conftest import DTYPE, X64, tol

pytestmark = pytest.mark.float32_only  # the state machine's logic; float64 runs it through the pinned rows

#: the detectors by name (the parametrised tests' ids), at their defaults
DETECTORS = {"cusum": cusum, "frozen": frozen, "bocpd": bocpd_detector}


# ---------------------------------------------------------------- cond_if_any
@pytest.mark.parametrize("max_batch", [None, 1, 2, 5])
def test_cond_if_any_equals_cond_and_skips_untaken_branch(max_batch):
    calls = []
    f = lambda x: (jax.debug.callback(lambda: calls.append(1)), x * 2.0 + 1.0)[1]
    g = cond_if_any(f, max_batch=max_batch)

    def run(x0, preds):
        return jax.lax.scan(lambda x, p: (g(p, x), x), x0, preds)

    def run_ref(x0, preds):
        return jax.lax.scan(lambda x, p: (jax.lax.cond(p, f, lambda v: v, x), x), x0, preds)

    x0 = jnp.arange(6.0, dtype=DTYPE).reshape(2, 3)
    P = jnp.asarray(np.random.default_rng(0).uniform(size=(2, 3, 20)) < 0.2)
    out = jax.jit(jax.vmap(jax.vmap(run)))(x0, P)  # nested vmap: streams × hyperparameters
    ref = jax.jit(jax.vmap(jax.vmap(run_ref)))(x0, P)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), out, ref)
    # with every predicate false, the branch never runs under vmap (a vmapped lax.cond would run it 20 times)
    calls.clear()
    jax.block_until_ready(jax.jit(jax.vmap(jax.vmap(run)))(x0, jnp.zeros_like(P)))
    assert calls == []
    calls.clear()
    jax.block_until_ready(jax.jit(jax.vmap(jax.vmap(run_ref)))(x0, jnp.zeros_like(P)))
    assert len(calls) > 0  # the reason cond_if_any exists


def test_cond_if_any_one_at_a_time_keeps_the_branchs_own_conds():
    """max_batch=1 runs the branch on the element itself: a cond inside it stays lazy (under a vmap of width 1 it
    would become a select and run its untaken side too, e.g. every remaining iteration of a converged tune)."""
    calls = []

    def f(x):
        return jax.lax.cond(x[0] > 1e6, lambda v: (jax.debug.callback(lambda: calls.append(1)), v)[1],
                            lambda v: v + 1.0, x)

    x = jnp.zeros((4, 3), DTYPE)
    p = jnp.asarray([True, False, True, False])
    out = jax.block_until_ready(jax.jit(jax.vmap(cond_if_any(f, max_batch=1)))(p, x))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x + p[:, None]))
    assert calls == []
    jax.block_until_ready(jax.jit(jax.vmap(cond_if_any(f, max_batch=2)))(p, x))
    assert len(calls) > 0  # two at a time, the branch is vmapped and its cond a select


@pytest.mark.parametrize("max_batch", [None, 1, 2, 5])
def test_computed_if_any_equals_cond_with_zeros_and_skips_untaken_branch(max_batch):
    """f(x) where the predicate holds, zeros elsewhere (an output of another structure than x), under nested vmap."""
    calls = []
    f = lambda x: (jax.debug.callback(lambda: calls.append(1)), {"a": x["w"] @ x["w"].T + 1.0, "b": x["v"].sum()})[1]
    h = computed_if_any(f, max_batch=max_batch)

    def ref(p, x):
        return jax.lax.cond(p, f, lambda v: jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(f, v)), x)

    rng = np.random.default_rng(1)
    x = {"w": jnp.asarray(rng.normal(size=(2, 3, 4, 4)), DTYPE), "v": jnp.asarray(rng.normal(size=(2, 3, 5)), DTYPE)}
    P = jnp.asarray(rng.uniform(size=(2, 3)) < 0.4)
    out = jax.jit(jax.vmap(jax.vmap(h)))(P, x)
    want = jax.jit(jax.vmap(jax.vmap(ref)))(P, x)
    for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol(1e-12, 1e-5))
    assert not np.any(np.asarray(out["a"])[~np.asarray(P)])  # zeros where the predicate is false
    assert np.all(np.asarray(out["a"])[np.asarray(P)] != 0)
    # unbatched: a plain branch; unbatched operand with a batched predicate
    np.testing.assert_allclose(np.asarray(jax.jit(h)(True, jax.tree_util.tree_map(lambda a: a[0, 0], x))["b"]),
                               np.asarray(x["v"][0, 0].sum()), rtol=tol(1e-12, 1e-5))
    one = jax.tree_util.tree_map(lambda a: a[0, 0], x)
    got = jax.jit(jax.vmap(h, in_axes=(0, None)))(P[0], one)["b"]
    want = np.where(np.asarray(P[0]), float(one["v"].sum()), 0.0)
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol(1e-12, 1e-5))
    calls.clear()
    jax.block_until_ready(jax.jit(jax.vmap(jax.vmap(h)))(jnp.zeros_like(P), x))
    assert calls == []


# ---------------------------------------------------------------- the state machine
def _two_concepts(rng, n1=150, n2=150, noise=0.05):
    x = rng.uniform(-1, 1, (n1 + n2, 1))
    y = np.where(np.arange(n1 + n2) < n1, 2.0 * x[:, 0], -2.0 * x[:, 0] + 1.0) + noise * rng.normal(size=n1 + n2)
    return x, y


def test_phases_follow_the_thesis_diagram(rng):
    W = 10
    inner = oj.windowed_bayes_linreg(1, W, alpha=1e-3, beta=100.0, intercept=True)
    lrn = adaptive(inner, W)
    X, Y = _two_concepts(rng)
    r = progressive_validation(lrn, lrn.init(), X, Y, record=record_mode)
    modes = np.asarray(r.records)
    # cold start: W items learned, the W-th is followed by a tune
    assert np.all(modes[: W - 1] == COLD_START) and modes[W - 1] == TUNE
    alarms = np.flatnonzero((modes[1:] == HIGH_ERROR) & (modes[:-1] != HIGH_ERROR)) + 1
    assert len(alarms) == 1 and 150 <= alarms[0] < 150 + 5, alarms  # a big drift is caught in a few items
    a = alarms[0]
    assert np.all(modes[W:a] == STABLE)
    assert np.all(modes[a:a + W - 1] == HIGH_ERROR) and modes[a + W - 1] == TUNE  # window recycled, then tune
    assert np.all(modes[a + W:] == STABLE)
    assert int(r.state.n_learned) == 2 * W and int(r.state.n_tunes) == 2 and int(r.state.n_alarms) == 1
    # after re-learning, the second concept is predicted well
    err = np.abs(np.asarray(r.predictions.mean)[a + W:] - Y[a + W:])
    assert np.mean(err) < 0.1


def test_always_learn_and_vmap_equals_single_runs(rng):
    W = 10
    inner = oj.windowed_bayes_linreg(1, W, alpha=1e-3, beta=100.0, intercept=True)
    X1, Y1 = _two_concepts(rng, 150, 150)
    X2, Y2 = _two_concepts(rng, 100, 200)
    lrn = adaptive(inner, W)
    Xs, Ys = jnp.asarray(np.stack([X1, X2]), DTYPE), jnp.asarray(np.stack([Y1, Y2]), DTYPE)
    run = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y, record=record_mode)[1::2]))
    preds, modes = run(Xs, Ys)
    for k in range(2):
        r = progressive_validation(lrn, lrn.init(), Xs[k], Ys[k], record=record_mode)
        np.testing.assert_array_equal(np.asarray(modes[k]), np.asarray(r.records))
        np.testing.assert_allclose(np.asarray(preds.mean[k]), np.asarray(r.predictions.mean), rtol=tol(1e-12, 1e-5),
                                   atol=tol(1e-12, 1e-5))
    al = adaptive(inner, W, options=MachineOptions(always_learn=True))
    r = progressive_validation(al, al.init(), X1, Y1, record=record_mode)
    assert int(r.state.n_learned) == len(Y1)
    assert int(r.state.n_tunes) >= 2  # cold start + the detected drift still schedule tunes


def test_window_given_to_init_sets_the_phase_length_and_the_inner_window(rng):
    """adaptive(learner with capacity 40, 40).init(window=w) == adaptive(learner of window w, w)."""
    X1, Y1 = _two_concepts(rng, 150, 150)
    Xs, Ys = jnp.asarray(X1, DTYPE), jnp.asarray(Y1, DTYPE)
    shared = adaptive(oj.bayesian_map_windowed(1, 40, options=oj.linear.MAP_WINDOWED._replace(capacity=40),
                                                  features=oj.ThesisFeatures(intercept=True)), 40)
    for w in (10, 25):
        alone = adaptive(oj.bayesian_map_windowed(1, w, features=oj.ThesisFeatures(intercept=True)), w)
        a = progressive_validation(shared, shared.init(window=w), Xs, Ys, record=record_mode)
        b = progressive_validation(alone, alone.init(), Xs, Ys, record=record_mode)
        assert int(a.state.phase_length) == w and int(a.state.inner.window) == w
        assert list(np.asarray(a.records)[:w + 1]) == [COLD_START] * (w - 1) + [TUNE, STABLE]
        np.testing.assert_array_equal(np.asarray(a.records), np.asarray(b.records))
        np.testing.assert_allclose(np.asarray(a.predictions.mean), np.asarray(b.predictions.mean),
                                   rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    assert int(shared.init().phase_length) == 40
    with pytest.raises(TypeError):  # a learner whose window is static takes no window at init
        adaptive(kernel_regression(1, 8), 8).init(window=4)


def test_frozen_rule_alarm_semantics():
    # with the frozen rule, a stable item alarms iff |e| > factor × (mean |e| of the last learning phase)
    W = 4
    inner = oj.windowed_bayes_linreg(1, W, alpha=1e-6, beta=1e4, intercept=True)
    lrn = adaptive(inner, W, detector=frozen(2.0))
    s = lrn.init()
    xs = [0.0, 1.0, 2.0, 3.0]
    for x in xs:
        s = lrn.learn(s, [x], 1.0 + x)  # exact line: cold-start errors come from the first items only
    ref = float(s.reference)
    assert int(s.mode) == STABLE and np.isfinite(ref) and ref > 0
    p = lrn.predict(s, [5.0])
    s_ok = lrn.learn(s, [5.0], float(p.mean) + 1.9 * ref)
    s_bad = lrn.learn(s, [5.0], float(p.mean) + 2.1 * ref)
    assert int(s_ok.mode) == STABLE and int(s_bad.mode) == HIGH_ERROR


def test_no_recompile_and_bad_arguments(rng):
    from test_progressive import count_compiles

    W = 5
    lrn = adaptive(kernel_regression(1, W), W)
    s = lrn.init()
    for i in range(3):
        s = lrn.learn(s, [float(i)], float(i))
    jax.block_until_ready((lrn.step(s, [0.5], 1.0), lrn.predict(s, [0.2]), lrn.tune(s)))
    assert count_compiles(lambda: jax.block_until_ready(
        (lrn.step(s, np.array([0.7]), np.float64(2.0)), lrn.learn(s, [0.1], 3), lrn.tune(s)))) == 0
    with pytest.raises(ValueError, match="window"):
        adaptive(kernel_regression(1, 5), 0)
    with pytest.raises(TypeError, match=r"detector: .*onlinejax\.wrappers\.detectors\.cusum"):
        adaptive(kernel_regression(1, 5), 5, detector="cusum")
    with pytest.raises(TypeError):  # the detector's options are the detector's, not the machine's
        adaptive(kernel_regression(1, 5), 5, threshold=20.0)
    with pytest.raises(ValueError, match="threshold"):
        cusum(threshold=-1.0)
    for bad, name in ((dict(drift=-0.1), "drift"), (dict(reference_items=0), "reference_items"),
                      (dict(ratio_clip=0.0), "ratio_clip"), (dict(drift=float("inf")), "drift"),
                      (dict(ratio_clip=1.2), "ratio_clip")):  # the last two never alarm
        with pytest.raises(ValueError, match=name):
            cusum(**bad)
    with pytest.raises(ValueError, match="factor"):
        frozen(0.0)
    with pytest.raises(ValueError, match="reference_items"):
        bocpd_detector(reference_items=1.5)


# ---------------------------------------------------------------- issue 4's drift check
W_DRIFT = 64
N_DRIFT_STREAMS = 3


def _stream(seed, d, drift_at=1000):
    # float32 generation so that the data are the same under x64
    return abrupt_drift_stream(jax.random.PRNGKey(seed), 2000, d, drift_at=drift_at, kind="linear", input_scale=1.0,
                               noise_std=1.0, redraw="reverse", dtype=jnp.float32)


def _drift_seeds(d):
    """The first seeds whose drift is material: RMS change of the function >= 1.5 noise std.

    Reversing the coefficients gives a function of the same difficulty (a fair before/after
    comparison), but when the coefficients are nearly equal the "drift" is invisible and harmless.
    """
    seeds = []
    for seed in range(50):
        F = np.asarray(_stream(seed, d)[2])
        F0 = np.asarray(_stream(seed, d, None)[2])
        if np.sqrt(np.mean((F[1000:] - F0[1000:]) ** 2)) >= 1.5:
            seeds.append(seed)
        if len(seeds) == N_DRIFT_STREAMS:
            return seeds


def _drift_runs(d, make_inner, detector):
    data = [_stream(s, d) for s in _drift_seeds(d)]
    Xs = jnp.stack([a[0] for a in data]).astype(DTYPE)
    Ys = jnp.stack([a[1] for a in data]).astype(DTYPE)
    lrn = adaptive(make_inner(d), W_DRIFT, detector=DETECTORS[detector]())
    run = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y, record=record_mode)[1::2]))
    preds, modes = run(Xs, Ys)
    return np.asarray(Ys, np.float64), np.asarray(preds.mean, np.float64), np.asarray(modes)


def _drift_outcome(y, m, modes, W=W_DRIFT):
    """(alarm within [1000, 1000 + 2W), MSE after 1000 + 2W, MSE on [2W, 1000))."""
    alarms = np.flatnonzero((modes[1:] == HIGH_ERROR) & (modes[:-1] != HIGH_ERROR)) + 1
    detected = np.any((alarms >= 1000) & (alarms < 1000 + 2 * W))
    pre = np.mean((y[2 * W:1000] - m[2 * W:1000]) ** 2)
    post = np.mean((y[1000 + 2 * W:] - m[1000 + 2 * W:]) ** 2)
    return detected, post, pre


INNER = {
    "gp": lambda d: gp_window(d, W_DRIFT, mean="ols"),
    "kernel_regression": lambda d: kernel_regression(d, W_DRIFT),
}


@pytest.mark.parametrize("d", [2, pytest.param(4, marks=pytest.mark.slow)])  # d = 4: CI time
@pytest.mark.parametrize("name", sorted(INNER))
def test_drift_detected_and_error_recovers(d, name):
    """Issue 4: detected within 2W items; the error after 2W items back within 20 % of the pre-drift level.

    The 20 % is checked on the error pooled over the streams: a single stream's MSE over ~900
    items of a model tuned on 64 points varies from one tuning window to the next (the 64 points
    are one noisy sample of the function); each stream must still be within 50 % (a missed drift
    costs several times the pre-drift error).
    """
    Y, M, modes = _drift_runs(d, INNER[name], "cusum")
    posts, pres = [], []
    for k in range(len(Y)):
        detected, post, pre = _drift_outcome(Y[k], M[k], modes[k])
        assert detected, (name, d, k)
        assert post <= 1.5 * pre, (name, d, k, post / pre)
        posts.append(post)
        pres.append(pre)
    assert sum(posts) <= 1.2 * sum(pres), (name, d, sum(posts) / sum(pres))


def test_frozen_reference_rule_misses_a_drift():
    missed = []
    for d in (2, 4):
        Y, M, modes = _drift_runs(d, INNER["kernel_regression"], "frozen")
        for k in range(len(Y)):
            detected, post, pre = _drift_outcome(Y[k], M[k], modes[k])
            missed.append((not detected) and post > 1.2 * pre)
    assert any(missed)


def test_one_shock_alarms_at_once_and_a_moderate_outlier_does_not():
    """z² above `shock` times the phase's mean z² alarms on that item; the clipped CUSUM alone needs ~3 items."""
    W = 8
    rng = np.random.default_rng(0)
    inner = oj.windowed_bayes_linreg(1, W, alpha=1e-2, beta=100.0, intercept=True)
    x = rng.uniform(0, 1, 60)
    y = 2 * x + 0.1 * rng.normal(size=60)
    for shock, want in ((1e3, HIGH_ERROR), (None, STABLE)):
        lrn = adaptive(inner, W, detector=cusum(shock=shock))
        s = lrn.init()
        for t in range(40):
            s = lrn.learn(s, [x[t]], y[t])
        assert int(s.mode) == STABLE
        p = lrn.predict(s, [0.5])
        s_mild = lrn.learn(s, [0.5], float(p.mean) + 6 * float(p.std))  # z² = 36: CUSUM grows, no alarm
        s_jump = lrn.learn(s, [0.5], float(p.mean) + 100 * float(p.std))  # z² = 1e4
        assert int(s_mild.mode) == STABLE and int(s_jump.mode) == want
    with pytest.raises(ValueError, match="shock"):
        cusum(shock=0.5)


# ---------------------------------------------------------------- the module-level functions
def _leaves_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for u, v in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_pure_step_one_equals_the_learner(rng):
    """``step_one`` driven by hand (inner learner and options passed explicitly) is the Learner's step, bit for bit."""
    W = 10
    inner = oj.windowed_bayes_linreg(1, W, alpha=1e-3, beta=100.0, intercept=True)
    X, Y = _two_concepts(rng)
    X, Y = jnp.asarray(X, DTYPE), jnp.asarray(Y, DTYPE)
    lrn = adaptive(inner, W, detector=cusum(threshold=15.0, shock=None))
    opts = AdaptiveOptions(detector=cusum(threshold=15.0, shock=None))
    pure = jax.jit(lambda s0: jax.lax.scan(lambda s, xy: step_one(inner, opts, s, *xy), s0, (X, Y)))
    s_pure, p_pure = pure(adaptive_init(inner, W))
    s_lrn, p_lrn = jax.jit(lambda s0: jax.lax.scan(lambda s, xy: lrn.step(s, *xy), s0, (X, Y)))(lrn.init())
    _leaves_equal((s_pure, p_pure), (s_lrn, p_lrn))
    assert int(s_pure.n_alarms) == 1 and int(s_pure.n_tunes) == 2
    # init forwards a window to the inner learner and makes it the phase length
    inner = oj.bayesian_map_windowed(1, 8, options=oj.linear.MAP_WINDOWED._replace(capacity=16))
    assert int(adaptive_init(inner, 16, window=8).phase_length) == 8


def test_boundary_skips_nonfinite_items():
    """Inside jit a non-finite item changes nothing but ``n_skipped`` (the boundary's skip_nonfinite)."""
    W = 4
    lrn = adaptive(oj.windowed_bayes_linreg(1, W, intercept=True), W)
    s = lrn.init()
    for t in range(6):
        s = lrn.learn(s, [0.1 * t], 0.2 * t)
    learn = jax.jit(lrn.learn)
    for x, y in (([np.nan], 1.0), ([0.3], np.inf)):
        s2 = learn(s, jnp.asarray(x, DTYPE), jnp.asarray(y, DTYPE))
        assert int(s2.n_skipped) == int(s.n_skipped) + 1
        _leaves_equal(s2._replace(n_skipped=s.n_skipped), s)


def _np_cusum(z2s, threshold, drift, reference_items, ratio_clip, shock):
    n, mean, g, alarms = 0, 1.0, 0.0, []
    for z2 in z2s:
        ratio = z2 / mean
        r = min(ratio, ratio_clip)
        warm = n >= reference_items
        g = max(0.0, g + r - 1.0 - drift) if warm else 0.0
        mean = (mean * (n + 1) + r * mean) / (n + 2)
        n += 1
        alarms.append((warm and g > threshold) or (shock is not None and ratio > shock))
    return mean, g, alarms


@pytest.mark.parametrize("shock", [None, 50.0])
def test_cusum_update_is_the_relative_cusum(shock):
    """``cusum().update``: Page's CUSUM on r = min(z²/mean z², ratio_clip), the mean updated with r·mean (float64
    reference)."""
    rule = cusum(threshold=6.0, drift=0.5, reference_items=3, ratio_clip=10.0, shock=shock)
    z2s = [0.5, 2.0, 1.0, 4.0, 30.0, 0.2, 80.0, 30.0, 0.1, 500.0]
    det = DetectorState(jnp.zeros((), jnp.int32), jnp.ones((), DTYPE), jnp.zeros((), DTYPE))
    alarms = []
    for z2 in z2s:
        det, alarm = rule.update(det, jnp.asarray(z2, DTYPE), jnp.asarray(0.0, DTYPE), jnp.asarray(1.0, DTYPE))
        alarms.append(bool(alarm))
    mean, g, want = _np_cusum(z2s, 6.0, 0.5, 3, 10.0, shock)
    assert alarms == want and any(want)
    assert int(det.n) == len(z2s)
    np.testing.assert_allclose([float(det.mean_z2), float(det.cusum)], [mean, g], rtol=tol(1e-12, 1e-5))
    # the frozen rule: |e| > factor × reference, no state
    for e, want in ((2.9, False), (3.1, True)):
        d2, alarm = frozen(3.0).update(det, jnp.asarray(1e6, DTYPE), jnp.asarray(e, DTYPE), jnp.asarray(1.0, DTYPE))
        assert bool(alarm) == want and d2 is det


def test_tune_batch_auto_follows_the_default_backend(monkeypatch):
    """``TunePlan(batch="auto")``: one stream at a time on the CPU, the whole batch on an accelerator; other strings
    refused."""
    import importlib

    adaptive_mod = importlib.import_module("onlinejax.wrappers.adaptive")

    assert adaptive_mod._default_tune_batch() == (1 if jax.default_backend() == "cpu" else None)
    monkeypatch.setattr(adaptive_mod.jax, "default_backend", lambda: "gpu")
    assert adaptive_mod._default_tune_batch() is None
    with pytest.raises(ValueError, match=r"tune_plan\.batch"):
        adaptive_mod.adaptive(gp_window(2, 8), 8, tune_plan=TunePlan(batch="every"))


def test_machine_tune_takes_the_state_alone_and_names_an_unknown_option():
    """The machine's ``tune`` tunes its inner learner as the inner ``tune`` does; a keyword option is a TypeError
    naming it (not a jit error about static arguments)."""
    inner = oj.windowed_bayes_linreg(2, 16)
    lrn = adaptive(inner, 16)
    rng = np.random.default_rng(0)
    s = lrn.learn(lrn.init(), jnp.asarray(rng.normal(size=(20, 2)), DTYPE), jnp.asarray(rng.normal(size=20), DTYPE))
    t = lrn.tune(s)
    for a, b in zip(jax.tree.leaves(t.inner), jax.tree.leaves(inner.tune(s.inner))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(TypeError, match="n_iter"):
        lrn.tune(s, n_iter=3)


def _segment_stream(seed, n=360):
    """A stream with two drifts and two non-finite items: several tunes and skips."""
    X, Y, _ = _stream(seed, 2, drift_at=120)
    X, Y = np.array(X[:n]), np.array(Y[:n])
    Y[240:] = 3.0 - 2.0 * Y[240:]
    X[50, 1], Y[200] = np.nan, np.inf
    return X, Y


@pytest.mark.parametrize("name, detector", [pytest.param("kernel_regression", "bocpd", marks=pytest.mark.slow),
                                            pytest.param("gp", "cusum", marks=pytest.mark.slow),
                                            pytest.param("gp", "bocpd", marks=pytest.mark.slow),
                                            pytest.param("kernel_regression", "cusum", marks=pytest.mark.slow)])
def test_deferred_tunes_equal_the_step(name, detector):
    """progressive_validation on one stream runs the tunes between item loops (DeferredStep); under vmap it
    falls back to the plain scan. Both equal scanning learner.step: the same tunes, states and predictions."""
    W = 32
    lrn = adaptive({"gp": lambda: gp_window(2, W, mean="ols"), "kernel_regression": lambda: kernel_regression(2, W)}[name](),
                   W, detector=DETECTORS[detector]())
    assert lrn.deferred is not None and adaptive(kernel_regression(2, W), W, tune=False).deferred is None
    assert adaptive(kernel_regression(2, W), W, tune_plan=TunePlan(split=False)).deferred is None
    plain = lrn._replace(deferred=None)
    run = jax.jit(lambda lr, s, X, Y: progressive_validation(lr, s, X, Y), static_argnums=0)
    streams = [_segment_stream(seed) for seed in (3, 4)]
    outs = []
    for X, Y in streams:
        a, b = run(lrn, lrn.init(), X, Y), run(plain, plain.init(), X, Y)
        assert int(a.state.n_tunes) >= 2 and int(a.state.n_skipped) == 2
        for f in ("n_tunes", "n_alarms", "n_learned", "n_seen", "n_skipped", "mode", "last"):
            assert int(getattr(a.state, f)) == int(getattr(b.state, f)), f
        for u, v in ((a.predictions.mean, b.predictions.mean), (a.predictions.var, b.predictions.var)):
            np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol(1e-7, 2e-3), atol=tol(1e-9, 1e-3))
        outs.append(a)
    Xs, Ys = (np.stack(v) for v in zip(*streams))
    # under vmap: the plain scan, the same tunes and predictions as one stream at a time
    vm = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y)))(Xs, Ys)
    for i, a in enumerate(outs):
        for f in ("n_tunes", "n_alarms", "n_learned", "n_seen", "n_skipped", "mode", "last"):
            assert int(getattr(vm.state, f)[i]) == int(getattr(a.state, f)), f
        np.testing.assert_allclose(np.asarray(vm.predictions.mean[i]), np.asarray(a.predictions.mean),
                                   rtol=tol(1e-7, 2e-3), atol=tol(1e-9, 1e-3))
    empty = progressive_validation(lrn, lrn.init(), np.zeros((0, 2)), np.zeros(0))
    assert empty.predictions.mean.shape == (0,) and int(empty.state.n_seen) == 0


@pytest.mark.parametrize("tune_every", [1, 7])
def test_deferred_step_contract(tune_every):
    """step(s, x, y) == deferred.step then apply when due, item by item (the DeferredStep contract)."""
    W = 16
    lrn = adaptive(kernel_regression(2, W), W, tune_plan=TunePlan(every=tune_every))
    d = lrn.deferred
    X, Y = _segment_stream(5)
    step, deferred_step = jax.jit(lrn.step), jax.jit(d.step)  # traced: the non-finite items are skipped, not refused
    s = t = lrn.init()
    dues = 0
    for x, y in zip(X, Y):
        s, p = step(s, x, y)
        u, q = deferred_step(t, x, y)
        due = bool(d.due(t, u))
        dues += due
        t = d.apply(u) if due else u
        _leaves_equal((s, p), (t, q))
    assert dues == int(s.n_tunes) >= 2


@pytest.mark.parametrize("k", [5, 16])
def test_tune_every_runs_each_phase_tune_at_the_next_multiple(k):
    """With ``tune_every=k`` the tune of a phase ending on item count ``c`` runs on count ``k·ceil(c/k)``
    (a phase ending while one waits shares it), only there; one stream and vmapped streams agree."""
    W = 16
    lrn = adaptive(kernel_regression(2, W), W, tune_plan=TunePlan(every=k))
    rec = lambda s: (s.n_tunes, s.n_seen, s.last)  # noqa: E731
    streams = [_segment_stream(seed) for seed in (3, 4, 6)]
    run = jax.jit(lambda s, X, Y: progressive_validation(lrn, s, X, Y, record=rec))  # traced: skips the NaN items
    outs = []
    for X, Y in streams:
        r = run(lrn.init(), X, Y)
        n_tunes, n_seen, last = (np.asarray(a) for a in r.records)
        ends = n_seen[last == TUNE]
        assert len(ends) >= 2
        want = sorted({int(-(-c // k) * k) for c in ends if -(-c // k) * k <= n_seen[-1]})
        tuned = np.diff(np.concatenate([[0], n_tunes])) > 0
        np.testing.assert_array_equal(n_seen[tuned], want)
        assert int(r.state.n_tunes) == len(want)
        assert bool(r.state.tune_pending) == (-(-ends[-1] // k) * k > n_seen[-1])  # the last phase's tune still waits
        outs.append(r)
    Xs, Ys = (np.stack(v) for v in zip(*streams))
    vm = jax.jit(jax.vmap(lambda X, Y: progressive_validation(lrn, lrn.init(), X, Y)))(Xs, Ys)
    for i, r in enumerate(outs):
        assert int(vm.state.n_tunes[i]) == int(r.state.n_tunes)
        np.testing.assert_allclose(np.asarray(vm.predictions.mean[i]), np.asarray(r.predictions.mean),
                                   rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    with pytest.raises(ValueError, match=r"tune_plan\.every"):
        adaptive(kernel_regression(2, W), W, tune_plan=TunePlan(every=0))


def test_tune_every_waiting_tune_sees_the_phase_window():
    """A stable stretch does not learn, so a tune that waited tunes the same window: the state just after it
    equals the tune_every=1 machine's right after its phase end, hyperparameters and all."""
    W, k = 16, 10
    X, Y = _segment_stream(3)
    now, later = adaptive(kernel_regression(2, W), W), adaptive(kernel_regression(2, W), W, tune_plan=TunePlan(every=k))
    a = progressive_validation(now, now.init(), X[:W], Y[:W])  # cold start: tuned on its W-th item
    b = progressive_validation(later, later.init(), X[:W], Y[:W])
    assert int(a.state.n_tunes) == 1 and int(b.state.n_tunes) == 0 and bool(b.state.tune_pending)
    c = -(-W // k) * k  # the waiting tune's item count
    b = progressive_validation(later, b.state, X[W:c], Y[W:c])
    assert int(b.state.n_tunes) == 1 and not bool(b.state.tune_pending) and int(b.state.n_learned) == W
    _leaves_equal(b.state.inner, a.state.inner)


# ---------------------------------------------------------------- hostile streams: stuck sensors, outliers
def _stuck_then_moving(seed, n=600, stuck=100, d=2):
    r = np.random.default_rng(seed)
    X = r.uniform(-1.0, 1.0, (n, d)).astype(DTYPE)
    y = (X @ r.normal(size=d) * 2.0 + r.normal(size=n)).astype(DTYPE)
    y[:stuck] = 0.0  # a stuck sensor, as a standardised learner sees it
    return X, y


@pytest.mark.parametrize("name", ["gp", "windowed"])
def test_a_window_of_identical_targets_predicts_a_positive_variance_and_recovers(name):
    from onlinejax.core.linalg import variance_floor
    from onlinejax.learners.linear import bayesian_map_windowed

    inner = (gp_window(2, 32, mean="average") if name == "gp"
             else bayesian_map_windowed(2, 32, features=oj.ThesisFeatures(True, True), alpha=9.0))
    lrn = adaptive(inner, 32)
    X, y = _stuck_then_moving(0)
    res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: (s.n_alarms, s.detector.mean_z2))
    m, v = np.asarray(res.predictions.mean), np.asarray(res.predictions.var)
    alarms, mean_z2 = map(np.asarray, res.records)
    assert np.all(np.isfinite(m)) and np.all(np.isfinite(v))
    # the floor eps·m² + sqrt(tiny) (> 0 even at m = 0) is never undercut
    assert np.all(v >= np.asarray(variance_floor(jnp.asarray(m * m))) * (1 - 1e-6))
    # the detector statistic stays finite through the stuck run and alarms as soon as the targets move
    assert np.all(np.isfinite(mean_z2))
    assert alarms[99] == 0 and alarms[101] >= 1
    # and the relearned window predicts as well as the stream allows (noise variance 1)
    assert np.mean((m[300:] - y[300:]) ** 2) < 1.6


def test_variance_floor_is_the_dtypes_resolution_of_the_level():
    from onlinejax.core.linalg import variance_floor

    fi = np.finfo(DTYPE)
    np.testing.assert_allclose(np.asarray(variance_floor(jnp.asarray([0.0, 4.0], DTYPE))),
                               [np.sqrt(fi.tiny), 4.0 * fi.eps + np.sqrt(fi.tiny)], rtol=1e-6)


def test_gp_tune_on_a_window_without_spread_keeps_its_hyperparameters(rng):
    gp = gp_window(2, 16, mean="average")
    s = gp.init()
    for x in rng.uniform(size=(16, 2)).astype(DTYPE):
        s = gp.learn(s, x, 3.0)
    t = gp.tune(s)
    for a, b in zip(jax.tree_util.tree_leaves(t.params), jax.tree_util.tree_leaves(s.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    p = gp.predict(t, jnp.asarray([0.5, 0.5], DTYPE))
    assert float(p.var) > 0 and np.isfinite(float(p.mean))


def test_a_nan_variance_alarms_instead_of_silencing_the_detector():
    opts = AdaptiveOptions(detector=cusum(threshold=15.0, reference_items=3))
    lrn = oj.bayes_linreg(1)  # any learner: its prediction is replaced below
    s = adaptive_init(lrn, 8)._replace(mode=jnp.asarray(STABLE, jnp.int32))
    s = s._replace(detector=s.detector._replace(n=jnp.asarray(10, jnp.int32)))
    bad = oj.Prediction(jnp.asarray(0.0, DTYPE), jnp.asarray(jnp.nan, DTYPE))
    nan_learner = lrn._replace(predict=lambda st, x: bad)
    new, _ = jax.jit(lambda s: step_one(nan_learner, opts, s, jnp.zeros((1,), DTYPE), jnp.asarray(1.0, DTYPE)))(s)
    assert int(new.n_alarms) == 1
    assert np.isfinite(float(new.detector.mean_z2))


def _outlier_stream(seed, n=1500, at=600, d=2):
    r = np.random.default_rng(seed)
    X = r.uniform(-1.0, 1.0, (n, d)).astype(DTYPE)
    y = X @ r.normal(size=d) * 2.0 + np.sin(3.0 * X[:, 0]) + r.normal(size=n)
    clean = y.astype(DTYPE)
    y = y.copy()
    y[at] += 1e4
    return X, clean, y.astype(DTYPE)


@pytest.mark.parametrize("name", ["gp", "kernel_regression"])
def test_an_outlier_is_not_learned_and_the_window_recovers(name):
    make = {"gp": lambda: gp_window(2, 64, mean="average"), "kernel_regression": lambda: kernel_regression(2, 64)}[name]
    lrn = adaptive(make(), 64, options=MachineOptions(naive_alarm=0.7, learn_shock=False))
    run = jax.jit(jax.vmap(lambda X, y: progressive_validation(lrn, lrn.init(), X, y).predictions.mean))
    mses = []
    for seed in (1, 2, 3):
        X, clean, dirty = _outlier_stream(seed)
        m = np.asarray(run(jnp.stack([X, X]), jnp.stack([clean, dirty])))
        assert np.all(np.isfinite(m))
        after = slice(900, 1500)  # 300 items after the outlier on
        mses.append([np.mean((m[k, after] - clean[after]) ** 2) for k in (0, 1)])
    mses = np.asarray(mses)
    assert np.all(mses[:, 1] <= 1.5 * mses[:, 0]), mses


def test_naive_alarm_replaces_a_window_learned_on_a_stuck_sensor_and_stays_quiet_on_a_clean_stream():
    # a window learned on a stuck sensor (its 40 first targets at 5) predicts the constant; its errors are
    # steady, so the relative detectors keep it, until the naive forecasts show that it is useless
    r = np.random.default_rng(5)
    n, d = 1500, 2
    X = r.uniform(-1.0, 1.0, (n, d)).astype(DTYPE)
    y = (X @ (r.normal(size=d) * 2.0) + 0.3 * r.normal(size=n)).astype(DTYPE)
    y[:40] = 5.0
    inner = kernel_regression(d, 32)
    mse = {}
    for naive in (None, 0.7):
        # only the naive test alarms
        lrn = adaptive(inner, 32, options=MachineOptions(naive_alarm=naive), detector=cusum(threshold=1e6, shock=None))
        res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: s.n_alarms)
        assert int(np.asarray(res.records)[-1]) == (0 if naive is None else 1)
        mse[naive] = np.mean((np.asarray(res.predictions.mean)[500:] - y[500:]) ** 2)
    assert mse[0.7] < 0.2 * mse[None], mse
    # a useful model on a stationary stream beats the naive forecasts: no alarm from the naive test
    lrn = adaptive(oj.bayes_linreg(d, beta=10.0), 32, options=MachineOptions(naive_alarm=0.7),
                   detector=cusum(threshold=1e6, shock=None))
    for seed in range(4):
        r = np.random.default_rng(100 + seed)
        X = r.uniform(-1.0, 1.0, (3000, d)).astype(DTYPE)
        y = (X @ r.normal(size=d) * 2.0 + 0.3 * r.normal(size=3000)).astype(DTYPE)
        res = progressive_validation(lrn, lrn.init(), X, y, record=lambda s: s.n_alarms)
        assert int(np.asarray(res.records)[-1]) == 0


def test_skip_repeats_learns_a_stuck_run_as_its_first_item():
    """``skip_repeats``: a learning phase that meets a stuck sensor's run (30 copies of one item) learns the run's
    first item only and counts the copies nowhere: its window and its phase end are those of the same stream with
    the copies removed (the state machine's inner state equal item for item after the run); without it the copies
    fill the window. A repeated ``x`` with a new ``y`` is data and is learned."""
    W, d = 32, 2
    r = np.random.default_rng(11)
    X = r.uniform(-1.0, 1.0, (100, d)).astype(DTYPE)
    y = (X @ np.array([1.5, -2.0]) + 0.3 * r.normal(size=100)).astype(DTYPE)
    X[10:40], y[10:40] = X[10], y[10]  # items 11..39 repeat item 10
    X[45:50] = X[45]  # the same input with new targets: not repeats
    keep = np.r_[0:11, 40:100]
    inner = oj.windowed_bayes_linreg(d, W, alpha=1e-2, beta=10.0, intercept=True)
    lrn = adaptive(inner, W, options=MachineOptions(skip_repeats=True), detector=cusum(threshold=1e6, shock=None),
                   tune=False)
    rec = lambda s: (s.inner, s.n_learned, s.mode)  # noqa: E731
    full = progressive_validation(lrn, lrn.init(), X, y, record=rec).records
    short = progressive_validation(lrn, lrn.init(), X[keep], y[keep], record=rec).records
    after = np.arange(40, 100)  # items of the full stream after the run, and their places in the short one
    for a, b in zip(jax.tree_util.tree_leaves(full[0]), jax.tree_util.tree_leaves(short[0])):
        np.testing.assert_allclose(np.asarray(a)[after], np.asarray(b)[after - 29], rtol=tol(1e-12, 1e-5),
                                   atol=tol(1e-12, 1e-5))
    np.testing.assert_array_equal(np.asarray(full[1])[after], np.asarray(short[1])[after - 29])
    assert int(np.asarray(full[1])[49]) == 11 + 10  # items 0..10 and 40..49, the same x at 45..49 included
    assert int(np.asarray(full[1])[-1]) == W  # the phase ended after W learned items
    plain = adaptive(inner, W, detector=cusum(threshold=1e6, shock=None), tune=False)
    n_plain = np.asarray(progressive_validation(plain, plain.init(), X, y, record=rec).records[1])
    assert n_plain[-1] == W and np.asarray(full[2])[39] != STABLE and n_plain[31] == W  # the copies filled it


def test_naive_alarm_is_checked():
    with pytest.raises(ValueError, match=r"options\.naive_alarm"):
        adaptive(kernel_regression(1, 8), 8, options=MachineOptions(naive_alarm=1.5))
    with pytest.raises(ValueError, match=r"options\.naive_alarm"):
        adaptive(kernel_regression(1, 8), 8, options=MachineOptions(naive_alarm=0.0))


def test_machine_options_are_one_checked_value():
    """``options=MachineOptions(...)``: an unknown field or an old keyword is a TypeError naming it, a bad value a
    ValueError naming its field; equal records are the same learner, and the default record is the thesis's machine
    (outputs equal to the bit on a drifting stream)."""
    inner = kernel_regression(2, 16)
    with pytest.raises(TypeError, match="min_move"):
        MachineOptions(min_move=4)
    with pytest.raises(TypeError, match="naive_alarm"):
        adaptive(inner, 16, naive_alarm=0.7)
    with pytest.raises(TypeError, match="options: expected"):
        adaptive(inner, 16, options={"naive_alarm": 0.7})
    for bad, field in ((dict(min_moves=2.5), "min_moves"), (dict(naive_alarm=1.0), "naive_alarm"),
                       (dict(follow_inputs=float("nan")), "follow_inputs")):
        with pytest.raises(ValueError, match=rf"options\.{field}:"):
            adaptive(inner, 16, options=MachineOptions(**bad))
    opts = MachineOptions(naive_alarm=0.7, min_moves=8)
    assert adaptive(inner, 16, options=opts) is adaptive(inner, 16, options=opts._replace())  # equal, not the same
    assert repr(opts) == "MachineOptions(naive_alarm=0.7, min_moves=8)" and repr(MachineOptions()) == "MachineOptions()"
    X, Y = _segment_stream(3)
    plain, given = adaptive(inner, 16), adaptive(inner, 16, options=MachineOptions(), tune_plan=TunePlan())
    a = progressive_validation(plain, plain.init(), X, Y, record=record_mode)
    b = progressive_validation(given, given.init(), X, Y, record=record_mode)
    assert int(a.state.n_tunes) >= 2
    _leaves_equal((a.predictions, a.records, a.state), (b.predictions, b.records, b.state))


@pytest.mark.parametrize("learn_shock", [True, False])
def test_learn_shock_decides_whether_the_alarming_outlier_enters_the_window(rng, learn_shock):
    W = 10
    lrn = adaptive(oj.windowed_bayes_linreg(1, W, alpha=1e-3, beta=100.0, intercept=True), W,
                   options=MachineOptions(learn_shock=learn_shock))
    X = rng.uniform(-1.0, 1.0, (60, 1)).astype(DTYPE)
    Y = (2.0 * X[:, 0] + 0.1 * rng.normal(size=60)).astype(DTYPE)
    Y[40] = 1e4  # a stable item: the shock alarms on it
    r = progressive_validation(lrn, lrn.init(), X, Y, record=record_mode)
    modes = np.asarray(r.records)
    assert modes[40] == HIGH_ERROR and modes[39] == STABLE
    held = np.asarray(r.state.inner.buffer.y)[np.asarray(r.state.inner.buffer.valid)]
    assert (1e4 in held) == learn_shock
    # either way the phase learns W items: with the outlier left out it ends one item later
    assert modes[40 + W - (1 if learn_shock else 0)] == TUNE


def test_a_phase_whose_input_barely_moved_is_followed_by_another_learning_phase(rng):
    """``min_moves=m``: after a learning phase whose input moved on fewer than ``m`` items (rows repeated in blocks)
    the machine tunes and learns on, never stable; on inputs that move every item it is the thesis's machine to the
    last bit."""
    W, n = 16, 200
    X = np.repeat(rng.normal(size=(n // 40, 2)), 40, axis=0).astype(DTYPE)  # blocks of 40 identical rows
    Y = (X @ [1.0, -1.0] + 0.1 * rng.normal(size=n)).astype(DTYPE)
    base = oj.windowed_bayes_linreg(2, W)
    on, thesis = adaptive(base, W, options=MachineOptions(min_moves=4)), adaptive(base, W)
    r_on = progressive_validation(on, on.init(), X, Y, record=record_mode)
    r_th = progressive_validation(thesis, thesis.init(), X, Y, record=record_mode)
    assert not np.any(np.asarray(r_on.records) == STABLE) and np.any(np.asarray(r_th.records) == STABLE)
    assert int(r_on.state.n_learned) == n and int(r_on.state.n_tunes) == n // W
    # the runner's split-off tune (no record: the deferred step) runs the same machine
    np.testing.assert_array_equal(np.asarray(progressive_validation(on, on.init(), X, Y).predictions.mean),
                                  np.asarray(r_on.predictions.mean))
    Xm = rng.normal(size=(n, 2)).astype(DTYPE)
    a = progressive_validation(on, on.init(), Xm, Y, record=record_mode)
    b = progressive_validation(thesis, thesis.init(), Xm, Y, record=record_mode)
    np.testing.assert_array_equal(np.asarray(a.records), np.asarray(b.records))
    np.testing.assert_array_equal(np.asarray(a.predictions.mean), np.asarray(b.predictions.mean))
    # a phase shorter than min_moves settles once every item moved
    short = adaptive(base, W, options=MachineOptions(min_moves=4 * W))
    c = progressive_validation(short, short.init(), Xm, Y, record=record_mode)
    np.testing.assert_array_equal(np.asarray(c.records), np.asarray(b.records))
    # tune_unmoved=False: the phases that learn on end without a tune
    quiet = adaptive(base, W, options=MachineOptions(min_moves=4, tune_unmoved=False))
    assert int(progressive_validation(quiet, quiet.init(), X, Y).state.n_tunes) == 0
    with pytest.raises(ValueError, match=r"options\.min_moves"):
        adaptive(base, W, options=MachineOptions(min_moves=-1))
    with pytest.raises(TypeError, match=r"options\.tune_unmoved"):
        adaptive(base, W, options=MachineOptions(min_moves=4, tune_unmoved="no"))



def _stable_learned(lrn, X, Y):
    """``([n] bool, [n] bool)``: the items a stable machine learned (``follow_inputs``), and the stable items."""
    res = progressive_validation(lrn, lrn.init(), X, Y, record=lambda s: (s.mode, s.n_learned))
    mode, n_learned = (np.asarray(a) for a in res.records)
    learned = np.diff(np.concatenate([[0], n_learned])) > 0
    stable = np.concatenate([[False], mode[:-1] == STABLE]) & (mode == STABLE)
    return learned & stable, stable


def test_a_stable_machine_follows_a_trending_input_but_not_a_creep_or_a_lagged_extreme(rng):
    """``follow_inputs=margin``: a stable machine learns an item on which an input lies more than the margin beyond
    its learned values, as it did on the item before (a trend: every stable item); not a creep to new values by less
    than the margin, nor a new extreme that lagged inputs pass on, one input per item. ``None``: the thesis's machine."""
    W, n = 16, 160
    base = oj.windowed_bayes_linreg(2, W)
    follow = adaptive(base, W, tune=False, options=MachineOptions(follow_inputs=0.01))
    thesis = adaptive(base, W, tune=False)
    cycle = np.resize(rng.uniform(-2.0, 2.0, W), n + 1)  # an input that repeats the first phase's values
    trend = np.column_stack([np.linspace(0.0, 8.0, n), cycle[:n]]).astype(DTYPE)
    y = (trend @ [1.0, -1.0] + 0.1 * rng.normal(size=n)).astype(DTYPE)
    learned, stable = _stable_learned(follow, trend, y)
    assert stable.sum() > n // 2 and np.array_equal(learned, stable)
    assert not _stable_learned(thesis, trend, y)[0].any()
    creep = trend.copy()
    creep[:40, 0] = np.resize(rng.uniform(0.0, 1.0, W), 40)  # the first phase's values, then new lows:
    creep[40:, 0] = creep[:W, 0].min() - 1e-5 * np.arange(1, n - 39)  # 1.2e-3 below them in all
    y_creep = (creep @ [1.0, -1.0] + 0.1 * rng.normal(size=n)).astype(DTYPE)
    assert not _stable_learned(follow, creep, y_creep)[0].any()
    no_margin = adaptive(base, W, tune=False, options=MachineOptions(follow_inputs=0.0))
    assert _stable_learned(no_margin, creep, y_creep)[0].any()
    v = cycle.copy()
    v[100] = 10.0  # one new extreme, passed from lag 0 to lag 1
    lagged = np.column_stack([v[1:], v[:-1]]).astype(DTYPE)
    y_lagged = (lagged @ [1.0, -1.0] + 0.1 * rng.normal(size=n)).astype(DTYPE)
    assert not _stable_learned(follow, lagged, y_lagged)[0].any()
    with pytest.raises(ValueError, match=r"options\.follow_inputs"):
        adaptive(base, W, options=MachineOptions(follow_inputs=-1.0))


def test_the_learned_range_restarts_with_the_window_an_alarm_starts(rng):
    """``x_lo`` / ``x_hi`` are the range of the inputs learned since the last alarm: after a change the new
    phase's items only, so a narrower new window is followed when an input leaves it."""
    W, n = 16, 200
    X = rng.uniform(0.0, 1.0, (n, 2))
    X[100:] = rng.uniform(0.4, 0.6, (n - 100, 2))
    X[160:162, 0] = [0.75, 0.8]  # beyond the new window's inputs, within the old one's
    y = X @ [1.0, -1.0] + 0.01 * rng.normal(size=n)
    y[100:] += 5.0  # a change: the machine alarms and learns a new window of inputs in [0.4, 0.6]
    lrn = adaptive(oj.windowed_bayes_linreg(2, W), W, tune=False, options=MachineOptions(follow_inputs=0.01))
    res = progressive_validation(lrn, lrn.init(), X.astype(DTYPE), y.astype(DTYPE),
                                 record=lambda s: (s.n_alarms, s.mode, s.x_lo, s.x_hi, s.n_learned))
    n_alarms, mode, x_lo, x_hi, n_learned = (np.asarray(a) for a in res.records)
    a = int(np.argmax(n_alarms > 0))  # the alarm item, the new phase's first
    assert 100 <= a < 110 and mode[a + W - 1] == STABLE and n_alarms[a + W - 1] == 1
    np.testing.assert_array_equal(x_lo[a + W - 1], X[a:a + W].min(0).astype(DTYPE))
    np.testing.assert_array_equal(x_hi[a + W - 1], X[a:a + W].max(0).astype(DTYPE))
    # stable, then the input leaves the new range two items in a row: the second is learned
    assert np.all(mode[a + W:162] == STABLE) and n_alarms[-1] == 1
    assert n_learned[160] == n_learned[159] and n_learned[161] == n_learned[160] + 1

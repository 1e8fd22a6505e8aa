"""The grid runner: per-row metrics equal single-stream runs; chunking, sharding and the registry."""
import csv
import os
import re
import subprocess
import sys
import textwrap

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax import zoo
from onlinejax.wrappers.adaptive import adaptive
from onlinejax.wrappers.baseline import train_once
from onlinejax.data import StreamGroup, stratified_names, thesis_grid
from onlinejax.evaluation import (GridLayout, GridLearner, ReplayOptions, Scoring, progressive_validation,
                                  registered_learners)
from onlinejax.runner import run_grid
from onlinejax.evaluation.metrics import METRICS, prequential, score, stable_mask
from onlinejax.learners.kernel_regression import kernel_regression
from onlinejax.learners.linear import bayes_linreg

from conftest import tol

pytestmark = pytest.mark.float32_only  # the runner's layouts; float64 runs it through the pinned rows

N = 300
zoo.register_all()


@pytest.fixture(scope="module")
def groups():
    return thesis_grid(jax.random.key(1), [n for n in stratified_names(1, size=N, seed=3) if "_2_" in n or "_4_" in n])


def _learners():
    return [
        GridLearner("blr", "linear", lambda d: bayes_linreg(d, alpha=1e-2, beta=1e-2, forgetting=0.99)),
        GridLearner("blr-grid", "linear", lambda d: bayes_linreg(d, alpha=1e-2, beta=1e-2),
                    hyper={"alpha": [1e-3, 1.0], "beta": [1e-2, 1e-3]}),
        GridLearner("kr-sm", "kr", lambda d: adaptive(kernel_regression(d, 16), 16)),
        GridLearner("kr-batch", "batch", lambda d: train_once(kernel_regression(d, 32), 32), score_from=32),
    ]


@pytest.mark.slow  # 68 s; the pinned rows check the runner's rows against recorded ones in CI
def test_rows_equal_single_stream_runs(groups):
    res = run_grid(_learners(), groups, scoring=Scoring(stable_window=40), progress=False)
    n_streams = sum(len(g.names) for g in groups)
    assert len(res.rows) == (1 + 2 + 1 + 1) * n_streams
    assert len(res.compile_seconds) == 4 * len(groups)  # one compile per learner and shape
    rows = {(r["learner"], r["stream"]): r for r in res.rows}
    acc = prequential(0.95)
    made = {g.X.shape[2]: [gl.make(g.X.shape[2]) for gl in _learners()] for g in groups}  # one compile per learner and d
    for g in groups:
        d = g.X.shape[2]
        for i in ((0, len(g.names) - 1) if g.X.shape[2] == 2 else (0,)):
            X, Y = g.X[i], g.Y[i]
            cps = [int(g.change_points[i])] if g.change_points[i] >= 0 else []
            for gl, lrn in zip(_learners(), made[d]):
                inits = [({}, gl.name)] if not gl.hyper else [
                    ({k: v[h] for k, v in gl.hyper.items()}, f"{gl.name}[alpha={gl.hyper['alpha'][h]:g},beta={gl.hyper['beta'][h]:g}]")
                    for h in range(2)]
                for kw, label in inits:
                    p = progressive_validation(lrn, lrn.init(**kw), X, Y).predictions
                    w = (np.arange(N) >= gl.score_from).astype(np.float32)
                    ref = score(acc, Y, p, w)
                    ref_st = score(acc, Y, p, w * stable_mask(N, 40, cps))
                    row = rows[(label, g.names[i])]
                    assert row["d"] == d and row["family"] == gl.family
                    for m in METRICS:
                        np.testing.assert_allclose(row[m], float(ref[m]), rtol=tol(1e-12, 2e-5), err_msg=f"{label} {m}")
                        np.testing.assert_allclose(row[m + "_st"], float(ref_st[m]), rtol=tol(1e-12, 2e-5))
                    assert row["atpi"] > 0 and row["compile_s"] > 0


def test_chunking_and_padding_do_not_change_rows(groups, tmp_path):
    g = groups[1]
    lrn = [_learners()[0], _learners()[2]]
    whole = run_grid(lrn, g, layout=GridLayout(chunk_size=64), progress=False)
    chunked = run_grid(lrn, g, layout=GridLayout(chunk_size=3), progress=False)  # 4 streams -> chunks of 3 + 1 padded
    assert [r["stream"] for r in whole.rows] == [r["stream"] for r in chunked.rows]
    for a, b in zip(whole.rows, chunked.rows):
        for m in METRICS:
            np.testing.assert_allclose(a[m], b[m], rtol=tol(1e-12, 1e-6))
    path = chunked.to_csv(tmp_path / "t.csv")
    with open(path) as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(chunked.rows) and {"learner", "stream", "smse", "smse_st", "icr", "atpi", "noise_std"} <= set(table[0])
    summ = chunked.summary(as_frame=False)
    assert [s["family"] for s in summ] == ["linear", "kr"] and summ[0]["rows"] == 4
    frame = chunked.summary()  # pandas is installed with the test extra
    assert list(frame["family"]) == ["linear", "kr"] and list(frame.columns[:2]) == ["family", "rows"]
    for m in ("smse", "icr"):  # the mean over a family's rows, recomputed from the table
        want = [np.mean([r[m] for r in chunked.rows if r["family"] == f]) for f in ("linear", "kr")]
        np.testing.assert_allclose(frame[m].to_numpy(), want, rtol=1e-12)
    with pytest.raises(ValueError, match="^by: "):
        chunked.summary(by="nope")
    ref = chunked.rows[0]["learner"]  # each row's CRPS over the reference learner's on the same stream
    rel = chunked.relative_to(ref)
    for r in rel.rows:
        base = next(b for b in chunked.rows if b["learner"] == ref and b["stream"] == r["stream"])
        assert r["crps_rel"] == pytest.approx(r["crps"] / base["crps"], rel=1e-12)
        assert r["crps_st_rel"] == pytest.approx(r["crps_st"] / base["crps_st"], rel=1e-12)
    assert all(r["crps_rel"] == 1.0 for r in rel.rows if r["learner"] == ref)
    with pytest.raises(ValueError, match="^reference: "):
        chunked.relative_to("NoSuchLearner")
    with pytest.raises(ValueError, match="^metrics: "):
        chunked.relative_to(ref, metrics=("nope",))


@pytest.mark.slow  # CI time; test_chunking_and_padding_do_not_change_rows checks the layout in CI
def test_vmap_width_does_not_change_rows(groups):
    """States vmapped all together, one at a time (lax.map) or 3 at a time (8 pairs: 3 groups of 3, one pair a padding copy): the same rows."""
    from onlinejax.runner.grid import _state_bytes

    g = groups[1]  # 4 streams; "blr-grid" has 2 hyperparameter pairs -> 8 (stream, hyper) pairs
    lrn = [_learners()[1], _learners()[2]]
    wide = run_grid(lrn, g, progress=False, layout=GridLayout(vmap_bytes=1 << 40))
    one = run_grid(lrn, g, progress=False, layout=GridLayout(vmap_bytes=1))
    three = run_grid(lrn[:1], g, progress=False,
                     layout=GridLayout(vmap_bytes=3 * _state_bytes(lrn[0].make(2), jnp.float32)))
    assert [r["stream"] for r in wide.rows] == [r["stream"] for r in one.rows]
    for a, b in zip(wide.rows, one.rows):
        for m in METRICS:
            np.testing.assert_allclose(a[m], b[m], rtol=tol(1e-12, 1e-5), err_msg=f"{a['learner']} {m}")
    for a, b in zip(wide.rows, three.rows):
        for m in METRICS:
            np.testing.assert_allclose(a[m], b[m], rtol=tol(1e-12, 1e-5), err_msg=f"{a['learner']} {m}")
    with pytest.raises(ValueError, match=r"^layout\.vmap_bytes: "):
        run_grid(lrn, g, progress=False, layout=GridLayout(vmap_bytes=0))


def test_per_configuration_vmap_bytes_overrides_the_runs(groups, monkeypatch):
    """``GridLearner.vmap_bytes`` (the zoo's GPs: 1) replaces run_grid's for that configuration only."""
    from onlinejax.runner import grid_plan as plan_mod

    seen = []
    real = plan_mod._vmap_width
    monkeypatch.setattr(plan_mod, "_vmap_width", lambda sb, vb: seen.append(vb) or real(sb, vb))
    monkeypatch.setattr(plan_mod, "_all_cpu", lambda devices: True)  # the hints are CPU-only (see below)
    g = groups[1]
    base = _learners()[1]
    alone = base._replace(name="blr-alone", vmap_bytes=1)
    r = run_grid([base, alone], g, progress=False, layout=GridLayout(vmap_bytes=1 << 40))
    assert sorted(seen) == [1, 1 << 40]
    rows = {(x["learner"], x["stream"]): x for x in r.rows}
    assert sum(x["learner"].startswith("blr-alone") for x in r.rows) == 8  # 4 streams x 2 hyper values
    for x in r.rows:
        if x["learner"].startswith("blr-alone"):
            y = rows[(x["learner"].replace("blr-alone", "blr-grid"), x["stream"])]
            for m in METRICS:
                np.testing.assert_allclose(x[m], y[m], rtol=tol(1e-12, 1e-5))
    with pytest.raises(ValueError, match="vmap_bytes"):
        run_grid([base._replace(vmap_bytes=0)], g, progress=False)
    assert all(x.vmap_bytes == 1 for x in registered_learners("GPRegression"))


def test_accelerator_defaults_vmap_whole_chunks(groups, monkeypatch):
    """On non-CPU devices every stream of a group is one chunk, all vmapped (the per-configuration
    CPU hints ignored, an explicit ``vmap_bytes`` kept); the rows equal the CPU defaults'."""
    from onlinejax.runner import grid_plan as plan_mod

    g = groups[1]  # 4 streams
    base = _learners()[1]
    alone = base._replace(name="blr-alone", vmap_bytes=1)
    cpu = run_grid([base, alone], g, progress=False, layout=GridLayout(chunk_size=None))
    widths, chunks = [], []
    real_program, real_chunk = plan_mod.predictions_program, plan_mod._default_chunk
    monkeypatch.setattr(plan_mod, "predictions_program",
                        lambda *a, **k: widths.append(k["width"]) or real_program(*a, **k))
    monkeypatch.setattr(plan_mod, "_default_chunk", lambda *a: chunks.append(a[-1]) or real_chunk(*a))
    monkeypatch.setattr(plan_mod, "_all_cpu", lambda devices: False)
    acc = run_grid([base, alone], g, progress=False)
    assert widths == [None, None] and chunks == [plan_mod._ACCELERATOR_CHUNK_BYTES] * 2
    for a, b in zip(cpu.rows, acc.rows):
        assert (a["learner"], a["stream"]) == (b["learner"], b["stream"])
        for m in METRICS:
            np.testing.assert_allclose(a[m], b[m], rtol=tol(1e-12, 1e-5), err_msg=f"{a['learner']} {m}")
    widths.clear()
    run_grid([alone], g, progress=False, layout=GridLayout(vmap_bytes=1))  # an explicit run_grid value holds everywhere
    assert widths == [1]
    with pytest.raises(ValueError, match=r"^layout\.chunk_bytes: "):
        run_grid([base], g, progress=False, layout=GridLayout(chunk_bytes=0))


@pytest.mark.slow
def test_compile_batches_release_programs_and_keep_rows(groups, capsys):
    """Programs compiled a batch at a time (learners never split): the same rows, in the same order."""
    lrn = [_learners()[0], _learners()[2]]
    assert len({g.X.shape[1:] for g in groups}) == 2  # two programs per learner
    def compile_bars(err):  # the final state of each "compiling" progress bar (one line each): its total
        finals = [line.split("\r")[-1] for line in err.split("\n")]
        return [int(m.group(1)) for m in map(re.compile(r"compiling \(\d+ at a time\): 100%\|[^|]*\| (\d+)/\1").match, finals) if m]

    whole = run_grid(lrn, groups, progress=True)  # default compile_batch: both learners in one batch
    assert compile_bars(capsys.readouterr().err) == [4]
    batched = run_grid(lrn, groups, progress=True, layout=GridLayout(compile_batch=1))  # each learner is its own batch
    assert compile_bars(capsys.readouterr().err) == [2, 2]
    assert [(r["learner"], r["stream"]) for r in whole.rows] == [(r["learner"], r["stream"]) for r in batched.rows]
    for a, b in zip(whole.rows, batched.rows):
        for m in METRICS:
            np.testing.assert_allclose(a[m], b[m], rtol=tol(1e-12, 1e-5), err_msg=f"{a['learner']} {m}")
    assert batched.compile_seconds.keys() == whole.compile_seconds.keys()
    with pytest.raises(ValueError, match=r"^layout\.compile_batch: "):
        run_grid(lrn, groups, progress=False, layout=GridLayout(compile_batch=0))


def test_user_streams_and_errors():
    X = jax.random.uniform(jax.random.key(0), (3, 50, 2))
    Y = X @ jnp.asarray([1.0, -2.0])
    g = StreamGroup.from_arrays(X, Y, names=["a", "b", "c"])
    res = run_grid({"blr": lambda d: bayes_linreg(d, alpha=1e-3, beta=100.0)}, g, scoring=Scoring(stable_window=10), progress=False)
    assert [r["stream"] for r in res.rows] == ["a", "b", "c"] and all(r["smse_st"] < 1e-3 for r in res.rows)
    twice = run_grid({"blr": lambda d: bayes_linreg(d, alpha=1e-3, beta=100.0)}, [g, g], scoring=Scoring(stable_window=10),
                     progress=False)
    assert len(twice.rows) == 6 and len(twice.compile_seconds) == 1  # groups of one shape share the executable
    # the program's stages (trace, lower, XLA compile) add up to its compile time
    (key, total), = res.compile_seconds.items()
    stages = res.compile_stages[key]
    assert len(stages) == 3 and min(stages) > 0 and sum(stages) == pytest.approx(total, rel=1e-6)
    assert [r["mse"] for r in twice.rows[3:]] == [r["mse"] for r in res.rows]
    with pytest.raises(ValueError, match="names"):
        StreamGroup.from_arrays(X, Y, names=["a"])
    with pytest.raises(ValueError, match="returned a learner for 3 inputs"):
        run_grid({"bad": lambda d: bayes_linreg(3)}, g, progress=False)
    with pytest.raises(ValueError, match="learners"):
        run_grid([], g)
    with pytest.raises(ValueError, match="hyper"):
        run_grid([GridLearner("h", "h", lambda d: bayes_linreg(d), hyper={"alpha": [1.0, 2.0], "beta": [1.0]})], g,
                 progress=False)


def test_bad_chunk_size_and_streams_are_refused_by_name():
    """chunk_size=0 was the default silently; 0 streams a ZeroDivisionError; a string an AttributeError."""
    X = jax.random.uniform(jax.random.key(0), (2, 20, 2))
    g = StreamGroup.from_arrays(X, X @ jnp.asarray([1.0, -2.0]))
    empty = StreamGroup.from_arrays(X[:0], X[:0, :, 0])
    make = {"blr": lambda d: bayes_linreg(d)}
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match=r"^layout\.chunk_size: "):
            run_grid(make, g, layout=GridLayout(chunk_size=bad), progress=False)
    with pytest.raises(ValueError, match="^streams: .*no streams"):
        run_grid(make, empty, progress=False)
    with pytest.raises(ValueError, match="^streams: .*no streams"):
        run_grid(make, [g, empty], progress=False)
    with pytest.raises((TypeError, ValueError), match="^streams: "):
        run_grid(make, "thesis", progress=False)
    with pytest.raises((TypeError, ValueError), match="^streams: "):
        run_grid(make, [g, "thesis"], progress=False)
    with pytest.raises(ValueError, match="^streams: .*no items"):  # was a ZeroDivisionError
        run_grid(make, StreamGroup.from_arrays(X[:, :0], X[:, :0, 0]), progress=False)
    with pytest.raises(ValueError, match="^streams: .*change_points"):  # built by hand, past from_arrays' check
        run_grid(make, g._replace(change_points=np.array([5, 20])), progress=False)
    assert len(run_grid(make, g, layout=GridLayout(chunk_size=1), progress=False).rows) == 2


def test_change_points_are_item_indices_or_minus_one():
    X = jnp.zeros((2, 20, 1))
    for bad in ([5, 20], [-2, 3], [1.5, 3], [1, 2, 3]):
        with pytest.raises(ValueError, match="^change_points: "):
            StreamGroup.from_arrays(X, X[..., 0], change_points=bad)
    g = StreamGroup.from_arrays(X, X[..., 0], change_points=[-1, 19.0])
    assert g.change_points.tolist() == [-1, 19]


def test_delayed_rows_equal_single_stream_delayed_runs(groups):
    from onlinejax.evaluation import delayed_progressive_validation, schedule_from_delays

    g = groups[0]
    gl = _learners()[0]
    res = run_grid([gl], g, scoring=Scoring(delay=5), progress=False)
    lrn = gl.make(g.X.shape[2])
    p = delayed_progressive_validation(lrn, lrn.init(), g.X[0], g.Y[0], schedule_from_delays(np.full(N, 5.0))).predictions
    ref = score(prequential(0.95), g.Y[0], p)
    np.testing.assert_allclose(res.rows[0]["mse"], float(ref["mse"]), rtol=tol(1e-12, 2e-5))
    plain = run_grid([gl], g, progress=False)
    assert res.rows[0]["mse"] != plain.rows[0]["mse"]


def test_train_once_learns_only_the_training_set_and_tunes_once():
    X = jax.random.uniform(jax.random.key(2), (80, 2)) * 10
    Y = jnp.sin(X[:, 0]) + X[:, 1]
    kr = kernel_regression(2, 32)
    lrn = train_once(kr, 32)
    s = lrn.learn(lrn.init(), X, Y)
    ref = kr.tune(kr.learn(kr.init(), X[:32], Y[:32]))
    assert int(s.n_learned) == 32
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), s.inner, ref)
    p, q = lrn.predict(s, X[40:45]), kr.predict(ref, X[40:45])
    np.testing.assert_array_equal(np.asarray(p.mean), np.asarray(q.mean))
    # NaN items (accepted inside jit) are skipped and do not count toward the training set
    s2 = jax.jit(lrn.learn)(lrn.init(), X.at[3, 0].set(jnp.nan), Y)
    keep = np.r_[0:3, 4:33]
    ref2 = kr.tune(kr.learn(kr.init(), X[keep], Y[keep]))
    assert int(s2.n_learned) == 32
    np.testing.assert_array_equal(np.asarray(s2.inner.buffer.x), np.asarray(ref2.buffer.x))


def test_registry_has_the_thesis_configurations():
    online, batch = zoo.thesis_online_learners(), zoo.thesis_batch_learners()
    assert len(online) == 52 and len({g.name for g in online}) == 52
    assert len(batch) == 12 and all(g.score_from in (32, 64, 128) for g in batch)
    fams = {g.family for g in online}
    assert fams == {"BayesianMLE", "BayesianMAP", "GPRegression", "KernelRegression"}
    assert sum(g.family == "GPRegression" for g in online) == 15
    gp = registered_learners("GPRegressionOLS")
    assert [g.name for g in gp] == [f"GPRegressionOLSMean_WS{w}" for w in (32, 48, 64, 96, 128)]
    assert registered_learners("kernelregression,BayesianMAP")[0].family == "KernelRegression"
    with pytest.raises(ValueError, match="matches no registered learner"):
        registered_learners("NoSuchLearner")
    for g in online + batch:  # every configuration builds for every grid dimension
        assert g.make(2).n_features == 2
    # a configuration that shares a program is still itself when built alone: init's defaults are its init_kwargs
    shared = [g for g in online if g.init_kwargs]
    assert len({g.program for g in shared}) == 2 * (2 + 2) + 5  # forgetting, windowed (x mapped) x MLE/MAP; GP
    for g in shared:
        lrn = g.make(2)
        chex.assert_trees_all_equal(lrn.init(), lrn.init(**g.init_kwargs))
    s = registered_learners("BayesianMAPWindowedMapped_WS48")[0].make(2).init()
    assert int(s.phase_length) == 48 and int(s.inner.window) == 48 and s.inner.buffer.y.shape == (128,)


def test_thesis_configurations_are_the_registered_ones():
    """The thesis's sets are built with the thesis's tune rule (a runner's ``tune_plan`` changes it, not the
    names: ``tests/test_schedule.py``)."""
    assert [g.name for g in zoo.thesis_default_learners()] == list(zoo.DEFAULT_NAMES)
    assert not any("_TE" in g.name for g in zoo.thesis_online_learners())
    kr = {g.name: g for g in zoo.thesis_online_learners()}["KernelRegression_WS32"].make(2)
    assert "tune_plan" not in kr.description and kr.factory_call is not None


@pytest.mark.slow
def test_shared_program_rows_equal_separate_programs(groups):
    """The thesis's three GP means at one window share one compiled program (``program=``, the mean
    read from the state); every row equals that of the configuration compiled alone with a fixed mean,
    and the table keeps the configurations' order."""
    from onlinejax.learners.gp import GPWindowOptions, gp_window

    W = 16
    names = ("zero", "average", "ols")
    by_state = GPWindowOptions(mean_from_state=True)
    shared = [GridLearner(f"gp-{m}", "gp", lambda d, m=m: adaptive(gp_window(d, W, mean=m, window_options=by_state), W),
                          init_kwargs={"mean": i}, program="gp") for i, m in enumerate(names)]
    alone = [GridLearner(f"gp-{m}", "gp", lambda d, m=m: adaptive(gp_window(d, W, mean=m), W)) for m in names]
    blr = GridLearner("blr", "linear", lambda d: bayes_linreg(d, alpha=1e-2, beta=1e-2))
    g = groups[0]  # one stream shape: the check is about programs, and each GP compile costs seconds
    a = run_grid([shared[0], blr, shared[1], shared[2]], g, scoring=Scoring(stable_window=40), progress=False)
    b = run_grid([alone[0], blr, alone[1], alone[2]], g, scoring=Scoring(stable_window=40), progress=False)
    assert len(a.compile_seconds) == 2 and len(b.compile_seconds) == 4
    assert [(r["learner"], r["stream"]) for r in a.rows] == [(r["learner"], r["stream"]) for r in b.rows]
    for ra, rb in zip(a.rows, b.rows):
        for m in METRICS:
            # float32: the two programs fuse their reductions differently (more so on a GPU), and a
            # stream with changepoints amplifies last-bit differences through the window's tunes; the
            # absolute part is for metrics near 0 (an r2 of 0.05 carries the mse's error times 20)
            np.testing.assert_allclose(ra[m], rb[m], rtol=tol(1e-9, 1e-3), atol=tol(0.0, 1e-4),
                                       err_msg=f"{ra['learner']} {ra['stream']} {m}")
    smse = {r["learner"]: r["smse"] for r in a.rows if r["stream"] == a.rows[0]["stream"]}
    assert len(set(smse.values())) == 4  # the three means really differ
    with pytest.raises(ValueError, match="init_kwargs"):
        run_grid([shared[0], shared[1]._replace(init_kwargs={"lengthscale": 1.0})], g, progress=False)
    for bad in (jnp.asarray(5), jnp.asarray(1.5), jnp.asarray([0, 1])):  # a concrete index is checked
        with pytest.raises(ValueError, match="mean"):
            shared[0].make(2).init(mean=bad)
    assert int(shared[0].make(2).init(mean=jnp.asarray(2.0)).inner.mean_kind) == 2
    with pytest.raises(TypeError, match="mean_from_state"):
        gp_window(2, W).init(mean="ols")


SHARD_SCRIPT = textwrap.dedent("""
    import jax, numpy as np
    from onlinejax.data import thesis_grid, stratified_names
    from onlinejax.evaluation import GridLayout, GridLearner
    from onlinejax.runner import run_grid
    from onlinejax.wrappers.adaptive import adaptive
    from onlinejax.learners.kernel_regression import kernel_regression
    from onlinejax.learners.linear import bayes_linreg
    assert len(jax.devices()) == 4, jax.devices()
    g = thesis_grid(jax.random.key(1), [n for n in stratified_names(2, size=200, seed=3) if "_200_1_" not in n])
    L = [GridLearner("blr", "l", lambda d: bayes_linreg(d, alpha=1e-2, beta=1e-2, forgetting=0.99)),
         GridLearner("kr", "k", lambda d: adaptive(kernel_regression(d, 16), 16))]
    a = run_grid(L, g, progress=False, layout=GridLayout(chunk_size=2))  # 4 devices x 2 streams per call
    b = run_grid(L, g, progress=False, layout=GridLayout(chunk_size=2, devices=jax.devices()[:1]))
    keys = ["mse", "smse", "smse_st", "icr", "saiw", "mlpd", "crps"]
    A = np.array([[r[k] for k in keys] for r in a.rows]); B = np.array([[r[k] for k in keys] for r in b.rows])
    assert [r["stream"] for r in a.rows] == [r["stream"] for r in b.rows]
    assert np.array_equal(np.isnan(A), np.isnan(B))
    ok = ~np.isnan(B)
    rel = np.max(np.abs(A - B)[ok] / np.maximum(np.abs(B[ok]), 1e-30))
    i, j = np.unravel_index(np.argmax(np.where(ok, np.abs(A - B) / np.maximum(np.abs(B), 1e-30), 0)), A.shape)
    print("ROWS", len(a.rows), "MAXREL", rel, a.rows[i]["learner"], a.rows[i]["stream"], keys[j], A[i, j], B[i, j])
""")


@pytest.mark.slow
def test_sharded_equals_unsharded_on_four_host_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", SHARD_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("ROWS")][0]
    rows, rel = int(line.split()[1]), float(line.split()[3])
    assert rows == 2 * 16
    # a few ulps: XLA may fuse the kernel regression's new weight computation differently under shard_map
    assert rel <= (1e-13 if jnp.zeros(()).dtype == jnp.float64 else 1e-6), line


@pytest.mark.slow
def test_replay_combination_rows_equal_running_the_combination_learner(groups):
    """Rows added from kept member predictions equal run_grid on the combination learner itself."""
    from onlinejax.wrappers.combination import combine, fixed_share, mean_correction
    from onlinejax.runner import replay_combination

    mc = mean_correction(0.99, 50.0)

    a = GridLearner("blr", "linear", lambda d: bayes_linreg(d, alpha=1e-2, beta=1e-2, forgetting=0.99))
    b = GridLearner("kr", "kr", lambda d: kernel_regression(d, 16))
    c = GridLearner("mix", "Combination",
                    lambda d: combine([a.make(d), b.make(d)], fixed_share(0.05), recalibrate=0.9, correct=mc))
    res = run_grid([a, b, c], groups, keep_predictions=True, progress=False)
    members_only = res._replace(rows=[r for r in res.rows if r["learner"] != "mix"],
                                predictions={k: v for k, v in res.predictions.items() if k[0] != "mix"})
    rep = replay_combination(members_only, groups, "mix", ["blr", "kr"], fixed_share(0.05),
                             options=ReplayOptions(recalibrate=0.9, correct=mc))
    direct = {r["stream"]: r for r in res.rows if r["learner"] == "mix"}
    replayed = {r["stream"]: r for r in rep.rows if r["learner"] == "mix"}
    assert set(direct) == set(replayed) and len(direct) == sum(len(g.names) for g in groups)
    for s, r in direct.items():
        for m in METRICS:
            for k in (m, m + "_st"):
                np.testing.assert_allclose(replayed[s][k], r[k], rtol=tol(1e-9, 1e-4), atol=tol(1e-12, 1e-6),
                                           err_msg=f"{s} {k}")
        np.testing.assert_allclose(rep.predictions[("mix", s)][0], res.predictions[("mix", s)][0],
                                   rtol=tol(1e-9, 1e-4), atol=tol(1e-9, 1e-4))
    with pytest.raises(ValueError, match="keep_predictions"):
        replay_combination(res._replace(predictions=None), groups, "m", ["blr"], fixed_share(0.05))


def test_default_chunks_are_evened_out():
    """Fewest calls that respect the state budget, and among those the least padding (brute force)."""
    from onlinejax.runner.grid import _default_chunk

    for S in (1, 5, 144, 216, 1000):
        for n_dev in (1, 2, 4):
            for state_bytes in (1, 7, 1000, 51_000, 205_000, 10 << 20):
                budget = 8 << 20
                c = _default_chunk(state_bytes, S, n_dev, budget)
                need = -(-S // n_dev)
                cap = max(1, budget // state_bytes)
                options = range(1, min(cap, need) + 1)
                calls = min(-(-need // k) for k in options)
                padding = min(k * calls - need for k in options if -(-need // k) == calls)
                assert 1 <= c <= max(1, min(cap, need)), (S, n_dev, state_bytes, c)
                assert -(-need // c) == calls, (S, n_dev, state_bytes, c)
                assert c * calls - need == padding and padding < calls, (S, n_dev, state_bytes, c)


def test_use_cpu_cores_sets_host_devices_before_jax_starts():
    from onlinejax.evaluation import use_cpu_cores

    for bad in (0, -2, 1.5):
        with pytest.raises(ValueError, match="n: must be an integer"):
            use_cpu_cores(bad)
    code = textwrap.dedent("""
        import jax
        from onlinejax.evaluation import use_cpu_cores
        n = use_cpu_cores(3)
        assert n == 3 and len(jax.devices()) == 3, (n, jax.devices())
        assert use_cpu_cores(5) == 3  # too late: the backend keeps its devices
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"  # host devices, also on a machine with a GPU
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    out = subprocess.run([sys.executable, "-c", code.replace("n == 3 and len(jax.devices()) == 3", "n == 2")
                          .replace("use_cpu_cores(5) == 3", "use_cpu_cores(5) == 2")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.slow
def test_replay_combination_with_a_wrapper_equals_the_wrapped_learner(groups):
    """replay_combination(wrap=...) equals run_grid on the wrapped combination itself, and mixes hedged members'
    learners, not their hedges (as the recommended combination does): a hedged Student-t output."""
    from onlinejax.wrappers.calibration import conformal
    from onlinejax.wrappers.combination import combine, ewa_squared_error
    from onlinejax.runner import replay_combination
    from onlinejax.wrappers.hedge import with_climatology

    wrap = lambda l: with_climatology(conformal(l, 0.9, method="quantile", recalibrate=0.99, df=4.0),  # noqa: E731
                                      keep_mean=True)
    inner_a = lambda d: bayes_linreg(d, alpha=1e-2, beta=1e-2, forgetting=0.99)  # noqa: E731
    inner_b = lambda d: bayes_linreg(d, alpha=1.0, beta=1.0, forgetting=0.95)  # noqa: E731
    a = GridLearner("blr", "linear", lambda d: with_climatology(inner_a(d), keep_mean=True))
    b = GridLearner("blr2", "linear", lambda d: with_climatology(inner_b(d)))
    c = GridLearner("mix", "Combination",
                    lambda d: wrap(combine([inner_a(d), inner_b(d)], ewa_squared_error(0.98), recalibrate=0.95)))
    res = run_grid([a, b, c], groups, keep_predictions=True, progress=False, scoring=Scoring(level=0.9))
    members_only = res._replace(rows=[r for r in res.rows if r["learner"] != "mix"],
                                predictions={k: v for k, v in res.predictions.items() if k[0] != "mix"})
    rep = replay_combination(members_only, groups, "mix", ["blr", "blr2"], ewa_squared_error(0.98),
                             options=ReplayOptions(recalibrate=0.95, wrap=wrap), scoring=Scoring(level=0.9))
    direct = {r["stream"]: r for r in res.rows if r["learner"] == "mix"}
    replayed = {r["stream"]: r for r in rep.rows if r["learner"] == "mix"}
    assert set(direct) == set(replayed)
    for s, r in direct.items():
        for k in ("smse", "icr", "mlpd", "crps", "skill", "icr_st"):
            np.testing.assert_allclose(replayed[s][k], r[k], rtol=tol(1e-9, 1e-4), atol=tol(1e-12, 1e-5),
                                       err_msg=f"{s} {k}")
        for got, want in zip(rep.predictions[("mix", s)], res.predictions[("mix", s)], strict=True):
            np.testing.assert_allclose(got, want, rtol=tol(1e-9, 1e-3), atol=tol(1e-12, 1e-4))
        # kept: the hedge's moments, and its learner's (the member's own), which the replay mixes
        m, v, _, m_in, v_in = res.predictions[("blr", s)]
        np.testing.assert_allclose(m, m_in, rtol=tol(1e-12, 1e-5), atol=tol(1e-12, 1e-5))  # keep_mean
        assert np.any(np.abs(v / v_in - 1.0) > 0.01)


def test_importing_the_zoo_registers_nothing():
    """Registration is explicit (zoo.register_all), and the registry imports nothing above the core."""
    import ast
    import onlinejax.core.registry as reg

    tree = ast.parse(open(reg.__file__).read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level}
    assert imported == {"base"}, imported
    code = textwrap.dedent("""
        import sys
        from onlinejax import zoo
        from onlinejax.core import registry
        assert not registry.REGISTRY
        try:
            registry.registered_learners("GP")
        except ValueError as e:
            assert "register_all" in str(e)
        else:
            raise AssertionError("an empty registry must say how to fill it")
        assert len(zoo.register_all()) == len(registry.REGISTRY) == len(zoo.configurations())
    """)
    subprocess.run([sys.executable, "-c", code], check=True)

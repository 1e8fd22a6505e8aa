import os

import pytest

from onlinejax.__main__ import main

pytestmark = pytest.mark.float32_only  # the commands' plumbing; the numerics are tested in both dtypes elsewhere


def test_main_job_small(tmp_path, capsys, restore_compilation_cache, monkeypatch):
    import onlinejax.__main__ as cli

    every = cli.drift_learners()
    assert len(every) == 9
    keep = ("BayesLinReg", "BayesLinReg-window64")  # the command's plumbing with two of its learners (CI time)
    monkeypatch.setattr(cli, "drift_learners", lambda: {k: every[k] for k in keep})
    cache = tmp_path / "xla"
    assert main(["drift", "--streams", "2", "--n", "120", "--out", str(tmp_path), "--compile-cache", str(cache)]) == 0
    import jax

    # drift compiles too: the persistent cache is on (programs that compile in >= 0.5 s are kept)
    assert jax.config.jax_compilation_cache_dir == str(cache) and os.path.isdir(cache)
    out = capsys.readouterr().out
    assert "BayesLinReg-window64" in out and "ICR95" in out
    assert os.path.getsize(tmp_path / "drift_running_mae.png") > 1000
    lines = (tmp_path / "drift_summary.csv").read_text().splitlines()
    assert lines[0].startswith("learner,mae,rmse,coverage") and len(lines) == 3


def test_bad_arguments_exit_nonzero(tmp_path):
    assert main(["drift", "--streams", "0", "--out", str(tmp_path)]) == 2


def test_version(capsys):
    import onlinejax

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"onlinejax {onlinejax.__version__}"


def test_list_learners_runs_nothing(tmp_path, capsys):
    from onlinejax import zoo
    from onlinejax.core.registry import registered_learners

    assert main(["grid", "--list-learners", "--out", str(tmp_path / "never")]) == 0
    lines = capsys.readouterr().out.splitlines()
    zoo.register_all()
    assert lines == [f"{g.name}\t{g.family}\t{g.description}" for g in registered_learners()] and len(lines) > 10
    assert all(len(line.split("\t")[2]) > 20 for line in lines)  # every configuration says what it is
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("cmd", ["drift", "grid", "compare"])
def test_help_shows_defaults(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0 and "(default: " in out
    assert {"drift": "(default: 16)", "grid": "(default: results)", "compare": "(default: 7.0)"}[cmd] in out


def test_options_have_one_meaning(capsys):
    """``--streams`` is drift's number of streams; grid's names are ``--stream-names``; no option before a command."""
    with pytest.raises(SystemExit) as e:
        main(["grid", "--streams", "SYNTH_ND_CD_2000_1_10_5_11"])
    assert e.value.code == 2 and "--streams" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--n", "5", "drift"])
    assert e.value.code == 2 and "--n: options follow their subcommand" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert "Options belong to their subcommand and follow it" in " ".join(capsys.readouterr().out.split())
    assert main(["--streams", "0"]) == 2  # no subcommand: drift's options


def test_usage_errors_name_the_option(tmp_path, capsys, monkeypatch):
    """Each case exits 2 before computing anything, naming the option (argparse's own errors say "argument --x")."""
    import onlinejax.__main__ as cli

    def computed(*args, **kwargs):
        raise AssertionError("a usage error must stop the command before it computes anything")

    for name in ("run_grid_command", "run_drift"):
        monkeypatch.setattr(cli, name, computed)
    out = ["--out", str(tmp_path), "--compile-cache", "none"]
    name = "SYNTH_D_CD_2000_1_50_3_23"
    cases = [(["drift", "--seed", str(2**64)], "--seed"), (["drift", "--seed", "-1"], "--seed"),
             (["grid", "--seed", "-1"], "--seed"), (["grid", "--seed", "1.5"], "--seed"),
             (["grid", "--stream-names", name, "--n", "100"], "--n"),
             (["grid", "--stream-names", name, "--per-cell", "1"], "--per-cell"),
             (["grid", "--stream-names", name, "--full"], "--full"), (["grid", "--stream-names", " , "], "--stream-names"),
             (["grid", "--stream-names", "SYNTH_X"], "--stream-names"), (["grid", "--full", "--per-cell", "3"], "--per-cell"),
             (["grid", "--thesis", "--learners", "GP"], "--thesis"), (["grid", "--learners", "NoSuchLearner"], "--learners"),
             (["grid", "--n", "5"], "--n"), (["grid", "--per-cell", "0"], "--per-cell"), (["drift", "--streams", "0"], "--streams"),
             (["grid", "--tune-every", "0"], "--tune-every"), (["grid", "--tune-every", "2.5"], "--tune-every")]
    for args, option in cases:
        try:
            code = main(args + out)
        except SystemExit as e:
            code = e.code
        assert code == 2, args
        err = capsys.readouterr().err
        assert f"error: {option}" in err or f"error: argument {option}" in err, (args, err)


def test_ctrl_c_stops_the_grid_while_it_compiles(tmp_path):
    """Ctrl-C during compilation ended the command only after every compile under way had finished (~2 min)."""
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "onlinejax", "grid", "--out", str(tmp_path), "--compile-cache", "none"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        seen = ""
        while "compiling" not in seen:  # the progress bar on stderr: the programs are being compiled
            c = p.stderr.read(1)
            assert c, f"the command ended before compiling: {seen[-500:]}"
            seen += c
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        code = p.wait(timeout=30)  # a hang guard, not a timing: before, the command exited only after ~2 minutes
        assert code == 130 and "interrupted" in p.stderr.read()  # the interrupt path ended it, not the compiles
    finally:
        p.kill()
        p.wait()


def test_paths_and_delay_checked_before_computing(tmp_path, capsys, monkeypatch):
    import onlinejax.__main__ as cli

    def computed(*args, **kwargs):
        raise AssertionError("a usage error must stop the command before it computes anything")

    for name in ("run_grid_command", "run_drift", "run_compare"):
        monkeypatch.setattr(cli, name, computed)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cases = [(["grid", "--out", "/proc/nonexistent/x"], "--out"), (["drift", "--out", "/proc/nonexistent/x"], "--out"),
             (["grid", "--out", str(tmp_path), "--compile-cache", str(blocker / "xla")], "--compile-cache"),
             (["grid", "--out", str(blocker), "--compile-cache", "none"], "--out"),
             (["drift", "--out", str(tmp_path), "--compile-cache", str(blocker / "xla")], "--compile-cache"),
             (["compare", "--compile-cache", str(blocker / "xla")], "--compile-cache"),
             (["compare", "--delay", "nan"], "--delay"), (["compare", "--delay", "inf"], "--delay")]
    for args, option in cases:
        assert main(args) == 2
        assert f"error: {option}" in capsys.readouterr().err


def test_compare_on_shipped_data(capsys):
    import pytest

    pytest.importorskip("river")
    assert main(["compare", "--delay", "7", "--compile-cache", "none"]) == 0
    out = capsys.readouterr().out
    for s in ("temporal split", "5-fold CV", "progressive validation", "delayed progressive (delay 7)"):
        assert s in out


def test_compare_values_and_order(capsys):
    import numpy as np
    import pytest

    pytest.importorskip("river")
    import onlinejax as oj
    from onlinejax.evaluation import compare_evaluations, progressive_validation

    days, X, y, _ = oj.data.trump_approval()
    assert X.shape == (1001, 5) and np.all(np.diff(days) >= 0)
    lrn = oj.bayes_linreg(5, alpha=1e-2, forgetting=0.99, intercept=True)
    r = compare_evaluations(lrn, X, y, times=days, delay=0.0, verbose=False)
    pv = float(np.mean(np.abs(y - np.asarray(progressive_validation(lrn, lrn.init(), X, y).predictions.mean, np.float64))))
    assert r["progressive validation"] == pytest.approx(pv)
    assert r["delayed progressive (delay 0)"] == pytest.approx(pv, rel=1e-5)
    r30 = compare_evaluations(lrn, X, y, times=days, delay=30.0, verbose=False)
    assert r30["delayed progressive (delay 30)"] > r30["progressive validation"]  # learning later cannot help here


@pytest.fixture
def restore_compilation_cache():
    """The grid command turns on JAX's process-wide persistent cache; put the options back afterwards."""
    import jax
    from jax._src import compilation_cache

    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes")
    old = {k: getattr(jax.config, k) for k in keys}
    yield
    for k, v in old.items():
        jax.config.update(k, v)
    compilation_cache.reset_cache()


@pytest.mark.slow
def test_grid_command_small(tmp_path, capsys, restore_compilation_cache):
    import csv

    cache = tmp_path / "xla"
    args = ["grid", "--per-cell", "1", "--n", "150", "--learners", "KernelRegression_WS32,BayesianMAPForgettingMapped_FF0.05",
            "--out", str(tmp_path), "--compile-cache", str(cache)]
    assert main(args) == 0
    assert len(os.listdir(cache)) >= 2  # both learners' programs (>= 0.5 s to compile each) were stored
    from onlinejax.evaluation import enable_compilation_cache

    with pytest.raises(ValueError, match="min_compile_seconds"):
        enable_compilation_cache(str(cache), min_compile_seconds=-1.0)
    out = capsys.readouterr().out
    assert "Thesis grid: 12 streams x 150 items, 2 learners" in out and "KernelRegression" in out and "SMSE-ST" in out
    with open(tmp_path / "grid.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 24 and {r["learner"] for r in rows} == {"KernelRegression_WS32", "BayesianMAPForgettingMapped_FF0.05"}
    for png in ("grid_summary.png", "grid_error.png", "grid_intervals.png", "grid_calibration.png"):
        assert os.path.getsize(tmp_path / png) > 1000
    assert "skill" in out and "MLPD" in out and "CRPS" in out
    assert main(["grid", "--learners", "NoSuchLearner", "--out", str(tmp_path)]) == 2
    assert main(["grid", "--per-cell", "0", "--out", str(tmp_path)]) == 2
    assert main(["grid", "--stream-names", "SYNTH_XX_CD_2000_1_10_5_11", "--out", str(tmp_path)]) == 2
    capsys.readouterr()
    assert main(["grid", "--stream-names", "SYNTH_ND_CD_2000_1_10_5_11", "--learners", "BayesianMAPForgettingMapped_FF0.05",
                 "--out", str(tmp_path)]) == 0
    assert "Thesis grid: 1 streams x 2000 items, 1 learners" in capsys.readouterr().out


@pytest.mark.slow
def test_grid_command_recommended_and_climatology(tmp_path, capsys, restore_compilation_cache):
    """A recommended configuration next to the climatology baseline: skill columns in the table and the CSV."""
    import csv

    args = ["grid", "--per-cell", "1", "--n", "200", "--learners", "RecommendedForgettingLinear,Climatology",
            "--out", str(tmp_path), "--compile-cache", "none"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "BayesianLinear" in out and "Climatology" in out
    with open(tmp_path / "grid.csv") as f:
        rows = list(csv.DictReader(f))
    clim = [r for r in rows if r["learner"] == "Climatology"]
    rec = [r for r in rows if r["learner"] == "RecommendedForgettingLinear"]
    assert len(clim) == len(rec) == 12
    assert all(abs(float(r["skill"])) < 1e-4 for r in clim)  # climatology against itself
    assert all(float(r["n_nonfinite"]) == 0 and 0.8 <= float(r["icr"]) <= 1.0 for r in rec)
    assert sum(float(r["skill"]) > 0 for r in rec) > len(rec) // 2  # 200-item streams: a short run-in


@pytest.mark.slow
def test_run_grid_progress_bars(capsys):
    """``progress=True``: tqdm bars over the programs compiled and run, on stderr; ``progress=False``: nothing."""
    import jax

    from onlinejax import zoo
    from onlinejax.data import stratified_names, thesis_grid
    from onlinejax.evaluation import registered_learners
    from onlinejax.runner import run_grid

    zoo.register_all()
    groups = thesis_grid(jax.random.key(0), stratified_names(1, size=60, seed=0)[:2])
    gls = registered_learners("Climatology")
    quiet = run_grid(gls, groups, progress=False)
    out, err = capsys.readouterr()
    assert out == "" and err == ""
    loud = run_grid(gls, groups, progress=True)
    err = capsys.readouterr().err
    assert "compiling" in err and "running" in err and "program" in err and "100%" in err
    assert [r["smse"] for r in loud.rows] == [r["smse"] for r in quiet.rows]

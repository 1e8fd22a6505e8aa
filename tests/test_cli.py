import os

from onlinejax.__main__ import main


def test_main_job_small(tmp_path, capsys):
    assert main(["drift", "--streams", "2", "--n", "120", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "BayesLinReg-window64" in out and "ICR95" in out
    assert os.path.getsize(tmp_path / "drift_running_mae.png") > 1000
    lines = (tmp_path / "drift_summary.csv").read_text().splitlines()
    assert lines[0].startswith("learner,mae,rmse,coverage") and len(lines) == 10


def test_bad_arguments_exit_nonzero(tmp_path):
    assert main(["drift", "--streams", "0", "--out", str(tmp_path)]) == 2

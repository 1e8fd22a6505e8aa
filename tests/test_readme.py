"""The README's Python quickstarts run as written, and its commands match .ci/run."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_quickstarts_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the grid example writes grid.csv
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3
    ns: dict = {}
    for b in blocks:  # later blocks reuse names from earlier ones, as a reader would
        exec(compile(b, "README.md", "exec"), ns)
    assert ns["preds"].mean.shape == (64, 16, 250)
    assert len(ns["result"].rows) == 2 * 4 and ns["std"].shape == (300,) and (ns["std"] > 0).all()
    assert ns["dist"].sigma > 0


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = [ln for ln in readme.splitlines() if "pytest" in ln and ln.startswith("python3.12")]
    assert len(test_cmd) == 1 and test_cmd[0] in ci.splitlines()
    assert sum(ln.startswith("python3.12 -m venv") for ln in readme.splitlines()) == 2

"""Every ```python block of the README runs alone, in a fresh namespace; its commands match .ci/run."""
import pathlib
import re

import pytest

pytestmark = pytest.mark.float32_only  # the README's blocks run as a user runs them (float32)

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)

def _check(ns: dict) -> None:
    """Spot checks on what some blocks compute (a block that defines the name is checked)."""
    if "preds" in ns and "lo" in ns:  # one learner in a jitted scan
        assert ns["preds"].mean.shape == (250,) and bool((ns["hi"] > ns["lo"]).all())
    if "smse" in ns:  # many streams x settings
        assert ns["smse"].shape == (16, 64)
    if "result" in ns and hasattr(ns["result"], "rows") and "names" in ns:  # own learners on the grid
        assert len(ns["result"].rows) == 2 * len(ns["names"]) == 2 * 4
        assert (pathlib.Path("grid.csv")).exists()
    if "weights" in ns:  # combination
        import numpy as np
        assert np.allclose(ns["weights"].sum(axis=1), 1.0, atol=1e-4)
    if "std" in ns:  # scikit-learn adapter
        assert ns["std"].shape == (100,) and (ns["std"] > 0).all()
    if "dist" in ns:  # River adapter
        assert ns["dist"].sigma > 0


def test_readme_has_self_contained_blocks():
    assert len(BLOCKS) >= 3
    assert all(re.search(r"^(import|from) ", b, re.M) for b in BLOCKS), "every block makes its own imports"


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_quickstart_block_runs_alone(i, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks may write files (grid.csv)
    block = BLOCKS[i]
    ns: dict = {"__name__": f"readme_block_{i}"}
    from onlinejax.core import registry

    before = dict(registry.REGISTRY)
    try:
        exec(compile(block, f"README.md[python block {i}]", "exec"), ns)
        _check(ns)
    finally:  # a block that registers a learner leaves the registry as it found it (other tests list it)
        registry.REGISTRY.clear()
        registry.REGISTRY.update(before)


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = [ln for ln in README.splitlines() if "pytest" in ln and ln.startswith("python3.12")]
    assert len(test_cmd) == 1 and test_cmd[0] in ci.splitlines()
    assert sum(ln.startswith("python3.12 -m venv") for ln in README.splitlines()) == 2
    main_cmd = [ln for ln in README.splitlines() if ln.startswith("python3.12") and "pytest" not in ln]
    assert main_cmd == ["python3.12 -m venv .venv && .venv/bin/pip install -q -e '.[plot]' && "
                        ".venv/bin/python -m onlinejax grid"]

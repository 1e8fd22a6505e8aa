"""The documentation: docs/README.md's build command writes the API reference without a warning,
the guide pages are in it, and every ```python block of the guide pages runs alone."""
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.float32_only  # the guides' blocks and the API reference (float32)

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDES = ("getting_started.md", "for_river_users.md", "for_sklearn_users.md", "metrics.md")
BLOCKS = [(page, i, block) for page in GUIDES
          for i, block in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text(), re.S))]


def test_docs_readme_documents_the_build_command():
    readme = (ROOT / "docs" / "README.md").read_text()
    assert ".venv/bin/python docs/make.py" in readme
    assert all(page in readme for page in GUIDES)
    package_doc = (ROOT / "onlinejax" / "__init__.py").read_text()
    assert all(f".. include:: ../docs/{page}" in package_doc for page in GUIDES)


def test_api_reference_builds_without_warnings(tmp_path):
    """The documented command, in a fresh interpreter (the build adapts pdoc in its own process)."""
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "make.py"), "-o", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]  # make.py exits 1 on any warning, listing them
    for page in ("onlinejax.html", "onlinejax/adapters/river.html", "onlinejax/adapters/sklearn.html",
                 "onlinejax/evaluation/metrics.html", "onlinejax/linear/bayes.html", "search.js"):
        assert (out / page).is_file(), page
    html = (out / "onlinejax.html").read_text()
    docstring = html[html.index('<div class="docstring">'):html.index('id="mod-onlinejax-view-source"')]  # no source listing
    for heading in ("getting-started", "onlinejax-for-river-users", "onlinejax-for-scikit-learn-users", "metrics-glossary"):
        assert f'id="{heading}"' in docstring, heading
    assert "include::" not in docstring and "```" not in docstring  # the guides were included and rendered
    assert docstring.count("<table>") >= 6


def test_guide_pages_have_self_contained_blocks():
    assert {page for page, _, _ in BLOCKS} == set(GUIDES)
    assert all(re.search(r"^(import|from) ", b, re.M) for _, _, b in BLOCKS), "every block makes its own imports"


@pytest.mark.parametrize("page, i", [(page, i) for page, i, _ in BLOCKS])
def test_guide_block_runs_alone(page, i, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    block = next(b for p, j, b in BLOCKS if (p, j) == (page, i))
    exec(compile(block, f"docs/{page}[python block {i}]", "exec"), {"__name__": f"docs_block_{i}"})

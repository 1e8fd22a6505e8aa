"""The documentation: docs/README.md's build command writes the API reference without a warning,
the guide pages are in it, every ```python block of the guide pages runs alone, and the docstrings' examples run."""
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
                 "onlinejax/evaluation/metrics.html", "onlinejax/learners/linear/bayes.html", "search.js"):
        assert (out / page).is_file(), page
    html = (out / "onlinejax.html").read_text()
    docstring = html[html.index('<div class="docstring">'):html.index('id="mod-onlinejax-view-source"')]  # no source listing
    for heading in ("getting-started", "onlinejax-for-river-users", "onlinejax-for-scikit-learn-users", "metrics-glossary"):
        assert f'id="{heading}"' in docstring, heading
    assert "include::" not in docstring and "```" not in docstring  # the guides were included and rendered
    assert docstring.count("<table>") >= 6


def test_index_of_public_names_is_current_and_included():
    """docs/public_names.md is what ``docs/make.py --names`` writes now, and the package page includes it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_make", ROOT / "docs" / "make.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    page = make.names_index()
    assert (ROOT / "docs" / "public_names.md").read_text() == page, "run: python docs/make.py --names"
    assert ".. include:: ../docs/public_names.md" in (ROOT / "onlinejax" / "__init__.py").read_text()
    listed = re.findall(r"^- `([\w.]+)`: (.*)$", page, re.M)
    assert len(listed) > 200 and all(what.strip() for _, what in listed)  # every name says what it is
    assert "`onlinejax.bayes_linreg`" in page and "`onlinejax.learners.linear.bayes_linreg`" not in page  # listed once
    assert "linalg" not in page and "batching" not in page  # internal modules stay out


def test_public_modules_export_only_what_they_define_or_re_export():
    """Every ``__all__`` entry exists; the package exports no module object it does not list (no star imports)."""
    import importlib
    import importlib.util
    import types

    import onlinejax

    for name in onlinejax.__all__:
        importlib.import_module(f"onlinejax.{name}") if not hasattr(onlinejax, name) else None
    for mod_name in ("onlinejax", "onlinejax.learners.linear", "onlinejax.evaluation", "onlinejax.learners.gp", "onlinejax.data",
                     "onlinejax.wrappers.calibration", "onlinejax.core.base", "onlinejax.wrappers.adaptive", "onlinejax.wrappers.standardize"):
        mod = importlib.import_module(mod_name)
        assert len(set(mod.__all__)) == len(mod.__all__), mod_name
        for n in mod.__all__:
            assert hasattr(mod, n) or importlib.util.find_spec(f"{mod_name}.{n}"), f"{mod_name}.{n}"
    leaked = {n for n, v in vars(onlinejax).items() if isinstance(v, types.ModuleType) and not n.startswith("_")}
    internal = {"linalg", "batching", "special", "window", "distributions", "learner", "cores", "checks", "scaler",
                "standardize_state", "kernel_regression_state", "kernel_regression_tune", "factory_call", "tree_summary"}
    assert leaked <= set(onlinejax.__all__) | internal, leaked - set(onlinejax.__all__)


def test_guide_pages_have_self_contained_blocks():
    assert {page for page, _, _ in BLOCKS} == set(GUIDES)
    assert all(re.search(r"^(import|from) ", b, re.M) for _, _, b in BLOCKS), "every block makes its own imports"


@pytest.mark.parametrize("page, i", [(page, i) for page, i, _ in BLOCKS])
def test_guide_block_runs_alone(page, i, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    block = next(b for p, j, b in BLOCKS if (p, j) == (page, i))
    exec(compile(block, f"docs/{page}[python block {i}]", "exec"), {"__name__": f"docs_block_{i}"})


def test_docstring_examples_run():
    """Every ``>>>`` example in the package's docstrings gives the output it shows (doctest, float32)."""
    import doctest
    import importlib
    import pkgutil

    import onlinejax

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    examples = 0
    for info in pkgutil.walk_packages(onlinejax.__path__, "onlinejax."):
        module = importlib.import_module(info.name)
        for test in finder.find(module, info.name):
            examples += len(test.examples)
            runner.run(test)
    assert examples >= 10, examples  # the walk found the package's examples
    assert runner.failures == 0, f"{runner.failures} docstring examples failed (output above)"

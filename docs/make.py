"""Build the HTML API reference of onlinejax, with the guide pages, by pdoc.

Usage, from the repository root (after ``pip install -e '.[docs]'``)::

    python docs/make.py              # writes docs/build/ (open docs/build/index.html)
    python docs/make.py -o DIR       # writes DIR/

Exits with status 1, listing them, if pdoc or an import raised any warning (a
docstring pdoc cannot render, a type it cannot resolve, a guide page it
cannot include), so ``tests/test_docs.py`` keeps the reference warning-free.

Two adaptations to the library's docstrings, made here and nowhere else:

* pdoc turns Sphinx roles into code spans that it links when the name
  resolves; the ``~`` of ``:class:`~a.B``` (show the last part only) would
  stop the link, so it is dropped.
* A ``typing.NamedTuple`` built under ``from __future__ import annotations``
  gets a ``__new__`` whose ``__module__`` is ``namedtuple_<Name>``, so pdoc
  cannot resolve its field annotations and warns for each (pdoc issue #765).
  Each such ``__new__`` is pointed back at its class's module before pdoc
  reads it, in this process only.
"""
from __future__ import annotations

import argparse
import importlib
import pathlib
import re
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
TILDE_ROLE = re.compile(r"(:(?:py:)?(?:func|class|meth|mod|data|attr|obj|exc|const):`)~")


def _untilde_roles(convert):
    def wrapped(docstring, docformat, source_file):
        return convert(TILDE_ROLE.sub(r"\1", docstring), docformat, source_file)

    return wrapped


def _namedtuples_home(module_names) -> None:
    for name in module_names:
        mod = importlib.import_module(name)
        for obj in vars(mod).values():
            new = getattr(obj, "__new__", None)
            if (isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields")
                    and getattr(new, "__module__", "").startswith("namedtuple_")):
                new.__module__ = obj.__module__  # re-exported classes too (onlinejax.combination)


def build(output: pathlib.Path) -> list:
    """Render the reference into ``output``; return the warnings raised (as ``warnings.WarningMessage``)."""
    sys.path.insert(0, str(ROOT))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import pdoc
        import pdoc.docstrings
        import pdoc.extract
        import pdoc.render

        pdoc.docstrings.convert = _untilde_roles(pdoc.docstrings.convert)
        pdoc.render.configure(docformat="google", footer_text="onlinejax", show_source=True, search=True)
        _namedtuples_home(pdoc.extract.walk_specs(["onlinejax"]))
        pdoc.pdoc("onlinejax", output_directory=output)
    return caught


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", type=pathlib.Path, default=ROOT / "docs" / "build",
                    help="output folder (default: docs/build)")
    out = ap.parse_args(argv).output
    caught = build(out)
    for w in caught:
        print(f"warning: {w.category.__name__}: {w.message} ({w.filename}:{w.lineno})", file=sys.stderr)
    if caught:
        print(f"{len(caught)} warning(s): the reference in {out} is incomplete", file=sys.stderr)
        return 1
    print(f"wrote {out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

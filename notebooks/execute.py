"""Execute the notebooks in place, so that the committed copies carry their outputs.

    .venv/bin/python notebooks/execute.py [NAME.ipynb ...]     # default: every notebook here

The size follows ``ONLINEJAX_NB_SIZE`` (``small`` by default, ``full`` on a GPU). Needs the
``notebooks`` extra (``pip install -e '.[notebooks]'``).
"""
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent


def execute(path: pathlib.Path, timeout: int = 1200) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


if __name__ == "__main__":
    paths = [HERE / p for p in sys.argv[1:]] or sorted(HERE.glob("*.ipynb"))
    for p in paths:
        t0 = time.perf_counter()
        nb = execute(p)
        nbformat.write(nb, p)
        print(f"{p.name}: {time.perf_counter() - t0:.1f} s")

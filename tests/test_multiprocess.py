"""run_grid over two processes (jax.distributed, gloo collectives on CPU) equals a single-process run."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from onlinejax.data import thesis_grid
from onlinejax.evaluation import GridLayout, Scoring
from onlinejax.runner import run_grid

from conftest import tol

ROOT = pathlib.Path(__file__).resolve().parents[1]
# d = 1: 5 streams (two chunks of 2 streams per device, the second padded); d = 2: 2 streams
NAMES = ["SYNTH_ND_NCD_150_1_100_1_33", "SYNTH_ND_CD_150_1_10_1_11", "SYNTH_D_NCD_150_1_10_3_12",
         "SYNTH_D_CD_150_1_10_3_23", "SYNTH_ND_NCD_150_1_10_0_22", "SYNTH_ND_NCD_150_2_10_3_11",
         "SYNTH_D_CD_150_2_50_3_24"]

pytestmark = pytest.mark.float32_only  # the runner's processes; rows are compared to one process in float32

# each process: join the run, make the streams, run the grid; write its table and the stream rows it read
WORKER = """
import json, sys
from onlinejax.evaluation.runtime import initialize_distributed

pid, port, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
initialize_distributed(f"127.0.0.1:{port}", num_processes=2, process_id=pid, cpu_devices=1,
                       initialization_timeout=60)
import jax, numpy as np
from test_multiprocess import NAMES, Recorded, learners
from onlinejax.data import thesis_grid
from onlinejax.evaluation import GridLayout, Scoring
from onlinejax.runner import run_grid


groups = [g._replace(X=Recorded(g.X), Y=Recorded(g.Y)) for g in thesis_grid(jax.random.key(1), NAMES)]
res = run_grid(learners(), groups, scoring=Scoring(stable_window=40), layout=GridLayout(chunk_size=2), progress=False)
read = {str(g.X.shape[2]): sorted(g.X.read | g.Y.read) for g in groups}
devices = [len(jax.devices()), len(jax.local_devices())]
try:  # only the other process's device: refused before anything runs
    run_grid(learners(), groups, layout=GridLayout(devices=[d for d in jax.devices() if d.process_index != pid]),
             progress=False)
except ValueError as e:
    refused = str(e)
with open(path, "w") as f:
    json.dump({"rows": res.rows, "compile": len(res.compile_seconds), "read": read, "devices": devices,
               "refused": refused}, f)
"""


class Recorded:
    """A ``[S, ...]`` array that records which streams (rows) were read from it."""

    def __init__(self, a):
        self.a, self.shape, self.read = np.asarray(a), tuple(a.shape), set()

    def __getitem__(self, index):
        self.read |= set(range(*index.indices(self.shape[0])))
        return self.a[index]


def learners():
    from onlinejax.learners.linear import bayes_linreg, windowed_bayes_linreg
    from onlinejax.core.registry import grid_learner

    return [grid_learner("blr", "linear", lambda d: bayes_linreg(d, alpha=1e-2, beta=1e-2, forgetting=0.99),
                         hyper={"alpha": [1e-3, 1.0]}),
            grid_learner("wblr", "windowed", lambda d: windowed_bayes_linreg(d, 32, alpha=1e-2, beta=1e-2))]


def _gloo() -> bool:
    try:
        from jax._src.lib import _jax
    except ImportError:  # pragma: no cover - older or newer layouts
        return False
    return hasattr(_jax, "make_gloo_tcp_collectives")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path) -> list:
    """Two worker processes (one CPU device each); their outputs."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")]))
    port, paths = _free_port(), [tmp_path / f"p{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(i), str(port), str(paths[i])], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    try:
        logs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]
    return [json.loads(p.read_text()) for p in paths]


@pytest.mark.skipif(not _gloo(), reason="this jaxlib has no gloo CPU collectives (jax.distributed on CPU)")
@pytest.mark.slow  # 58 s: two JAX processes compile the same programs; with the slow checks, for the CI budget
def test_two_processes_give_the_single_process_table(tmp_path):
    p0, p1 = _launch(tmp_path)
    assert p0["devices"] == [2, 1]
    assert p0["refused"] == "layout.devices: all belong to process 1, not this one (0)", p0["refused"]
    # each process read only its own device's streams of each chunk (2 per device; past the end: the last stream)
    assert p0["read"] == {"1": [0, 1, 4], "2": [0, 1]} and p1["read"] == {"1": [2, 3, 4], "2": [1]}
    # the same table on both, timings included (the slower process's); as text, so NaN equals NaN
    assert json.dumps(p0["rows"]) == json.dumps(p1["rows"]) and p0["compile"] == p1["compile"]
    ref = run_grid(learners(), thesis_grid(jax.random.key(1), NAMES), scoring=Scoring(stable_window=40),
                   layout=GridLayout(chunk_size=2), progress=False)
    assert p0["compile"] == len(ref.compile_seconds) == 4
    assert [(r["learner"], r["stream"]) for r in p0["rows"]] == [(r["learner"], r["stream"]) for r in ref.rows]
    assert len(ref.rows) == 3 * len(NAMES)
    for a, b in zip(p0["rows"], ref.rows):
        assert {k: v for k, v in a.items() if not isinstance(v, float)} == {
            k: v for k, v in b.items() if not isinstance(v, float)}
        for k in a:
            if k not in ("atpi", "drmax", "compile_s") and isinstance(a[k], float):
                np.testing.assert_allclose(a[k], b[k], rtol=tol(1e-12, 1e-6), equal_nan=True,
                                           err_msg=f"{a['learner']} {a['stream']} {k}")
        assert a["atpi"] > 0 and a["compile_s"] > 0

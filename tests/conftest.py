import os
import shutil
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

X64 = bool(jax.config.jax_enable_x64)
DTYPE = jnp.zeros(()).dtype

# The tests compare module-level cores (and their own jnp products) with float64 references at
# float32 tolerances. A Learner's functions fix their precision themselves (base.full_precision,
# checked on every backend in test_base.py); the cores follow JAX's default, which on NVIDIA GPUs
# is TensorFloat-32, so there the whole session runs at full float32 precision (on a CPU every
# precision computes the same products).
if jax.default_backend() != "cpu":
    jax.config.update("jax_default_matmul_precision", "highest")


# One persistent compilation cache per test run, shared by the xdist workers (which inherit the
# controller's environment) and the subprocesses they start: the suite builds the same learners in many
# files, and each build is a new jit function whose identical executable would otherwise be compiled again.
# A fresh directory each run, removed by the process that made it, so no run's timings depend on another's.
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="onlinejax-tests-")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.3"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
for _key, _cast in (("jax_compilation_cache_dir", str), ("jax_persistent_cache_min_compile_time_secs", float),
                   ("jax_persistent_cache_min_entry_size_bytes", int)):
    if _key.upper() in os.environ:  # jax read them at import if they were set before; set them now in any case
        jax.config.update(_key, _cast(os.environ[_key.upper()]))


#: xdist's report of a test whose worker process died; no assertion or exception message matches it.
WORKER_CRASH = "worker .* crashed while running"


def pytest_configure(config):
    """A test whose xdist worker died runs once more; an ordinary failure never does.

    Full runs on 2-core machines lose about one worker per run to a segmentation fault in libgcc's
    unwinder under a C++ throw in jaxlib (a freed JIT object's unwind table still registered), on a
    different test each time (benchmarks/RESULTS.md, "Worker crashes in the test suite"). With
    pytest-rerunfailures installed (the test extra), unless reruns were asked for or ``--pdb`` is on:
    one rerun, only for crashes (``--only-rerun`` matches no ordinary failure; a crash is rerun
    whatever it says), and the summary lists the rerun tests.
    """
    if (config.pluginmanager.hasplugin("rerunfailures") and config.getoption("reruns") is None
            and not config.getini("reruns") and not config.option.usepdb):
        config.option.reruns = 1
        config.option.only_rerun = [WORKER_CRASH]
        config.option.reportchars = (config.option.reportchars or "") + "R"


def pytest_sessionfinish(session, exitstatus):
    """The process that made the run's compilation cache (the controller under xdist) removes it."""
    if _OWN_CACHE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def tol(f64: float, f32: float) -> float:
    """Dtype-aware tolerance: the first under float64, the second under float32."""
    return f64 if X64 else f32


def pytest_collection_modifyitems(config, items):
    """The float64 run leaves out the ``float32_only`` tests (CI runs the suite once per dtype)."""
    if not X64:
        return
    skip = pytest.mark.skip(reason="float32_only: runs in the float32 run")
    for item in items:
        if item.get_closest_marker("float32_only") is not None:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)

#!/usr/bin/env bash
# The GPU checks of benchmarks/RESULTS.md ("On a GPU") in one command, for a machine with an NVIDIA GPU
# and JAX's CUDA wheels (pip install -e '.[cuda]', or an image that has jax with its CUDA plugin).
#
# Run from the repository root:  OUT=/tmp/gpu bash benchmarks/gpu.sh [step ...]
# Steps (default: all, in this order): env tests grid gp bayes tune_every notebook. Each step has a time limit,
# writes its whole log to $OUT/<step>.log and prints its exit status, its seconds and its log's tail.
# PY (default python3) runs everything; the repository is put on PYTHONPATH, so an image's own jax
# is used as it is. River, for the baselines, may be installed from wheels in $WHEELS.
set -u
OUT=${OUT:-/tmp/onlinejax-gpu}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${WHEELS:-}" ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/onlinejax-site "$WHEELS"/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/onlinejax-site"
fi

step() {  # step NAME SECONDS COMMAND...
    local name=$1 secs=$2 t0 rc
    shift 2
    echo "== $name: $*"
    t0=$(date +%s)
    timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "-- $name: rc=$rc, $(($(date +%s) - t0)) s"
    tail -n "${TAIL:-25}" "$OUT/$name.log" | cut -c1-240
}

run_env() {
    step env 60 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv; \
        $PY -c 'import jax, jaxlib; print(\"jax\", jax.__version__, jax.devices(), jax.default_backend())'"
}
run_tests() {  # float32 on the GPU: the learners' numerics and the grid runner (TAIL shows the failures)
    TAIL=40 step tests "${TESTS_S:-400}" $PY -m pytest -p no:cacheprovider -o addopts= -m "not slow" -n 8 -v -rfE \
        tests/test_base.py tests/test_linalg.py tests/test_bayes.py tests/test_windowed.py tests/test_gp.py \
        tests/test_gp_anatomy.py tests/test_kernel_regression.py tests/test_adaptive.py tests/test_grid_runner.py
    grep -c " PASSED" "$OUT/tests.log" | sed 's/^/passed: /'
    grep -E "^(FAILED|ERROR) " "$OUT/tests.log" | cut -c1-200 | head -40
}
# the state machines with the runner's TunePlan(every=32): with the thesis's rule (GRID_ARGS=) the vmapped GP
# machines tune on almost every item and the grid does not finish in a lease (RESULTS.md, "On a GPU")
run_grid() { TAIL=30 step grid "${GRID_S:-300}" $PY benchmarks/grid.py ${GRID_ARGS---tune-every 32}; }
run_gp() { step gp "${GP_S:-90}" $PY benchmarks/gp_window.py --skip-grid --repeats 3; }
run_bayes() { step bayes "${BAYES_S:-120}" $PY benchmarks/bayes_linreg.py; }
run_tune_every() { step tune_every "${TUNE_EVERY_S:-200}" $PY benchmarks/tune_every.py; }
run_notebook() {
    ONLINEJAX_NB_SIZE=full step notebook "${NB_S:-300}" $PY notebooks/execute.py notebooks/01_gpu_benchmark.ipynb
}

for s in ${@:-env tests grid gp bayes tune_every notebook}; do
    "run_$s"
done

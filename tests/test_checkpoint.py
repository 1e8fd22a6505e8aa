"""Checkpoints: stop after item k, save, load in a new process, continue == the uninterrupted run, bit for bit."""
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from onlinejax.core.checkpoint import load_checkpoint, save_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.float32_only  # resuming is bitwise in either dtype; checked once

SETUP = """
import jax, jax.numpy as jnp, numpy as np
from onlinejax.wrappers.adaptive import adaptive
from onlinejax.wrappers.combination import combine, fixed_share, mean_correction
from onlinejax.evaluation.metrics import prequential
from onlinejax.learners.kernel_regression import kernel_regression
from onlinejax.learners.linear import bayes_linreg

# members of different state types, a state machine and a weight rule: a deep, mixed pytree
learner = combine([adaptive(kernel_regression(2, 16), 16), bayes_linreg(2, alpha=1.0, beta=25.0, forgetting=0.95)],
                  fixed_share(0.05), recalibrate=0.9, correct=mean_correction())
acc = prequential(0.95)
dt = jnp.zeros(()).dtype
r = np.random.default_rng(0)
X = r.uniform(-1, 1, (240, 2)).astype(dt)
Y = (np.where(np.arange(240) < 120, X @ [1.0, -2.0], np.sin(3 * X[:, 0])) + 0.1 * r.normal(size=240)).astype(dt)

@jax.jit
def one(state, m, x, y):  # one compiled call per item, the same executable in both processes
    state, p = learner.step(state, x, y)
    return state, acc.update(m, y, p, jnp.ones((), dt)), p.mean

def run(state, m, lo, hi):
    means = []
    for i in range(lo, hi):
        state, m, mean = one(state, m, X[i], Y[i])
        means.append(np.asarray(mean))
    return state, m, np.asarray(means)
"""


def test_resume_in_a_new_process_is_bitwise_identical(tmp_path):
    ns: dict = {}
    exec(SETUP, ns)
    learner, acc, dt = ns["learner"], ns["acc"], ns["dt"]
    s_full, m_full, means_full = ns["run"](learner.init(), acc.init(dt), 0, 240)
    s_k, m_k, _ = ns["run"](learner.init(), acc.init(dt), 0, 150)
    path = save_checkpoint(tmp_path / "ck", (s_k, m_k))
    code = SETUP + textwrap.dedent(f"""
        from onlinejax.core.checkpoint import load_checkpoint
        s, m = load_checkpoint({path!r}, (learner.init(), acc.init(dt)))
        s, m, means = run(s, m, 150, 240)
        np.savez({str(tmp_path / "out.npz")!r}, means=means, mae=np.asarray(acc.value(m)["mae"]),
                 icr=np.asarray(acc.value(m)["icr"]), w=np.asarray(s.log_weights))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["means"], means_full[150:])
    np.testing.assert_array_equal(out["w"], np.asarray(s_full.log_weights))
    assert out["mae"] == np.asarray(acc.value(m_full)["mae"]) and out["icr"] == np.asarray(acc.value(m_full)["icr"])
    # the checkpoint moved the weights and the state machine: the comparison is not trivial
    assert int(s_k.members[0].n_tunes) >= 1 and np.ptp(np.exp(np.asarray(s_full.log_weights))) > 0.05


def test_mismatched_template_is_refused(tmp_path):
    from onlinejax.learners.kernel_regression import kernel_regression
    from onlinejax.learners.linear import bayes_linreg

    s = bayes_linreg(2).init()
    path = save_checkpoint(tmp_path / "blr.npz", s)
    back = load_checkpoint(path, bayes_linreg(2).init())
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(s)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="structure"):
        load_checkpoint(path, kernel_regression(2, 8).init())
    with pytest.raises(ValueError, match="leaf"):
        load_checkpoint(path, bayes_linreg(3).init())
    with pytest.raises(ValueError, match="PRNG"):
        save_checkpoint(tmp_path / "k.npz", {"key": jax.random.key(0)})


@pytest.mark.parametrize("corrupt", [lambda b: b"", lambda b: b[: len(b) // 2], lambda b: b"hello world",
                                     lambda b: b[:200] + bytes([b[200] ^ 255]) + b[201:]],
                         ids=["empty", "truncated", "text", "bit-flip"])
def test_corrupt_file_is_a_value_error_naming_path(tmp_path, corrupt):
    """Not BadZipFile / EOFError / numpy's misleading "pickled data" message."""
    from onlinejax.learners.linear import bayes_linreg

    s = bayes_linreg(2).init()
    good = save_checkpoint(tmp_path / "blr.npz", s)
    bad = tmp_path / "bad.npz"
    with open(good, "rb") as f:
        bad.write_bytes(corrupt(f.read()))
    with pytest.raises(ValueError, match="^path: .*not a readable checkpoint"):
        load_checkpoint(bad, s)


def test_npz_not_written_by_save_checkpoint_is_refused(tmp_path):
    np.savez(tmp_path / "other.npz", a=np.ones(2))
    with pytest.raises(ValueError, match="^path: .*__treedef__"):
        load_checkpoint(tmp_path / "other.npz", {"a": jnp.ones(2)})


def test_a_template_of_another_configuration_is_refused(tmp_path):
    """bounds='bayes' and 'asymptotic' share one array layout: the state's static options tell them
    apart without being asked, and meta checks what the user adds."""
    from onlinejax.learners.linear import WindowedOptions, windowed_bayes_linreg

    bayes, asym = windowed_bayes_linreg(2, 5), windowed_bayes_linreg(2, 5, options=WindowedOptions(bounds="asymptotic"))
    s = bayes.learn(bayes.init(), np.ones((3, 2)), np.arange(3.0))
    path = save_checkpoint(tmp_path / "w.npz", s, meta={"bounds": "bayes"})
    back = load_checkpoint(path, bayes.init(), meta={"bounds": "bayes"})
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(s)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="(?s)^path: .*structure differs.*bounds"):
        load_checkpoint(path, asym.init())
    with pytest.raises(ValueError, match="^meta: .*bayes"):
        load_checkpoint(path, bayes.init(), meta={"bounds": "asymptotic"})
    plain = save_checkpoint(tmp_path / "plain.npz", s)
    with pytest.raises(ValueError, match="^meta: .*no meta"):
        load_checkpoint(plain, bayes.init(), meta={"bounds": "bayes"})
    with pytest.raises(ValueError, match="^meta: "):
        save_checkpoint(tmp_path / "bad.npz", s, meta={"f": object()})
    assert not (tmp_path / "bad.npz").exists()
    with pytest.raises(ValueError, match="^meta: "):
        save_checkpoint(tmp_path / "bad.npz", s, meta="bayes")

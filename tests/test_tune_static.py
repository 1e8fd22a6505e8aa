"""Every learner's ``tune`` is one static program: no ``while`` primitive (a GPU would pay a host round trip per
iteration, and under ``vmap`` every stream would wait for the slowest)."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from onlinejax import zoo
from onlinejax.learners.gp import GPTuneOptions, gp_window
from onlinejax.learners.linear import BayesOptions, bayes_linreg

pytestmark = pytest.mark.float32_only  # a property of the traced program, not of the dtype


def _primitives(jaxpr) -> set:
    """Names of every primitive in ``jaxpr`` as printed, sub-jaxprs (scan, cond, pjit, custom rules) included."""
    return set(re.findall(r"= ([a-z_]+)\[", str(jaxpr))) | set(re.findall(r"= ([a-z_]+) ", str(jaxpr)))


def _tune_primitives(lrn, state) -> set:
    return _primitives(jax.make_jaxpr(lrn.tune)(state))


def test_the_check_sees_a_nested_while():
    f = jax.jit(lambda x: jax.lax.cond(x > 0, lambda x: jax.lax.while_loop(lambda v: v < 3, lambda v: v + 1, x),
                                       lambda x: x, x))
    assert "while" in _primitives(jax.make_jaxpr(f)(1.0))


_TUNED = [n for n, gl in zoo.configurations().items()
          if ("WS32" in n or n.startswith("Recommended") or n.startswith("Combination_EWASE_FF0.98"))]


@pytest.mark.parametrize("name", _TUNED)
def test_a_configurations_tune_has_no_while(name):
    gl = zoo.configurations()[name]
    lrn = gl.make(2)
    if lrn.tune is None:
        pytest.skip(f"{name} has no tune")
    assert "while" not in _tune_primitives(lrn, lrn.init(**(gl.init_kwargs or {})))


@pytest.mark.parametrize("method", ["lbfgs", "adam"])
def test_gp_tune_is_static_for_either_method_and_after_learning(method):
    lrn = gp_window(3, 16, tune_options=GPTuneOptions(method=method))
    s = lrn.init()
    rng = np.random.default_rng(0)
    for x in rng.normal(size=(20, 3)):
        s = lrn.learn(s, x, float(np.sin(x[0])))
    prims = _tune_primitives(lrn, s)
    assert "while" not in prims and "scan" in prims  # the fixed-count iterations
    assert jnp.all(jnp.isfinite(jnp.asarray(jax.jit(lrn.tune)(s).params.log_lengthscale)))


def test_evidence_tune_is_static():
    lrn = bayes_linreg(3, options=BayesOptions(tunable=True))
    assert "while" not in _tune_primitives(lrn, lrn.init())

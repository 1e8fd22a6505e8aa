"""Bayesian online changepoint detection (Adams & MacKay 2007, arXiv:0710.3742) as a learner wrapper.

The stream is split into runs by unknown changepoints; after each change the
model starts afresh from its prior. :func:`bocpd` keeps a posterior over the
*run length* ``r_t`` (items since the last change, the current one included)
and, for each run-length hypothesis, its own copy of an inner learner's state
trained on that run's items only. With a constant hazard ``h`` (the prior
probability of a change at any item):

* **predict** (A&M eq. 1 with the change-or-grow prior, eq. 2–3): the
  predictive of ``y_t`` is the mixture

  ``p(y_t | x_t, data) = h·p₀(y_t | x_t) + (1 - h)·Σ_r w_r·p_r(y_t | x_t)``

  of the prior's predictive (a change now) and each run's predictive, with
  ``w_r = P(r_{t-1} = r | data)``; every component is the inner learner's
  predictive; the result is a :class:`~onlinejax.wrappers.combination.MixturePrediction`
  of Gaussians (moment-matched when the inner predictive is neither Gaussian nor
  Student-t) or, for Student-t runs, a :class:`~onlinejax.core.student_mixture.StudentTMixture`
  — uncertainty that widens at a change instead of a hard reset.
* **learn** (A&M eq. 3–4 and the run-length recursion of Algorithm 1): the
  joint of each hypothesis and ``y_t`` is its mixture weight times its
  predictive density; the change hypothesis's state learns ``(x_t, y_t)`` from
  the prior, each run's state learns it on top of its run; the posterior is
  the joints normalised (their sum is the evidence ``p(y_t | data)``).

Static shapes: the ``R`` most probable hypotheses are kept (``lax.top_k`` of
the ``R + 1`` candidates after each item), so memory and time are ``R`` inner
states and ``R + 1`` inner steps per item. Nothing is pruned while ``t < R``,
and the recursion is then exact (tested against a float64 NumPy reference).
The hazard is an array in the state, stored as its logit, so it vmaps and
differentiates (:func:`onlinejax.evaluation.tune_prequential` can tune it).

The module's anatomy: :class:`BOCPDState`; :func:`init`; :func:`components`
(the predictive mixture's parts); :func:`predict_one`, :func:`learn_one`, :func:`step_one` (both, each hypothesis predicting once);
:func:`changepoint_probability` (pass it as ``record=`` to
:func:`~onlinejax.evaluation.progressive_validation`); the factory
:func:`bocpd` binds the inner learner and ``R`` to them.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ..core.base import (Learner, LearnerCores, StudentTPrediction, check_in_range, check_int, describe_factory, keep_if,
                         make_learner, state_dtype)
from .combination.distribution import MixturePrediction, mixture_prediction
from ..core.student_mixture import StudentTMixture

Array = jax.Array

__all__ = ["BOCPDState", "init", "components", "predict_one", "learn_one", "step_one", "changepoint_probability",
           "expected_run_length", "bocpd", "ReexpressRuns", "ScaleRunsState", "scale_runs_init", "scale_runs_update",
           "recent_change_probability"]


class BOCPDState(NamedTuple):
    """State of :func:`bocpd` with ``R`` run-length hypotheses.

    Attributes:
      runs: the inner learner's state with every leaf stacked ``[R, ...]``: hypothesis
        ``i``'s posterior from the items of its run.
      prior: the inner learner's initial state (a change starts from it).
      log_weights: ``[R]`` log run-length posterior ``log P(r_t = run_length_i | data)``;
        ``-inf`` for unused slots.
      run_length: ``[R]`` int32 items in each hypothesis's run.
      logit_hazard: ``[]`` ``log(h / (1 - h))`` of the constant hazard ``h``.
      cp_prob: ``[]`` posterior probability that a change happened at the last
        learned item (``P(r_t = 1 | data)``).
      n_seen, n_skipped: ``[]`` int32 counters.
    """

    runs: Any
    prior: Any
    log_weights: Array
    run_length: Array
    logit_hazard: Array
    cp_prob: Array
    n_seen: Array
    n_skipped: Array


def init(learner: Learner, n_runs: int, hazard=0.01, **inner_kwargs) -> BOCPDState:
    """Every hypothesis slot holds the prior; the run length is 0 with probability 1.

    Args:
      learner: the inner learner (static).
      n_runs: ``R`` hypotheses kept (static).
      hazard: ``h ∈ (0, 1)``, the prior probability of a change at each item (an array: vmaps).
      **inner_kwargs: passed to ``learner.init`` (e.g. ``alpha``, ``beta``, ``dtype``).
    """
    check_in_range(hazard, "hazard", 0.0, 1.0, hi_open=True)
    prior = learner.init(**inner_kwargs)
    dt = state_dtype(prior)
    runs = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (n_runs,) + jnp.shape(a)), prior)
    h = jnp.asarray(hazard, dt)
    zero_i = jnp.zeros((), jnp.int32)
    return BOCPDState(runs=runs, prior=prior, log_weights=jnp.full((n_runs,), -jnp.inf, dt).at[0].set(0.0),
                      run_length=jnp.zeros((n_runs,), jnp.int32), logit_hazard=jnp.log(h) - jnp.log1p(-h),
                      cp_prob=jnp.zeros((), dt), n_seen=zero_i, n_skipped=zero_i)


def _inner_predictions(state: BOCPDState, x: Array, learner: Learner):
    """The inner learner's predictions for ``x``: the prior's (a change now) and each run's (``[R]`` leaves)."""
    return learner.predict(state.prior, x), jax.vmap(learner.predict, in_axes=(0, None))(state.runs, x)


def _mixture_parts(state: BOCPDState, p0, pr) -> tuple[Array, Array, Array]:
    """:func:`components` from the inner predictions ``p0`` (the prior's) and ``pr`` (the runs')."""
    lw = jnp.concatenate([jax.nn.log_sigmoid(state.logit_hazard)[None],
                          jax.nn.log_sigmoid(-state.logit_hazard) + state.log_weights])
    means = jnp.concatenate([jnp.reshape(p0.mean, (1,)), pr.mean])
    vars = jnp.concatenate([jnp.reshape(p0.var, (1,)), pr.var])
    return lw, means, vars


def components(state: BOCPDState, x: Array, *, learner: Learner) -> tuple[Array, Array, Array]:
    """The predictive mixture's parts for ``x: [d]``: a change now, then each hypothesis going on.

    Returns:
      ``(log_weights [R + 1], means [R + 1], vars [R + 1])``: ``log h`` with the prior's
      predictive, then ``log(1 - h) + log w_r`` with run ``r``'s predictive (A&M eq. 3 with the
      constant hazard's change-or-grow prior).
    """
    return _mixture_parts(state, *_inner_predictions(state, x, learner))


def _issued(lw: Array, means: Array, vars: Array, p0, pr) -> MixturePrediction | StudentTMixture:
    """The predictive mixture: of the runs' Student-t's when they are Student-t, else of Gaussians (their moments)."""
    if isinstance(p0, StudentTPrediction):
        return StudentTMixture(lw - jax.nn.logsumexp(lw), means,
                               jnp.concatenate([jnp.reshape(p0.scale, (1,)), pr.scale]),
                               jnp.concatenate([jnp.reshape(p0.df, (1,)), pr.df]))
    return mixture_prediction(lw, means, vars)


def predict_one(state: BOCPDState, x: Array, *, learner: Learner) -> MixturePrediction | StudentTMixture:
    """``p(y | x, data)``: the mixture over a change now and the kept run lengths (module doc)."""
    p0, pr = _inner_predictions(state, x, learner)
    return _issued(*_mixture_parts(state, p0, pr), p0, pr)


def learn_one(state: BOCPDState, x: Array, y: Array, *, learner: Learner) -> BOCPDState:
    """The run-length recursion for one item (``x: [d]``, ``y: []``), pruned to the ``R`` most probable.

    Joints ``a_0 = h·p₀(y)`` (a change: the prior learns the item, run length 1) and
    ``a_{r+1} = (1 - h)·w_r·p_r(y)`` (run ``r`` learns it and grows); the posterior is
    ``a / Σa`` over the ``R`` largest (A&M Algorithm 1, steps 3–7). An item no hypothesis
    can explain (all joints ``-inf`` or NaN) leaves the state unchanged but ``n_skipped``.

    ``update`` is this too, whatever prediction it is given: the recursion weighs the hypotheses
    the state holds now, by their own predictive densities of ``y`` (after other items were learned,
    or behind a wrapper that hands on only the issued mixture's moments, the issued components are not
    those hypotheses'); the wrappers around it judge the issued prediction.
    """
    return step_one(state, x, y, learner=learner)[0]


def step_one(state: BOCPDState, x: Array, y: Array, *, learner: Learner
             ) -> tuple[BOCPDState, MixturePrediction | StudentTMixture]:
    """:func:`predict_one`, then :func:`learn_one` on the same inner predictions (each hypothesis predicts once).

    Each hypothesis learns the item by its ``update`` with the prediction it made
    (:attr:`~onlinejax.core.base.Learner.update`), so an inner wrapper judges that prediction too.

    Args:
      state: :class:`BOCPDState`; x: ``[d]``; y: ``[]``; learner: the inner learner (static).
    Returns:
      ``(state after the item, the mixture prediction of y made before it)`` (``R + 1`` components).
    """
    p0, pr = _inner_predictions(state, x, learner)
    lw, means, vars = _mixture_parts(state, p0, pr)
    # each hypothesis's own predictive density (a Student-t run model's heavy tails too)
    joint = lw + jnp.concatenate([jnp.reshape(p0.log_prob(y), (1,)), pr.log_prob(y)])
    joint = jnp.where(jnp.isnan(joint), -jnp.inf, joint)
    grown = jax.vmap(learner.update, in_axes=(0, None, None, 0))(state.runs, x, y, pr)
    fresh = learner.update(state.prior, x, y, p0)
    cand = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), fresh, grown)
    length = jnp.concatenate([jnp.ones((1,), jnp.int32), state.run_length + 1])
    n_runs = state.log_weights.shape[0]
    top, idx = jax.lax.top_k(joint, n_runs)
    log_evidence = jax.nn.logsumexp(joint)
    ok = jnp.isfinite(log_evidence)
    new = state._replace(runs=jax.tree_util.tree_map(lambda a: a[idx], cand),
                         log_weights=top - jax.nn.logsumexp(top), run_length=length[idx],
                         cp_prob=jnp.exp(joint[0] - log_evidence), n_seen=state.n_seen + 1)
    return keep_if(ok, new, state._replace(n_skipped=state.n_skipped + 1)), _issued(lw, means, vars, p0, pr)


def changepoint_probability(state: BOCPDState) -> Array:
    """``[]`` ``P(a change at the last learned item | data)``; a ``record=`` function for
    :func:`~onlinejax.evaluation.progressive_validation` (pass this same object: no recompiles)."""
    return state.cp_prob


def expected_run_length(state: BOCPDState) -> Array:
    """``[]`` posterior mean run length ``Σ_r w_r·r`` over the kept hypotheses."""
    return jnp.sum(jnp.exp(state.log_weights) * state.run_length.astype(state.log_weights.dtype))


@describe_factory
def bocpd(learner: Learner, n_runs: int = 32, *, hazard=0.01) -> Learner:
    """Bayesian online changepoint detection over any learner (Adams & MacKay 2007; module doc).

    Args:
      learner: the inner learner, e.g. :func:`~onlinejax.learners.linear.bayes_linreg` (each run-length
        hypothesis keeps its own state, so a conjugate, non-windowed learner is the natural choice);
        :func:`~onlinejax.learners.linear.nig_linreg` for runs that learn their noise level (and, with its
        ``trend=`` and ``forgetting=``, their level and slope: a series that wanders or trends is then
        not read as a stream of changes). A run's clock starts at its start; an item :func:`bocpd`
        skips (non-finite) does not reach the runs.
      n_runs: ``R >= 2`` hypotheses kept (static): memory ``R`` inner states, time ``R + 1``
        inner steps per item. The ``R`` most probable run lengths are kept, not the ``R``
        shortest, so ``R`` need not cover the expected run length ``1/h``: a few tens
        score as hundreds do (``benchmarks/bocpd_runs.py``); below about 8 the log score
        starts to fall where the run-length posterior is diffuse.
      hazard: default ``h ∈ (0, 1)`` for ``init``; an array in the state (``init(hazard=)``).
    Returns:
      A learner with ``init(hazard=, **inner_init_kwargs)``, whose ``predict`` returns a
      :class:`~onlinejax.core.student_mixture.StudentTMixture` of the runs' predictives when they are
      Student-t (:func:`~onlinejax.learners.linear.nig_linreg`; its CRPS sums quadratures over the ``O(R²)``
      pairs of runs), else a :class:`~onlinejax.wrappers.combination.MixturePrediction` of Gaussians. Non-finite
      items are skipped
      (``n_skipped``); record the changepoint probabilities with
      ``progressive_validation(..., record=changepoint_probability)``.

    Example::

        learner = bocpd(bayes_linreg(2, alpha=1.0, beta=25.0), n_runs=64, hazard=1 / 200)
        res = progressive_validation(learner, learner.init(), X, Y, record=changepoint_probability)
        res.records      # [n] P(change at item t | items 1..t)
    """
    if not isinstance(learner, Learner):
        raise TypeError(f"learner: expected a Learner, got {type(learner).__name__}")
    R = check_int(n_runs, "n_runs", 2)
    check_in_range(hazard, "hazard", 0.0, 1.0, hi_open=True)

    def _init(hazard=hazard, **inner_kwargs):
        return init(learner, R, hazard, **inner_kwargs)

    return make_learner(init=_init, learn_one=partial(learn_one, learner=learner),
                        predict_one=partial(predict_one, learner=learner), n_features=learner.n_features,
                        cores=LearnerCores(step_one=partial(step_one, learner=learner)), skip_nonfinite=True)


class ReexpressRuns(NamedTuple):
    """A standardisation's ``reexpress`` for :func:`bocpd`: the inner learner's, applied to every run.

    ``ReexpressRuns(reexpress)(state, r, c, g, h)`` carries each hypothesis's posterior into the new
    coordinates (:func:`~onlinejax.wrappers.standardize.standardize`'s ``reexpress``); the prior stays as it is,
    so a change starts from the prior's guess in today's standardised units. A value (equal for equal
    ``reexpress``), so learners built with it compare and hash equal.

    Attributes:
      reexpress: the inner learner's ``reexpress(state, r [d], c [d], g [], h []) -> state`` (e.g.
        :class:`onlinejax.learners.linear.nig.NIGReexpress`).
    """

    reexpress: Callable

    def __call__(self, state: BOCPDState, x_ratio: Array, x_shift: Array, y_ratio: Array, y_shift: Array) -> BOCPDState:
        runs = jax.vmap(self.reexpress, in_axes=(0, None, None, None, None))(state.runs, x_ratio, x_shift, y_ratio,
                                                                            y_shift)
        return state._replace(runs=runs)


# --------------------------------------------------------------------------
# A change in the residuals' scale: the state machine's BOCPD drift detector
# --------------------------------------------------------------------------
class ScaleRunsState(NamedTuple):
    """Run-length posterior of standardised residuals ``z ~ N(0, s²)`` whose variance ``s²`` changes.

    Each hypothesis has the conjugate posterior ``s² ~ InvGamma(a, b)`` of its run (Murphy 2007,
    "Conjugate Bayesian analysis of the Gaussian distribution", known mean): ``a ← a + ½``,
    ``b ← b + z²/2`` per item, predictive ``z ~ t_{2a}(0, b/a)``.

    Attributes:
      log_weights: ``[R]`` log run-length posterior (``-inf``: an unused slot).
      shape, rate: ``[R]`` each run's ``a``, ``b``.
      run_length: ``[R]`` int32.
    """

    log_weights: Array
    shape: Array
    rate: Array
    run_length: Array


#: The prior of a new run's residual variance: ``InvGamma(1, 1)`` (predictive ``t₂(0, 1)``: a calibrated
#: scale, heavy tails).
SCALE_PRIOR = (1.0, 1.0)


def scale_runs_init(n_runs: int, dtype) -> ScaleRunsState:
    """One run of length 0 at the prior; ``n_runs = R`` slots (static)."""
    a0, b0 = SCALE_PRIOR
    return ScaleRunsState(jnp.full((n_runs,), -jnp.inf, dtype).at[0].set(0.0), jnp.full((n_runs,), a0, dtype),
                          jnp.full((n_runs,), b0, dtype), jnp.zeros((n_runs,), jnp.int32))


def scale_runs_update(s: ScaleRunsState, z2: Array, hazard) -> ScaleRunsState:
    """The run-length recursion (A&M Algorithm 1) for one standardised squared residual ``z2: []``."""
    a0, b0 = SCALE_PRIOR
    dt = s.rate.dtype
    lh, l1h = jnp.log(jnp.asarray(hazard, dt)), jnp.log1p(-jnp.asarray(hazard, dt))
    a = jnp.concatenate([jnp.full((1,), a0, dt), s.shape])
    b = jnp.concatenate([jnp.full((1,), b0, dt), s.rate])
    # each run's inverse-gamma predictive t_{2a}(0, b/a) at |z| (symmetric)
    joint = jnp.concatenate([lh[None], l1h + s.log_weights]) + jax.scipy.stats.t.logpdf(
        jnp.sqrt(z2), 2.0 * a, 0.0, jnp.sqrt(b / a))
    joint = jnp.where(jnp.isnan(joint), -jnp.inf, joint)
    top, idx = jax.lax.top_k(joint, s.log_weights.shape[0])
    length = jnp.concatenate([jnp.ones((1,), jnp.int32), s.run_length + 1])
    new = ScaleRunsState(top - jax.nn.logsumexp(top), (a + 0.5)[idx], (b + 0.5 * z2)[idx], length[idx])
    return keep_if(jnp.isfinite(jax.nn.logsumexp(joint)), new, s)


def recent_change_probability(s: ScaleRunsState, within: int, at_least: int = 1) -> Array:
    """``[]`` posterior probability that the residuals' scale changed between ``within`` and ``at_least``
    items ago (run lengths ``at_least ≤ r ≤ within``; ``at_least > 1`` asks the change to have persisted)."""
    return jnp.sum(jnp.where((s.run_length <= within) & (s.run_length >= at_least), jnp.exp(s.log_weights), 0.0))

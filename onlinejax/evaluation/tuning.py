"""Gradient tuning of a learner's continuous hyperparameters on its prequential score.

The prequential (predict-then-learn) score of a stream (Dawid 1984; thesis
6.1) is the mean over items ``i`` of the score of the prediction made from
items ``1..i-1``, exactly what :func:`~onlinejax.evaluation.progressive_validation`
computes in one ``lax.scan``::

    S(θ) = 1/|I| Σ_{i ∈ I} s(p_θ(· | x_i, D_{<i}), y_i),    I = {i >= burn_in: item i finite}

with ``s`` the log predictive density (``score="log"``, :meth:`Prediction.log_prob`)
or minus the CRPS (``score="crps"``, :meth:`Prediction.crps`; Gneiting &
Raftery 2007, eq. 21 for a Gaussian). Every learner is a pure function of
its initial state, so ``S`` is differentiable in the hyperparameters ``θ``
that ``learner.init(**θ)`` puts into the state (a forgetting factor, prior
and noise precisions, a GP's noise, signal and lengthscale): the gradient
flows back through the whole scan. :func:`tune_prequential` follows it with
an optax optimizer, in the unconstrained coordinates ``u = T(θ)`` of a
bijection per hyperparameter (:data:`DEFAULT_TRANSFORMS`).

This is the gradient counterpart of a grid search over ``init`` values
(:func:`~onlinejax.evaluation.evaluate_streams` with ``hyper=``), which it
matches on the blog's drifting stream (``tests/test_tuning.py``); its cost
grows with the number of optimizer steps, not with a grid's size to the
power of the number of hyperparameters (``benchmarks/tune_prequential.py``).

Non-finite items: the learners skip them (:func:`onlinejax.core.base.skip_nonfinite`);
they are left out of the score, and the gradient stays finite (the skip
never feeds a NaN into the part of the computation it discards).
Integer-valued hyperparameters (a window length) and static options cannot
be tuned this way: their gradient is zero or undefined. Nor can learners whose
step runs a ``while_loop`` or :func:`~onlinejax.core.batching.cond_if_any` on
differentiated values (:func:`~onlinejax.wrappers.adaptive.adaptive`): JAX cannot
reverse-differentiate them. (The forgetting model's windup guard runs one
on values it does not differentiate, :func:`onlinejax.core.linalg.cap_variance`.)
"""
from __future__ import annotations

import warnings
from typing import Callable, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..core.base import Learner, check_int, check_positive, default_float_dtype, learnable, tree_repr
from .options import checked_record

Array = jax.Array

__all__ = [
    "Bijection",
    "BIJECTIONS",
    "DEFAULT_TRANSFORMS",
    "GradientOptions",
    "PrequentialScoring",
    "SCORES",
    "TuneResult",
    "converged",
    "prequential_score",
    "tune_prequential",
]

SCORES = ("log", "crps")


class Bijection(NamedTuple):
    """A map between a hyperparameter's domain and the real line, elementwise.

    Attributes:
      forward: constrained value -> unconstrained ``u``.
      inverse: ``u`` -> constrained value.
      domain: the domain, for messages (``"(0, inf)"``).
    """

    forward: Callable[[Array], Array]
    inverse: Callable[[Array], Array]
    domain: str


#: The bijections a name in ``transforms=`` may refer to.
BIJECTIONS = {
    "log": Bijection(jnp.log, jnp.exp, "(0, inf)"),
    "logit": Bijection(jax.scipy.special.logit, jax.nn.sigmoid, "(0, 1)"),
    "identity": Bijection(lambda v: v, lambda u: u, "(-inf, inf)"),
    "log_above_2": Bijection(lambda v: jnp.log(v - 2.0), lambda u: 2.0 + jnp.exp(u), "(2, inf)"),
}

#: Default bijection per ``init`` keyword of the library's learners: ``log``
#: for positive quantities, ``logit`` for weights of the past in ``(0, 1)``.
DEFAULT_TRANSFORMS = {
    "alpha": "log", "beta": "log",                                    # bayes_linreg, windowed_bayes_linreg
    "signal_std": "log", "noise_std": "log", "lengthscale": "log",    # gp_window (lengthscale: kernel_regression too)
    "prior_var": "log", "noise_var": "log",                           # kernel_regression, climatology; sgd_linreg
    "forgetting": "logit", "decay": "logit", "residual_forgetting": "logit",
    "hazard": "logit",                                                # bocpd: a probability per item
    "prior_precision": "log", "time_scale": "log", "lengthscales": "log",  # nig_linreg, random_feature_gp
    "prior_df": "log_above_2", "discount": "logit",                   # degrees of freedom > 2 (a variance)
}

#: :func:`tune_prequential` calls a run converged when its last tenth of the steps raised the best score
#: by at most this much: nats per item for the log score, a fraction of the mean CRPS for ``"crps"``.
CONVERGED_GAIN = {"log": 1e-3, "crps": 1e-3}


class TuneResult(NamedTuple):
    """What :func:`tune_prequential` returns.

    Attributes:
      params: ``{name: value}`` the best-scoring constrained hyperparameters met
        (a float for a scalar, else an array): pass them to ``learner.init(**params)``.
      scores: ``[steps + 1]`` the prequential score before each optimizer step
        and after the last one (averaged over the streams).
      history: ``{name: [steps + 1, ...]}`` the constrained values scored in ``scores``.
      best_step: index into ``scores`` of ``params``.
      n_nonfinite: optimizer steps whose score or gradient was not finite (skipped).
      converged: whether the last ``max(1, steps // 10)`` steps left the best score where it was,
        to :data:`CONVERGED_GAIN` (:func:`converged`); when false, more steps (or a larger
        learning rate) would likely find better hyperparameters.
      n_skipped: items with a missing (non-finite) value in ``x`` or ``y``, over every stream:
        neither learned nor scored.
    """

    params: dict
    scores: np.ndarray
    history: dict
    best_step: int
    n_nonfinite: int
    converged: bool
    n_skipped: int = 0

    def __repr__(self) -> str:  # shapes and scalar values, not every element
        return tree_repr(self)


class PrequentialScoring(NamedTuple):
    """Which prequential score, from which item (``scoring=`` of :func:`prequential_score`, :func:`tune_prequential`).

    An immutable, hashable record of static values; the defaults are the mean log predictive density
    of every item.

    Attributes:
      score: ``"log"`` (default: the mean log predictive density) or ``"crps"`` (minus the mean CRPS).
      burn_in: items ``i < burn_in`` are learned but not scored (an int >= 0, default 0).
    """

    score: str = "log"
    burn_in: int = 0

    def checked(self, name: str = "scoring") -> "PrequentialScoring":
        """The record with its values checked (``ValueError`` naming the field)."""
        if self.score not in SCORES:
            raise ValueError(f"{name}.score: must be one of {SCORES}, got {self.score!r}")
        return PrequentialScoring(self.score, check_int(self.burn_in, f"{name}.burn_in", 0))


class GradientOptions(NamedTuple):
    """The gradient ascent of :func:`tune_prequential` (``options=``): its steps and its optax optimizer.

    An immutable, hashable record; the defaults are 100 steps of ``optax.adam(0.05)``.

    Attributes:
      steps: optimizer steps (an int >= 1, default 100).
      learning_rate: the default Adam's step size (> 0; default ``None``: 0.05); give it or
        ``optimizer``, not both.
      optimizer: any ``optax.GradientTransformation`` (default ``None``: Adam). Pass the same object
        again to reuse the compiled program. A step whose score or gradient is not finite is not
        applied (counted in ``n_nonfinite``, with a warning).
    """

    steps: int = 100
    learning_rate: Optional[float] = None
    optimizer: Optional[optax.GradientTransformation] = None

    def checked(self, name: str = "options") -> "GradientOptions":
        """The record with ``steps`` an int and ``optimizer`` set (Adam at ``learning_rate``; ``ValueError`` naming the field)."""
        steps = check_int(self.steps, f"{name}.steps", 1)
        if self.optimizer is not None and self.learning_rate is not None:
            raise ValueError(f"{name}.learning_rate: give it or {name}.optimizer, not both")
        if self.optimizer is not None:
            return GradientOptions(steps, None, self.optimizer)
        lr = 0.05 if self.learning_rate is None else self.learning_rate
        check_positive(lr, f"{name}.learning_rate")
        return GradientOptions(steps, None, _adam(float(lr)))  # one Adam object per rate: one compile


def converged(scores, score: str = "log") -> bool:
    """Whether a run of prequential scores ``[steps + 1]`` (higher is better) has stopped improving.

    Converged when the best score of the last ``k = max(1, steps // 10)`` steps
    exceeds the best before them by at most :data:`CONVERGED_GAIN` ``[score]``:
    an absolute gain in nats per item for ``"log"``, a gain relative to the
    best mean CRPS for ``"crps"`` (whose unit is the targets'). Non-finite
    scores are ignored; a run without a finite score is not converged.
    """
    if score not in CONVERGED_GAIN:
        raise ValueError(f"score: must be one of {tuple(CONVERGED_GAIN)}, got {score!r}")
    s = np.asarray(scores, np.float64)
    if s.ndim != 1 or s.size < 2:
        raise ValueError(f"scores: expected a [steps + 1] array with steps >= 1, got shape {s.shape}")
    s = np.where(np.isfinite(s), s, -np.inf)
    best = s.max()
    if not np.isfinite(best):
        return False
    k = max(1, (len(s) - 1) // 10)
    tol = CONVERGED_GAIN[score] * (1.0 if score == "log" else abs(best))
    return bool(best - s[:-k].max() <= tol)


def _stream_score(learner: Learner, params, X, Y, score: str, burn_in: int, missing: bool, dtype):
    """Mean score of one stream ``X [n, d]``, ``Y [n]`` (items from ``burn_in`` on, finite ones only)."""
    state = learner.init(dtype=dtype, **params)

    def body(s, xy):
        x, y = xy
        if missing:  # the prediction at a zeroed x, so no NaN reaches the gradient
            ok = learnable(x, y)
            s_next, pred = learner.step(s, x, y)[0], learner.predict(s, jnp.where(ok, x, jnp.zeros_like(x)))
            y = jnp.where(ok, y, jnp.zeros_like(y))  # scored with weight 0
        else:
            ok = jnp.ones((), bool)
            s_next, pred = learner.step(s, x, y)
        item = pred.log_prob(y) if score == "log" else -pred.crps(y)
        return s_next, (jnp.where(ok, item, jnp.zeros_like(item)), ok)

    _, (items, ok) = jax.lax.scan(body, state, (X, Y))
    w = ok & (jnp.arange(Y.shape[0]) >= burn_in)
    return jnp.sum(jnp.where(w, items, 0.0)) / jnp.sum(w)


def prequential_score(learner: Learner, params: Mapping, X, Y, *,
                      scoring: PrequentialScoring = PrequentialScoring(), missing: bool = False, dtype=None) -> Array:
    """The prequential score ``S(θ)`` (module docstring) of ``learner.init(**params)``: pure, differentiable.

    Args:
      learner: any :class:`~onlinejax.core.base.Learner`.
      params: ``{init keyword: value}`` (constrained values; arrays or tracers).
      X: ``[n, d]`` or ``[S, n, d]`` inputs; Y: ``[n]`` or ``[S, n]`` targets.
      scoring: :class:`PrequentialScoring` (static): the ``score``, ``"log"`` (mean log predictive
        density, the default) or ``"crps"`` (minus the mean CRPS), and the ``burn_in`` items
        learned but not scored (default 0).
      missing: the stream may hold non-finite items (static): they are learned as the
        learner does (skipped) and not scored; costs one more ``predict`` per item.
      dtype: the state dtype passed to ``init`` (default float32, float64 under x64).
    Returns:
      ``[]`` the score, averaged over the ``S`` streams (each over its scored items).

    ``jax.grad(lambda p: prequential_score(learner, p, X, Y))(params)`` is the
    gradient :func:`tune_prequential` follows; nothing is checked here.
    """
    dtype = dtype or default_float_dtype()
    score, burn_in = scoring
    fn = lambda X, Y: _stream_score(learner, params, X, Y, score, burn_in, missing, dtype)  # noqa: E731
    return jnp.mean(jax.vmap(fn)(X, Y)) if jnp.ndim(X) == 3 else fn(X, Y)


def _program(learner, score, burn_in, missing, dtype, names, bijections, optimizer, steps, u0, X, Y):
    """``steps`` optimizer steps on ``-S(T⁻¹(u))`` in one scan; the scores and ``u`` before each, then after."""
    constrain = lambda u: {k: b.inverse(u[k]) for k, b in zip(names, bijections)}  # noqa: E731
    scoring = PrequentialScoring(score, burn_in)
    loss = lambda u: -prequential_score(learner, constrain(u), X, Y, scoring=scoring,  # noqa: E731
                                        missing=missing, dtype=dtype)

    def step(carry, _):
        u, opt_state = carry
        val, g = jax.value_and_grad(loss)(u)
        upd, new_state = optimizer.update(g, opt_state, u)
        ok = jnp.isfinite(val)
        for leaf in jax.tree_util.tree_leaves(g):
            ok &= jnp.all(jnp.isfinite(leaf))
        keep = lambda a, b: jax.tree_util.tree_map(lambda p, q: jnp.where(ok, p, q), a, b)  # noqa: E731
        carry = (keep(optax.apply_updates(u, upd), u), keep(new_state, opt_state))
        return carry, (-val, u, ~ok)

    (u, _), (scores, us, bad) = jax.lax.scan(step, (u0, optimizer.init(u0)), None, length=steps)
    last = -loss(u)
    scores = jnp.concatenate([scores, last[None]])
    us = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), us, u)
    return scores, constrain(us), jnp.sum(bad)


_compiled_program = jax.jit(_program, static_argnums=tuple(range(9)))


def _resolve_transforms(names, transforms: Optional[Mapping]) -> tuple:
    """Each name's :class:`Bijection`: ``transforms[name]`` (a name of :data:`BIJECTIONS`, a Bijection) or the default."""
    transforms = dict(transforms or {})
    extra = sorted(set(transforms) - set(names))
    if extra:
        raise ValueError(f"transforms: names not in params: {extra}")
    out = []
    for k in names:
        t = transforms.get(k, DEFAULT_TRANSFORMS.get(k))
        if t is None:
            raise ValueError(f"transforms: no default bijection for {k!r}; pass transforms={{{k!r}: 'log'}} for a "
                             f"positive value, {{{k!r}: 'logit'}} for one in (0, 1), 'identity' for any real, "
                             "or a Bijection")
        if isinstance(t, str) and t not in BIJECTIONS:
            raise ValueError(f"transforms: {k!r}: unknown bijection {t!r}; "
                             f"expected one of {sorted(BIJECTIONS)} or a Bijection")
        if not isinstance(t, (str, Bijection)):
            raise ValueError(f"transforms: {k!r}: expected a name of {sorted(BIJECTIONS)} or a Bijection, got {t!r}")
        out.append(BIJECTIONS[t] if isinstance(t, str) else t)
    return tuple(out)


def _check_params(learner: Learner, params, bijections, dtype) -> dict:
    """The unconstrained starting point; ``ValueError`` naming ``params`` for what ``learner.init`` refuses."""
    for k, v in params.items():
        try:
            finite = np.all(np.isfinite(np.asarray(v, np.float64)))
        except (TypeError, ValueError):
            finite = False
        if not finite:
            raise ValueError(f"params: {k!r} must be a finite number or array, got {v!r}")
        try:
            learner.init(dtype=dtype, **{k: v})
        except TypeError as e:
            raise ValueError(f"params: {learner!r} has no init keyword {k!r} ({e})") from None
    learner.init(dtype=dtype, **params)  # the learner's own range checks (ValueError naming the keyword)
    u0 = {}
    for (k, v), b in zip(params.items(), bijections):
        u = np.asarray(b.forward(jnp.asarray(v, dtype)))
        if not np.all(np.isfinite(u)):
            raise ValueError(f"params: {k!r} = {v!r} maps to a non-finite value: its transform's domain "
                             f"is {b.domain} (the boundary excluded); start inside it")
        u0[k] = jnp.asarray(u, dtype)
    return u0


def _check_stream(learner: Learner, X, Y, burn_in: int, dtype):
    """``X``, ``Y`` as ``dtype`` arrays ``[(S,) n, d]``, ``[(S,) n]``, and how many items hold a non-finite value."""
    X, Y = np.asarray(X, dtype), np.asarray(Y, dtype)
    d = learner.n_features
    if X.ndim not in (2, 3) or X.shape[-1] != d or Y.shape != X.shape[:-1]:
        raise ValueError(f"X, Y: expected shapes [n, {d}] and [n] (or [S, n, {d}] and [S, n]), "
                         f"got {X.shape} and {Y.shape}")
    ok = np.isfinite(X).all(-1) & np.isfinite(Y)
    if not ok[..., burn_in:].any(-1).all():
        raise ValueError(f"scoring.burn_in: {burn_in} leaves a stream without a finite item to score (n = {Y.shape[-1]})")
    return X, Y, int(ok.size - np.count_nonzero(ok))


def tune_prequential(learner: Learner, params: Mapping, X, Y, *, scoring: PrequentialScoring = PrequentialScoring(),
                     options: GradientOptions = GradientOptions(), transforms: Optional[Mapping] = None,
                     dtype=None) -> TuneResult:
    """Tune ``learner.init``'s continuous hyperparameters by gradient ascent on the prequential score.

    Maximises :func:`prequential_score` (mean log predictive density, or minus
    the mean CRPS, of each item's prediction made before it is learned) over
    ``u = T(θ)``, each hyperparameter's unconstrained coordinates, with
    ``options.steps`` steps of ``options.optimizer`` (default ``optax.adam(0.05)``). The whole
    loop is one compiled program (cached per learner, score, options and
    shapes: a second call with other data or starting values does not recompile).

    Args:
      learner: a :class:`~onlinejax.core.base.Learner` whose ``init`` takes the keywords of ``params``
        (e.g. ``bayes_linreg(d, forgetting=0.95)``: ``alpha``, ``beta``, ``forgetting``).
      params: ``{init keyword: starting value}``, constrained (``{"forgetting": 0.95, "beta": 10.0}``);
        scalars or arrays (``alpha`` of shape ``[d]``); the others keep the factory's defaults.
      X: ``[n, d]`` inputs, or ``[S, n, d]`` for ``S`` streams (their mean score is maximised);
        Y: ``[n]`` or ``[S, n]``. Non-finite items are skipped by the learner and not scored.
      scoring: :class:`PrequentialScoring`: the ``score``, ``"log"`` (default) or ``"crps"``, and the
        ``burn_in`` items learned but not scored (default 0).
      options: :class:`GradientOptions`: the ``steps`` (default 100) and the optimizer (default
        ``optax.adam(0.05)``; ``learning_rate`` sets Adam's step size, ``optimizer`` any other).
      transforms: ``{name: "log" | "logit" | "identity" | "log_above_2" | Bijection}`` overriding
        :data:`DEFAULT_TRANSFORMS` (``log`` for ``alpha``, ``beta``, ``signal_std``,
        ``noise_std``, ``lengthscale``, ``prior_var``, ``noise_var``, ``prior_precision``,
        ``time_scale``, ``lengthscales``; ``logit`` for ``forgetting``, ``decay``,
        ``residual_forgetting``, ``hazard``, ``discount``; ``log_above_2`` for ``prior_df``);
        required for other names.
      dtype: state dtype (default float32, float64 under x64).
    Returns:
      :class:`TuneResult`: the best-scoring hyperparameters met (``params``),
      the ``scores`` and ``history`` of the ``steps + 1`` points visited, and whether the
      run had ``converged`` (if not, a ``RuntimeWarning`` says so).
    Raises:
      ValueError: naming the argument: ``scoring.score`` not in :data:`SCORES`; ``params`` empty, with a
        keyword ``init`` does not take, a non-finite value or one on its transform's boundary
        (``forgetting=1.0`` under ``logit``); ``transforms`` without a bijection for a name; bad
        ``options.steps``, ``scoring.burn_in``, ``options.learning_rate``; shapes of ``X``, ``Y``.

    Example:
      >>> import jax, onlinejax as oj
      >>> X, Y, _ = oj.data.drifting_linear_stream(jax.random.key(0))
      >>> res = tune_prequential(oj.bayes_linreg(2, beta=25.0, forgetting=0.95), {"forgetting": 0.95}, X, Y)
      >>> 0.7 < res.params["forgetting"] < 0.9
      True
    """
    score, burn_in = checked_record(scoring, PrequentialScoring, "scoring")
    steps, _, optimizer = checked_record(options, GradientOptions, "options")
    if not isinstance(params, Mapping) or not params:
        raise ValueError(f"params: expected a non-empty dict of init keywords, got {params!r}")
    dtype = np.dtype(dtype or default_float_dtype())
    names = tuple(params)
    bijections = _resolve_transforms(names, transforms)
    u0 = _check_params(learner, params, bijections, dtype)
    X, Y, n_skipped = _check_stream(learner, X, Y, burn_in, dtype)
    missing = n_skipped > 0
    scores, hist, bad = _compiled_program(learner, score, burn_in, missing, dtype, names, bijections, optimizer,
                                          steps, u0, X, Y)
    scores = np.asarray(scores)
    hist = {k: np.asarray(v) for k, v in hist.items()}
    best = int(np.argmax(np.where(np.isfinite(scores), scores, -np.inf)))  # 0 if none is finite
    out = {k: (float(v[best]) if v[best].ndim == 0 else v[best]) for k, v in hist.items()}
    if int(bad):
        warnings.warn(f"tune_prequential: {int(bad)} of {steps} steps had a non-finite score or gradient "
                      "and were not applied", RuntimeWarning, stacklevel=2)
    done = converged(scores, score)
    if not done:
        warnings.warn(f"tune_prequential: not converged: the score still rose in the last {max(1, steps // 10)} "
                      f"of {steps} steps; pass more options.steps or a larger options.learning_rate", RuntimeWarning, stacklevel=2)
    return TuneResult(out, scores, hist, best, int(bad), done, n_skipped)


_ADAM: dict = {}


def _adam(lr: float) -> optax.GradientTransformation:
    """One ``optax.adam(lr)`` object per rate, so repeated calls hit the same compiled program."""
    if lr not in _ADAM:
        _ADAM[lr] = optax.adam(lr)
    return _ADAM[lr]

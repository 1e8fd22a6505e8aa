"""Core types: :class:`Prediction`, :class:`Learner` and the input boundary.

A learner is an immutable record of pure functions over an immutable state
pytree, in the spirit of optax's ``GradientTransformation(init, update)``.
The functions stored in a :class:`Learner` do two things:

1. at the *boundary* they normalise inputs (``x`` to ``[d]`` or ``[b, d]``
   and ``y`` to ``[]`` or ``[b]``, both cast to the state's floating dtype) and,
   when the inputs are concrete (not traced), validate them and raise a
   :class:`ValueError` that names the argument;
2. they call a ``jax.jit``-compiled core, so that a Python loop that feeds
   Python floats, ints, ``np.float32``/``np.float64`` scalars, NumPy or JAX
   arrays hits one compiled executable (no retrace per input type).

Inside ``jit``/``vmap``/``scan`` the validation cannot raise; there the
learners *skip* an item whose ``x`` or ``y`` is not finite, or finite but too
large to square in the dtype (:func:`learnable`; the state is
returned unchanged and its ``n_skipped`` counter is incremented), so one bad
item never poisons a posterior.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import dataclasses
import functools
import statistics

import jax
import jax.numpy as jnp
import numpy as np

from .special import _log_gamma_ratio_excess, student_t_cdf, student_t_quantile

Array = jax.Array
State = Any

__all__ = [
    "Prediction",
    "StudentTPrediction",
    "student_t_cdf",
    "student_t_quantile",
    "Learner",
    "DeferredStep",
    "FactoryCall",
    "default_float_dtype",
    "normal_quantile",
    "make_learner",
    "sequential",
    "skip_nonfinite",
    "welford_update",
]


_INV_SQRT_PI = 1.0 / float(np.sqrt(np.pi))


def default_float_dtype() -> np.dtype:
    """float32, or float64 when ``jax_enable_x64`` is on (JAX's own rule)."""
    return jnp.zeros(()).dtype


def normal_quantile(level: float) -> float:
    """Two-sided standard-normal quantile ``z`` with ``P(|Z| <= z) = level``."""
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level: must lie in (0, 1), got {level!r}")
    # stdlib, so it stays a Python float even while tracing
    return statistics.NormalDist().inv_cdf(0.5 + 0.5 * float(level))


class Prediction(NamedTuple):
    """A Gaussian predictive distribution ``N(mean, var)``.

    The scores (:meth:`log_prob`, :meth:`cdf`, :meth:`crps`) floor the variance
    at the dtype's ``tiny``, so a zero variance scores as the point mass it
    is, without NaN: a log density that is very negative but finite away from
    the mean, a step CDF, a CRPS of ``|y - mean|``. A variance above ``tiny``
    scores exactly as without the floor.

    Attributes:
      mean: ``[...]`` predictive mean (``[]`` for one item, ``[b]`` for a batch).
      var: ``[...]`` predictive variance of the *observation* (noise included),
        same shape as ``mean``.
    """

    mean: Array
    var: Array

    @property
    def std(self) -> Array:
        """Predictive standard deviation ``sqrt(var)``, shape of ``mean``."""
        return jnp.sqrt(self.var)

    def interval(self, level: float = 0.95) -> tuple[Array, Array]:
        """Central interval ``mean ± z·std`` with ``z = Φ⁻¹((1 + level)/2)``.

        Args:
          level: coverage probability in (0, 1); a Python float (static).
        Returns:
          ``(lower, upper)``, each of the shape of ``mean``.
        """
        z = normal_quantile(level)
        half = z * self.std
        return self.mean - half, self.mean + half

    def _scored(self, y: Array) -> tuple[Array, Array, Array]:
        """``(y, var, dtype)`` for the scores: ``y`` cast, ``var`` floored at ``tiny`` (a point mass scores finitely)."""
        dt = jnp.result_type(self.mean, self.var)
        return jnp.asarray(y, dt), jnp.maximum(self.var, jnp.finfo(dt).tiny), dt

    def cdf(self, y: Array) -> Array:
        """``Φ((y - μ)/σ)``: the probability integral transform of ``y`` (broadcast against ``mean``).

        With ``var = 0``: the step ``1{y > μ}`` (½ at ``y = μ``).
        """
        y, var, _ = self._scored(y)
        return jax.scipy.special.ndtr((y - self.mean) / jnp.sqrt(var))

    def log_prob(self, y: Array) -> Array:
        """Gaussian log density ``-½[log(2πσ²) + (y - μ)²/σ²]`` of ``y`` (broadcast against ``mean``).

        The squared residual is capped at the dtype's largest finite value, so
        a residual of many standard deviations (a point mass missed) gives a
        very negative, finite log density, never ``-inf``.
        """
        y, var, dt = self._scored(y)
        return -0.5 * (jnp.log(2.0 * jnp.pi * var) + jnp.minimum((y - self.mean) ** 2 / var, jnp.finfo(dt).max))

    def crps(self, y: Array) -> Array:
        """Closed-form CRPS ``σ[z(2Φ(z) - 1) + 2φ(z) - 1/√π]``, ``z = (y - μ)/σ`` (Gneiting & Raftery 2007, eq. 21).

        Where ``z`` overflows (a point mass) the limit ``|y - μ|``.
        """
        y, var, _ = self._scored(y)
        sd = jnp.sqrt(var)
        z = (y - self.mean) / sd
        crps = sd * (z * (2.0 * jax.scipy.stats.norm.cdf(z) - 1.0) + 2.0 * jax.scipy.stats.norm.pdf(z) - _INV_SQRT_PI)
        return jnp.where(jnp.isinf(z), jnp.abs(y - self.mean), crps)


class StudentTPrediction(NamedTuple):
    """A Student-t predictive distribution ``μ + s·T_ν`` (location, scale, degrees of freedom ``ν > 0``).

    The calibration wrappers return it (:func:`onlinejax.calibration.conformal`
    with ``df=``): a heavy-tailed predictive whose log density at a residual
    of ``z`` scales falls like ``-(ν+1) log|z|`` instead of ``-z²/2``, so one
    surprise (a discontinuity, a drift) costs tens of nats, not millions.
    :func:`onlinejax.baseline.climatology` returns it with ``ν = n - 1``.

    Every ``ν > 0`` is valid and large ``ν`` (the Gaussian limit, up to
    ``1/ε`` and beyond) is computed without cancellation; the moments and
    scores that do not exist are infinite: :attr:`var` is ``+inf`` for
    ``ν <= 2`` and :meth:`crps` is ``+inf`` for ``ν <= 1``. The scores floor
    the scale at ``sqrt(tiny)`` of the dtype (as :class:`Prediction` floors
    its variance at ``tiny``), so a scale of 0 scores as a point mass without
    NaN; a larger scale scores exactly as without the floor.

    Attributes:
      mean: ``[...]`` location ``μ`` (the mean where ``ν > 1``).
      scale: ``[...]`` scale ``s >= 0``.
      df: ``[...]`` degrees of freedom ``ν > 0``, the shape of ``mean`` (so a batch of
        predictions scans and vmaps leaf by leaf).
    """

    mean: Array
    scale: Array
    df: Array

    @property
    def var(self) -> Array:
        """Variance ``s² ν/(ν - 2)``; ``+inf`` for ``ν <= 2``, where the t has no finite variance."""
        finite = self.df > 2.0
        return jnp.where(finite, self.scale * self.scale * self.df / jnp.where(finite, self.df - 2.0, 1.0), jnp.inf)

    @property
    def std(self) -> Array:
        """Standard deviation ``sqrt(var)``."""
        return jnp.sqrt(self.var)

    def interval(self, level: float = 0.95) -> tuple[Array, Array]:
        """Central interval ``μ ± t_ν((1 + level)/2)·s``; ``level`` a Python float in (0, 1)."""
        normal_quantile(level)  # validates level
        half = student_t_quantile(0.5 + 0.5 * float(level), jnp.broadcast_to(self.df, jnp.shape(self.mean))) * self.scale
        return self.mean - half, self.mean + half

    def _scored(self, y: Array) -> tuple[Array, Array, Array]:
        """``(y, z, s)``: ``y`` cast, the scale ``s`` floored at ``sqrt(tiny)`` and ``z = (y - μ)/s``."""
        dt = jnp.result_type(self.mean, self.scale)
        y = jnp.asarray(y, dt)
        s = jnp.maximum(self.scale, np.sqrt(np.finfo(dt).tiny).astype(dt))
        return y, (y - self.mean) / s, s

    def _log1p_z2_over_df(self, z: Array) -> Array:
        """``log(1 + z²/ν)``, with ``z²`` capped at the dtype's largest finite value (finite for a point mass)."""
        return jnp.log1p(jnp.minimum(z * z, jnp.finfo(z.dtype).max) / self.df)

    def cdf(self, y: Array) -> Array:
        """``F_ν((y - μ)/s)`` (:func:`student_t_cdf`), broadcast against ``mean``; a step at ``μ`` for ``s = 0``."""
        _, z, _ = self._scored(y)
        return student_t_cdf(z, self.df)

    def log_prob(self, y: Array) -> Array:
        """Log density ``log Γ((ν+1)/2) - log Γ(ν/2) - ½ log(νπ) - log s - (ν+1)/2 log(1 + z²/ν)`` of ``y``.

        The ratio of gamma functions is taken as ``½ log(ν/2)`` plus its small
        excess (:func:`_log_gamma_ratio_excess`), which cancels ``½ log ν``
        exactly, so large ``ν`` loses no precision (``jax.scipy.stats.t.logpdf``
        subtracts two ``gammaln`` of order ``ν log ν`` and keeps only their
        resolution). Broadcast against ``mean``.
        """
        _, z, s = self._scored(y)
        nu = self.df
        return (_log_gamma_ratio_excess(0.5 * nu) - 0.5 * np.log(2.0 * np.pi) - jnp.log(s)
                - 0.5 * (nu + 1.0) * self._log1p_z2_over_df(z))

    def crps(self, y: Array) -> Array:
        """Closed-form CRPS (Jordan, Krüger & Lerch 2019, scoringRules, ``crps_t``); ``+inf`` for ``ν <= 1``.

        ``s[z(2F_ν(z) - 1) + 2 f_ν(z)(ν + z²)/(ν - 1) - 2√ν B(½, ν - ½)/((ν - 1) B(½, ν/2)²)]``
        with ``z = (y - μ)/s``. The Beta functions and the density enter
        through :func:`_log_gamma_ratio_excess` (no cancellation at large
        ``ν``); the constant term tends to ``1/√π``, the Gaussian's. Where
        ``z`` overflows (a point mass) ``s·z`` is ``y - μ``.
        """
        y, z, s = self._scored(y)
        linear, two_pdf, c = _student_t_crps_terms(self.mean, s, self.df, y, z)
        return jnp.where(self.df > 1.0, linear + s * (two_pdf - c), jnp.inf)


def student_t_abs_moments(mean: Array, scale: Array, df: Array, y: Array, z: Array) -> tuple[Array, Array]:
    """``(E|X - y|, ½ E|X - X'|)`` of ``X = μ + s·T_ν`` (``X'`` an independent copy), the two terms of its CRPS.

    ``E|X - y| = s[z(2F_ν(z) - 1) + 2 f_ν(z)(ν + z²)/(ν - 1)]`` and
    ``½ E|X - X'| = 2s√ν B(½, ν - ½)/((ν - 1) B(½, ν/2)²)`` with ``z = (y - μ)/s``
    (Jordan, Krüger & Lerch 2019, ``crps_t``); the Beta functions and the density
    enter through :func:`_log_gamma_ratio_excess`, so large ``ν`` loses no
    precision (the constant tends to ``s/√π``, the Gaussian's). Where ``z``
    overflows (a point mass) ``s·z`` is ``y - μ``. Both are meaningful for
    ``ν > 1`` only (the t has no mean otherwise); there ``ν`` is replaced by 2 so
    that the values stay finite, and the caller masks them.

    Args:
      mean, scale, df, y, z: broadcast; ``scale > 0`` (floored by the caller),
        ``z = (y - mean)/scale``.
    Returns:
      ``(e_abs, half_pair)``, broadcast.
    """
    linear, two_pdf, c = _student_t_crps_terms(mean, scale, df, y, z)
    return linear + scale * two_pdf, scale * c


def _student_t_crps_terms(mean, scale, df, y, z):
    """``(s·z(2F_ν(z) - 1), 2 f_ν(z)(ν + z²)/(ν - 1), 2√ν B(½, ν - ½)/((ν - 1) B(½, ν/2)²))`` (:func:`student_t_abs_moments`)."""
    nu = jnp.where(df > 1.0, df, 2.0)
    r = _log_gamma_ratio_excess
    log_c = (-0.5 * np.log(np.pi) - jnp.log1p(-1.0 / nu) - 0.5 * jnp.log1p(-0.5 / nu)
             - r(nu - 0.5) + 2.0 * r(0.5 * nu))
    # log[f_ν(z)(ν + z²)/(ν - 1)]: the density's power (ν+1)/2 less the one of (ν + z²)
    log_pdf_term = (r(0.5 * nu) - 0.5 * np.log(2.0 * np.pi) - jnp.log1p(-1.0 / nu)
                    - 0.5 * (nu - 1.0) * jnp.log1p(jnp.minimum(z * z, jnp.finfo(z.dtype).max) / nu))
    sz = jnp.where(jnp.isinf(z), y - mean, scale * z)
    return sz * (2.0 * student_t_cdf(z, nu) - 1.0), 2.0 * jnp.exp(log_pdf_term), jnp.exp(log_c)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class StaticOptions:
    """The static options a state was built for, carried in the tree's *structure*, not its leaves.

    A state field of this type has no arrays: ``jit``, ``vmap`` and ``scan`` pass it through
    unchanged, and two states built for different options have different tree structures, so
    :func:`~onlinejax.checkpoint.load_checkpoint` refuses a file saved under other options
    (e.g. ``bounds="bayes"`` into a ``bounds="asymptotic"`` learner, whose arrays look alike).

    Attributes:
      items: ``((name, value), ...)`` with hashable values.
    """

    items: tuple = ()

    @classmethod
    def of(cls, **options) -> "StaticOptions":
        """``StaticOptions.of(bounds="bayes")``; the names are sorted."""
        return cls(tuple(sorted(options.items())))


class DeferredStep(NamedTuple):
    """A learner's step with its rare, costly part split off, for runners that loop over items between them.

    A state machine that tunes at the end of each learning phase carries
    the tune as a branch of every step; on XLA:CPU even an untaken branch
    costs a learner of a large state about a microsecond per item
    (``benchmarks/state_machine.py``). With this split a runner steps
    items in an inner loop that has no such branch and applies the rare part
    between such loops (:func:`onlinejax.evaluation.progressive_validation`
    does, for one stream at a time).

    Contract: for every state ``s`` and item ``(x, y)``,
    ``learner.step(s, x, y)`` equals ``t, p = step(s, x, y)`` followed by
    ``t = apply(t) if due(s, t) else t``, returning ``(t, p)``.

    Attributes:
      step: ``(state, x, y) -> (state, Prediction)`` with the boundary of
        :attr:`Learner.step`, the rare part left pending.
      due: ``(state_before, state_after) -> bool []``: whether the item left
        the rare part pending.
      apply: ``state -> state``: the rare part.
    """

    step: Callable[[State, Any, Any], tuple[State, "Prediction"]]
    due: Callable[[State, State], Array]
    apply: Callable[[State], State]


def map_nested(fn: Callable, v):
    """``v`` with ``fn`` applied to every value inside its lists, tuples and dicts, recursively, in new containers.

    NamedTuples (options, states) and every other value are leaves: ``fn(v)``.
    """
    if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
        return type(v)(map_nested(fn, a) for a in v)
    if isinstance(v, dict):
        return {k: map_nested(fn, a) for k, a in v.items()}
    return fn(v)


class FactoryCall:
    """The public factory call that built a :class:`Learner`: ``factory(*args, **kwargs)``.

    Kept so that a runner can build the same learner again with other
    scheduling options (:func:`onlinejax.schedule.with_tune_plan`). Compared
    and hashed by identity: equal calls return the same learner
    (:func:`reuse_equal_calls`), and a call's arguments may be arrays.
    """

    __slots__ = ("factory", "args", "kwargs", "built")

    def __init__(self, factory: Callable, args: tuple, kwargs: dict):
        # lists and dicts copied, so a caller who changes theirs later does not change the recorded call
        self.factory = factory
        self.args, self.kwargs = map_nested(lambda v: v, tuple(args)), map_nested(lambda v: v, dict(kwargs))
        self.built: Optional[tuple] = None  # the returned learner's other fields, to tell it from a changed copy

    def __repr__(self) -> str:
        return f"FactoryCall({getattr(self.factory, '__name__', self.factory)!r})"


class Learner(NamedTuple):
    """An online learner: a record of pure functions (optax style).

    Attributes:
      init: ``init(**hyperparameters) -> state``; hyperparameters that do not
        change shapes are arrays in the state, so ``jax.vmap(lambda a:
        learner.init(alpha=a))(alphas)`` builds a batch of learners.
      learn: ``learn(state, x, y) -> state`` with ``x: [d]``, ``y: []`` or a
        mini-batch ``x: [b, d]``, ``y: [b]``.
      predict: ``predict(state, x) -> Prediction`` with ``x: [d]`` (``mean``
        and ``var`` are ``[]``) or ``x: [b, d]`` (``[b]``).
      step: ``step(state, x, y) -> (state, Prediction)``: predict ``y`` from
        ``x`` *before* learning from it, then learn; one compiled call (the
        fast path for research code that drives a learner from a Python loop).
        It equals ``pred = predict(state, x); update(state, x, y, pred)``.
      n_features: ``d``, the input width the learner expects (static).
      downdate: optional. For learners with a growing posterior,
        ``downdate(state, x, y)`` removes an item previously learned (the exact
        inverse of ``learn``); for windowed learners ``downdate(state)`` evicts
        the oldest item of the window (the item comes from the window itself).
      tune: optional ``tune(state, **options) -> state``: re-estimate the
        hyperparameters from the learner's own data and rebuild the state.
      description: the call that built the learner (``"windowed_bayes_linreg(3, 64)"``),
        set by the public factories (:func:`describe_factory`); used by ``repr``.
      deferred: optional :class:`DeferredStep`, ``step`` with its rare part
        (a state machine's tune) split off; runners may use it instead of ``step``.
      update: ``update(state, x, y, pred) -> state``: learn the item given
        ``pred = predict(state, x)``, the prediction that was issued for it
        (optax's ``update`` receives what the caller computed). Wrappers judge
        that prediction (calibrators score it, the state machine's detector
        tests it) instead of predicting again, so a caller whose ``x`` changed
        between the two calls (River's scaler in front) or who learns later
        still has the issued prediction judged. ``x: [d]`` with ``pred``'s
        leaves ``[]``, or a batch ``x: [b, d]`` with ``[b]`` leaves.
      factory_call: the :class:`FactoryCall` that built the learner (set by the public factories with
        :func:`describe_factory`, like ``description``), or ``None``.
    """

    init: Callable[..., State]
    learn: Callable[[State, Any, Any], State]
    predict: Callable[[State, Any], Prediction]
    step: Callable[[State, Any, Any], tuple[State, Prediction]]
    n_features: int
    downdate: Optional[Callable[..., State]] = None
    tune: Optional[Callable[..., State]] = None
    description: Optional[str] = None
    deferred: Optional[DeferredStep] = None
    update: Optional[Callable[[State, Any, Any, Any], State]] = None
    factory_call: Optional[FactoryCall] = None

    def __repr__(self) -> str:
        extra = [m for m in ("downdate", "tune") if getattr(self, m) is not None]
        what = self.description or "make_learner(...)"
        return f"Learner({what}; n_features={self.n_features}" + (f"; with {', '.join(extra)})" if extra else ")")


def _leaf_repr(a) -> str:
    if not hasattr(a, "shape"):
        return repr(a)
    if a.shape == () and not isinstance(a, jax.core.Tracer):
        v = np.asarray(a).item()
        return f"{v:.4g}" if isinstance(v, float) else repr(v)
    return f"{np.dtype(a.dtype).name}{list(a.shape)}"


def tree_nbytes(tree) -> int:
    """Bytes of a pytree's array leaves (shapes and dtypes only: also for ``jax.eval_shape`` results)."""
    return sum(int(np.prod(np.shape(a))) * np.dtype(a.dtype).itemsize for a in jax.tree_util.tree_leaves(tree))


def tree_repr(tree, depth: int = 2) -> str:
    """A one-line summary of a pytree: NamedTuple fields by name, arrays by dtype and shape, scalars by value.

    ``BayesLinRegState(mean=float32[2], cov_sqrt=float32[2, 2], beta=1, ...)``: what a ``repr`` of
    a state or a result shows instead of every element.
    """
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        if depth == 0:
            return f"{type(tree).__name__}(...)"
        inner = ", ".join(f"{k}={tree_repr(getattr(tree, k), depth - 1)}" for k in tree._fields)
        return f"{type(tree).__name__}({inner})"
    if isinstance(tree, dict):
        if depth == 0:
            return "{...}"
        return "{" + ", ".join(f"{k!r}: {tree_repr(v, depth - 1)}" for k, v in tree.items()) + "}"
    if isinstance(tree, (list, tuple)):
        return f"{type(tree).__name__}[{len(tree)}]"
    return _leaf_repr(tree)


def _short_repr(v) -> str:
    """A value in a factory call's description: learners by their description, big arrays by shape."""
    if isinstance(v, Learner):
        return v.description or "Learner(...)"
    if isinstance(v, (np.ndarray, jax.Array)) and np.size(v) > 4:
        return f"array{list(np.shape(v))}"
    if callable(v) and hasattr(v, "__qualname__"):
        return v.__qualname__
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


#: Results kept per function by :func:`reuse_equal_calls` (the oldest is dropped first).
_FACTORY_CACHE_SIZE = 256


def _frozen(v):
    """A hashable key of a factory argument: type and value, lists and dicts as tuples (hash fails on arrays)."""
    if isinstance(v, (list, tuple)):
        return (type(v), tuple(_frozen(a) for a in v))
    if isinstance(v, dict):
        return (dict, tuple((k, _frozen(a)) for k, a in v.items()))
    return (type(v), v)


def reuse_equal_calls(factory: Callable) -> Callable:
    """Decorate a factory of immutable records of functions so that equal arguments return the same record.

    jit keys a static argument (a learner, a weight rule) on its functions, so a
    record built again would compile its programs again. The key holds the
    arguments' types (``1``, ``1.0`` and ``True`` differ), lists and dicts as
    tuples, and what a factory may read from JAX's configuration (x64, the
    backend); a call with an unhashable argument (an array) builds afresh, and
    a call that raises is not kept.
    """
    built: dict = {}

    @functools.wraps(factory)
    def wrapped(*args, **kwargs):
        key = (_frozen(args), _frozen(kwargs), bool(jax.config.jax_enable_x64), jax.default_backend())
        try:
            hash(key)
        except TypeError:
            return factory(*args, **kwargs)
        if key not in built:
            if len(built) >= _FACTORY_CACHE_SIZE:
                built.pop(next(iter(built)))
            built[key] = factory(*args, **kwargs)
        return built[key]

    return wrapped


def describe_factory(factory: Callable[..., "Learner"]) -> Callable[..., "Learner"]:
    """Decorate a public learner factory so that its learners' ``repr`` shows the call that built them.

    ``windowed_bayes_linreg(3, 64, intercept=True)`` then prints as
    ``Learner(windowed_bayes_linreg(3, 64, intercept=True); n_features=4; with downdate, tune)``;
    wrappers nest (``standardize(gp_window(2, 64))``). Signature and docstring are kept.
    The call itself is kept in ``Learner.factory_call``.
    Calls with equal hashable arguments return the same :class:`Learner`
    (:func:`reuse_equal_calls`), so building a configuration again does not compile its programs again.
    """

    @reuse_equal_calls
    @functools.wraps(factory)
    def build(*args, **kwargs):
        out = factory(*args, **kwargs)
        call = ", ".join([_short_repr(a) for a in args] + [f"{k}={_short_repr(v)}" for k, v in kwargs.items()])
        made = FactoryCall(build, args, kwargs)
        out = out._replace(description=f"{factory.__name__}({call})", factory_call=made)
        made.built = tuple(out[:-1])
        return out

    return build


# --------------------------------------------------------------------------
# Boundary helpers
# --------------------------------------------------------------------------
def is_concrete(*xs) -> bool:
    """True when none of ``xs`` is a JAX tracer (we are outside jit/vmap)."""
    return not any(isinstance(x, jax.core.Tracer) for x in xs)


def state_dtype(state: State) -> np.dtype:
    """The floating dtype of a state: that of its first floating leaf."""
    for leaf in jax.tree_util.tree_leaves(state):
        dt = getattr(leaf, "dtype", None)  # not jnp.result_type: it is too slow for a per-item call
        if dt is not None and np.issubdtype(dt, np.floating):
            return np.dtype(dt)
    raise ValueError("state: has no floating-point leaf")


def _as_array(v, dtype, name):
    """``v`` as a ``dtype`` array; ``ValueError`` naming ``name`` if it cannot be (complex input included)."""
    kind = getattr(getattr(v, "dtype", None), "kind", None)
    if kind is None and not isinstance(v, (float, int)):  # a list or a Python complex: look at its values
        v = np.asarray(v)
        kind = v.dtype.kind
    if kind == "c":  # the cast would keep the real part silently
        raise ValueError(f"{name}: complex values are not supported, got dtype {np.dtype(v.dtype).name}")
    if isinstance(v, jax.Array):
        # a weak-typed scalar (e.g. jnp.asarray(3.0)) would hit another cache entry
        if v.dtype == dtype and not getattr(v, "weak_type", False):
            return v
        if isinstance(v, jax.core.Tracer):
            return jax.lax.convert_element_type(v, dtype)
        # concrete: convert on the host, so no eager conversion op gets compiled
        return np.asarray(v).astype(dtype)
    try:
        return np.asarray(v, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: cannot convert to a {np.dtype(dtype).name} array ({e})") from None


def _check_finite(v, name):
    if not np.isfinite(v).all():  # the method, not np.all(...): this runs on every item
        raise ValueError(f"{name}: contains NaN or inf")


def coerce_x(x, n_features: int, dtype, name: str = "x", *, finite: bool = True):
    """Cast ``x`` to ``dtype`` and check its trailing width is ``n_features`` (and, with ``finite``, its values).

    Returns the array and whether it is a batch (``ndim == 2``).
    """
    x = _as_array(x, dtype, name)
    if x.ndim not in (1, 2) or x.shape[-1] != n_features:
        raise ValueError(
            f"{name}: expected shape [{n_features}] or [b, {n_features}], got {tuple(x.shape)}"
        )
    if finite and is_concrete(x):
        _check_finite(x, name)
    return x, x.ndim == 2


def coerce_xy(x, y, n_features: int, dtype):
    """Cast and check one item (``[d]``, ``[]``) or a mini-batch (``[b, d]``, ``[b]``)."""
    x, batched = coerce_x(x, n_features, dtype)
    y = _as_array(y, dtype, "y")
    want = (x.shape[0],) if batched else ()
    if tuple(y.shape) != want:
        raise ValueError(f"y: expected shape {want} for x of shape {tuple(x.shape)}, got {tuple(y.shape)}")
    if is_concrete(y):
        _check_finite(y, "y")
    return x, y


def check_positive(value, name: str):
    """Raise ``ValueError`` naming ``name`` unless every element is > 0 (concrete only)."""
    if is_concrete(value):
        a = np.asarray(value)
        if not np.all(np.isfinite(a)) or not np.all(a > 0):
            raise ValueError(f"{name}: must be finite and > 0, got {value!r}")


def check_int(value, name: str, minimum: int) -> int:
    """Return ``value`` as a Python int; ``ValueError`` naming ``name`` unless it is an integer >= ``minimum``.

    Rejects ``bool`` and non-integral numbers (``2.5``); accepts ``4.0`` and NumPy integers.
    """
    ok = not isinstance(value, bool)
    try:
        ok = ok and int(value) == value and int(value) >= minimum
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_in_range(value, name: str, lo: float, hi: float, lo_open=True, hi_open=False):
    """Raise ``ValueError`` unless ``lo < value <= hi`` (bounds' openness configurable)."""
    if is_concrete(value):
        a = np.asarray(value)
        ok_lo = a > lo if lo_open else a >= lo
        ok_hi = a < hi if hi_open else a <= hi
        if not np.all(np.isfinite(a)) or not np.all(ok_lo & ok_hi):
            lb = "(" if lo_open else "["
            rb = ")" if hi_open else "]"
            raise ValueError(f"{name}: must lie in {lb}{lo}, {hi}{rb}, got {value!r}")


def welford_update(n: Array, mean: Array, var: Array, value: Array, decay=1.0) -> tuple[Array, Array, Array]:
    """One step of Welford's running mean and variance, in the variance form, the past faded by ``decay``.

    ``n ← min(δn + 1, n_max)``, ``m ← m + (v - m_old)/n``,
    ``σ² ← σ² + ((v - m_old)(v - m) - σ²)/n`` (Welford 1962; West 1979 for
    weights; the variance form as in Finch 2009, "Incremental calculation of
    weighted mean and variance"). ``σ²`` is the (weighted) mean squared
    deviation ``M2/n``, not the growing sum ``M2``: where the count stops,
    the estimates stop moving instead of drifting (a float32 count stops
    at ``2²⁴``, while ``M2`` would keep growing).

    The count saturates at ``n_max = 1/(32ε)`` of the dtype (``2¹⁸`` in
    float32, ``2⁴⁷`` in float64): up to there a new item moves the estimates
    by tens of units in their last place, so their rounding errors average
    out; with a larger count the increments shrink to a few units in the
    last place and their rounding, which does not average out, biases the
    variance. Beyond ``n_max`` items the statistics are exponentially
    weighted with a memory of ``n_max`` items. Element-wise: ``mean``, ``var`` and ``value``
    share a shape (``[]`` or ``[d]``), ``n`` is ``[]``.

    Args:
      n: ``[]`` (decayed) count of the items so far (0 before the first).
      mean: running mean; var: running mean squared deviation (any finite value before the first item).
      value: the new item; decay: weight of the past per item, in ``(0, 1]``.
    Returns:
      ``(n, mean, var)`` after ``value``.
    """
    n_max = 1.0 / (32.0 * jnp.finfo(jnp.result_type(n, mean)).eps)
    n = jnp.minimum(decay * n + 1.0, n_max)
    delta = value - mean
    mean = mean + delta / n
    return n, mean, var + (delta * (value - mean) - var) / n


def keep_if(ok: Array, new: State, old: State) -> State:
    """Per-leaf ``where(ok, new, old)``: a branch-free conditional state update."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, old)


def learnable(x: Array, y: Array) -> Array:
    """Whether items can be learned: ``x`` and ``y`` finite and small enough to square.

    A finite value beyond ``sqrt(max / d)`` of its dtype (``|v| ≳ 1.8e19 / √d`` in float32)
    overflows ``xᵀx`` or ``y²`` in the learners' updates and would leave a non-finite state
    for good, so it counts as unusable like NaN or ±inf.

    Args:
      x: ``[..., d]`` inputs; y: ``[...]`` targets.
    Returns:
      ``[...]`` bool, ``True`` for the items a learner may absorb.
    """
    x = jnp.asarray(x)
    y = jnp.asarray(y)
    dtype = jnp.result_type(x, y, jnp.float32)
    limit = np.sqrt(np.finfo(dtype).max / max(1, x.shape[-1] + 1)) / 2
    return jnp.all(jnp.abs(x) <= limit, axis=-1) & (jnp.abs(y) <= limit)


#: Input widths from which XLA:CPU computes a learner's matrix-vector products with BLAS calls rather than
#: inline loops: there a fused producer of ``x`` costs more than materialising it (:func:`zero_unusable`),
#: and a step that shares ``Wᵀx`` between prediction and update pays off
#: (:func:`onlinejax.linear.bayes.step_one`); below it the fused, separate forms are faster.
BLAS_MIN_FEATURES = 12


def zero_unusable(x: Array, x_ok: Array, y: Array, y_ok: Array) -> tuple[Array, Array]:
    """``(x, y)`` with the rows of ``x`` where ``x_ok`` is false and the ``y`` where ``y_ok`` is false set to 0.

    Shapes: ``x: [..., d]``, ``x_ok, y, y_ok: [...]``. From ``d >=``
    :data:`BLAS_MIN_FEATURES` the result passes through an optimisation barrier:
    left to itself XLA:CPU fuses the ``where`` into the matrix-vector products
    that consume ``x``, and a dot with a fused operand is emitted as a plain
    loop instead of a call to the BLAS kernel, several times slower at the
    widths where BLAS is used (``benchmarks/bayes_linreg.py``).
    """
    xz = jnp.where(x_ok[..., None], x, jnp.zeros_like(x))
    yz = jnp.where(y_ok, y, jnp.zeros_like(y))
    if x.shape[-1] < BLAS_MIN_FEATURES:  # narrower products are emitted inline, and fusing them is cheaper
        return xz, yz
    return jax.lax.optimization_barrier((xz, yz))


def skip_nonfinite(fn: Callable, returns_prediction: bool = False) -> Callable:
    """Make a single-item ``fn(state, x, y)`` leave the state unchanged when ``x`` or ``y`` is not
    finite (or too large to square, see :func:`learnable`).

    The skipped state has its ``n_skipped`` counter (a ``[]`` int32 field every
    learner state that uses this carries) incremented; ``fn`` still runs, so
    under ``vmap`` every stream executes the same program (a branch-free
    :func:`keep_if`). With ``returns_prediction`` (a ``step_one``), ``fn``
    returns ``(state, prediction)`` and the prediction is passed through.
    :func:`make_learner` applies it (``skip_nonfinite=True``); it is exported
    for wrappers that build their step from other learners' cores.

    ``fn`` never sees a non-finite value: a skipped item reaches it with
    ``y = 0`` and, where ``x`` has a non-finite element, ``x = 0`` (the
    prediction of such an ``x`` is then NaN, as before; a finite ``x`` too
    large to square reaches ``fn`` as it is, so its prediction is kept). Without this,
    ``jax.grad`` of anything computed through the learner is NaN as soon as
    one item was skipped: the ``where`` sends a zero cotangent into ``fn``'s
    unused branch, and zero times the NaN partials of ``fn`` at a NaN
    ``x`` is NaN (the "double where" rule of JAX's FAQ).
    """

    def wrapped(state, x, y):
        ok = learnable(x, y)
        x_finite = jnp.all(jnp.isfinite(x), axis=-1)
        out = fn(state, *zero_unusable(x, x_finite, y, ok))
        new = out[0] if returns_prediction else out
        kept = keep_if(ok, new, state._replace(n_skipped=state.n_skipped + 1))
        if not returns_prediction:
            return kept
        nan_if_bad = lambda a: jnp.where(x_finite, a, jnp.nan) if jnp.issubdtype(a.dtype, jnp.floating) else a  # noqa: E731
        return kept, jax.tree_util.tree_map(nan_if_bad, out[1])

    return wrapped


def _skip_with_prediction(update_one: Callable) -> Callable:
    """:func:`skip_nonfinite` for an ``update_one(state, x, y, pred)``: a skipped item's prediction reaches it as ones."""

    def wrapped(state, x, y, pred):
        ok = learnable(x, y)
        pred = jax.tree_util.tree_map(
            lambda a: jnp.where(ok, a, jnp.ones_like(a)) if jnp.issubdtype(a.dtype, jnp.floating) else a, pred)
        return skip_nonfinite(lambda s, x_, y_: update_one(s, x_, y_, pred))(state, x, y)

    return wrapped


def sequential(learn_one: Callable[[State, Array, Array], State]):
    """Lift a single-item ``learn_one`` to mini-batches by scanning over rows."""

    def learn_many(state, X, Y):
        def body(s, xy):
            return learn_one(s, *xy), None

        return jax.lax.scan(body, state, (X, Y))[0]

    return learn_many


def full_precision(fn: Callable) -> Callable:
    """``fn`` traced with its matrix products in the full precision of their dtype, on every backend.

    Without it JAX's default precision lets a float32 matrix product run in
    TensorFloat-32 on NVIDIA GPUs (10-bit mantissas: relative errors of
    about 1e-3 per product instead of 1e-7), which moves a GP's or a
    posterior's predictive variance by far more than its float32 rounding.
    The precision is fixed when ``fn`` is traced or differentiated
    (``jax.default_matmul_precision("highest")`` around the call), so it
    holds inside a user's ``jit``, ``vmap`` and ``jvp``/``grad`` too; on a
    CPU, and for float64, every precision computes the same products.
    :func:`make_learner` applies it to every function of the
    :class:`Learner` it returns.
    """

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return wrapped


def make_learner(
    *,
    init: Callable[..., State],
    learn_one: Callable,
    learn_batch: Optional[Callable] = None,
    predict_one: Callable,
    predict_batch: Optional[Callable] = None,
    n_features: int,
    downdate: Optional[Callable] = None,
    downdate_takes_item: bool = True,
    tune: Optional[Callable] = None,
    step_one: Optional[Callable] = None,
    skip_nonfinite: bool = False,
    update_one: Optional[Callable] = None,
) -> Learner:
    """Wrap pure single-item/batch cores into a :class:`Learner` with a checked boundary.

    The cores see ``x: [d]``/``[b, d]`` and ``y: []``/``[b]`` already cast to
    the state's dtype. ``learn_batch`` defaults to a scan over ``learn_one``
    (exactly sequential learning); ``predict_batch`` to ``vmap(predict_one)``.
    Every function is traced under :func:`full_precision` (matrix products in
    full float32 precision on GPUs too).
    ``step_one(state, x, y) -> (state, Prediction)`` may be given when
    learning needs the prediction of the same item (it is then computed once);
    by default it is ``predict_one`` followed by ``learn_one``. A mini-batch
    ``step`` scans ``step_one`` when it is given, so that the batch
    predictions are the sequential ones.
    ``update_one(state, x, y, pred) -> state`` learns the item given the
    prediction ``predict_one(state, x)`` issued for it (a wrapper judges that
    prediction); by default it is ``learn_one`` (a learner whose learning
    does not use its prediction). With ``update_one`` and no ``step_one``,
    ``step_one`` is ``predict_one`` followed by ``update_one`` (the item is
    predicted once). A mini-batch ``update`` scans ``update_one`` over the
    items and their predictions.

    With ``skip_nonfinite`` the boundary owns the non-finite skip: inside
    ``jit``/``vmap``/``scan`` (where the concrete check cannot raise) an item
    whose ``x`` or ``y`` is NaN/inf leaves the state unchanged except its
    ``n_skipped`` counter (:func:`skip_nonfinite`). The cores then assume
    finite items. It wraps ``learn_one`` and ``step_one``; a custom
    ``learn_batch`` must skip by itself. An empty mini-batch (``x: [0, d]``)
    is a no-op at the boundary: ``learn`` returns the state unchanged.
    """
    if update_one is not None and step_one is None:
        step_one = _predict_then_update(predict_one, update_one)
    if skip_nonfinite:
        learn_one, step_one, update_one = _skipping(learn_one, step_one, update_one)
    learn_batch = learn_batch or sequential(learn_one)
    predict_batch = predict_batch or jax.vmap(predict_one, in_axes=(None, 0))
    j_learn_one, j_learn_batch = jax.jit(learn_one), jax.jit(learn_batch)
    j_pred_one, j_pred_batch = jax.jit(predict_one), jax.jit(predict_batch)
    j_step_one, j_step_batch = map(jax.jit, _step_cores(learn_one, learn_batch, predict_one, predict_batch, step_one))
    j_update_one, j_update_batch = map(jax.jit, _update_cores(learn_one, learn_batch, update_one))

    def learn(state, x, y):
        x, y = coerce_xy(x, y, n_features, state_dtype(state))
        if x.ndim == 2 and x.shape[0] == 0:  # an empty batch teaches nothing
            return state
        return (j_learn_batch if x.ndim == 2 else j_learn_one)(state, x, y)

    def predict(state, x):
        x, batched = coerce_x(x, n_features, state_dtype(state))
        return (j_pred_batch if batched else j_pred_one)(state, x)

    def step(state, x, y):
        x, y = coerce_xy(x, y, n_features, state_dtype(state))
        if x.ndim == 2 and x.shape[0] == 0:
            return state, j_pred_batch(state, x)
        return (j_step_batch if x.ndim == 2 else j_step_one)(state, x, y)

    def update(state, x, y, pred):
        x, y = coerce_xy(x, y, n_features, state_dtype(state))
        if x.ndim == 2 and x.shape[0] == 0:
            return state
        pred = _checked_prediction(pred, y.shape, state_dtype(state))
        return (j_update_batch if x.ndim == 2 else j_update_one)(state, x, y, pred)

    dd = None if downdate is None else _checked_downdate(jax.jit(downdate), downdate_takes_item, n_features)
    # around the boundary, not only the cores: derivative rules (a Cholesky's JVP, a custom_vmap's
    # re-trace) emit their products when a transformation reaches the call, outside the cores' traces
    init, learn, predict, step, update = map(full_precision, (init, learn, predict, step, update))
    dd, tune = (None if f is None else full_precision(f) for f in (dd, tune))
    return Learner(init=init, learn=learn, predict=predict, step=step, n_features=n_features, downdate=dd, tune=tune,
                   update=update)


def _skipping(learn_one, step_one, update_one):
    """The cores with :func:`skip_nonfinite` applied (``None`` stays ``None``)."""
    return (skip_nonfinite(learn_one), None if step_one is None else skip_nonfinite(step_one, returns_prediction=True),
            None if update_one is None else _skip_with_prediction(update_one))


def _predict_then_update(predict_one, update_one):
    """``step_one``: the item predicted once, then learned with that prediction."""

    def step_one(state, x, y):
        pred = predict_one(state, x)
        return update_one(state, x, y, pred), pred

    return step_one


def _step_cores(learn_one, learn_batch, predict_one, predict_batch, step_one):
    """``(step_one, step_batch)``: the given ``step_one`` (a batch scans it), or predict before learning."""
    if step_one is None:

        def step_one(state, x, y):
            return learn_one(state, x, y), predict_one(state, x)

        def step_batch(state, X, Y):
            return learn_batch(state, X, Y), predict_batch(state, X)

        return step_one, step_batch
    return step_one, lambda state, X, Y: jax.lax.scan(lambda s, xy: step_one(s, *xy), state, (X, Y))


def _update_cores(learn_one, learn_batch, update_one):
    """``(update_one, update_batch)``: the given ``update_one`` (a batch scans it), or ``learn`` ignoring ``pred``."""
    if update_one is None:
        return (lambda state, x, y, pred: learn_one(state, x, y)), (lambda state, X, Y, preds: learn_batch(state, X, Y))

    def update_batch(state, X, Y, preds):
        return jax.lax.scan(lambda s, xyp: (update_one(s, *xyp), None), state, (X, Y, preds))[0]

    return update_one, update_batch


def _checked_prediction(pred, shape: tuple, dtype):
    """The boundary of ``update``'s ``pred``: a prediction pytree whose leaves match ``y``'s batch shape, cast to ``dtype``.

    ``mean`` and ``var`` are ``[]`` for one item and ``[b]`` for a batch;
    other leaves may carry one trailing axis (a mixture's components).
    """
    if not hasattr(pred, "mean") or not hasattr(pred, "var"):
        raise TypeError(f"pred: expected the prediction predict() returned, got {type(pred).__name__}")
    for name in ("mean", "var"):
        if tuple(jnp.shape(getattr(pred, name))) != tuple(shape):
            raise ValueError(f"pred: {name} of shape {jnp.shape(getattr(pred, name))} does not match y's shape "
                             f"{tuple(shape)}")
    for leaf in jax.tree_util.tree_leaves(pred):
        if tuple(jnp.shape(leaf))[:len(shape)] != tuple(shape) or jnp.ndim(leaf) > len(shape) + 1:
            raise ValueError(f"pred: leaves of shape {jnp.shape(leaf)} do not match y's shape {tuple(shape)}")
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype) if jnp.issubdtype(jnp.result_type(a),
                                                                                    jnp.floating) else a, pred)




def _checked_downdate(j_dd: Callable, takes_item: bool, n_features: int) -> Callable:
    """The boundary of ``downdate``: ``(state, x, y)`` checked like ``learn`` (one item only), or ``(state)``."""
    if not takes_item:
        return lambda state: j_dd(state)

    def dd(state, x, y):
        x, y = coerce_xy(x, y, n_features, state_dtype(state))
        if x.ndim == 2:
            raise ValueError("x: downdate takes one item, got a batch")
        return j_dd(state, x, y)

    return dd

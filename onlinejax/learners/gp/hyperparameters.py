"""Type-II MAP hyperparameters of one GP window, in named pieces.

:func:`tune_hyperparameters` maximises the window's log marginal likelihood
plus a hyperprior over :class:`~onlinejax.learners.gp.params.GPParams` with optax. It
is :func:`tune_window` (the window's constants, :class:`TuneWindow`),
:func:`tune_objective` (the loss, in the optimiser's coordinates
:func:`excess_to_params` / :func:`params_to_excess`), :func:`tune_start`,
:func:`tune_restart` (one L-BFGS or Adam run of a fixed length) and
:func:`select_restart`. The learner's ``tune``, which calls it and rebuilds the
factor once, is :func:`onlinejax.learners.gp.window.tune`. Its options are one value,
:class:`GPTuneOptions`.
"""
from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ...core.checks import check_bool, check_record
from ...core.base import check_int, check_positive, keep_if
from .params import GPParams
from .likelihood import mean_residuals, residual_log_marginal_likelihood

Array = jax.Array

__all__ = ["tune_hyperparameters", "GPTuneOptions", "NOISE_FLOOR", "LENGTHSCALE_PRIOR"]

#: Default ``GPTuneOptions.noise_floor``: after a tune the noise standard deviation is at least 3.2 % of
#: the window's target standard deviation. A larger floor widens the intervals of well-fitted
#: windows; a smaller one lets a tune on a noise-free or jumping window become overconfident.
NOISE_FLOOR = 1e-3
#: Default ``GPTuneOptions.lengthscale_prior``: a lengthscale 10× off the input spread costs 0.66 nats.
LENGTHSCALE_PRIOR = 2.0


class GPTuneOptions(NamedTuple):
    """The options of a GP's tune (:func:`tune_hyperparameters`, the learner's ``tune``): Python values.

    An immutable, hashable record passed as one value
    (``gp_window(d, W, tune_options=GPTuneOptions(steps=8))``); equal records
    build the same learner. The defaults are the learner's type-II MAP tune;
    ``GPTuneOptions(noise_floor=0.0, lengthscale_prior=None, from_data=False)``
    is maximum likelihood from the current hyperparameters (the thesis's tune).

    Attributes:
      steps: iterations of each start (a ``fori_loop`` of fixed count; default 20; 0 keeps the start).
      restarts: starts of the first tune (>= 1, default 2): the start, then copies with the
        lengthscales ×0.3 / ×3 and the noise ×10 / ×0.1 (:func:`tune_hyperparameters`).
      retune_restarts: starts of every later tune (>= 1, at most ``restarts``; default 1): later tunes
        begin from parameters already fitted to the stream, so fewer starts find the same optimum.
        Read by :func:`onlinejax.learners.gp.window.tune`; :func:`tune_hyperparameters` runs ``n_active``.
      method: ``"lbfgs"`` (the default; :func:`tune_restart`) or ``"adam"``.
      learning_rate: Adam's step size (> 0, default 0.05; ``method="adam"`` only).
      noise_floor: ``f >= 0`` (default :data:`NOISE_FLOOR`): the tune keeps the noise variance at least
        ``f·var(y)``, the window's target variance; 0 turns it off.
      lengthscale_prior: standard deviation ``s > 0`` of the log-normal prior on each lengthscale around
        the window's input spread, ``log ℓ_j ~ N(log sd(x_j), s²)`` (default :data:`LENGTHSCALE_PRIOR`;
        ``None``: maximum likelihood).
      from_data: also start from the window's statistics (``σ_f`` = residuals' root mean square,
        ``ℓ_j = sd(x_j)``) when that start has the better objective than the current hyperparameters
        (default True; :func:`tune_start`).
      retune_from_initial: ``False`` (default); ``True`` (needs ``restarts >= 2``): the second tune also runs
        ``restarts`` starts, the second of them from the learner's initial hyperparameters
        (:func:`restart_plan`). A first tune on a
        few items (a standardiser's warm-up) can settle where a tune on a whole window from the initial ones
        would not, and later tunes, each starting from the last, stay there: e.g. a ``linear()`` term carrying
        a 4-d stream's signal, the SE term's amplitude near 0 and its lengthscales without a gradient.
    """

    steps: int = 20
    restarts: int = 2
    retune_restarts: int = 1
    method: str = "lbfgs"
    learning_rate: float = 0.05
    noise_floor: float = NOISE_FLOOR
    lengthscale_prior: Optional[float] = LENGTHSCALE_PRIOR
    from_data: bool = True
    retune_from_initial: bool = False

    def checked(self) -> "GPTuneOptions":
        """The record with its values checked and as Python numbers (``ValueError`` naming the field)."""
        if self.method not in ("lbfgs", "adam"):
            raise ValueError(f"tune_options.method: must be 'lbfgs' or 'adam', got {self.method!r}")
        check_positive(self.learning_rate, "tune_options.learning_rate")
        if not (np.isfinite(self.noise_floor) and float(self.noise_floor) >= 0.0):
            raise ValueError(f"tune_options.noise_floor: must be finite and >= 0, got {self.noise_floor!r}")
        prior = self.lengthscale_prior
        if prior is not None:
            check_positive(prior, "tune_options.lengthscale_prior")
            prior = float(prior)
        check_bool(self.from_data, "tune_options.from_data")
        check_bool(self.retune_from_initial, "tune_options.retune_from_initial")
        if self.retune_from_initial and check_int(self.restarts, "tune_options.restarts", 1) < 2:
            raise ValueError("tune_options.retune_from_initial: needs restarts >= 2 (its second start is the "
                             f"initial hyperparameters), got restarts={self.restarts!r}")
        return GPTuneOptions(check_int(self.steps, "tune_options.steps", 0),
                             check_int(self.restarts, "tune_options.restarts", 1),
                             check_int(self.retune_restarts, "tune_options.retune_restarts", 1), self.method,
                             float(self.learning_rate), float(self.noise_floor), prior, bool(self.from_data),
                             bool(self.retune_from_initial))


def checked_tune_options(options) -> GPTuneOptions:
    """``options`` checked (:meth:`GPTuneOptions.checked`); a ``TypeError`` naming ``tune_options`` if not a record."""
    return check_record(options, GPTuneOptions, "tune_options").checked()


class TuneWindow(NamedTuple):
    """The window's constants in the tune's objective (:func:`tune_window`; arrays, so a tune vmaps).

    Attributes:
      X: ``[W, d]``; valid: ``[W]`` bool; r: ``[W]`` residuals ``y - m(X)`` of
        the mean function (0 on empty slots; ``m`` does not depend on ``θ``).
      n: ``[]`` valid items (at least 1).
      floor, log_floor, has_floor: ``[]`` the absolute noise-variance floor
        ``f·var(y)``, its log (finite) and ``floor > 0``.
      spread: ``[d]`` bool, input ``j`` varies over the valid items (:func:`tune_window`);
        log_sd_x: ``[d]`` ``log sd(x_j)`` (0 without spread).
    """

    X: Array
    valid: Array
    r: Array
    n: Array
    floor: Array
    log_floor: Array
    has_floor: Array
    spread: Array
    log_sd_x: Array


def _window_moments(X, y, valid):
    """``(n, sd_x [d], var_y)`` of the window's valid items (population moments; ``n >= 1``)."""
    w = valid.astype(X.dtype)
    n = jnp.maximum(jnp.sum(w), 1.0)
    xm = (w @ X) / n
    sd_x = jnp.sqrt((w @ ((X - xm) ** 2)) / n)
    ym = jnp.sum(w * y) / n
    return n, sd_x, jnp.sum(w * (y - ym) ** 2) / n


def tune_window(mean, X: Array, y: Array, valid: Array, noise_floor=0.0, dtype=None) -> TuneWindow:
    """:class:`TuneWindow` of the window ``X: [W, d]``, ``y: [W]``, ``valid: [W]``.

    The mean function is fitted once here (an SVD for ``"ols"``), not per
    evaluation of the objective; ``noise_floor = f`` (static, >= 0) gives the
    absolute floor ``f·var(y)`` of the window's population target variance.
    An input has a spread where its valid values range over more than 10
    rounding units of their magnitude: the window says nothing about the
    lengthscale of one that does not (a stuck sensor), so the tune leaves it
    where it was (no prior on it, no restart moves it).
    """
    dt = dtype or X.dtype
    n, sd_x, var_y = _window_moments(X, y, valid)
    floor = jnp.asarray(noise_floor, dt) * var_y  # absolute noise-variance floor for this window
    log_floor = jnp.log(jnp.maximum(floor, jnp.finfo(dt).tiny))
    r = mean_residuals(mean, X, y, valid)[1]
    # a range beyond rounding, not sd > 0: the sd of a constant column is rounding noise (~1e-7 in float32),
    # and a prior centred there fits a lengthscale that makes every other value of that input unseen
    m = valid[:, None]
    hi, lo = jnp.max(jnp.where(m, X, -jnp.inf), axis=0), jnp.min(jnp.where(m, X, jnp.inf), axis=0)
    spread = (hi - lo > 10.0 * jnp.finfo(X.dtype).eps * jnp.maximum(jnp.abs(hi), jnp.abs(lo))) & (sd_x > 0)
    return TuneWindow(X, valid, r, n, floor, log_floor, floor > 0, spread, jnp.log(jnp.where(spread, sd_x, 1.0)))


def excess_to_params(w: TuneWindow, t: GPParams) -> GPParams:
    """Optimiser coordinates ``θ`` to :class:`~onlinejax.learners.gp.params.GPParams`: ``σ_n² = exp(2θ_n) + floor``.

    Without a floor, ``θ`` itself.
    """
    ln = jnp.where(w.has_floor, 0.5 * jnp.logaddexp(2.0 * t.log_noise_std, w.log_floor), t.log_noise_std)
    return t._replace(log_noise_std=ln)


def params_to_excess(w: TuneWindow, p: GPParams) -> GPParams:
    """Inverse of :func:`excess_to_params`; the excess is kept at least ``1e-3·σ_n²``."""
    v = jnp.exp(2.0 * p.log_noise_std)
    return p._replace(log_noise_std=0.5 * jnp.log(jnp.maximum(v - w.floor, 1e-3 * v)))


def _log_prior(w: TuneWindow, t: GPParams, lengthscale_prior: Optional[float]) -> Array:
    """``Σ_j -½((log ℓ_j - log sd(x_j))/s)²`` over dimensions with spread; 0 without a prior (``s = None``)."""
    if lengthscale_prior is None:
        return jnp.zeros((), t.log_noise_std.dtype)
    u = (t.log_lengthscale - w.log_sd_x) / lengthscale_prior
    return -0.5 * jnp.sum(jnp.where(w.spread, u * u, 0.0))


def tune_objective(t: GPParams, w: TuneWindow, kernel: Callable, lengthscale_prior: Optional[float] = None) -> Array:
    """The tune's loss ``-(log p(r | X, θ) + log p(θ)) / n``: ``[]``, differentiable in ``t``.

    ``log p(r | X, θ)`` is the window's log marginal likelihood (thesis eq.
    4.29, R&W eq. 2.30;
    :func:`~onlinejax.learners.gp.likelihood.residual_log_marginal_likelihood`) at
    :func:`excess_to_params` of ``t``; ``log p(θ)`` the log-normal
    lengthscale prior (R&W eq. 5.5's numerator: type-II MAP).
    """
    lml = residual_log_marginal_likelihood(kernel, excess_to_params(w, t), w.X, w.r, w.valid)
    return -(lml + _log_prior(w, t, lengthscale_prior)) / w.n


def tune_start(loss: Callable, w: TuneWindow, params: GPParams, from_data: bool = False) -> GPParams:
    """The tune's first start (optimiser coordinates): ``params``, or the window's statistics if better.

    With ``from_data`` the data start is ``σ_f`` = root mean square of the
    residuals, ``σ_n = 0.1σ_f``, ``ℓ_j = sd(x_j)`` (the current values where
    these are 0 or input ``j`` has no spread); it is taken when its ``loss`` is finite and not worse.
    Both starts are scored in one batched call.
    """
    base = params_to_excess(w, params)
    if not from_data:
        return base
    dt = params.log_noise_std.dtype
    rms = jnp.sqrt(jnp.sum(w.r * w.r) / w.n)
    ok = rms > 0
    data = base._replace(log_signal_std=jnp.where(ok, jnp.log(jnp.where(ok, rms, 1.0)), params.log_signal_std),
                         log_noise_std=jnp.where(ok, jnp.log(jnp.where(ok, 0.1 * rms, 1.0)), base.log_noise_std),
                         log_lengthscale=jnp.where(w.spread, w.log_sd_x, params.log_lengthscale).astype(dt))
    l_data, l_base = jax.vmap(loss)(_stacked(data, base))
    better = jnp.isfinite(l_data) & ~(l_base <= l_data)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(better, a, b), data, base)


def _stacked(*trees):
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *trees)


def _restart_starts(base: GPParams, restarts: int, spread: Array) -> GPParams:
    """``restarts`` starts stacked on a leading axis: ``base``, then lengthscales ×0.3 / ×3 and noise ×10 / ×0.1.

    Only the lengthscales of inputs with a spread (``spread: [d]`` bool) move: the window says nothing about
    the others, whose loss is flat, so any start would be kept.
    """
    dt = base.log_noise_std.dtype
    offs = jnp.asarray([[0.0, 0.0], [jnp.log(0.3), jnp.log(10.0)], [jnp.log(3.0), jnp.log(0.1)],
                        [0.0, jnp.log(10.0)], [jnp.log(0.3), 0.0], [jnp.log(3.0), 0.0]], dt)
    offs = offs[jnp.arange(restarts) % offs.shape[0]]
    return jax.vmap(lambda o: base._replace(log_lengthscale=base.log_lengthscale + jnp.where(spread, o[0], 0.0),
                                            log_noise_std=base.log_noise_std + o[1]))(offs)


#: Step sizes along the quasi-Newton direction that :func:`tune_restart` tries: the unit step, then the rest at once.
LINE_SEARCH_STEPS = (1.0, 0.3, 0.1, 0.01, 0.001)


def _finite_tree(t) -> Array:
    return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(l)) for l in jax.tree_util.tree_leaves(t)]))


def tune_restart(loss: Callable, p0: GPParams, active: Array, *, steps: int = 20, method: str = "lbfgs",
                 learning_rate: float = 0.05) -> tuple[GPParams, Array, Array]:
    """One restart: minimise ``loss`` from ``p0`` in ``steps`` iterations of a fixed count (a ``fori_loop``).

    ``method="lbfgs"``: each iteration takes the loss and its gradient at
    ``p``, the L-BFGS direction ``u`` (Nocedal & Wright alg. 7.4,
    :func:`optax.scale_by_lbfgs`) and a line search without a loop: the
    unit step ``p - u`` is taken if it decreases the loss sufficiently
    (Armijo, N&W eq. 3.4); otherwise the shorter steps ``p - a·u`` of
    :data:`LINE_SEARCH_STEPS` are scored at once (one batched Cholesky, in
    a ``cond``: on one stream it runs only when the unit step fails) and the
    best finite step is taken. The loss thus appears three times in the
    program (with its gradient, at the unit step, batched) whatever
    ``steps`` is, and the gradient is taken once per iteration, at the point
    reached. An iteration that lowers the loss by no more than ``10 eps``
    relatively, or that finds a non-finite gradient, ends the restart: the
    remaining iterations are a ``cond`` that passes the carry on (skipped on
    one stream; under ``vmap`` every stream pays for ``steps`` iterations).
    A curvature pair with ``s·y <= 0`` (the objective is not convex) would
    turn the next direction uphill, so the memory then starts afresh.
    ``"adam"``: ``steps`` Adam steps at
    ``learning_rate``; a step to non-finite parameters is not taken. Neither
    has a data-dependent loop, so a tune is the same program on every
    backend and costs no host round trip on a GPU. An inactive restart
    (``active: []`` bool false) does not move and scores ``inf``.

    Returns:
      ``(p, loss(p), loss(p0))`` (both losses ``inf`` for an inactive restart).
    """
    dt = p0.log_noise_std.dtype
    if method == "adam":
        return _adam_restart(loss, p0, active, steps, learning_rate)
    if steps == 0:
        v0 = jnp.where(active, loss(p0), jnp.inf)
        return p0, v0, v0
    lbfgs = optax.scale_by_lbfgs()
    sizes = jnp.asarray(LINE_SEARCH_STEPS, dt)
    ftol = 10.0 * float(jnp.finfo(dt).eps)
    inf = jnp.asarray(jnp.inf, dt)

    def iterate(c):
        p, st, _, v_first, _ = c
        v, g = jax.value_and_grad(loss)(p)
        ok = jnp.isfinite(v) & _finite_tree(g)
        # a pair with s·y <= 0 would turn the direction uphill: the memory starts afresh (Nocedal & Wright §7.2)
        curved = optax.tree.vdot(optax.tree.sub(p, st.params), optax.tree.sub(g, st.updates)) > 0
        st = keep_if((st.count == 0) | curved, st, lbfgs.init(p))
        u, st_next = lbfgs.update(g, st, p)
        cands = jax.vmap(lambda a: jax.tree_util.tree_map(lambda x, d: x - a * d, p, u))(sizes)
        v1 = loss(jax.tree_util.tree_map(lambda x: x[0], cands))
        # Armijo's sufficient decrease at the unit step (Nocedal & Wright eq. 3.4, c₁ = 1e-4)
        unit_ok = v1 <= v - 1e-4 * jnp.abs(optax.tree.vdot(g, u))
        short = jax.tree_util.tree_map(lambda x: x[1:], cands)
        vs = jnp.concatenate([v1[None], jax.lax.cond(unit_ok, lambda c: jnp.full(sizes.shape[0] - 1, jnp.inf, dt),
                                                     lambda c: jax.vmap(loss)(c), short)])
        vs = jnp.where(jnp.isfinite(vs), vs, jnp.inf)
        best = jnp.where(unit_ok, 0, jnp.argmin(vs))
        moved = ok & (vs[best] < v - ftol * jnp.maximum(1.0, jnp.abs(v)))
        v_first = jnp.where(jnp.isinf(v_first), v, v_first)
        p_new = jax.tree_util.tree_map(lambda x: x[best], cands)
        return keep_if(moved, (p_new, st_next, vs[best], v_first, jnp.asarray(False)),
                       (p, st, v, v_first, jnp.asarray(True)))

    c0 = (p0, lbfgs.init(p0), inf, inf, ~active)
    c = jax.lax.fori_loop(0, steps, lambda _, c: jax.lax.cond(c[4], lambda c: c, iterate, c), c0)
    return c[0], c[2], c[3]


def _adam_restart(loss: Callable, p0: GPParams, active: Array, steps: int, learning_rate: float):
    opt = optax.adam(learning_rate)

    def adam_step(_, c):
        p, st = c
        u, st = opt.update(jax.grad(loss)(p), st, p)
        p_new = optax.apply_updates(p, u)
        return keep_if(active & _finite_tree(p_new), p_new, p), st

    p = jax.lax.fori_loop(0, steps, adam_step, (p0, opt.init(p0)))[0]
    l_p, l_0 = jax.vmap(loss)(_stacked(p, p0))
    inf = jnp.asarray(jnp.inf, l_p.dtype)
    return p, jnp.where(active, l_p, inf), jnp.where(active, l_0, inf)


def select_restart(w: TuneWindow, ps: GPParams, ls: Array, l_base: Array, active: Array, base: GPParams,
                   params: GPParams) -> GPParams:
    """The tune's result from the restarts' ``ps`` (stacked) and final losses ``ls: [restarts]``.

    The active restart with the lowest finite loss, if not worse than the
    start ``base`` (whose loss is ``l_base: []``, the first restart's
    starting loss); else ``base``; ``params`` itself when neither loss is
    finite. Returned as :class:`~onlinejax.learners.gp.params.GPParams` (:func:`excess_to_params`).
    """
    ls = jnp.where(jnp.isfinite(ls) & active, ls, jnp.inf)
    best = jnp.argmin(ls)
    cand = jax.tree_util.tree_map(lambda a: a[best], ps)
    out = keep_if(jnp.isfinite(ls[best]) & ~(ls[best] > l_base), cand, base)
    return keep_if(jnp.isfinite(ls[best]) | jnp.isfinite(l_base), excess_to_params(w, out), params)


def restart_plan(o: GPTuneOptions, n_tunes: Array, initial: Callable[[], GPParams]):
    """``(n_active, second)`` for a learner's tune after ``n_tunes: []`` earlier ones (``o`` checked).

    ``n_active``: ``o.restarts`` starts on the first tune, ``min(o.retune_restarts, o.restarts)`` afterwards,
    and with ``o.retune_from_initial`` ``o.restarts`` on the second too, whose second start is then
    ``initial()`` (the learner's initial hyperparameters): ``second = (initial(), n_tunes == 1)`` for
    :func:`tune_hyperparameters` (``None`` without the option).
    """
    later = min(o.retune_restarts, o.restarts)
    if not o.retune_from_initial:
        return jnp.where(n_tunes == 0, o.restarts, later), None
    return jnp.where(n_tunes <= 1, o.restarts, later), (initial(), n_tunes == 1)


def tune_hyperparameters(kernel, mean, params: GPParams, X, y, valid, *,
                         tune_options: GPTuneOptions = GPTuneOptions(), n_active=None, second=None) -> GPParams:
    """Maximise the window's log marginal likelihood (or posterior, with a prior) over ``params`` with optax.

    The objective (:func:`tune_objective`) is ``log p(y | X, θ) + log p(θ)``
    (Rasmussen & Williams eq. 5.8 plus a hyperprior: the log of the
    numerator of their eq. 5.5, i.e. type-II MAP), divided by the window's
    item count, where (the fields of ``tune_options``, :class:`GPTuneOptions`)

    * ``noise_floor = f`` adds ``f·var(y)`` (the window's target variance) to
      the noise variance: the optimiser works on the excess
      ``σ_n² - f·var(y)`` (:func:`excess_to_params`), and the returned
      ``σ_n²`` includes it. A smooth kernel fitted to a window with a jump,
      or to noise-free targets, otherwise interpolates with the noise at the
      dtype's floor (:func:`~onlinejax.learners.gp.params.noise_floor_rel`): the
      predictive standard deviation becomes a tiny fraction of the targets'
      spread and the next jump or drift scores a huge ``z``. A nugget
      relative to the data's scale is the usual remedy in GP emulation
      (Gramacy & Lee 2012, "Cases for the nugget in modeling computer
      experiments");
    * ``lengthscale_prior = s`` puts a log-normal prior on each lengthscale,
      ``log ℓ_j ~ N(log sd(x_j), s²)`` with ``sd(x_j)`` the window's input
      spread in dimension ``j`` (none where the input does not vary: a
      stuck input keeps its lengthscale, see :func:`tune_window`). The
      likelihood is flat in ``ℓ_j`` once ``ℓ_j`` is far below the inputs'
      spacing (``K ≈ (σ_f² + σ_n²)I``: every ``∂K/∂ℓ_j`` vanishes), and the
      optimiser drifts there to a white-noise fit; the prior pulls it back
      and costs only ``½(log 10/s)²`` nats for a lengthscale 10× off;
    * ``from_data=True`` also considers a start from the window's statistics
      (:func:`tune_start`) and begins from whichever of it and ``params`` has
      the better objective. The default hyperparameters (1, 0.1, 1) are
      unit-scale: on inputs of scale 50 and targets of scale 10⁵ every pair
      of points is ~20 lengthscales apart, the likelihood is flat in the
      lengthscales and L-BFGS stops at a white-noise fit that predicts the
      mean function everywhere.

    Runs ``restarts`` starts (:func:`tune_restart`) one after another
    (``lax.map``, a ``scan`` of static length: on one stream a start that
    has converged, or is inactive, skips its remaining iterations; under
    ``vmap`` the two forms cost the same): the start above and
    copies with lengthscales ×0.3 / ×3 and noise ×10 / ×0.1, each for
    ``steps`` iterations, and returns the start with the best final
    objective (:func:`select_restart`: NaN runs are ignored; if all fail the
    start is returned, or ``params`` if the objective is not finite there).
    One compiled call; vmaps over windows. ``n_active`` (an int32 array,
    default ``restarts``) runs only the first ``n_active`` starts and skips
    the others, so the number of starts can change between calls without
    recompiling (``tune_options.retune_restarts`` is the learner's, not read
    here). ``GPTuneOptions(noise_floor=0.0, lengthscale_prior=None,
    from_data=False)`` is maximum likelihood from ``params``.

    Args:
      kernel: pair kernel; mean: a name of :data:`~onlinejax.learners.gp.likelihood.MEANS` or a ``[]`` index (static or traced).
      params: :class:`~onlinejax.learners.gp.params.GPParams` to start from; X: ``[W, d]``; y: ``[W]``; valid: ``[W]`` bool.
      tune_options: :class:`GPTuneOptions` (static; default: the learner's tune).
      n_active: ``None`` or a ``[]`` int32 array, the number of starts run (at most ``tune_options.restarts``).
      second: ``None``, or ``(GPParams, [] bool)``: where the bool holds, the second start is these
        hyperparameters instead of the start's copy (:func:`restart_plan`; needs ``restarts >= 2``).
    Returns:
      :class:`~onlinejax.learners.gp.params.GPParams` (the same shapes as ``params``).
    Raises:
      ValueError: naming the field of a bad option (``tune_options.noise_floor: ...``), or ``second`` with
        fewer than two restarts.
    """
    o = checked_tune_options(tune_options)
    w = tune_window(mean, X, y, valid, o.noise_floor, params.log_noise_std.dtype)
    loss = partial(tune_objective, w=w, kernel=kernel, lengthscale_prior=o.lengthscale_prior)
    base = tune_start(loss, w, params, o.from_data)
    n_active = o.restarts if n_active is None else jnp.maximum(n_active, 1)
    active = jnp.arange(o.restarts) < n_active
    run = partial(tune_restart, loss, steps=o.steps, method=o.method, learning_rate=o.learning_rate)
    starts = _restart_starts(base, o.restarts, w.spread)
    if second is not None:
        if o.restarts < 2:
            raise ValueError(f"second: needs tune_options.restarts >= 2, got {o.restarts}")
        q, use = second
        starts = jax.tree_util.tree_map(lambda a, b: a.at[1].set(jnp.where(use, b.astype(a.dtype), a[1])), starts, q)
    ps, ls, l_starts = jax.lax.map(lambda a: run(*a), (starts, active))
    return select_restart(w, ps, ls, l_starts[0], active, base, params)

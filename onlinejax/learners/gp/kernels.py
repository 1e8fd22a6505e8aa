"""Stationary kernels written for one pair of points and lifted with ``vmap`` (tinygp style).

Hyperparameters live in an array pytree :class:`GPParams`, stored
unconstrained (logs), so they vmap and differentiate:

* squared exponential with ARD lengthscales (thesis eq. 4.27):
  ``k(x, x') = σ_f² exp(-½ Σ_j (x_j - x'_j)²/ℓ_j²)``;
* Matérn 3/2: ``σ_f² (1 + √3 r) exp(-√3 r)``, Matérn 5/2:
  ``σ_f² (1 + √5 r + 5r²/3) exp(-√5 r)``, with ``r² = Σ_j (x_j - x'_j)²/ℓ_j²``
  (Rasmussen & Williams eq. 4.17).
* periodic (MacKay 1998; R&W eq. 4.31, one period per input):
  ``σ_f² exp(-2 Σ_j sin²(π(x_j - x'_j)/P_j)/λ_j²)`` (:func:`periodic`);
* linear, ``σ_f² xᵀx'/d`` (:func:`linear`); sums and products, ``as_kernel("se") + periodic(12.0)``
  (:class:`Kernel`): the right-hand term has its own amplitude (a sum) and
  lengthscales, stored relative to the left-hand term's.

Any function with the same signature, ``kernel(p, x1, x2) -> []``, is a
kernel too (:func:`resolve_kernel` checks one; :func:`cross` and
:func:`gram` lift it with ``vmap``, the built-ins take a faster matrix path).
A kernel with hyperparameters of its own (a period, a second term's
amplitude) is a :class:`Kernel`: it reads them from ``p.extra``, a pytree
that :meth:`Kernel.extra_init` builds, so they vmap, differentiate and are
tuned with the rest (:func:`onlinejax.learners.gp.hyperparameters.tune_hyperparameters`).

The Matérn kernels use a guarded ``r = sqrt(r²)`` whose gradient is finite at
``r = 0`` (duplicate inputs), where the exact derivative in ``r²`` is used.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...core.base import check_positive, default_float_dtype
from .params import GPParams, lengthscales, signal_var

Array = jax.Array

__all__ = [
    "gp_params",
    "KERNELS",
    "resolve_kernel",
    "gram",
    "cross",
    "squared_exponential",
    "matern32",
    "matern52",
    "Kernel",
    "as_kernel",
    "periodic",
    "linear",
]


def gp_params(n_features: int, signal_std=1.0, noise_std=0.1, lengthscale=1.0, dtype=None, kernel=None) -> GPParams:
    """Build :class:`GPParams` from positive values (``lengthscale``: ``[]`` or ``[d]``).

    ``kernel``: a :class:`Kernel` whose own hyperparameters start at its defaults
    (:meth:`Kernel.extra_init`); a plain pair kernel or ``None`` has none.
    """
    check_positive(signal_std, "signal_std")
    check_positive(noise_std, "noise_std")
    check_positive(lengthscale, "lengthscale")
    dt = dtype or default_float_dtype()
    d = int(n_features)
    for name, v in (("signal_std", signal_std), ("noise_std", noise_std)):
        if np.ndim(v) != 0:
            raise ValueError(f"{name}: must be a scalar, got shape {np.shape(v)}")
    if np.shape(lengthscale) not in ((), (d,)):
        raise ValueError(f"lengthscale: must be a scalar or have shape [{d}], got shape {np.shape(lengthscale)}")
    ls = jnp.broadcast_to(jnp.asarray(lengthscale, dt), (d,))
    extra = kernel.extra_init(d, dt) if isinstance(kernel, Kernel) else ()
    return GPParams(jnp.log(jnp.asarray(signal_std, dt)), jnp.log(jnp.asarray(noise_std, dt)), jnp.log(ls), extra)


def _r2(p, x1, x2):
    z = (x1 - x2) / lengthscales(p)
    return jnp.sum(z * z)  # not z @ z: that is a batched dot under vmap, slower to differentiate on a CPU


def _safe_r(r2):
    pos = r2 > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, r2, 1.0)), 0.0)


def _se_profile(r2):
    return jnp.exp(-0.5 * r2)


def _matern32_profile(r2):
    r = jnp.sqrt(3.0) * _safe_r(r2)
    return (1.0 + r) * jnp.exp(-r)


def _matern52_profile(r2):
    r = jnp.sqrt(5.0) * _safe_r(r2)
    return (1.0 + r + 5.0 * r2 / 3.0) * jnp.exp(-r)


def squared_exponential(p: GPParams, x1: Array, x2: Array) -> Array:
    """SE-ARD kernel for one pair ``x1, x2: [d]`` (thesis eq. 4.27)."""
    return signal_var(p) * _se_profile(_r2(p, x1, x2))


def matern32(p: GPParams, x1: Array, x2: Array) -> Array:
    """Matérn 3/2 for one pair ``x1, x2: [d]`` (R&W eq. 4.17 with ν = 3/2)."""
    return signal_var(p) * _matern32_profile(_r2(p, x1, x2))


def matern52(p: GPParams, x1: Array, x2: Array) -> Array:
    """Matérn 5/2 for one pair ``x1, x2: [d]`` (R&W eq. 4.17 with ν = 5/2)."""
    return signal_var(p) * _matern52_profile(_r2(p, x1, x2))


# k(x, x') = σ_f² f(r²) for the built-in kernels: gram() evaluates f on the whole matrix of
# scaled squared distances instead of vmapping the pair kernel (the same formula; its gradient,
# needed on every iteration of a tune, is much cheaper as one matrix expression)
_PROFILES = {squared_exponential: _se_profile, matern32: _matern32_profile, matern52: _matern52_profile}


KERNELS: dict[str, Callable] = {"se": squared_exponential, "matern32": matern32, "matern52": matern52}


def resolve_kernel(kernel, n_features: int) -> Callable:
    """The pair kernel named by ``kernel`` (a key of :data:`KERNELS`), or ``kernel`` itself if it is one.

    A callable must have the built-ins' signature, ``kernel(p, x1, x2) -> []``
    with ``p`` a :class:`GPParams` of ``n_features`` lengthscales and
    ``x1, x2: [d]`` (tinygp style); it is checked by tracing it once
    (``jax.eval_shape``, nothing is computed). :func:`cross` and :func:`gram`
    lift it with ``vmap``.

    Raises:
      ValueError: naming ``kernel``, for an unknown name, a non-callable, or a
        callable that fails on (or does not return a scalar for) one pair.
    """
    if isinstance(kernel, str) or not callable(kernel):
        if isinstance(kernel, str) and kernel in KERNELS:
            return KERNELS[kernel]
        raise ValueError(f"kernel: must be one of {tuple(KERNELS)} or a pair kernel k(params, x1, x2), got {kernel!r}")
    dt = default_float_dtype()
    vec = jax.ShapeDtypeStruct((int(n_features),), dt)
    try:
        params = jax.eval_shape(lambda: gp_params(n_features, dtype=dt, kernel=kernel))
        out = jax.eval_shape(kernel, params, vec, vec)
    except Exception as e:  # noqa: BLE001  (any failure of a user's function is a bad argument)
        raise ValueError(f"kernel: calling kernel(params, x1, x2) on one pair of [{n_features}] inputs failed: "
                         f"{type(e).__name__}: {e}") from e
    if getattr(out, "shape", None) != ():
        raise ValueError(f"kernel: must return a scalar k(x1, x2) for one pair, got {out!r}")
    return kernel


def _scaled_sq_dist(p: GPParams, X1: Array, X2: Array) -> Array:
    """``[n, m]`` ``r²_ij = Σ_k ((X1_ik - X2_jk)/ℓ_k)²``, summed feature by feature.

    Differences, not ``|a|² + |b|² - 2aᵀb`` (which cancels for near-duplicate
    inputs in float32). One ``[n, m]`` term per feature for ``d <= 16``:
    XLA:CPU reduces a ``[n, m, d]`` array over its short minor axis slowly.
    """
    ls = jnp.broadcast_to(lengthscales(p), X1.shape[-1:])
    Z1, Z2 = X1 / ls, X2 / ls
    if X1.shape[-1] > 16:
        return jnp.sum((Z1[:, None, :] - Z2[None, :, :]) ** 2, axis=-1)
    return sum((Z1[:, k][:, None] - Z2[:, k][None, :]) ** 2 for k in range(X1.shape[-1]))


def cross(kernel: Callable, p: GPParams, X: Array, x: Array) -> Array:
    """``[n]`` vector ``k(X_i, x)`` (built-in kernels from :func:`_scaled_sq_dist`, others by ``vmap``)."""
    return gram(kernel, p, X, x[None, :])[:, 0] if _matrix_path(kernel) else jax.vmap(kernel, (None, 0, None))(p, X, x)


def gram(kernel: Callable, p: GPParams, X1: Array, X2: Array) -> Array:
    """``[n, m]`` matrix ``k(X1_i, X2_j)``.

    Any pair kernel is lifted with ``vmap``; the built-in stationary kernels
    are evaluated from the ``[n, m]`` matrix of scaled squared distances
    ``r²`` (the same formula, differentiated several times faster on CPU).
    """
    if isinstance(kernel, Kernel):
        return kernel.gram(p, X1, X2)
    profile = _PROFILES.get(kernel)
    if profile is None:
        return jax.vmap(lambda a: cross(kernel, p, X2, a))(X1)
    return signal_var(p) * profile(_scaled_sq_dist(p, X1, X2))


def _matrix_path(kernel) -> bool:
    """Whether :func:`gram` has a matrix formula for ``kernel`` (built-ins, and kernels made of them)."""
    if isinstance(kernel, Kernel):
        return kernel.has_matrix_path()
    return kernel in _PROFILES


# --------------------------------------------------------------------------
# kernels with hyperparameters of their own, and their sums and products
# --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Kernel:
    """A pair kernel ``k(p, x1, x2) -> []`` that may have hyperparameters of its own, in ``p.extra``.

    Compose with ``+`` and ``*`` (a name such as ``"se"`` or a plain pair
    kernel on either side is wrapped by :func:`as_kernel`):
    ``as_kernel("se") + periodic(12.0)`` is a trend plus a seasonal term,
    ``as_kernel("se") * periodic(12.0)`` a locally periodic kernel. In
    ``k1 + k2`` the left term reads the shared ``σ_f``, ``ℓ`` of
    :class:`GPParams`; the right term's amplitude and lengthscales are the
    shared ones times ``exp`` of its own ``log_rel_signal_std`` ``[]`` and
    ``log_rel_lengthscale`` ``[d]`` (0 at the start; only for a right term
    that reads ``ℓ``: :func:`periodic` has its own), so the tune's
    scale-free start (``σ_f`` from the residuals, ``ℓ`` from the inputs'
    spread) sets both. In ``k1 * k2`` the right term's amplitude is 1 (the
    product's is the left term's). Equal kernels compare and hash equal
    (frozen dataclasses), so learners built with equal kernels share compiled
    programs.
    """

    def __call__(self, p: GPParams, x1: Array, x2: Array) -> Array:
        raise NotImplementedError

    def extra_init(self, n_features: int, dtype) -> Any:
        """The kernel's own hyperparameters at their defaults (unconstrained): a pytree, ``()`` for none."""
        return ()

    def gram(self, p: GPParams, X1: Array, X2: Array) -> Array:
        """``[n, m]`` ``k(X1_i, X2_j)`` (the pair kernel lifted with ``vmap``, unless a subclass knows better)."""
        return jax.vmap(lambda a: jax.vmap(lambda b: self(p, a, b))(X2))(X1)

    def has_matrix_path(self) -> bool:
        return False

    def uses_lengthscale(self) -> bool:
        """Whether the kernel reads :class:`GPParams`'s lengthscales (a sum's right term then gets its own)."""
        return True

    def __add__(self, other) -> "Kernel":
        return _Sum(self, as_kernel(other))

    def __radd__(self, other) -> "Kernel":
        return _Sum(as_kernel(other), self)

    def __mul__(self, other) -> "Kernel":
        return _Product(self, as_kernel(other))

    def __rmul__(self, other) -> "Kernel":
        return _Product(as_kernel(other), self)


@dataclasses.dataclass(frozen=True)
class _PairKernel(Kernel):
    """A plain pair kernel (a built-in or the user's) as a :class:`Kernel` without hyperparameters of its own."""

    fn: Callable

    def __repr__(self) -> str:
        name = next((k for k, v in KERNELS.items() if v is self.fn), None)
        return f"as_kernel({name!r})" if name else f"as_kernel({getattr(self.fn, '__name__', self.fn)})"

    def __call__(self, p, x1, x2):
        return self.fn(p, x1, x2)

    def gram(self, p, X1, X2):
        return gram(self.fn, p, X1, X2)

    def has_matrix_path(self) -> bool:
        return self.fn in _PROFILES


@dataclasses.dataclass(frozen=True)
class _Periodic(Kernel):
    period: float
    lengthscale: float

    def __repr__(self) -> str:
        return f"periodic({self.period!r}, {self.lengthscale!r})"

    def extra_init(self, n_features, dtype):
        d = (int(n_features),)
        return {"log_period": jnp.full(d, math.log(self.period), dtype),
                "log_lengthscale": jnp.full(d, math.log(self.lengthscale), dtype)}

    def __call__(self, p, x1, x2):
        return self.gram(p, x1[None, :], x2[None, :])[0, 0]

    def gram(self, p, X1, X2):
        period, ls = jnp.exp(p.extra["log_period"]), jnp.exp(p.extra["log_lengthscale"])
        s = jnp.sin(jnp.pi * (X1[:, None, :] - X2[None, :, :]) / period) / ls
        return signal_var(p) * jnp.exp(-2.0 * jnp.sum(s * s, axis=-1))

    def has_matrix_path(self) -> bool:
        return True

    def uses_lengthscale(self) -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class _Linear(Kernel):
    def __repr__(self) -> str:
        return "linear()"

    def __call__(self, p, x1, x2):
        return self.gram(p, x1[None, :], x2[None, :])[0, 0]

    def gram(self, p, X1, X2):
        return signal_var(p) * (X1 @ X2.T) / X1.shape[-1]

    def has_matrix_path(self) -> bool:
        return True

    def uses_lengthscale(self) -> bool:
        return False


def _right_params(p: GPParams, own: dict, amplitude: bool) -> GPParams:
    """The right-hand term's parameters: the shared ones times its relative amplitude (a sum) and lengthscales."""
    sig = p.log_signal_std + own["log_rel_signal_std"] if amplitude else jnp.zeros_like(p.log_signal_std)
    ls = p.log_lengthscale + own["log_rel_lengthscale"] if "log_rel_lengthscale" in own else p.log_lengthscale
    return p._replace(log_signal_std=sig, log_lengthscale=ls, extra=own["extra"])


@dataclasses.dataclass(frozen=True)
class _Composite(Kernel):
    left: Kernel
    right: Kernel

    amplitude = True  # whether the right-hand term has its own amplitude

    def extra_init(self, n_features, dtype):
        own = {"extra": self.right.extra_init(n_features, dtype)}
        if self.right.uses_lengthscale():
            own["log_rel_lengthscale"] = jnp.zeros((int(n_features),), dtype)
        if self.amplitude:
            own["log_rel_signal_std"] = jnp.zeros((), dtype)
        return (self.left.extra_init(n_features, dtype), own)

    def _terms(self, p: GPParams):
        left_extra, own = p.extra
        return p._replace(extra=left_extra), _right_params(p, own, self.amplitude)

    def has_matrix_path(self) -> bool:
        return self.left.has_matrix_path() and self.right.has_matrix_path()

    def uses_lengthscale(self) -> bool:
        return self.left.uses_lengthscale() or self.right.uses_lengthscale()


@dataclasses.dataclass(frozen=True)
class _Sum(_Composite):
    """``k1 + k2`` (:class:`Kernel`)."""

    def __repr__(self) -> str:
        return f"{self.left!r} + {self.right!r}"

    def __call__(self, p, x1, x2):
        pl, pr = self._terms(p)
        return self.left(pl, x1, x2) + self.right(pr, x1, x2)

    def gram(self, p, X1, X2):
        pl, pr = self._terms(p)
        return self.left.gram(pl, X1, X2) + self.right.gram(pr, X1, X2)


@dataclasses.dataclass(frozen=True)
class _Product(_Composite):
    """``k1 · k2`` (:class:`Kernel`); the right-hand term's amplitude is 1."""

    def __repr__(self) -> str:
        return f"({self.left!r}) * ({self.right!r})"

    amplitude = False

    def __call__(self, p, x1, x2):
        pl, pr = self._terms(p)
        return self.left(pl, x1, x2) * self.right(pr, x1, x2)

    def gram(self, p, X1, X2):
        pl, pr = self._terms(p)
        return self.left.gram(pl, X1, X2) * self.right.gram(pr, X1, X2)


def as_kernel(kernel) -> Kernel:
    """``kernel`` as a composable :class:`Kernel`: a name of :data:`KERNELS`, a pair kernel, or a Kernel itself.

    Raises:
      ValueError: naming ``kernel``, for anything else.
    """
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, str):
        if kernel not in KERNELS:
            raise ValueError(f"kernel: must be one of {tuple(KERNELS)}, a pair kernel or a Kernel, got {kernel!r}")
        return _PairKernel(KERNELS[kernel])
    if callable(kernel):
        return _PairKernel(kernel)
    raise ValueError(f"kernel: must be one of {tuple(KERNELS)}, a pair kernel or a Kernel, got {kernel!r}")


def periodic(period=1.0, lengthscale=1.0) -> Kernel:
    """The periodic kernel ``σ_f² exp(-2 Σ_j sin²(π(x_j - x'_j)/P_j)/λ_j²)`` (MacKay 1998; R&W eq. 4.31).

    Args:
      period: ``P`` > 0, the starting period of every input (in the inputs'
        units, e.g. 12 for monthly data with the time index as input).
      lengthscale: ``λ`` > 0, the starting smoothness within a period
        (dimensionless: ``λ = 1`` allows about one bump per period, smaller
        values sharper shapes). The kernel's own, not :class:`GPParams`'s
        ``ℓ``, which is on the inputs' scale.
    Returns:
      A :class:`Kernel` whose ``p.extra`` is ``{"log_period": [d],
      "log_lengthscale": [d]}``, tuned with the rest; compose it, e.g.
      ``as_kernel("se") + periodic(12.0)`` for a trend plus a season.

    In float32 keep the inputs' magnitude moderate (a time index in the
    thousands leaves ``sin`` few correct digits); rescale time or use float64.

    Raises:
      ValueError: naming the argument, unless it is a finite number > 0.
    """
    for name, v in (("period", period), ("lengthscale", lengthscale)):
        check_positive(v, name)
        if np.ndim(v) != 0:
            raise ValueError(f"{name}: must be a scalar, got shape {np.shape(v)}")
    return _Periodic(float(period), float(lengthscale))


def linear() -> Kernel:
    """The dot-product kernel ``σ_f² xᵀx'/d`` (R&W eq. 4.23, ``Σ_p = σ_f² I/d``): Bayesian linear regression.

    Through the origin, weights' prior ``N(0, σ_f²/d · I)``. In a sum, ``as_kernel("se") + linear()``, a
    linear trend the window integrates over rather than fits like an OLS mean (which extrapolates wildly once
    ``d`` is a sizeable share of the window), its amplitude tuned with the rest. No hyperparameters of its
    own (``p.extra == ()``); meant for inputs of unit scale (behind :func:`~onlinejax.wrappers.standardize.standardize`).
    """
    return _Linear()

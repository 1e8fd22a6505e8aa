"""Input checks at a learner's boundary, and the floating dtypes.

:func:`coerce_x` and :func:`coerce_xy` cast a learner's inputs to its state's
dtype (:func:`state_dtype`) and check their shapes and, when they are
concrete (:func:`is_concrete`), their values; :func:`check_int`,
:func:`check_positive` and :func:`check_in_range` check a factory's options.
Each raises a :class:`ValueError` that names the argument. :func:`check_bool`
checks a switch, :func:`check_record` that an option record was given as one
(each a :class:`TypeError` naming the argument), and :func:`changed_fields`
is the records' ``repr``.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

State = Any

__all__ = ["default_float_dtype", "is_concrete", "state_dtype", "coerce_x", "coerce_xy", "check_positive",
           "check_int", "check_in_range", "check_bool", "check_record", "changed_fields"]


def default_float_dtype() -> np.dtype:
    """float32, or float64 when ``jax_enable_x64`` is on (JAX's own rule)."""
    return jnp.zeros(()).dtype


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


def check_bool(value, name: str) -> bool:
    """``value`` as a Python bool; a :class:`TypeError` naming ``name`` unless it is a bool (NumPy's too).

    A switch given as ``1`` or ``"yes"`` is refused rather than read by its truth value.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return bool(value)


def check_record(value, cls: type, name: str):
    """``value`` unless it is not a ``cls`` option record: a :class:`TypeError` naming ``name``.

    Factories take their options as immutable records (``gp_window(tune_options=GPTuneOptions(...))``); a dict,
    a tuple or another record in their place is refused here, before its fields are checked.
    """
    if not isinstance(value, cls):
        article = "an" if cls.__name__[0] in "AEIOU" else "a"
        raise TypeError(f"{name}: expected {article} {cls.__name__}, got {type(value).__name__}")
    return value


def changed_fields(record) -> str:
    """An option record's ``repr`` with only the fields that differ from its defaults, functions by name.

    Two configurations then read apart in a learner's description without the defaults' noise, e.g.
    ``MachineOptions(naive_alarm=0.7)``.
    """
    defaults = record._field_defaults
    changed = [f"{k}={getattr(v, '__qualname__', None) or repr(v)}" for k, v in zip(record._fields, record)
               if k not in defaults or (v is not defaults[k] and v != defaults[k])]
    return f"{type(record).__name__}({', '.join(changed)})"

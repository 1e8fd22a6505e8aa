"""A stateful convenience wrapper for driving one learner from a Python loop.

The functional API (``state = learner.learn(state, x, y)``) is what runs
inside ``jit``/``scan``/``vmap``. From a plain Python loop, however, every
call pays JAX's dispatch cost, which grows with the number of arrays passed
in and out (each leaf of the state is one). :class:`StatefulLearner` keeps
the state packed in one flat device buffer and sends ``x`` and ``y`` as one
array, so each item costs one compiled call with two arrays in and two out —
the regime of research code that calls a learner item by item.
It only wraps the functional core: ``.state`` gives the pytree back.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .base import Learner, Prediction, check_int, coerce_x, coerce_xy, state_dtype, tree_repr

Array = jax.Array

__all__ = ["StatefulLearner"]


class _Packer:
    """Pack a pytree's leaves into one flat buffer of the state's float dtype, and back.

    Floating leaves are cast (exactly, to a wider or equal dtype); int32 and
    bool leaves are bit-cast into float32 buffers (exact, whatever the value)
    or converted into float64 buffers (exact for any int32).
    """

    def __init__(self, tree, dtype):
        leaves, self.treedef = jax.tree_util.tree_flatten(tree)
        self.dtype = np.dtype(dtype)
        self.layout = []  # (offset, shape, dtype)
        off = 0
        for leaf in leaves:
            dt = np.dtype(leaf.dtype)
            if np.issubdtype(dt, np.floating) and dt.itemsize > self.dtype.itemsize:
                raise ValueError(f"state: leaf of dtype {dt} does not fit a {self.dtype} buffer")
            n = int(np.prod(leaf.shape, dtype=np.int64))
            self.layout.append((off, tuple(leaf.shape), dt))
            off += n
        self.size = off

    def _to_buf(self, leaf):
        dt = np.dtype(leaf.dtype)
        if np.issubdtype(dt, np.floating):
            return jnp.ravel(leaf).astype(self.dtype)
        v = jnp.ravel(leaf).astype(jnp.int32)
        if self.dtype.itemsize == 4:
            return jax.lax.bitcast_convert_type(v, self.dtype)
        return v.astype(self.dtype)

    def _from_buf(self, v, dt):
        if np.issubdtype(dt, np.floating):
            return v.astype(dt)
        if self.dtype.itemsize == 4:
            v = jax.lax.bitcast_convert_type(v, jnp.int32)
        else:
            v = jnp.round(v).astype(jnp.int32)
        return v.astype(dt)

    def pack(self, tree):
        return jnp.concatenate([self._to_buf(leaf) for leaf in jax.tree_util.tree_leaves(tree)])

    def unpack(self, buf):
        leaves = [self._from_buf(buf[off:off + math.prod(shape)], dt).reshape(shape) for off, shape, dt in self.layout]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    @functools.cached_property
    def pack_jit(self):
        """:meth:`pack` as one compiled call (run eagerly, each leaf's casts and the concatenation compile apart)."""
        return jax.jit(self.pack)

    @functools.cached_property
    def unpack_jit(self):
        """:meth:`unpack` as one compiled call."""
        return jax.jit(self.unpack)


_COMPILED: dict = {}


def _compiled(learner: Learner, pk: _Packer):
    """``(packer, step, learn, predict, update, like, learn_first, tune)``: the packed calls of ``learner`` for states
    laid out like ``pk`` (``tune`` ``None`` when the learner has none).

    ``like`` is the structure of one item's prediction (its type, leaf shapes
    and dtypes), to rebuild ``step``'s flat output; ``learn_first(buf, X, Y, n)`` learns the first ``n``
    rows of a padded block one by one.

    Jitted once per learner (an immutable record of functions) and state layout, so every
    :class:`StatefulLearner` of the same learner — and every adapter model built from the same
    spec — reuses one set of compiled calls instead of compiling its own.
    """
    key = (learner, pk.treedef, pk.dtype, tuple(pk.layout))
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit
    d = learner.n_features

    def _step(buf, xy):
        s, p = learner.step(pk.unpack(buf), xy[:d], xy[d])
        return pk.pack(s), _flat_prediction(p)

    def _learn(buf, x, y):
        return pk.pack(learner.learn(pk.unpack(buf), x, y))

    def _predict(buf, x):
        return learner.predict(pk.unpack(buf), x)

    def _update(buf, x, y, pred):
        return pk.pack(learner.update(pk.unpack(buf), x, y, pred))

    def _learn_first(buf, X, Y, n):
        # the first n rows of a padded block, in order: one program for every n up to the block's length, and
        # the padding never learned (a loop whose count is a value; a masked scan would learn every row)
        return pk.pack(jax.lax.fori_loop(0, n, lambda i, s: learner.learn(s, X[i], Y[i]), pk.unpack(buf)))

    def _tune(buf):
        return pk.pack(learner.tune(pk.unpack(buf)))

    like = jax.eval_shape(_predict, jax.ShapeDtypeStruct((pk.size,), pk.dtype), jax.ShapeDtypeStruct((d,), pk.dtype))
    out = (pk, jax.jit(_step), jax.jit(_learn), jax.jit(_predict), jax.jit(_update), like, jax.jit(_learn_first),
           None if learner.tune is None else jax.jit(_tune))
    if len(_COMPILED) >= 128:  # bounded: drop the oldest entry
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[key] = out
    return out


def _flat_prediction(p) -> Array:
    """One item's prediction (any pytree: Gaussian, Student-t, mixture) as one flat array: one transfer per step."""
    return jnp.concatenate([jnp.ravel(leaf).astype(p.mean.dtype) for leaf in jax.tree_util.tree_leaves(p)])


def _unflat_prediction(flat: np.ndarray, like):
    """:func:`_flat_prediction`'s inverse for the prediction's structure ``like`` (shapes and dtypes), NumPy leaves."""
    leaves, treedef = jax.tree_util.tree_flatten(like)
    out, off = [], 0
    for leaf in leaves:
        k = math.prod(leaf.shape)
        out.append(flat[off:off + k].reshape(leaf.shape).astype(leaf.dtype))
        off += k
    return jax.tree_util.tree_unflatten(treedef, out)


def _reject_non_item(x, y, d: int, dtype):
    """Raise ``ValueError`` naming ``x`` or ``y`` unless they are one item (``[d]``, ``[]``).

    ``coerce_x`` gives its precise message first (bad dtype, width or a non-finite value);
    a well-formed mini-batch, which :meth:`StatefulLearner.step` does not take, is refused here.
    """
    coerce_x(x, d, dtype)
    if np.shape(x) != (d,):
        raise ValueError(f"x: step takes one item of shape [{d}], got {np.shape(x)} (use learn for a batch)")
    raise ValueError(f"y: step takes a scalar y, got shape {np.shape(y)}")


class StatefulLearner:
    """Hold a learner's state and step it item by item with minimal dispatch cost.

    Args:
      learner: any :class:`~onlinejax.Learner`.
      state: initial state (default ``learner.init()``).

    Example::

        model = StatefulLearner(bayes_linreg(8))
        for x, y in stream:
            pred = model.step(x, y)      # predict, then learn; pred.mean, pred.var are floats
    """

    def __init__(self, learner: Learner, state: Any = None):
        self.learner = learner
        state = learner.init() if state is None else state
        self._dtype = state_dtype(state)
        self._d = learner.n_features
        (self._packer, self._step, self._learn, self._predict, self._update,
         self._pred_like, self._learn_first, self._tune) = _compiled(learner, _Packer(state, self._dtype))
        self._buf = self._packer.pack_jit(state)
        self._eager_tune = False
        self._xy = np.empty(self._d + 1, self._dtype)
        self._x_view, self._y_view = self._xy[: self._d], self._xy[self._d:]

    def __repr__(self) -> str:
        return f"StatefulLearner({self.learner!r}, state={tree_repr(self.state, 1)})"

    @property
    def state(self):
        """The current state as the learner's pytree."""
        return self._packer.unpack_jit(self._buf)

    def step(self, x, y) -> Prediction:
        """Predict ``y`` from ``x`` (``[d]``), then learn ``(x, y)``.

        Returns:
          the learner's own prediction (a :class:`~onlinejax.core.base.Prediction`,
          :class:`~onlinejax.core.base.StudentTPrediction` or mixture) with NumPy leaves.
        """
        if np.shape(x) != (self._d,) or np.ndim(y) != 0:
            _reject_non_item(x, y, self._d, self._dtype)
        xy = self._xy
        try:  # same_kind: a complex value raises instead of losing its imaginary part
            np.copyto(self._x_view, x, casting="same_kind")
            np.copyto(self._y_view, y, casting="same_kind")
        except (TypeError, ValueError):
            x, y = coerce_xy(x, y, self._d, self._dtype)  # raises the precise ValueError
            xy[: self._d], xy[self._d] = x, y  # e.g. an object array of numbers
        if not np.isfinite(xy).all():
            coerce_xy(x, y, self._d, self._dtype)
        self._buf, out = self._step(self._buf, xy.copy())
        return _unflat_prediction(np.asarray(out), self._pred_like)

    def learn(self, x, y) -> "StatefulLearner":
        """Learn one item or a mini-batch."""
        x, y = coerce_xy(x, y, self.learner.n_features, self._dtype)
        self._buf = self._learn(self._buf, x, y)
        return self

    def learn_padded(self, x, y, size: int) -> "StatefulLearner":
        """Learn a mini-batch of at most ``size`` items, in order, by one compiled call per ``size``.

        The batch is padded to ``size`` rows and the padding is not learned (a
        loop over the first ``b`` rows, its count a value), so batches of every
        length up to ``size`` share one program (:meth:`learn` compiles one per
        batch length). Each item goes through the one-item ``learn``, as a
        learner's default mini-batch ``learn`` does (a learner with a batch
        update of its own, :func:`~onlinejax.learners.linear.bayes_linreg`, learns the
        rows one by one here: equal up to rounding).

        Args:
          x: ``[b, d]`` with ``1 <= b <= size``; y: ``[b]``; size: the block's length (static).
        """
        size = check_int(size, "size", 1)
        x, y = coerce_xy(x, y, self.learner.n_features, self._dtype)
        if x.ndim != 2 or not 1 <= x.shape[0] <= size:
            raise ValueError(f"x: learn_padded takes a batch of 1 to {size} items, got shape {x.shape}")
        n = x.shape[0]
        X = np.zeros((size, self._d), self._dtype)
        Y = np.zeros((size,), self._dtype)
        X[:n], Y[:n] = x, y
        self._buf = self._learn_first(self._buf, X, Y, np.int32(n))
        return self

    def tune(self) -> "StatefulLearner":
        """``learner.tune`` on the held state (default options), one compiled call on the packed state.

        A ``tune`` that cannot be traced (a user's, branching in Python on the state's values) runs
        as it is on the unpacked state.
        """
        if self._tune is None:
            raise ValueError("tune: this learner has no tune")
        if not self._eager_tune:
            try:
                self._buf = self._tune(self._buf)
                return self
            except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
                    jax.errors.TracerIntegerConversionError, jax.errors.TracerArrayConversionError):
                self._eager_tune = True  # traced once: not again on every call
        self._buf = self._packer.pack_jit(self.learner.tune(self.state))
        return self

    def update(self, x, y, pred) -> "StatefulLearner":
        """Learn one item given ``pred``, the learner's own prediction issued for it (:attr:`Learner.update`).

        ``pred`` is the whole prediction ``learner.predict`` returned (a
        Student-t or a mixture, not only its mean and variance).
        """
        x, y = coerce_xy(x, y, self.learner.n_features, self._dtype)
        if x.ndim != 1:
            raise ValueError(f"x: update takes one item of shape [{self._d}], got {x.shape}")
        pred = jax.tree_util.tree_map(lambda a: jnp.asarray(a, self._dtype), pred)
        self._buf = self._update(self._buf, x, y, pred)
        return self

    def predict(self, x) -> Prediction:
        """The learner's own predictive distribution for ``x: [d]`` or ``[b, d]``, with NumPy leaves."""
        x, _ = coerce_x(x, self.learner.n_features, self._dtype)
        return jax.tree_util.tree_map(np.asarray, self._predict(self._buf, x))

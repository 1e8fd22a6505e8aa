"""What the River and scikit-learn adapters share: building a learner from a picklable spec,
mapping named features onto the learner's fixed input width, and holding the state.

The functional core needs a static input width ``d``; River hands over dicts whose keys may
come and go. :class:`FeatureSlots` gives each feature name a slot of a fixed-width vector the
first time the name is seen, up to a capacity (default: the number of features of the first
item); a missing feature (absent, ``None`` or NaN in a data frame) is 0 in its slot, and a name
first seen once the capacity is used up is ignored and counted. For the linear learners a slot
that has been 0 so far is exactly a weight still at its prior, so reserving slots
(``n_features=K``) for features that appear later loses nothing.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Mapping

import jax
import numpy as np

from ..base import Learner, Prediction
from ..stateful import StatefulLearner

__all__ = ["resolve_factory", "build_learner", "FeatureSlots", "Engine", "AUTO_TUNE_EVERY", "DEFAULT_LEARNER"]

#: The adapters' default learner: :func:`onlinejax.calibration.calibrated_bayes_linreg` (raw features of
#: any scale, an intercept, calibrated intervals).
DEFAULT_LEARNER = "calibrated_bayes_linreg"

#: ``tune_every=None`` with the default learner: type-II ML of its prior and noise precisions after every
#: 50 learned items.
AUTO_TUNE_EVERY = 50


def resolve_factory(learner: str | Callable) -> Callable[..., Learner]:
    """``learner`` -> ``factory(n_features, **params) -> Learner``.

    A string names either a function of the package (``"bayes_linreg"``,
    ``"windowed_bayes_linreg"``, ``"gp_window"``, ``"kernel_regression"``, ``"sgd_linreg"``, ...)
    or a configuration registered by :mod:`onlinejax.zoo` (``"GPRegressionOLSMean_WS64"``; these
    take no parameters). A callable is used as it is; it must be picklable (a module-level
    function or a ``functools.partial`` of one, not a lambda) for the adapter to pickle.
    """
    if callable(learner):
        return learner
    if not isinstance(learner, str):
        raise TypeError(f"learner: expected a name or a callable, got {type(learner).__name__}")
    import onlinejax
    from onlinejax import gp
    from onlinejax.kernel_regression import kernel_regression

    if learner == "kernel_regression":  # the module's other names (init, tune, ...) are its pure steps
        return kernel_regression
    for ns in (onlinejax, gp):
        f = getattr(ns, learner, None)
        if callable(f) and not isinstance(f, type):
            return f
    from onlinejax import zoo
    from onlinejax.registry import REGISTRY

    known = {**zoo.configurations(), **REGISTRY}  # the zoo's names, and the user's registrations
    if learner in known:
        make = known[learner].make

        def factory(n_features, **params):
            if params:
                raise ValueError(f"learner_params: the registered configuration {learner!r} takes none, got {sorted(params)}")
            return make(n_features)

        return factory
    raise ValueError(f"learner: {learner!r} is neither a function of onlinejax nor a registered configuration")


@functools.lru_cache(maxsize=64)
def _cached_learner(spec, n_features: int, params: tuple) -> Learner:
    return resolve_factory(spec)(n_features, **dict(params))


def build_learner(spec, n_features: int, params: dict) -> Learner:
    """``resolve_factory(spec)(n_features, **params)``, shared between adapter instances.

    A learner is an immutable record of pure, jitted functions, so models (and their clones,
    and every ``fit``) built from the same spec reuse one learner and its compiled code instead
    of compiling again. Specs or parameters that cannot be hashed are built afresh.
    """
    try:
        key = tuple(sorted(params.items()))
        hash((spec, key))
    except TypeError:
        return resolve_factory(spec)(n_features, **params)
    return _cached_learner(spec, int(n_features), key)


class FeatureSlots:
    """Names -> slots of a fixed-width input vector (see the module docstring).

    Args:
      capacity: the width ``d``; ``None`` takes the number of features of the first item.
    """

    def __init__(self, capacity: int | None = None):
        if capacity is not None and (not isinstance(capacity, (int, np.integer)) or capacity < 1):
            raise ValueError(f"n_features: expected a positive int or None, got {capacity!r}")
        self.capacity = None if capacity is None else int(capacity)
        self.index: dict = {}
        self.ignored: set = set()
        self._warned = False

    @property
    def n_ignored(self) -> int:
        """How many distinct names arrived after every slot was taken."""
        return len(self.ignored)

    @staticmethod
    def _sorted(keys):
        try:
            return sorted(keys)
        except TypeError:  # mixed key types
            return sorted(keys, key=lambda k: (type(k).__name__, repr(k)))

    def admit(self, keys) -> None:
        """Give new names a slot (in sorted order, so the key order of a dict does not matter)."""
        new = [k for k in keys if k not in self.index and k not in self.ignored]
        if not new:
            return
        if self.capacity is None:
            self.capacity = len(new)
        for k in self._sorted(new):
            if len(self.index) < self.capacity:
                self.index[k] = len(self.index)
            else:
                self.ignored.add(k)
                if not self._warned:
                    self._warned = True
                    warnings.warn(f"feature {k!r} arrived after all {self.capacity} input slots were taken; "
                                  "it is ignored (pass n_features to reserve slots)", stacklevel=4)

    def vector(self, x: Mapping, dtype) -> np.ndarray:
        """``x`` (a dict of numbers) -> ``[capacity]``; missing features are 0."""
        self.admit(x.keys())
        v = np.zeros(self.capacity, dtype)
        for k, val in x.items():
            i = self.index.get(k)
            if i is not None and val is not None:
                v[i] = val
        return v

    def matrix(self, columns, values: np.ndarray, dtype) -> np.ndarray:
        """Columns named ``columns`` of ``values: [b, len(columns)]`` -> ``[b, capacity]``."""
        self.admit(columns)
        out = np.zeros((values.shape[0], self.capacity), dtype)
        for j, k in enumerate(columns):
            i = self.index.get(k)
            if i is not None:
                out[:, i] = np.where(np.isnan(values[:, j]), 0.0, values[:, j])  # missing -> 0
        return out


class Engine:
    """A learner, its state and its feature slots, built lazily once ``d`` is known.

    Args:
      learner, learner_params, init_params: ``resolve_factory(learner)(d, **learner_params)``
        builds the learner, ``learner.init(**init_params)`` its state.
      n_features: slot capacity (``None``: the first item's feature count).
      tune_every: call ``learner.tune`` after every ``tune_every`` learned items (0: never;
        ``None``: every :data:`AUTO_TUNE_EVERY` items for the default learner
        :data:`DEFAULT_LEARNER`, never for others).
    """

    def __init__(self, learner, learner_params, init_params, n_features, tune_every):
        self.spec = learner
        resolve_factory(learner)  # fail early on a bad name
        self.learner_params = dict(learner_params or {})
        self.init_params = dict(init_params or {})
        if tune_every is not None and (isinstance(tune_every, bool) or not isinstance(tune_every, (int, np.integer))
                                       or tune_every < 0):
            raise ValueError(f"tune_every: expected None or an int >= 0, got {tune_every!r}")
        self.auto_tune = tune_every is None
        self.tune_every = 0 if tune_every is None else int(tune_every)
        self.slots = FeatureSlots(n_features)
        self.learner: Learner | None = None
        self._sl: StatefulLearner | None = None  # the state, packed for cheap per-item calls
        self.n_learned = 0

    @property
    def state(self) -> Any:
        """The learner's state pytree (``None`` before the learner is built)."""
        return None if self._sl is None else self._sl.state

    def _set_state(self, state) -> None:
        # compiled calls are shared per learner and layout (StatefulLearner), so this compiles nothing
        self._sl = StatefulLearner(self.learner, state)

    # -- lazy build ------------------------------------------------------------------------
    def _build(self):
        lrn = build_learner(self.spec, self.slots.capacity, self.learner_params)
        if not isinstance(lrn, Learner):
            raise TypeError(f"learner: the factory returned {type(lrn).__name__}, not an onlinejax Learner")
        if self.auto_tune:
            self.tune_every = AUTO_TUNE_EVERY if self.spec == DEFAULT_LEARNER else 0
        if self.tune_every and lrn.tune is None:
            raise ValueError("tune_every: this learner has no tune")
        return lrn, lrn.init(**self.init_params)

    def ready(self) -> None:
        """Build the learner and its initial state once the input width is known."""
        if self.learner is None:
            self.learner, state = self._build()
            self._set_state(state)

    @property
    def dtype(self) -> np.dtype:
        """The state's floating dtype."""
        self.ready()
        return self._sl._dtype

    # -- rows ------------------------------------------------------------------------------
    def row(self, x: Mapping) -> np.ndarray:
        """A dict of features -> ``[d]`` in the learner's dtype."""
        self.slots.admit(x.keys())
        self.ready()
        return self.slots.vector(x, self.dtype)

    def rows(self, columns, values) -> np.ndarray:
        """Named columns of ``values: [b, len(columns)]`` -> ``[b, d]`` in the learner's dtype."""
        self.slots.admit(list(columns))
        self.ready()
        return self.slots.matrix(list(columns), np.asarray(values, dtype=np.float64), self.dtype)

    def array(self, X) -> np.ndarray:
        """An array ``[b, d]`` (scikit-learn style); fixes ``d`` at the first call."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X: expected a 2-d array [n_samples, n_features], got shape {X.shape}")
        if self.slots.capacity is None:
            self.slots.capacity = X.shape[1]
        if X.shape[1] != self.slots.capacity:
            raise ValueError(f"X: has {X.shape[1]} features, the model was built for {self.slots.capacity}")
        self.ready()
        return X.astype(self.dtype)

    # -- learning --------------------------------------------------------------------------
    def learn(self, X: np.ndarray, y) -> None:
        """``X: [d]`` with ``y: []`` or ``X: [b, d]`` with ``y: [b]``, in order."""
        y = np.asarray(y, dtype=self.dtype)
        if not self.tune_every:
            self._sl.learn(X, y)
            self.n_learned += 1 if X.ndim == 1 else X.shape[0]
            return
        Xb, yb = (X[None], y[None]) if X.ndim == 1 else (X, y)
        start = 0
        while start < len(yb):  # split the batch at the tune points, so batches = items
            k = min(len(yb) - start, self.tune_every - self.n_learned % self.tune_every)
            self._sl.learn(Xb[start:start + k], yb[start:start + k])
            self.n_learned += k
            start += k
            if self.n_learned % self.tune_every == 0:
                self._set_state(self.learner.tune(self._sl.state))

    def predict(self, X: np.ndarray):
        """Predictive distribution of ``X: [d]`` or ``[b, d]``, its leaves float64 NumPy arrays.

        A :class:`~onlinejax.base.Prediction`, or the learner's own kind (a Student-t from the
        calibrated default learner), which keeps ``mean``, ``var`` and ``interval``.
        """
        p = self._sl.predict(X)
        return type(p)(*(np.asarray(v, np.float64) for v in p))

    # -- pickling: the learner is rebuilt from its spec, the state from numpy leaves ---------
    def __getstate__(self):
        d = dict(self.__dict__)
        d["learner"] = None
        d.pop("_sl")
        d["state_leaves"] = None if self._sl is None else [np.asarray(v) for v in jax.tree_util.tree_leaves(self.state)]
        return d

    def __setstate__(self, d):
        leaves = d.pop("state_leaves")
        self.__dict__.update(d)
        self.learner, self._sl = None, None
        if leaves is not None:
            self.learner, template = self._build()
            treedef = jax.tree_util.tree_structure(template)
            self._set_state(jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(v) for v in leaves]))

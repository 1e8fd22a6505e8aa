"""What the River and scikit-learn adapters share: building a learner from a picklable spec,
mapping named features onto the learner's input width, and holding the state.

The functional core needs a static input width ``d``; River hands over dicts whose keys may
come and go. :class:`FeatureSlots` gives each feature name a slot of the input vector:

* Slots are taken only by items that are learned. The slots of an item are planned, the item is
  learned, and only then are they taken; an item the learner rejects (a non-finite target or
  feature value, a value that is not a number) raises and leaves slots, state and width as they
  were. A prediction plans slots for its new names but takes none.
* The width is ``n_features``, or the number of features of the first item learned.
* A missing feature (absent, ``None``, or NaN) is 0 in its slot. For the linear learners a slot
  that has been 0 so far is exactly a weight still at its prior, so a prediction with a name never
  learned treats its weight as at its prior (as River's ``BayesianLinearRegression`` does).
* A name that arrives once every slot is taken widens the learner where its state can be widened
  exactly (:data:`GROWABLE`: ``bayes_linreg`` and the default ``calibrated_bayes_linreg``, without
  forgetting): the width doubles and :func:`grow_state` pads the state with weights at their prior,
  so the model predicts as the same learner given the wider width from the start (tested against
  one). Every other learner (windowed, kernel, GP, SGD, forgetting, a callable) keeps its width:
  such a name is ignored, counted (``n_ignored``) and warned about once; reserve slots with
  ``n_features=K`` for features known to come later (exact for the linear learners, see above).

Building the first learner turns on JAX's persistent compilation cache
(:func:`~onlinejax.evaluation.ensure_compilation_cache`: unless JAX has a cache folder already;
``ONLINEJAX_COMPILE_CACHE=DIR`` chooses the folder, ``ONLINEJAX_COMPILE_CACHE=none`` opts out), so a
new process loads the programs an earlier one compiled.

The parts live in private modules: building and sharing learners (:mod:`onlinejax.adapters._build`),
the feature slots (:mod:`onlinejax.adapters._slots`) and widening a state
(:mod:`onlinejax.adapters._grow`); :class:`Engine` here ties them together, and this module's names
are importable from here as before.
"""
from __future__ import annotations

import collections
import contextlib
from typing import Any, Mapping

import jax
import numpy as np

from ..core.base import Learner, coerce_x, coerce_xy
from ..wrappers.calibration import CALIBRATED_STANDARDIZATION
from ..core.stateful import StatefulLearner
from ..evaluation.runtime import ensure_compilation_cache
from ._build import _packed_predict, build_learner, initial_state, resolve_factory
from ._grow import GROWABLE, can_grow, grow_state
from ._grow import _grow  # noqa: F401  (re-exported: the old path adapters._core._grow)
from ._slots import FeatureSlots

__all__ = ["resolve_factory", "build_learner", "FeatureSlots", "Engine", "GROWABLE", "can_grow", "grow_state",
           "AUTO_TUNE_INTERVAL", "DEFAULT_LEARNER"]

#: The adapters' default learner: :func:`onlinejax.wrappers.calibration.calibrated_bayes_linreg` (raw features of
#: any scale, an intercept, calibrated intervals).
DEFAULT_LEARNER = "calibrated_bayes_linreg"
#: Predictions kept for items whose labels have not arrived (delayed labels), the oldest dropped first.
MAX_ISSUED = 1024

#: ``tune_interval=None`` with the default learner: type-II ML of its prior and noise precisions after every
#: 50 learned items.
AUTO_TUNE_INTERVAL = 50

#: The first items the default learner watches for a learning scaler in front (River's
#: ``preprocessing.StandardScaler``): :data:`SCALER_SIGNS` items in a row each learned right after one
#: prediction whose inputs it matches nowhere but which it changed (the pipeline transformed the item
#: again after its scaler learned it), every input at most :data:`SCALED_INPUT_MAX` in size. Seen, the
#: default learner is built again with :data:`SCALED_UPSTREAM` and learns the items so far again. (100:
#: River's ChickWeights starts with 50 items at time 0, which a scaler leaves unchanged.)
SCALER_WATCH = 100
#: Items in a row that must show the scaler's signature.
SCALER_SIGNS = 3
#: The largest input of an item taken for one a scaler standardised: the clip of the default's
#: standardised inputs (:func:`~onlinejax.wrappers.calibration.calibrated`), which it keeps on inputs given as they are.
SCALED_INPUT_MAX = 5.0
#: The default learner's standardisation behind a scaler: its inputs taken as given (clipped at 5), only the target
#: standardised.
SCALED_UPSTREAM = CALIBRATED_STANDARDIZATION._replace(scale_inputs=False)


class Engine:
    """A learner, its state and its feature slots, built lazily once ``d`` is known.

    Args:
      learner, learner_params, init_params: ``resolve_factory(learner)(d, **learner_params)``
        builds the learner, ``learner.init(**init_params)`` its state.
      n_features: slot capacity (``None``: the first item's feature count).
      tune_interval: call ``learner.tune`` after every ``tune_interval`` learned items (0: never;
        ``None``: every :data:`AUTO_TUNE_INTERVAL` items for the default learner
        :data:`DEFAULT_LEARNER`, never for others).
      grow: let named features that arrive once every slot is taken widen the learner, where
        its state can be widened exactly (:func:`can_grow`, :func:`grow_state`); else they are
        ignored and counted.
    """

    def __init__(self, learner, learner_params, init_params, n_features, tune_interval, *, grow: bool = False):
        self.spec = learner
        resolve_factory(learner)  # fail early on a bad name
        self.learner_params = dict(learner_params or {})
        self.init_params = dict(init_params or {})
        if tune_interval is not None and (isinstance(tune_interval, bool)
                                          or not isinstance(tune_interval, (int, np.integer)) or tune_interval < 0):
            raise ValueError(f"tune_interval: expected None or an int >= 0, got {tune_interval!r}")
        self.auto_tune = tune_interval is None
        self.tune_interval = 0 if tune_interval is None else int(tune_interval)
        self.slots = FeatureSlots(n_features)
        self.grow = bool(grow) and can_grow(learner, self.learner_params, self.init_params)
        self.learner: Learner | None = None
        self._sl: StatefulLearner | None = None  # the state, packed for cheap per-item calls
        self.n_learned = 0
        self._forget_issued()
        # the default learner's first items, kept to learn again if a scaler in front shows itself
        self._watched: list | None = [] if learner == DEFAULT_LEARNER and "standardization" not in self.learner_params \
            else None
        self._scaler_signs = 0

    @property
    def state(self) -> Any:
        """The learner's state pytree (``None`` before the learner is built)."""
        return None if self._sl is None else self._sl.state

    @property
    def state_is_empty(self) -> bool:
        """Whether no state was built yet (:attr:`state` is ``None``), without unpacking one."""
        return self._sl is None

    def _set_state(self, state) -> None:
        # compiled calls are shared per learner and layout (StatefulLearner), so this compiles nothing
        self._sl = StatefulLearner(self.learner, state)

    # -- lazy build ------------------------------------------------------------------------
    def _build(self, width: int | None = None):
        ensure_compilation_cache()  # a new process loads what an earlier one compiled (opt out: module doc)
        lrn = build_learner(self.spec, self.slots.capacity if width is None else width, self.learner_params)
        if not isinstance(lrn, Learner):
            raise TypeError(f"learner: the factory returned {type(lrn).__name__}, not an onlinejax Learner")
        if self.auto_tune:
            self.tune_interval = AUTO_TUNE_INTERVAL if self.spec == DEFAULT_LEARNER else 0
        if self.tune_interval and lrn.tune is None:
            raise ValueError("tune_interval: this learner has no tune")
        return lrn, initial_state(lrn, self.init_params)

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

    def _machine(self, width: int):
        """``(learner, StatefulLearner)`` for ``width`` inputs: the current ones, the initial ones, or the
        current state widened; ``None`` where it cannot be widened exactly."""
        if self.learner is not None and width == self.learner.n_features:
            return self.learner, self._sl
        lrn, init = self._build(width)
        if self.learner is None:
            return lrn, StatefulLearner(lrn, init)
        wide = grow_state(self._sl.state, init, self.learner.n_features, width)
        return None if wide is None else (lrn, StatefulLearner(lrn, wide))

    @contextlib.contextmanager
    def _tentative(self, keys, keep: bool):
        """Plan slots for ``keys`` and hold the learner of that width while the body runs.

        With ``keep`` the slots, the learner and its state are kept once the body returns (the item
        was learned); on an exception, or without ``keep`` (a prediction), everything is as before.
        """
        plan = self.slots.plan(keys, self.grow)
        machine = self._machine(plan.width)
        if machine is None:  # the state cannot be widened: no growth, the new names are ignored
            plan = self.slots.plan(keys, False)
            machine = self._machine(plan.width)
        saved = self.learner, self._sl, self.n_learned, self.tune_interval
        self.learner, self._sl = machine
        try:
            yield plan
        except BaseException:
            self.learner, self._sl, self.n_learned, self.tune_interval = saved
            raise
        if keep:
            self.slots.commit(plan)
        else:
            self.learner, self._sl, self.n_learned, self.tune_interval = saved

    # -- named features (River) ------------------------------------------------------------
    def learn_dict(self, x: Mapping, y) -> None:
        """Learn one item given as a dict of features; its new names take slots only if it is learned."""
        with self._tentative(x.keys(), keep=True) as plan:
            v = self.slots.vector(x, self._sl._dtype, plan)
            self.learn(v, y)
            self._watch(v, y)

    def predict_dict(self, x: Mapping):
        """The prediction for a dict of features (see :meth:`predict`); takes no slot."""
        with self._tentative(x.keys(), keep=False) as plan:
            return self.predict(self.slots.vector(x, self._sl._dtype, plan))

    def learn_frame(self, columns, values, y) -> None:
        """Learn the rows of ``values: [b, len(columns)]`` with targets ``y: [b]``, all or none."""
        with self._tentative(list(columns), keep=True) as plan:
            X = self.slots.matrix(list(columns), np.asarray(values, dtype=np.float64), self._sl._dtype, plan)
            self.learn(X, y)

    def predict_frame(self, columns, values):
        """Predictions for the rows of ``values: [b, len(columns)]``; takes no slot."""
        with self._tentative(list(columns), keep=False) as plan:
            X = self.slots.matrix(list(columns), np.asarray(values, dtype=np.float64), self._sl._dtype, plan)
            return self.predict(X)

    # -- arrays (scikit-learn) ---------------------------------------------------------------
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

    # -- issued predictions ----------------------------------------------------------------
    def _forget_issued(self) -> None:
        self._issued: collections.OrderedDict = collections.OrderedDict()
        self._n_pending = 0
        self._last_issued = None

    def _keep_issued(self, x: np.ndarray, pred) -> None:
        """Remember the prediction issued for one item until its label arrives (bounded, oldest dropped)."""
        key = (self.learner.n_features, x.tobytes())
        self._issued[key] = pred
        self._issued.move_to_end(key)
        if len(self._issued) > MAX_ISSUED:
            self._issued.popitem(last=False)
        self._n_pending += 1
        self._last_issued = (self.learner.n_features, pred, x)

    def _take_issued(self, x: np.ndarray):
        """``(the prediction issued for the item x, whether x changed since)``; the prediction ``None`` where
        there is none (then it is predicted now).

        The one issued for this very ``x``; else, when exactly one prediction was issued since the
        last item learned, that one: River's pipelines call ``predict_one`` and then ``learn_one``
        for the same item, with ``x`` transformed again in between (a scaler in front has learned).
        """
        pred = self._issued.pop((self.learner.n_features, x.tobytes()), None)
        moved = False
        if pred is None and self._n_pending == 1:
            width, issued, x_issued = self._last_issued
            if width == self.learner.n_features:
                pred = issued
            # the inputs the prediction saw changed (slots a new feature took since are left out)
            moved = not np.array_equal(x[:len(x_issued)], x_issued)
        self._n_pending, self._last_issued = 0, None
        return pred, moved

    @property
    def inputs_scaled_upstream(self) -> bool:
        """Whether the learner takes its inputs as given (a ``standardization`` with ``scale_inputs=False``), set
        by the user or by :meth:`_rebuild_for_scaler_in_front`."""
        return getattr(self.learner_params.get("standardization"), "scale_inputs", True) is False

    def _rebuild_for_scaler_in_front(self):
        """The default learner built again with :data:`SCALED_UPSTREAM`, the items learned so far learned again
        (:data:`SCALER_WATCH`). Returns the function that undoes it (all or nothing: a failure here or in
        learning the item that showed the scaler leaves the engine as it was)."""
        saved = (self.learner, self._sl, self.n_learned, dict(self.learner_params), self._watched, self._issued,
                 self._n_pending, self._last_issued, self._scaler_signs)

        def undo():
            (self.learner, self._sl, self.n_learned, self.learner_params, self._watched, self._issued,
             self._n_pending, self._last_issued, self._scaler_signs) = saved

        watched, d = self._watched, self.learner.n_features
        self.learner_params["standardization"] = SCALED_UPSTREAM
        self._watched = None
        self._forget_issued()  # the old learner's predictions are no longer this learner's
        try:
            self.learner, state = self._build(d)
            self._set_state(state)
            self.n_learned = 0
            for xw, yw in watched:  # narrower items (the learner grew since) have 0 in the new slots
                self.learn(np.pad(xw, (0, d - len(xw))), yw)
        except BaseException:
            undo()
            raise
        return undo

    def _watch(self, x: np.ndarray, y) -> None:
        """Keep one of the default learner's first :data:`SCALER_WATCH` items, just learned (see
        :meth:`_rebuild_for_scaler_in_front`)."""
        if self._watched is not None:
            if self.n_learned > SCALER_WATCH:
                self._watched = None
            else:
                self._watched.append((np.array(x), y))

    # -- learning --------------------------------------------------------------------------
    def learn(self, X: np.ndarray, y) -> None:
        """``X: [d]`` with ``y: []`` or ``X: [b, d]`` with ``y: [b]``, in order.

        One item is learned with the prediction issued for it, where one was
        (:meth:`_take_issued`), through the learner's ``update``: its
        calibrators and detectors judge the prediction the caller received.
        """
        y = np.asarray(y, dtype=self.dtype)
        if np.ndim(X) == 1:
            coerce_xy(X, y, self.learner.n_features, self.dtype)  # a bad item changes nothing, not even the watch
            pred, moved = self._take_issued(np.asarray(X))
            signed = moved and np.all(np.abs(X) <= SCALED_INPUT_MAX)
            self._scaler_signs = self._scaler_signs + 1 if signed else 0
            undo = None
            if self._scaler_signs >= SCALER_SIGNS and self._watched is not None:
                undo = self._rebuild_for_scaler_in_front()
                pred = None  # the learner built again issued nothing
            try:
                return self._learn_given(X, y, pred)
            except BaseException:
                if undo is not None:
                    undo()
                raise
        # a mini-batch: the predictions issued before it are no longer the pipeline's pending one
        self._n_pending, self._last_issued, self._watched = 0, None, None
        self._learn_given(X, y, None)

    def _learn_given(self, X: np.ndarray, y: np.ndarray, pred) -> None:
        """:meth:`learn` once the issued prediction is known (``None``: predicted now), tuning on schedule."""
        if pred is not None:
            self._sl.update(X, y, pred)
            self.n_learned += 1
            if self.tune_interval and self.n_learned % self.tune_interval == 0:
                self._sl.tune()
            return
        if not self.tune_interval:  # one call: it learns the whole batch or raises
            self._sl.learn(X, y)
            self.n_learned += 1 if X.ndim == 1 else X.shape[0]
            return
        Xb, yb = (X[None], y[None]) if X.ndim == 1 else (X, y)
        if X.ndim == 2:  # all or none: check the batch before its first chunk is learned
            coerce_xy(Xb, yb, self.learner.n_features, self.dtype)
        start = 0
        while start < len(yb):  # split the batch at the tune points, so batches = items
            k = min(len(yb) - start, self.tune_interval - self.n_learned % self.tune_interval)
            if X.ndim == 1:
                self._sl.learn(X, y)
            else:  # padded to the tune interval: one compiled call serves every chunk length
                self._sl.learn_padded(Xb[start:start + k], yb[start:start + k], self.tune_interval)
            self.n_learned += k
            start += k
            if self.n_learned % self.tune_interval == 0:
                self._sl.tune()

    def predict(self, X: np.ndarray):
        """The learner's own predictive distribution of ``X: [d]`` or ``[b, d]``, leaves NumPy arrays.

        Its kind is the learner's: a :class:`~onlinejax.core.base.Prediction`, a
        :class:`~onlinejax.core.base.StudentTPrediction` (the calibrated default learner), a
        :class:`~onlinejax.wrappers.combination.MixturePrediction` or a
        :class:`~onlinejax.core.student_mixture.StudentTMixture`, so its ``interval``, ``cdf``,
        ``log_prob`` and ``crps`` are the learner's, not those of a Gaussian of its variance.
        The leaves keep the state's dtype, so the distribution's methods compute in it.
        """
        X, _ = coerce_x(X, self.learner.n_features, self.dtype)
        p = _packed_predict(self.learner, self._sl._packer)(self._sl._buf, X)
        p = type(p)(*(np.asarray(v) for v in p))
        if X.ndim == 1:
            self._keep_issued(np.asarray(X), p)
        return p

    # -- pickling: the learner is rebuilt from its spec, the state from numpy leaves ---------
    def __getstate__(self):
        d = dict(self.__dict__)
        for k in ("_issued", "_n_pending", "_last_issued"):
            d.pop(k, None)
        d["_watched"] = None  # no training rows in a pickle: an unpickled default no longer watches for a scaler
        d["learner"] = None
        d.pop("_sl")
        d["state_leaves"] = None if self._sl is None else [np.asarray(v) for v in jax.tree_util.tree_leaves(self.state)]
        return d

    def __setstate__(self, d):
        leaves = d.pop("state_leaves")
        d.setdefault("grow", False)  # pickled before learners could widen
        d.setdefault("_watched", None)  # pickled before the default learner watched for a scaler in front
        d.setdefault("_scaler_signs", 0)
        self.__dict__.update(d)
        self._forget_issued()
        self.learner, self._sl = None, None
        if leaves is not None:
            self.learner, template = self._build()
            treedef = jax.tree_util.tree_structure(template)
            self._set_state(jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(v) for v in leaves]))

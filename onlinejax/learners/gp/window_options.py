"""The option records of :func:`~onlinejax.learners.gp.gp_window`: :class:`GPHyper` and :class:`GPWindowOptions`.

:class:`GPHyper` holds the initial hyperparameters (``init`` overrides each),
:class:`GPWindowOptions` how the window learns and predicts; each checks
itself (``checked``). The learner (state, init, predict, step, evict, tune
and the factory) is :mod:`onlinejax.learners.gp.window`; the tune's options,
:class:`~onlinejax.learners.gp.hyperparameters.GPTuneOptions`, are in
:mod:`onlinejax.learners.gp.hyperparameters`.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ...core.checks import check_bool
from .kernels import gp_params

__all__ = ["GPHyper", "GPWindowOptions"]


class GPHyper(NamedTuple):
    """The initial hyperparameters of :func:`gp_window` (``init`` overrides each): Python values.

    An immutable record passed as one value (``gp_window(d, W, initial=GPHyper(noise_std=0.3))``), hashable when
    its fields are (a list lengthscale is frozen by :func:`~onlinejax.core.base.describe_factory`'s cache, an array
    builds afresh). ``step`` and ``learn`` keep them until a ``tune``.

    Attributes:
      signal_std: ``σ_f > 0``, ``[]`` (default 1).
      noise_std: ``σ_n > 0``, ``[]`` (default 0.1; the noise variance used adds the dtype's floor,
        :func:`~onlinejax.learners.gp.params.noise_floor_rel`).
      lengthscale: ``ℓ > 0``, ``[]`` or ``[d]`` (default 1; one per input with ``"se"``'s ARD).
    """

    signal_std: Any = 1.0
    noise_std: Any = 0.1
    lengthscale: Any = 1.0

    def checked(self, n_features: int) -> "GPHyper":
        """The record unchanged once :func:`~onlinejax.learners.gp.kernels.gp_params` accepts it (``ValueError``:
        ``initial.<field>: ...``)."""
        try:
            gp_params(n_features, *self)
        except ValueError as e:  # gp_params names the bare field
            raise ValueError(f"initial.{e}") from None
        return self


class GPWindowOptions(NamedTuple):
    """How :func:`gp_window`'s window learns and predicts: Python bools, an immutable hashable record.

    Attributes:
      freeze_when_full: stop learning once the window is full (the batch-GP baseline trained once on the
        first ``W`` items; default False).
      mean_from_state: read the mean function from ``state.mean_kind``, set by ``init(mean=...)`` (a name
        or an index into ``MEANS``, an array under ``vmap``; default ``gp_window``'s ``mean``), instead of
        fixing it at construction (default False). The three means then share one compiled program and
        vmap over the mean (the thesis grid evaluates them so: 15 programs instead of 45); every learning
        step and tune fits all three means and keeps the chosen one.
      adapt_scale: multiply the predictive variance by the window's scale estimate ``ĉ >= 1``
        (:func:`window_scale`, updated on every step in O(W)); False gives the plain GP predictive of the
        hyperparameters (default True).
    """

    freeze_when_full: bool = False
    mean_from_state: bool = False
    adapt_scale: bool = True

    def checked(self) -> "GPWindowOptions":
        """The record with each field checked to be a bool (``TypeError``: ``window_options.<field>: ...``)."""
        return GPWindowOptions(*(check_bool(v, f"window_options.{name}") for name, v in zip(self._fields, self)))

"""A cap on a calibrated interval's width: at most ``k`` times the climatology's at the same item.

A model that ignores its inputs and the order of the targets, the
climatology (:func:`~onlinejax.wrappers.baseline.climatology_predict`: after ``n``
targets a Student-t with ``n - 1`` degrees of freedom, location ``ȳ``, scale
``s·sqrt(1 + 1/n)``), has the central interval

    ``ȳ ± t_{n-1}(1 - α/2)·s·sqrt(1 + 1/n)``.

An interval many times wider claims to know less than that crude forecaster, and
the calibrated learners issue such intervals where their own evidence is thin
or stale: on the first items (a prior in a guessed unit), and after a shock,
where a model relearned on a few items meets a variance scale raised by the
misses of the model before it (a short-rate series' 1980 jump: a GP's 95 %
interval 14 times the climatology's, a kernel regression's 43 times).
:func:`capped` keeps the calibrated interval's half-width at most
``k·t_{n-1}(1 - α/2)·sqrt(1 + 1/n)·max(s, s_M)`` (``k`` = :data:`WIDTH_CAP`), where ``s_M``
is the targets' standard deviation with a memory of ``M`` items
(:data:`WIDTH_CAP_MEMORY`): after the targets' spread grows (a stuck sensor
that resumes, a noisier regime) the all-time ``s`` lags by hundreds of items
and ``s_M`` by tens, so an honest wide interval is not cut below the present
spread for long. ``s_M ≤ 1.12 s`` on every item of fifteen real macroeconomic
and geophysical series, so there the cap keeps the width within ``2.8`` times
the climatology's.

The cap is applied after the calibrators and they do not learn against it:
they judge the calibrated interval (as if the cap were a wrapper outside them),
so a run of capped misses cannot wind their scale up for later. While all
targets so far are equal (``s = 0``), or before two, there is no cap.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...core.cores import welford_update
from ...core.special import student_t_quantile_series

Array = jax.Array

__all__ = ["WIDTH_CAP", "WIDTH_CAP_MEMORY", "WidthCapState", "width_cap_init", "width_cap_update",
           "width_cap_variance", "capped"]

#: ``k``: the calibrated interval is at most this many times as wide as the climatology's.
WIDTH_CAP = 2.5
#: ``M``: the memory (items) of the targets' recent standard deviation ``s_M``.
WIDTH_CAP_MEMORY = 64


class WidthCapState(NamedTuple):
    """The targets' running statistics of the cap: all of them, and the last ~``M`` (:data:`WIDTH_CAP_MEMORY`).

    Attributes:
      n: ``[2]`` counts (the second saturates at ``M``).
      mean: ``[2]`` means.
      var: ``[2]`` mean squared deviations (Welford, :func:`~onlinejax.core.cores.welford_update`).
    """

    n: Array
    mean: Array
    var: Array


def width_cap_init(dtype) -> WidthCapState:
    """No targets yet (no cap)."""
    z = jnp.zeros((2,), dtype)
    return WidthCapState(z, z, z)


def width_cap_update(s: WidthCapState, y: Array, ok) -> WidthCapState:
    """Learn the target ``y: []`` where ``ok`` (a finite label); Welford's update of both statistics."""
    decay = jnp.asarray([1.0, 1.0 - 1.0 / WIDTH_CAP_MEMORY], s.mean.dtype)
    y = jnp.where(ok, y, s.mean[0])
    n, mean, var = welford_update(s.n, s.mean, s.var, y, decay)
    return jax.tree.map(lambda new, old: jnp.where(ok, new, old), WidthCapState(n, mean, var), s)


def width_cap_variance(s: WidthCapState, alpha: Array, z_alpha: Array, ratio: float = WIDTH_CAP) -> Array:
    """``[]`` the largest variance of a Gaussian whose ``1 - α`` interval is within the cap; ``+inf`` when none.

    ``(k·t_{n-1}(1 - α/2)·sqrt(1 + 1/n)·max(s, s_M) / z_α)²`` (module doc; ``z_α = Φ⁻¹(1 - α/2)``,
    ``s² = var·n/(n - 1)``), ``s`` floored at the dtype's resolution at the targets' mean, as the
    climatology's own scale is.

    Args:
      s: :class:`WidthCapState`; alpha, z_alpha: ``[]`` the calibrated miscoverage and its normal quantile.
      ratio: ``k``.
    """
    dt = s.mean.dtype
    fi = jnp.finfo(dt)
    n = s.n[0]
    ready = (n >= 2.0) & (s.var[0] > 0.0)
    nn = jnp.where(ready, n, 2.0)
    sd = jnp.sqrt(jnp.maximum(s.var[0] * nn / (nn - 1.0), s.var[1]))
    sd = jnp.maximum(sd, fi.eps * jnp.abs(s.mean[0]) + np.sqrt(fi.tiny))
    t = student_t_quantile_series(1.0 - 0.5 * alpha, z_alpha, nn - 1.0)
    half = ratio * t * sd * jnp.sqrt(1.0 + 1.0 / nn)
    return jnp.where(ready, jnp.minimum((half / z_alpha) ** 2, fi.max), jnp.inf).astype(dt)


def capped(s: WidthCapState, alpha: Array, z_alpha: Array, var: Array, informative: Array,
           ratio: float = WIDTH_CAP) -> Array:
    """``[]`` the variance ``var`` of an informative calibrated Gaussian, at most :func:`width_cap_variance`'s.

    An uninformative one (an abstention) is returned as it is.
    """
    return jnp.where(informative, jnp.minimum(var, width_cap_variance(s, alpha, z_alpha, ratio)), var)

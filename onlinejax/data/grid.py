"""The thesis's 576-stream synthetic grid (thesis 6.2.2) and a taxi-like timestamped stream.

Every grid stream has a name ``SYNTH_(D|ND)_(CD|NCD)_SIZE_INPDIM_INPSCALE_NOISE_G1G2``
(the thesis's pattern; its examples write the two growth codes without a
separator, e.g. ``SYNTH_D_CD_2000_1_50_3_23``, and :func:`parse_name` accepts
both ``_23`` and ``_2_3``):

* ``D`` / ``ND`` — discontinuous / continuous generating function;
* ``CD`` / ``NCD`` — abrupt concept drift at item ``SIZE // 2`` (every
  coefficient redrawn) or none;
* ``INPDIM`` ∈ {1, 2, 4}; inputs ``U(0, 1)·INPSCALE``, ``INPSCALE`` ∈ {10, 50, 100};
* ``NOISE`` ∈ {0, 1, 3, 5}: the thesis calls it the noise *variance*, but
  its generator used the value as the **standard deviation** of the additive
  Gaussian noise; we do the same (``noise_std`` in :class:`GridStream`);
* growth codes (:data:`GROWTH_CODES`): 1 linear ``bᵀx``, 2 log-linear
  ``s·log s`` (``s = bᵀx``), 3 quadratic ``Σ b_j x_j²``, 4 quadratic ``(bᵀx)²``,
  coefficients ``b ~ U(0, 10)``. Continuous streams use one growth (``G1 = G2``;
  in one dimension the two quadratics are the same growth, so only 1–3);
  discontinuous streams use ``G1`` where ``Σx < d·INPSCALE/2`` and the faster
  ``G2`` elsewhere, for the allowed pairs 12, 13, 14, 23, 24 (d = 1: 12, 13, 23).
  Each piece has its own coefficient vector.

That gives 3 × 4 = 12 scale/noise settings × (3 + 3 | 4 + 5 | 4 + 5) growth
settings for d = 1 | 2 | 4 × 2 drift settings = 576 streams. A stream's data
depend only on the key and its name (the key is folded with the stream's
index in :func:`grid_names`), so a subset regenerates bit-identically.
"""
from __future__ import annotations

import re
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..core.base import check_int, default_float_dtype
from .synthetic import GROWTHS, growth

__all__ = [
    "GROWTH_CODES", "GridStream", "StreamGroup", "parse_name", "grid_streams", "grid_names", "stratified_names",
    "thesis_stream", "thesis_grid", "taxi_stream",
]

#: growth code -> :func:`~onlinejax.data.synthetic.growth` kind.
GROWTH_CODES = {1: "linear", 2: "loglinear", 3: "quadratic_sum", 4: "quadratic_dot"}
DIMS = (1, 2, 4)
SCALES = (10, 50, 100)
NOISES = (0, 1, 3, 5)
_NAME = re.compile(r"^SYNTH_(D|ND)_(CD|NCD)_(\d+)_(\d+)_(\d+)_(\d+)_(\d)_?(\d)$")


def _growth_settings(dim: int, discontinuous: bool) -> tuple:
    if discontinuous:
        return ((1, 2), (1, 3), (2, 3)) if dim == 1 else ((1, 2), (1, 3), (1, 4), (2, 3), (2, 4))
    return tuple((g, g) for g in ((1, 2, 3) if dim == 1 else (1, 2, 3, 4)))


class GridStream(NamedTuple):
    """One stream of the thesis grid (a host-side description; see the module doc)."""

    discontinuous: bool
    drift: bool
    size: int
    dim: int
    input_scale: int
    noise_std: int
    growth1: int
    growth2: int

    @property
    def name(self) -> str:
        return (f"SYNTH_{'D' if self.discontinuous else 'ND'}_{'CD' if self.drift else 'NCD'}_{self.size}_{self.dim}_"
                f"{self.input_scale}_{self.noise_std}_{self.growth1}{self.growth2}")

    @property
    def title(self) -> str:
        """A readable description for plot titles, e.g. ``"d=2, quadratic_sum, noise σ=3, inputs ×50, drift at 1000"``."""
        g1, g2 = GROWTH_CODES[self.growth1], GROWTH_CODES[self.growth2]
        growth = g1 if g1 == g2 else f"{g1} | {g2} (discontinuous)"
        change = f"drift at {self.change_point}" if self.drift else "no drift"
        return f"d={self.dim}, {growth}, noise σ={self.noise_std}, inputs ×{self.input_scale}, {change}"

    @property
    def change_point(self) -> int:
        """Item index of the drift (``size // 2``), or -1."""
        return self.size // 2 if self.drift else -1

    def properties(self) -> dict:
        """The stream's properties as a flat dict (the grid runner's table columns)."""
        return {"stream": self.name, "discontinuous": self.discontinuous, "drift": self.drift, "n": self.size,
                "d": self.dim, "input_scale": self.input_scale, "noise_std": self.noise_std,
                "growth1": GROWTH_CODES[self.growth1], "growth2": GROWTH_CODES[self.growth2]}


def grid_streams(size: int = 2000) -> list[GridStream]:
    """The 576 streams of thesis 6.2.2 in a fixed order (by d, continuity, drift, scale, noise, growth)."""
    size = check_int(size, "size", 2)
    return [GridStream(disc, drift, size, d, sc, no, g1, g2)
            for d in DIMS for disc in (False, True) for drift in (False, True)
            for sc in SCALES for no in NOISES for g1, g2 in _growth_settings(d, disc)]


def grid_names(size: int = 2000) -> list[str]:
    """The 576 names, in :func:`grid_streams` order."""
    return [s.name for s in grid_streams(size)]


def parse_name(name: str) -> GridStream:
    """``SYNTH_...`` name -> :class:`GridStream`; raises ``ValueError`` for anything outside the grid's settings."""
    m = _NAME.match(name.strip()) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"stream name {name!r}: expected SYNTH_(D|ND)_(CD|NCD)_SIZE_INPDIM_INPSCALE_NOISE_G1G2, "
                         f"e.g. SYNTH_D_CD_2000_1_50_3_23")
    disc, drift = m.group(1) == "D", m.group(2) == "CD"
    size, dim, scale, noise, g1, g2 = (int(g) for g in m.groups()[2:])
    s = GridStream(disc, drift, size, dim, scale, noise, g1, g2)
    if size < 2 or dim not in DIMS or scale not in SCALES or noise not in NOISES \
            or (g1, g2) not in _growth_settings(dim, disc):
        raise ValueError(f"stream name {name!r}: not in the thesis grid (d in {DIMS}, scale in {SCALES}, noise in "
                         f"{NOISES}, growths {[f'{a}{b}' for a, b in _growth_settings(dim, disc)]} for "
                         f"{'D' if disc else 'ND'} with d = {dim})")
    return s


#: stream -> its position in :func:`grid_streams` (size-independent), the key's fold-in.
_INDEX = {s: i for i, s in enumerate(grid_streams(2))}


def stratified_names(per_cell: int = 4, size: int = 2000, seed: int = 0) -> list[str]:
    """A sample of the grid with ``per_cell`` streams from each of the 12 (d, D|ND, CD|NCD) cells.

    Within a cell the streams are drawn without replacement (``numpy`` seed
    ``seed``), so scales, noise levels and growths vary.
    """
    per_cell = check_int(per_cell, "per_cell", 1)
    rng = np.random.default_rng(seed)
    cells: dict = {}
    for s in grid_streams(size):
        cells.setdefault((s.dim, s.discontinuous, s.drift), []).append(s)
    out = []
    for key in sorted(cells):
        group = cells[key]
        take = rng.choice(len(group), size=min(per_cell, len(group)), replace=False)
        out += [group[i].name for i in sorted(take)]
    return out


def _stream_arrays(key, n: int, d: int, scale, disc, drift, g1, g2, dtype):
    kx, kb, ke = jax.random.split(key, 3)
    X = jax.random.uniform(kx, (n, d), dtype) * scale
    B = jax.random.uniform(kb, (2, 2, d), dtype, 0.0, 10.0)  # [concept, piece, d]

    def f(b, g, x):  # growth code g (1..4) as an array, so one program serves every growth
        return jnp.stack([growth(k, b, x) for k in GROWTHS])[g - 1]

    def one(i, x):
        concept = jnp.where(drift & (i >= n // 2), 1, 0)
        upper = disc & (jnp.sum(x) >= d * scale / 2.0)
        return jnp.where(upper, f(B[concept, 1], g2, x), f(B[concept, 0], g1, x))

    F = jax.vmap(one)(jnp.arange(n), X)
    return X, F, jax.random.normal(ke, (n,), dtype)


def check_change_points(change_points, S: int, n: int) -> np.ndarray:
    """``[S]`` int64 drift indices; ``ValueError`` naming ``change_points`` unless each is -1 or in ``[0, n)``."""
    a = np.asarray(change_points)
    if a.size != S:
        raise ValueError(f"change_points: expected {S} values (one per stream), got {a.size}")
    a = a.reshape(S)
    if not (np.issubdtype(a.dtype, np.integer) or np.all(np.isfinite(a) & (a == np.round(a)))):
        raise ValueError(f"change_points: must be integers (item indices, -1 for none), got {a.tolist()}")
    a = a.astype(np.int64)
    if np.any((a < -1) | (a >= n)):
        raise ValueError(f"change_points: each must be -1 (none) or an item index in [0, {n}), got {a.tolist()}")
    return a


class StreamGroup(NamedTuple):
    """Streams of one shape, stacked for ``vmap``.

    Attributes:
      names: ``S`` stream names.
      X: ``[S, n, d]``; Y: ``[S, n]`` targets; F: ``[S, n]`` noise-free values (or None).
      change_points: ``[S]`` int item index of each stream's drift, -1 for none.
      properties: ``S`` dicts of the streams' properties (table columns).
    """

    names: tuple
    X: jax.Array
    Y: jax.Array
    F: jax.Array | None
    change_points: np.ndarray
    properties: tuple

    @classmethod
    def from_arrays(cls, X, Y, names: Sequence[str] | None = None, change_points=None) -> "StreamGroup":
        """Wrap user streams ``X [S, n, d]``, ``Y [S, n]`` (one shape) for :func:`~onlinejax.runner.run_grid`.

        ``change_points``: ``[S]`` item index of each stream's drift in ``[0, n)``, ``-1`` for none
        (default: none); they only mark which items the ``*_st`` metrics leave out.
        """
        X = jnp.asarray(X)
        Y = jnp.asarray(Y)
        if X.ndim != 3 or Y.shape != X.shape[:2]:
            raise ValueError(f"X, Y: expected shapes [S, n, d] and [S, n], got {tuple(X.shape)} and {tuple(Y.shape)}")
        S, n, d = X.shape
        names = tuple(names) if names is not None else tuple(f"stream{i}" for i in range(S))
        if len(names) != S:
            raise ValueError(f"names: expected {S} names, got {len(names)}")
        cp = np.full(S, -1, np.int64) if change_points is None else check_change_points(change_points, S, n)
        props = tuple({"stream": nm, "n": n, "d": d} for nm in names)
        return cls(names, X, Y, None, cp, props)


def thesis_stream(key, name: str | GridStream, dtype=None):
    """One grid stream: ``(X [n, d], Y [n], F [n])`` for its name (see the module doc).

    Bit-identical to the same stream inside :func:`thesis_grid` with the same key.
    """
    s = parse_name(name) if isinstance(name, str) else name
    g = thesis_grid(key, [s], dtype=dtype)[0]
    return g.X[0], g.Y[0], g.F[0]


def thesis_grid(key, names: Sequence[str | GridStream] | None = None, *, size: int = 2000, dtype=None) -> list[StreamGroup]:
    """Generate grid streams, one :class:`StreamGroup` per input dimension (``vmap`` over streams).

    Args:
      key: a ``jax.random`` key; stream ``i`` of :func:`grid_streams` uses ``fold_in(key, i)``.
      names: names or :class:`GridStream` s (default: all 576 of length ``size``).
      size: stream length when ``names`` is None.
      dtype: floating dtype (default float32, or float64 under x64).
    Returns:
      list of :class:`StreamGroup`, ordered by ``(n, d)``; within a group the
      streams keep the order given.
    """
    dtype = dtype or default_float_dtype()
    specs = grid_streams(size) if names is None else [parse_name(s) if isinstance(s, str) else s for s in names]
    if not specs:
        raise ValueError("names: no streams given")
    groups: dict = {}
    for s in specs:
        groups.setdefault((s.size, s.dim), []).append(s)
    out = []
    for (n, d), ss in sorted(groups.items()):
        idx = np.asarray([_INDEX[s._replace(size=2)] for s in ss])
        par = np.asarray([[s.input_scale, s.noise_std, s.discontinuous, s.drift, s.growth1, s.growth2] for s in ss])
        # fixed-size calls (padded with the first stream) so that a stream's numbers never depend on
        # which other streams were generated with it; Y = F + noise·ε on the host, where no
        # fused multiply-add can round differently from one program to another
        parts = []
        for lo in range(0, len(ss), _GEN_CHUNK):
            sel = np.arange(lo, lo + _GEN_CHUNK) % len(ss)
            keys = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.asarray(idx[sel]))
            p = par[sel]
            out_c = _generate(n, d, dtype)(keys, jnp.asarray(p[:, 0], dtype), jnp.asarray(p[:, 2], bool),
                                           jnp.asarray(p[:, 3], bool), jnp.asarray(p[:, 4], jnp.int32),
                                           jnp.asarray(p[:, 5], jnp.int32))
            parts.append([np.asarray(a)[: len(ss) - lo] for a in out_c])
        X, F, E = (np.concatenate(a) for a in zip(*parts))
        Y = F + par[:, 1].astype(F.dtype)[:, None] * E
        out.append(StreamGroup(tuple(s.name for s in ss), jnp.asarray(X), jnp.asarray(Y), jnp.asarray(F),
                               np.asarray([s.change_point for s in ss]), tuple(s.properties() for s in ss)))
    return out


_GEN_CACHE: dict = {}
_GEN_CHUNK = 32


def _generate(n, d, dtype):
    k = (n, d, np.dtype(dtype).name)
    if k not in _GEN_CACHE:
        _GEN_CACHE[k] = jax.jit(jax.vmap(lambda key, sc, disc, dr, g1, g2: _stream_arrays(
            key, n, d, sc, disc, dr, g1, g2, dtype)))
    return _GEN_CACHE[k]


def taxi_stream(key, n_items: int = 5000, *, mean_gap: float = 30.0, dtype=None):
    """A taxi-like stream: trips whose duration is the label, known only when the trip ends.

    Blog ``000_1463b71a5ad3192a.txt`` (NYC taxi trips): the model is asked at
    departure and the answer (the duration) arrives when the trip ends, so
    the label delay *is* the label. Departures are a Poisson process
    (exponential gaps, mean ``mean_gap`` seconds) starting at 0; features
    ``[distance_km, sin(2π·hour/24), cos(2π·hour/24)]`` with log-normal
    distances (median 2.5 km); speed 30 km/h off-peak, 15 km/h at the 8 h and
    18 h peaks; log-normal (σ = 0.15) multiplicative noise plus 60 s of pick-up
    time.

    Returns:
      ``(departure [n] seconds, X [n, 3], duration [n] seconds)``; pass
      ``schedule_from_times(departure, departure + duration)`` to
      :func:`~onlinejax.evaluation.delayed_progressive_validation`.
    """
    n_items = check_int(n_items, "n_items", 1)
    if not mean_gap > 0:
        raise ValueError(f"mean_gap: must be > 0, got {mean_gap!r}")
    dtype = dtype or default_float_dtype()
    kg, kd, ke = jax.random.split(key, 3)
    t = jnp.cumsum(jax.random.exponential(kg, (n_items,), dtype) * mean_gap) - mean_gap
    t = jnp.maximum(t, 0.0)
    dist = 2.5 * jnp.exp(0.6 * jax.random.normal(kd, (n_items,), dtype))
    hour = jnp.mod(t / 3600.0, 24.0)
    ang = 2.0 * jnp.pi * hour / 24.0
    peak = jnp.exp(-0.5 * ((hour - 8.0) / 1.5) ** 2) + jnp.exp(-0.5 * ((hour - 18.0) / 1.5) ** 2)
    speed = 30.0 - 15.0 * jnp.minimum(peak, 1.0)  # km/h
    dur = 60.0 + 3600.0 * dist / speed * jnp.exp(0.15 * jax.random.normal(ke, (n_items,), dtype))
    X = jnp.stack([dist, jnp.sin(ang), jnp.cos(ang)], axis=1)
    return t, X, dur

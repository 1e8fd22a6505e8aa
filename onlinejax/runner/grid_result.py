"""The grid runner's table: :class:`GridResult`, its rows, summaries, CSV and relative metrics.

:data:`ROW_METRICS` names the metric columns every row of
:func:`~onlinejax.runner.run_grid` and
:func:`~onlinejax.runner.replay_combination` carries.
"""
from __future__ import annotations

import csv
from typing import NamedTuple, Sequence

import numpy as np

from ..core.schedule import TunePlan
from ..evaluation.metrics import METRICS

#: Metrics of every row (``*_st`` are the same over stable items).
ROW_METRICS = METRICS + ("skill", "mlpd_clim", "mlpd_from", "n_nonfinite") + tuple(
    f"{m}_st" for m in METRICS + ("skill", "mlpd_clim", "mlpd_from", "n_nonfinite"))


class GridResult(NamedTuple):
    """The table: ``rows`` (one dict per learner × stream), plus per-compile timings.

    ``compile_seconds``: ``{(configuration, n, d): seconds}`` from tracing to a compiled program (the
    first program whose predictions have a given type and shape also pays for the scores' program, which
    the others share: :func:`~onlinejax.evaluation.streams.compiled_scores`);
    ``compile_stages``: the same keys, ``(trace, lower, XLA compile)`` seconds of this process
    (programs compile several at a time in threads, so a stage's wall time includes waiting for
    the interpreter while another program traces).
    ``predictions`` (only with ``run_grid(keep_predictions=True)``):
    ``{(row learner label, stream name): (mean [n], var [n], pit [n], inner mean [n], inner var [n])}``
    NumPy arrays (:data:`~onlinejax.evaluation.streams.KEPT`); ``pit`` is the prediction's own CDF at the target (Gaussian, Student-t
    or mixture); the inner moments are those of the learner inside a climatology hedge
    (:func:`~onlinejax.wrappers.hedge.inner_prediction`), which :func:`~onlinejax.runner.replay_combination` mixes, else the
    prediction's own.
    ``tune_plan``: the :class:`~onlinejax.core.schedule.TunePlan` the rows ran under (checked, ``batch="auto"``
    read from the devices), or ``None`` (each configuration as it was built).
    """

    rows: list
    compile_seconds: dict
    predictions: dict | None = None
    compile_stages: dict | None = None
    tune_plan: TunePlan | None = None

    def __repr__(self) -> str:
        learners = len({r["learner"] for r in self.rows})
        streams = len({r.get("stream") for r in self.rows})
        kept = "" if self.predictions is None else f", predictions of {len(self.predictions)} rows"
        return (f"GridResult({len(self.rows)} rows: {learners} learners x {streams} streams, "
                f"{len(self.columns())} columns{kept}; .summary(), .to_pandas(), .to_csv(path))")

    def columns(self) -> list:
        """Column names of the table, in first-seen order over the rows."""
        cols: list = []
        for r in self.rows:
            cols += [k for k in r if k not in cols]
        return cols

    def to_pandas(self):
        """A ``pandas.DataFrame`` (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=self.columns())

    def to_csv(self, path) -> str:
        """Write the table as CSV and return the path."""
        cols = self.columns()
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(self.rows)
        return str(path)

    def summary(self, by: str = "family", metrics: Sequence[str] = ("smse", "smse_st", "icr", "saiw", "atpi"),
                how: str = "mean", as_frame: bool | None = None):
        """Aggregate the metrics per ``by`` value (thesis Fig. 6.4: mean over streams).

        Non-finite values are left out of the aggregate; ``nonfinite_rows`` counts the rows left out.

        Args:
          by: the row key to group by (``"family"``, ``"learner"``, ``"d"``, ...).
          metrics: the columns to aggregate (:data:`ROW_METRICS`, ``"atpi"``, ...).
          how: ``"mean"`` or ``"median"``.
          as_frame: ``None``: a ``pandas.DataFrame`` when pandas is installed, else a list of
            dicts; ``True``: a DataFrame (``ImportError`` without pandas); ``False``: the list.
        Returns:
          One row per group: ``by``, ``rows`` (rows in the group), the metrics, ``nonfinite_rows``.
        """
        if how not in ("mean", "median"):
            raise ValueError(f"how: must be 'mean' or 'median', got {how!r}")
        out = self._summary_rows(by, tuple(metrics), how)
        if as_frame is False:
            return out
        try:
            import pandas as pd
        except ImportError:
            if as_frame:
                raise
            return out
        return pd.DataFrame(out, columns=[by, "rows", *metrics, "nonfinite_rows"])

    def relative_to(self, reference: str, metrics: Sequence[str] = ("crps", "crps_st")) -> "GridResult":
        """The table with ``<metric>_rel`` columns: each row's metric over the ``reference`` learner's on its stream.

        E.g. ``relative_to("Climatology")`` gives ``crps_rel``, the CRPS as a fraction
        of the Student-t climatology's on the same stream and items (1 is no better
        than the climatology; scale-free, so medians over streams of any scale
        compare). Rows of streams the reference did not run get NaN.

        Raises:
          ValueError: naming ``reference`` when no row has that learner, or ``metrics`` for a missing column.
        """
        base = {r.get("stream"): r for r in self.rows if r["learner"] == reference}
        if not base:
            raise ValueError(f"reference: no rows of learner {reference!r}; the learners are "
                             f"{sorted({r['learner'] for r in self.rows})}")
        missing = [m for m in metrics if m not in self.rows[0]]
        if missing:
            raise ValueError(f"metrics: {missing} are not columns")
        rows = []
        for r in self.rows:
            ref = base.get(r.get("stream"))
            rel = {f"{m}_rel": (r[m] / ref[m] if ref is not None and ref[m] > 0 else float("nan")) for m in metrics}
            rows.append({**r, **rel})
        return self._replace(rows=rows)

    def _summary_rows(self, by: str, metrics: tuple, how: str) -> list:
        if self.rows and by not in self.rows[0]:
            raise ValueError(f"by: {by!r} is not a column; the columns are {self.columns()}")
        agg = {"mean": np.mean, "median": np.median}[how]
        groups: dict = {}
        for r in self.rows:
            groups.setdefault(r[by], []).append(r)
        out = []
        for k, rs in groups.items():
            row = {by: k, "rows": len(rs)}
            bad = 0
            for m in metrics:
                v = np.asarray([r[m] for r in rs], np.float64)
                ok = np.isfinite(v)
                bad = max(bad, int((~ok).sum()))
                row[m] = float(agg(v[ok])) if ok.any() else float("nan")
            row["nonfinite_rows"] = bad
            out.append(row)
        return out

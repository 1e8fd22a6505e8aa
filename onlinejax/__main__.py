"""Command line: ``python -m onlinejax [drift] [--streams S] [--n N] [--out DIR]``, ``grid`` and ``compare``.

``drift`` (the default) runs progressive validation of the Bayesian linear
family on the blog's drifting two-weight stream, ``S`` independent streams
vmapped in one compiled program per learner, prints a table of MAE / RMSE /
95 % interval coverage per learner (mean over streams) and writes a PNG of
the running MAE. ``grid`` runs registered learner configurations (default:
one per family) on a stratified sample of the thesis's 576-stream grid (or
``--full``) with :func:`onlinejax.runner.run_grid` and prints a
per-family SMSE / SMSE-ST / ICR / SAIW / MLPD / CRPS / log-score skill / ATPI
summary (thesis Fig. 6.4, with proper scores); ``--thesis`` runs the thesis's
configurations instead of the recommended ones.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import tempfile
import sys
import threading
import time
from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np


def drift_learners():
    """The learners of the ``drift`` command: ``{name: Learner}`` (2 inputs: ``[1, u]``)."""
    import optax

    from .learners import linear as L

    lam, b = L.forgetting_from_smoothing(0.8, 25.0)
    return {
        "BayesLinReg": L.bayes_linreg(2, alpha=2.0, beta=25.0),
        "BayesLinReg-forget0.98": L.bayes_linreg(2, alpha=2.0, beta=25.0, forgetting=0.98),
        "BayesLinReg-blog-smooth0.8": L.bayes_linreg(2, alpha=2.0, beta=b, forgetting=lam),
        "BayesLinReg-window64": L.windowed_bayes_linreg(2, 64, alpha=2.0, beta=25.0),
        "BayesianMLEForgetting_FF0.05": L.bayesian_mle_forgetting(2, forgetting_factor=0.05),
        "BayesianMAPForgetting_FF0.05": L.bayesian_map_forgetting(2, forgetting_factor=0.05, alpha=2.0, beta=25.0),
        "BayesianMLEWindowed_WS64": L.bayesian_mle_windowed(2, 64),
        "BayesianMAPWindowedMapped_WS64": L.bayesian_map_windowed(2, 64, alpha=2.0, beta=25.0,
                                                                    features=L.ThesisFeatures(mapped=True)),
        "SGD(adam 0.05)": L.sgd_linreg(2, optax.adam(0.05), intercept=False),
    }


def run_drift(streams: int, n: int, out: str, seed: int = 0, level: float = 0.95) -> list[dict]:
    """The ``drift`` command: every :func:`drift_learners` entry on ``streams`` drifting streams, one program each."""
    from .data import drifting_linear_stream
    from .evaluation import StreamsOptions, evaluate_streams, running_metrics

    first, trans = int(0.4 * n), int(0.2 * n)
    keys = jax.random.split(jax.random.key(seed), streams)
    Xs, Ys, _ = jax.vmap(lambda k: drifting_linear_stream(k, first, trans, n - first - trans))(keys)
    rows, curves = [], {}
    for name, lrn in drift_learners().items():
        t0 = time.perf_counter()
        res = evaluate_streams(lrn, Xs, Ys, options=StreamsOptions(level=level), keep_predictions=True)
        secs = time.perf_counter() - t0
        m = {k: float(np.mean(res.metrics[k])) for k in ("mae", "rmse", "icr", "aiw")}
        rows.append({"learner": name, "mae": m["mae"], "rmse": m["rmse"], "coverage": m["icr"], "width": m["aiw"],
                     "seconds": secs})
        curves[name] = np.mean(np.asarray(running_metrics(Ys, res.predictions, level)["mae"]), axis=0)
    print(f"Progressive validation on the blog's drifting stream: {streams} streams x {n} items, "
          f"transition at items {first}-{first + trans}; {jax.devices()[0].platform}, "
          f"{jnp.zeros(()).dtype}")
    _write_drift(rows, curves, out, streams, (first, first + trans))
    return rows


def _write_drift(rows: list, curves: dict, out: str, streams: int, drift_span: tuple) -> None:
    print(f"{'learner':34s} {'MAE':>8s} {'RMSE':>8s} {'ICR95':>7s} {'width':>7s} {'s (incl. compile)':>18s}")
    for r in rows:
        print(f"{r['learner']:34s} {r['mae']:8.4f} {r['rmse']:8.4f} {r['coverage']:7.3f} {r['width']:7.3f} {r['seconds']:18.2f}")
    os.makedirs(out, exist_ok=True)
    csv = os.path.join(out, "drift_summary.csv")
    with open(csv, "w") as f:
        f.write("learner,mae,rmse,coverage,width,seconds\n")
        for r in rows:
            f.write(f"{r['learner']},{r['mae']},{r['rmse']},{r['coverage']},{r['width']},{r['seconds']}\n")
    print(f"wrote {csv}")
    try:
        from .plots import plot_running_error

        png = plot_running_error(curves, os.path.join(out, "drift_running_mae.png"),
                                 title=f"Running MAE, mean of {streams} drifting streams", drift_span=drift_span)
        print(f"wrote {png}")
    except ImportError as e:
        print(f"no plot: {e}")


def run_compare(delay: float = 7.0) -> dict:
    """Temporal split vs K-fold vs progressive vs delayed progressive on River's TrumpApproval."""
    from .data import trump_approval
    from .evaluation import compare_evaluations
    from .learners.linear import bayes_linreg

    days, X, y, names = trump_approval()
    lrn = bayes_linreg(X.shape[1], alpha=1e-2, beta=1.0, forgetting=0.99, intercept=True)
    print(f"TrumpApproval (River's shipped CSV): {len(y)} days, features {', '.join(names)}; "
          f"learner: forgetting Bayesian linear regression (λ = 0.99, intercept); label delay {delay:g} days")
    return compare_evaluations(lrn, X, y, times=days, delay=delay)


def run_grid_command(per_cell: int, n: int, learners: str | None, out: str, full: bool, seed: int = 0,
                     stream_names: str | None = None, thesis: bool = False, tune_every: int = 1):
    """The thesis grid (or a stratified sample) for the chosen learners; prints a per-family summary, writes CSV and PNGs.

    Default learners: the recommended set (:func:`onlinejax.zoo.recommended_learners`) and the
    climatology baseline; ``thesis=True``: the thesis's small set and its default combination.
    ``tune_every > 1``: the runner's :class:`~onlinejax.core.schedule.TunePlan` ``(every=tune_every)``.
    """
    from .data import grid_names, parse_name, stratified_names, thesis_grid
    from .evaluation import ReplayOptions, registered_learners
    from .runner import replay_combination, run_grid
    from .core.schedule import TunePlan
    from . import zoo

    zoo.register_all()
    if stream_names:
        names = [parse_name(s.strip()).name for s in stream_names.split(",") if s.strip()]
    else:
        names = grid_names(n) if full else stratified_names(per_cell, size=n, seed=seed)
    if learners:
        gls = registered_learners(learners)
    else:
        gls = zoo.thesis_default_learners() if thesis else zoo.default_learners()
    t0 = time.perf_counter()
    groups = thesis_grid(jax.random.key(seed), names)
    res = run_grid(gls, groups, keep_predictions=True, tune_plan=TunePlan(every=tune_every) if tune_every > 1 else None)
    if not learners:
        # the combination from its members' predictions (no second compile of the members)
        rule, rc, mc = zoo.default_combination_rule()
        name, members = ((zoo.DEFAULT_COMBINATION, zoo.COMBINATION_MEMBERS) if thesis
                         else (zoo.RECOMMENDED_COMBINATION, zoo.RECOMMENDED_MEMBERS))
        wrap = None if thesis else zoo.calibrate_combination
        if all(m in {g.name for g in gls} for m in members):
            res = replay_combination(res, groups, name, members, rule, options=ReplayOptions(
                recalibrate=rc, correct=mc, after_spread=not thesis, wrap=wrap))
    secs = time.perf_counter() - t0
    if zoo.CLIMATOLOGY in {r["learner"] for r in res.rows}:
        res = res.relative_to(zoo.CLIMATOLOGY)
    n_streams = sum(len(g.names) for g in groups)
    print(f"Thesis grid: {n_streams} streams x {groups[0].X.shape[1]} items, "
          f"{len({r['learner'] for r in res.rows})} learners; {jax.devices()[0].platform} "
          f"x{len(jax.devices())}, {jnp.zeros(()).dtype}; {secs:.1f} s incl. compile"
          + (f"; state machines tune on item counts that are multiples of {tune_every}" if tune_every > 1 else ""))
    _print_grid_table(res)
    os.makedirs(out, exist_ok=True)
    print(f"wrote {res.to_csv(os.path.join(out, 'grid.csv'))}")
    try:
        for png in grid_plots(res, groups, out):
            print(f"wrote {png}")
    except ImportError as e:
        print(f"no plots: {e}")
    return res


def _print_grid_table(res) -> None:
    """The main command's table: per family, medians over streams of the scale-free columns."""
    print("(medians over streams, so that no stream's scale dominates; -ST: over the stable items, leaving out 128 "
          "after the start and after a drift; width (95 % interval) and CRPS in units of the stream's target "
          "standard deviation; CRPS/clim: over the Student-t climatology's CRPS on the same stream and items; "
          "MLPD and skill (MLPD minus the Student-t climatology's) from the third item on; "
          "non-finite rows are left out and counted; grid.csv has every stream's row)")
    rel = "crps_st_rel" in res.rows[0]
    cols = ("smse", "smse_st", "icr", "aiw_sd_st", "crps_sd_st") + (("crps_st_rel",) if rel else ()) + (
        "mlpd_from", "skill", "atpi")
    print(f"{'family':18s} {'rows':>5s} {'SMSE':>9s} {'SMSE-ST':>9s} {'ICR95':>7s} {'width-ST':>9s} {'CRPS-ST':>9s} "
          + (f"{'CRPS/clim-ST':>13s} " if rel else "")
          + f"{'MLPD':>9s} {'skill':>8s} {'ATPI (us)':>10s} {'non-finite':>10s}")
    for r in res.summary(metrics=cols, how="median", as_frame=False):
        print(f"{r['family']:18s} {r['rows']:5d} {r['smse']:9.4f} {r['smse_st']:9.4f} {r['icr']:7.3f} "
              f"{r['aiw_sd_st']:9.4f} {r['crps_sd_st']:9.4f} " + (f"{r['crps_st_rel']:13.4f} " if rel else "")
              + f"{r['mlpd_from']:9.3f} {r['skill']:8.3f} {1e6 * r['atpi']:10.2f} {r['nonfinite_rows']:10d}")


def grid_plots(res, groups, out: str, window: int = 100) -> list:
    """The main command's figures: the per-family summary, sliding-window error with the drift marked and
    intervals for one stream, and PIT histograms."""
    from .data import parse_name
    from .plots import plot_grid_summary, plot_intervals, plot_pit, plot_windowed_error

    # the first drifting stream of the sample (else the first stream)
    cands = [(g, i) for g in groups for i, c in enumerate(g.change_points) if c >= 0] or [(groups[0], 0)]
    g, i = cands[0]
    name, cp = g.names[i], int(g.change_points[i])
    try:
        what = parse_name(name).title
    except ValueError:  # a stream from outside the thesis grid
        what = name
    y = np.asarray(g.Y[i], np.float64)
    labels = list(dict.fromkeys(r["learner"] for r in res.rows))
    kernel = np.ones(window) / window
    curves = {}
    for lab in labels:
        if (lab, name) in res.predictions:
            m = np.asarray(res.predictions[(lab, name)][0], np.float64)
            curves[lab] = np.convolve((y - m) ** 2, kernel, mode="full")[: len(y)] / np.var(y)
    n_streams = sum(len(g.names) for g in groups)
    paths = [plot_grid_summary(res.summary(metrics=("smse", "icr", "skill"), as_frame=False),
                               os.path.join(out, "grid_summary.png"), metrics=("smse", "icr", "skill"),
                               title=f"Mean over {n_streams} streams, per family")]
    paths.append(plot_windowed_error(curves, os.path.join(out, "grid_error.png"), drift_at=cp, window=window,
                                     title=f"Sliding-window SMSE on {what}"))
    family = {r["learner"]: r.get("family") for r in res.rows}
    lab = next((l for l in reversed(labels) if family[l] == "Combination"), labels[0])  # the combination's, if run
    m, v = (np.asarray(a, np.float64) for a in res.predictions[(lab, name)][:2])
    lo_i = max(0, (cp if cp >= 0 else len(y) // 2) - 150)
    sl = slice(lo_i, lo_i + 300)
    # the run keeps each prediction's moments, so the band is their Gaussian 95 % interval, titled as such
    half = NormalDist().inv_cdf(0.975) * np.sqrt(v[sl])
    paths.append(plot_intervals(y[sl], m[sl], m[sl] - half, m[sl] + half, os.path.join(out, "grid_intervals.png"),
                                start=lo_i, drift_at=cp, title=f"{lab}: mean ± 1.96 sd\n{what}"))
    # calibration: PIT histograms per learner over every stream of the run
    # the predictions' own CDFs at the targets (a Student-t or mixture is not its moment-matched Gaussian)
    pits = {lab: np.concatenate([np.asarray(p[2], np.float64) for (l2, _), p in res.predictions.items() if l2 == lab])
            for lab in labels}
    paths.append(plot_pit(pits, os.path.join(out, "grid_calibration.png"),
                          title=f"PIT histograms over {n_streams} streams (flat = calibrated)"))
    return paths


#: ``--seed`` takes what every stream generator accepts: a 32-bit unsigned integer.
SEED_MAX = 2**32 - 1


def _seed(text: str) -> int:
    """``--seed``'s type: an integer in [0, ``SEED_MAX``] (argparse names the option in its usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, {SEED_MAX}], got {text}")
    return value


_EPILOG = ("Options belong to their subcommand and follow it: python -m onlinejax drift --n 500. "
           "Without a subcommand, drift runs with the options given: python -m onlinejax --n 500.")
_COMMANDS = ("drift", "grid", "compare")


def _subparser(sub, name: str, help: str) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` shows the defaults."""
    return sub.add_parser(name, help=help, description=help, formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def _parser() -> argparse.ArgumentParser:
    """The command line: ``drift``, ``grid`` and ``compare``, each with its own options (defaults in ``--help``)."""
    from . import __version__

    p = argparse.ArgumentParser(prog="python -m onlinejax", description=__doc__.splitlines()[0], epilog=_EPILOG,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--version", action="version", version=f"onlinejax {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="{drift,grid,compare}")
    d = _subparser(sub, "drift", "Bayesian linear family on the blog's drifting stream (default)")
    d.add_argument("--streams", type=int, default=16, help="number of independent streams (vmapped)")
    d.add_argument("--n", type=int, default=2000, help="items per stream")
    d.add_argument("--out", default="results", help="output folder for CSV and PNG")
    d.add_argument("--seed", type=_seed, default=0, help=f"random seed of the streams (0 to {SEED_MAX})")
    g = _subparser(sub, "grid", "learners x thesis grid streams (a stratified sample by default)")
    g.add_argument("--per-cell", type=int, default=None,
                   help="streams per (d, D|ND, CD|NCD) cell of the sample (None: 2)")
    g.add_argument("--full", action="store_true", help="all 576 streams")
    g.add_argument("--n", type=int, default=None, help="items per stream (None: 2000)")
    g.add_argument("--learners", default=None,
                   help="comma-separated names or substrings (None: the recommended learners and climatology)")
    g.add_argument("--list-learners", action="store_true",
                   help="print the registered configurations (name, family, one line about it) and exit")
    g.add_argument("--thesis", action="store_true",
                   help="the thesis's small set (one configuration per family) instead of the recommended one")
    g.add_argument("--stream-names", default=None,
                   help="comma-separated grid stream names, each of which gives its own size (None: a stratified "
                        "sample); not with --n, --per-cell or --full")
    g.add_argument("--tune-every", type=int, default=1, metavar="K",
                   help="a state machine's tune waits for the next item count that is a multiple of K, so many "
                        "vmapped streams share tune items (1: at the learning phase's end, the thesis's rule)")
    g.add_argument("--out", default="results", help="output folder for CSV and PNGs")
    g.add_argument("--seed", type=_seed, default=0, help=f"random seed of the sample and the streams (0 to {SEED_MAX})")
    c = _subparser(sub, "compare", "evaluation schemes side by side on a real data set (needs River)")
    c.add_argument("--delay", type=float, default=7.0, help="label delay in days for delayed validation")
    for q in (d, g, c):
        q.add_argument("--compile-cache", default=None, metavar="DIR",
                       help="persistent XLA compilation cache, so a repeated run loads its programs instead of "
                            "compiling them (None: $ONLINEJAX_COMPILE_CACHE or ~/.cache/onlinejax/xla; 'none': off, as is "
                            "ONLINEJAX_COMPILE_CACHE=none)")
    return p


def _with_command(p: argparse.ArgumentParser, argv: list) -> list:
    """``argv`` with ``drift`` in front when it names no subcommand; a usage error for an option before one."""
    at = next((i for i, a in enumerate(argv) if a in _COMMANDS), None)
    if at is None:
        return argv if any(a in ("-h", "--help", "--version") for a in argv) else ["drift", *argv]
    early = [a for a in argv[:at] if a.startswith("-") and a not in ("-h", "--help", "--version")]
    if early:
        p.error(f"{early[0]}: options follow their subcommand (python -m onlinejax {argv[at]} {early[0]} ...)")
    return argv


def _list_learners() -> int:
    """Print every registered configuration as ``name<TAB>family<TAB>description``, one a line; nothing runs."""
    from . import zoo
    from .core.registry import registered_learners

    zoo.register_all()
    for gl in registered_learners():
        print(f"{gl.name}\t{gl.family}\t{gl.description}")
    return 0


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _writable(option: str, path: str) -> str | None:
    """``None`` when the folder ``path`` exists or can be made, and takes a file; else a message naming ``option``."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        return f"{option}: cannot write to {path!r} ({e.strerror or e})"
    return None


def _compile_cache_unwritable(a) -> str | None:
    """The usage error of ``--compile-cache`` (a folder that cannot be written), or None."""
    from .evaluation import default_cache_dir

    path = a.compile_cache or default_cache_dir()
    if path == "none":
        return None
    return _writable("--compile-cache", os.path.expanduser(path))


def _start_compile_cache(a) -> None:
    """Turn on the persistent compilation cache unless ``--compile-cache none``: every command compiles."""
    from .evaluation import default_cache_dir, enable_compilation_cache

    path = a.compile_cache or default_cache_dir()
    if path != "none":
        enable_compilation_cache(path)


def _grid_usage(a) -> str | None:
    """The usage error of ``grid``'s sizes, names and learners (naming the option), or None; fills the defaults."""
    if a.stream_names is not None:
        given = [o for o, v in (("--n", a.n), ("--per-cell", a.per_cell), ("--full", a.full or None)) if v is not None]
        if given:
            return f"{given[0]}: --stream-names gives the streams and their sizes; use one or the other"
        from .data import parse_name

        names = [s.strip() for s in a.stream_names.split(",") if s.strip()]
        if not names:
            return "--stream-names: no names given"
        try:
            [parse_name(s) for s in names]
        except ValueError as e:
            return f"--stream-names: {e}"
    if a.full and a.per_cell is not None:
        return "--per-cell: --full runs every stream; use one or the other"
    if a.thesis and a.learners is not None:
        return "--thesis: it chooses the learners, as --learners does; use one or the other"
    a.n, a.per_cell = 2000 if a.n is None else a.n, 2 if a.per_cell is None else a.per_cell
    if a.per_cell < 1:
        return f"--per-cell must be >= 1, not {a.per_cell}"
    if a.n < 10:
        return f"--n must be >= 10, not {a.n}"
    if a.tune_every < 1:
        return f"--tune-every must be >= 1, not {a.tune_every}"
    if a.learners is not None:
        from . import zoo
        from .core.registry import registered_learners

        zoo.register_all()
        try:
            if not registered_learners(a.learners):
                return "--learners: no names given"
        except ValueError as e:
            return f"--learners: {str(e).removeprefix('learners: ')}"
    return _writable("--out", a.out) or _compile_cache_unwritable(a)


def _grid(a) -> int:
    if a.list_learners:
        return _list_learners()
    bad = _grid_usage(a)
    if bad:
        return _error(bad)
    from .evaluation import use_cpu_cores

    use_cpu_cores()  # one host device per core: run_grid shards the streams over them
    _start_compile_cache(a)
    try:
        run_grid_command(a.per_cell, a.n, a.learners, a.out, a.full, a.seed, a.stream_names, a.thesis, a.tune_every)
    except ValueError as e:
        return _error(str(e))
    return 0


def _compare(a) -> int:
    if not (math.isfinite(a.delay) and a.delay >= 0):
        return _error(f"--delay must be a finite number >= 0, not {a.delay:g}")
    bad = _compile_cache_unwritable(a)
    if bad:
        return _error(bad)
    _start_compile_cache(a)
    try:
        run_compare(a.delay)
    except ImportError as e:
        return _error(str(e))
    return 0


def main(argv=None) -> int:
    """Parse ``argv`` and run ``drift`` (default), ``grid`` or ``compare``; 0 on success, 2 on a usage error."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = _parser()
    a = p.parse_args(_with_command(p, argv))
    if a.cmd == "grid":
        return _grid(a)
    if a.cmd == "compare":
        return _compare(a)
    if a.streams < 1 or a.n < 10:
        return _error(f"--streams must be >= 1 and --n >= 10, not {a.streams} and {a.n}")
    bad = _writable("--out", a.out) or _compile_cache_unwritable(a)
    if bad:
        return _error(bad)
    _start_compile_cache(a)
    run_drift(a.streams, a.n, a.out, a.seed)
    return 0


def exit_on_interrupt() -> None:
    """Let Ctrl-C end the process within a moment, with exit status 130 (the shell's for SIGINT).

    Python runs a signal handler only when the main thread returns to the
    interpreter, which an XLA compilation or a compiled program does not do
    for minutes, and at exit it waits for the threads still compiling. The
    C-level handler writes each signal to a pipe at once; a daemon thread
    waiting on that pipe (it gets the GIL: XLA runs without it) ends the
    process. Call it from the main thread of a command-line process only: it
    replaces the process's SIGINT handling.
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def stop(*_) -> None:
        sys.stdout.flush()
        print("\ninterrupted", file=sys.stderr, flush=True)
        os._exit(128 + signal.SIGINT)

    def watch() -> None:
        while True:
            if signal.SIGINT in os.read(read_fd, 64):
                stop()

    signal.set_wakeup_fd(write_fd)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=watch, name="onlinejax-interrupt", daemon=True).start()


if __name__ == "__main__":
    exit_on_interrupt()
    sys.exit(main())

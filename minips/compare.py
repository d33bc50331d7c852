"""``python -m minips compare``: several algorithms, one after another, on the
same seed, data, model and machine; a markdown table and figures.

Run it under ``mpiexec -n P`` like ``train``. Its flags (``train``'s and its
own) are read in :mod:`minips.cli`; this module runs what they ask for. Algorithms are given as spec
strings ``NAME[:key=value]...[@LABEL]`` separated by commas, e.g.
``sync,overlap-sync,pseudo-sync:predictor=last,pseudo-sync:adaptive:2`` (the
positional short form ``pseudo-sync:PREDICTOR:K`` still works).
With ``--seeds 0,1,2`` every algorithm runs once per seed (seeds outermost),
into ``OUT/<label>-seed<s>/``, and compare.md adds the statistics over seeds:
per algorithm the mean and 95 % t interval of the test metric (and of the
validation metric with ``--val-fraction``, which then decides), and each
algorithm against the baseline paired by seed (better / worse / no difference shown; with
``--within POINTS`` the target met / missed / unresolved), as ``bench study``
reports them (:mod:`minips.stats`).

Writes ``OUT/<label>/`` (each run's train outputs), ``OUT/compare.md``,
``OUT/compare.json`` and ``OUT/accuracy.png``, ``OUT/breakdown.png``, ``OUT/trace.png``,
``OUT/consensus.png`` when some method's ranks differ, and when the runs counted their
traffic ``OUT/accuracy-bytes.png`` and ``OUT/accuracy-traffic.png`` (:func:`minips.plots.plot_runs`).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from .report import time_to_target
from .rundir import COMPARE_JSON, COMPARE_MD, atomic_write_all, json_text, run_folder
from .stats import COLLAPSE_MARGIN, Failure

#: chance level of an accuracy in compare --seeds: ten classes, as in every classification set minips ships
CHANCE_ACCURACY = 0.1

__all__ = ["parse_algos", "check_algos", "run_folder", "run_compare", "markdown_table", "seeds_report",
           "time_to_target", "traffic_ratio", "baseline_run"]


def parse_algos(spec: str) -> list[dict]:
    """``"sync,pseudo-sync:predictor=last:staleness=2@stale2"`` -> one entry per
    comma-separated algorithm spec (grammar: :mod:`minips.distributed.algorithms.spec`):
    ``{"algo": the spec, "label": its label}``.

    Raises:
        ValueError: an empty list, or an entry that is not a valid spec
            (unknown algorithm or option, bad value), naming the entry.
    """
    from .distributed.algorithms import DEFAULT_ALGOS, resolve

    out = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        try:
            label = resolve(item).label
        except ValueError as e:
            raise ValueError(f"--algos entry {item!r}: {_without_spec(e, item)}") from None
        out.append({"algo": item, "label": label})
    if not out:
        raise ValueError(f"--algos is empty; e.g. --algos {','.join(DEFAULT_ALGOS)}")
    return out


def _run_config(base_cfg, entry: dict, out: Path, seed: int | None = None):
    """The TrainConfig of one ``--algos`` entry (and one of several ``--seeds``:
    its folder is ``<label>-seed<s>``)."""
    if seed is None:
        return dataclasses.replace(base_cfg, **entry, out=str(run_folder(out, entry["label"])), resume=None)
    return dataclasses.replace(base_cfg, **entry, seed=seed, out=str(run_folder(out, f"{entry['label']}-seed{seed}")),
                               resume=None)


def check_algos(base_cfg, algos: list[dict], out, seeds: list[int] | None = None) -> None:
    """Check every entry (the algorithm spec with the shared flags, and the
    run's options) and the output directory before any training starts, so a
    typo in the last entry does not cost the runs before it.

    Raises:
        ConfigError: naming the entry and what is wrong with it (the message of
            the single-run path).
    """
    from .config import ConfigError, check_out_dir

    from .rundir import check_fresh, check_unlocked
    out = check_out_dir(out)
    check_unlocked(out)  # another compare writes this folder (it holds OUT/run.lock while it runs)
    check_fresh(out, base_cfg.overwrite)  # an older compare's runs and table would be mixed with this one's
    seen = {}
    for entry, seed in [(e, s) for s in (seeds or [None]) for e in algos]:
        cfg = _run_config(base_cfg, entry, out, seed)
        if cfg.out in seen:  # both runs would write one folder
            raise ConfigError(f"--algos entries {seen[cfg.out]!r} and {entry['label']!r} are the same run "
                              f"(both would write {cfg.out}); list each algorithm once")
        seen[cfg.out] = entry["label"]
        check_unlocked(cfg.out)  # a run (of any seed) in progress there: refused before --overwrite clears it
        try:
            cfg.validate()
            spec = cfg.resolve_algo()
            if cfg.check_replicas and not spec.replicated:
                raise ConfigError(f"--check-replicas compares weight hashes, but {spec.label} lets ranks hold "
                                  "different weights; drop --check-replicas")
            check_out_dir(cfg.out)
        except ValueError as e:
            raise ConfigError(f"--algos entry {entry['label']!r}: {_without_spec(e, entry['algo'])}") from None


def _without_spec(error: Exception, spec: str) -> str:
    """The message of a spec error without its own "algorithm spec 'X':" prefix
    (the caller names the --algos entry already)."""
    return str(error).removeprefix(f"algorithm spec {spec!r}: ")


def traffic_ratio(summary: dict, summaries: list[dict], base: dict | None = None) -> float | None:
    """Bytes sent per rank per step relative to the registry's baseline run in
    the same comparison (None when the baseline is not among them or either
    did not count its traffic). ``base``: that baseline's summary when the
    caller has found it already (:func:`baseline_run`)."""
    base = base if base is not None else baseline_run(summaries)
    if base is None or summary.get("bytes_sent_per_step") is None:
        return None
    return summary["bytes_sent_per_step"] / base["bytes_sent_per_step"]


def baseline_run(summaries: list[dict]) -> dict | None:
    """The first summary of the registry's baseline algorithm (sync) that
    counted its traffic, or None."""
    from .distributed.algorithms import BASELINE, resolve
    return next((s for s in summaries if s.get("bytes_sent_per_step") and resolve(s["algo"]).name == BASELINE),
                None)


def markdown_table(summaries: list[dict], target: float | None = None) -> str:
    """The comparison table (one row per run); ``target``: the test accuracy
    (or BLEU) whose first reaching is timed (``--target-accuracy``)."""
    from .distributed.algorithms import BASELINE
    metric_cols = [("test_accuracy", "test acc"), ("test_loss", "test loss")]
    if any(s.get("bleu") is not None for s in summaries):
        metric_cols = [("bleu", "BLEU"), ("exact_match", "exact match"), ("test_loss", "test loss")]
    if any(s.get("rank0_test_accuracy") is not None for s in summaries):  # --eval-rank0
        metric_cols.append(("rank0_test_accuracy", "rank 0 acc"))
    diverse = any(s.get("consensus_distance") is not None for s in summaries)  # ranks that differ
    metric = metric_cols[0][0]
    base = baseline_run(summaries)  # once: a spec is parsed and checked to find it
    ratios = [traffic_ratio(s, summaries, base) for s in summaries]
    has_ratio = any(r is not None for r in ratios)
    virt = any(s.get("virtual") for s in summaries)  # ranks were threads: times are not a cluster's
    tag = " (VIRTUAL)" if virt else ""
    net = next((s.get("projected_network") for s in summaries if s.get("projected_network")), "")
    head = ["algorithm", *[c for _, c in metric_cols], *(["consensus"] if diverse else []), f"images/s{tag}",
            f"step ms{tag}", *([f"projected step ms ({net})"] if virt else []), "compute ms", "wait ms", "own ms",
            "overlap eff.", "MiB sent/step", *([f"sent vs {BASELINE}"] if has_ratio else []),
            *([("projected " if virt else "") + f"s to {target:g}"] if target is not None else []), f"wall s{tag}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s, ratio in zip(summaries, ratios):
        b = s["time_breakdown"]
        reach = time_to_target(s, target, metric)
        eff = s.get("overlap_efficiency")
        cons = s.get("consensus_distance")
        row = [s["label"], *[_fmt(s.get(k)) for k, _ in metric_cols],
               *([("-" if cons is None else f"{cons:.3g}")] if diverse else []), f"{s['images_per_s']:.0f}",
               f"{1e3 * s['step_time_s']:.2f}",
               *([_ms(s.get("projected_step_time_s"))] if virt else []), f"{1e3 * (b['forward'] + b['backward']):.2f}",
               f"{1e3 * b['wait']:.2f}", f"{1e3 * _own(b):.2f}", "n/a" if eff is None else f"{eff:.2f}",
               _mib(s.get("bytes_sent_per_step")),
               *(["n/a" if ratio is None else f"{ratio:.3g}x"] if has_ratio else []),
               *(["not reached" if reach is None else f"{reach:.1f}"] if target is not None else []),
               f"{s['wall_time_s']:.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "compute = forward + backward; own = the algorithm's own phases (predict, average, consensus, "
              "...); overlap eff. = 1 - wait / (blocking allreduce of the gradient alone), for algorithms that "
              "allreduce the gradient every step; MiB sent/step = per rank, mean over ranks and steps."
              + (f" sent vs {BASELINE} = MiB sent/step over the {BASELINE} run's." if has_ratio else "")
              + (f" s to {target:g} = wall seconds until the first evaluation at or above {metric} {target:g} "
                 "(evaluations happen once per epoch)." if target is not None else "")
              + (" Test metrics of runs whose ranks differ are of the model averaged over ranks; consensus = "
                 "(1/P) sum_i ||w_i - mean w||^2 at the end of training (the evaluation after the last step; "
                 "consensus.png shows it as a star after the values logged during training)." if diverse else "")
              + (f" VIRTUAL: the ranks were threads of one process, so measured times are not cluster times; "
                 f"projected = the algorithm's cost model on {net} at this P from the compute measured per rank"
                 + (" (times to the target use it)" if target is not None else "") + "." if virt else "")]
    return "\n".join(lines)


def _ms(v):
    return "n/a" if v is None else f"{1e3 * v:.2f}"


def _fmt(v):
    return "n/a" if v is None else f"{v:.4f}"


def _own(breakdown: dict) -> float:
    """Seconds per step of the algorithm's own phases: everything but compute
    (forward, backward), the optimizer (update) and post/wait (e.g. predict,
    average, consensus, compress, mix)."""
    return sum(v for k, v in breakdown.items() if k not in ("forward", "backward", "update", "post", "wait"))


def _mib(v):
    """Bytes per step as MiB (mean over ranks; summaries from before traffic was counted: n/a)."""
    return "n/a" if v is None else f"{v / 2**20:.3f}"


def run_compare(base_cfg, algos: list[dict], out, target: float | None = None, seeds: list[int] | None = None,
                within: float | None = None, figures: bool = True) -> list[dict]:
    """Train each algorithm with ``base_cfg`` (same seed, data, model); returns
    the summaries. ``target``: see :func:`markdown_table`. ``seeds``: run every
    algorithm once per seed (None or one seed: ``base_cfg.seed``'s single
    runs); ``within``: the target gap to the baseline in points, for the
    statistics over seeds (:func:`seeds_report`); ``figures``: draw the
    figures of :func:`minips.plots.plot_runs` into ``out`` at the end (False:
    the report alone; ``python -m minips plot`` draws them later).

    Every entry is checked before the first run, as far as a run checks itself
    before training (:meth:`minips.train.Trainer.preflight`: e.g. a topology
    that does not fit the number of ranks, a compressor larger than the
    model, a staleness above the run's steps), so a bad last entry does not
    cost the runs before it. ``compare.md`` and ``compare.json`` are rewritten
    after each run with the runs finished so far (and the ones still to run),
    so a later run that fails, or a job that is killed, keeps the report of
    what finished.

    Raises:
        ConfigError: an entry that a run would refuse, naming the entry.
    """
    from .config import ConfigError
    from .data.shared import shared_data
    from .distributed.comm import get_comm
    from .train import Trainer

    out = Path(out)
    many = seeds is not None and len(seeds) > 1
    if seeds is not None and len(seeds) == 1:
        base_cfg = dataclasses.replace(base_cfg, seed=seeds[0])
    runs = [(e, s) for s in seeds for e in algos] if many else [(e, None) for e in algos]
    check_algos(base_cfg, algos, out, seeds if many else None)
    comm = get_comm(base_cfg.network, base_cfg.progress, base_cfg.allreduce, base_cfg.ranks_per_node or None)
    # the data set is read and normalised once for all the runs (and their preflights), not once per run
    with shared_data():
        for entry in algos:  # collective: every rank builds every entry once, nothing is written
            try:
                Trainer(_run_config(base_cfg, entry, out), comm).preflight()
            except ValueError as e:
                raise ConfigError(f"--algos entry {entry['label']!r}: {_without_spec(e, entry['algo'])}") from None
        if comm.rank == 0 and many and not base_cfg.val_fraction:
            print("compare --seeds: no --val-fraction, so the statistics over seeds decide on the test split "
                  "(compare.md says so); add --val-fraction 0.1 to decide on a validation split", file=sys.stderr)
        return _locked_run_all(base_cfg, comm, runs, out, target, seeds if many else None, within, figures)


def _locked_run_all(base_cfg, comm, runs: list[tuple], out: Path, target, seeds, within,
                    figures: bool = True) -> list[dict]:
    """Take the folder's lock, clear it under --overwrite, and train the runs."""
    # Rank 0 takes the folder's lock (OUT/run.lock) for the whole comparison
    # before --overwrite clears anything, so that a second compare into the
    # same folder is refused instead of deleting this one's finished runs
    # (each run also locks its own subfolder); the outcome is broadcast.
    from .rundir import LOCK, RunFolderError, clear_run_files, release_lock_of, take_lock
    lock, error = None, None
    if comm.rank == 0:
        try:
            lock = take_lock(out)
        except RunFolderError as e:
            error = str(e)
        if lock is not None and base_cfg.overwrite:
            clear_run_files(out)
    error, owner = comm.bcast_obj((error, lock.owner if lock is not None else None))
    if error:
        raise RunFolderError(error)
    if lock is not None and lock.replaced and not base_cfg.quiet:
        print(f"note: removed the stale lock {lock.path} of process {lock.replaced.get('pid')} on this host, which "
              "no longer runs", flush=True)
    try:
        return _run_all(base_cfg, comm, runs, out, target, seeds, within, figures)
    except BaseException:
        if owner is not None and comm.rank != 0:  # rank 0 may be killed by this rank's abort: free its lock
            release_lock_of(out / LOCK, owner)
        raise
    finally:
        if lock is not None:
            lock.release()


def _run_all(base_cfg, comm, runs: list[tuple], out: Path, target, seeds, within, figures: bool = True) -> list[dict]:
    """Train the runs of :func:`run_compare` one after the other and write the
    report after each (the folder's lock is held by the caller)."""
    from .train import Trainer

    summaries = []
    report = dict(runs=runs, target=target, seeds=seeds, within=within)
    for entry, seed in runs:
        cfg = _run_config(base_cfg, entry, out, seed)
        if comm.rank == 0 and not cfg.quiet:
            print(f"\n=== {entry['label']}" + (f", seed {seed}" if seed is not None else "") + " ===", flush=True)
        try:
            summaries.append(Trainer(cfg, comm).run())
        except BaseException as e:
            if comm.rank == 0 and summaries:  # what finished stays reported (the CLI then ends the job)
                _write_report(out, summaries, failed=(_run_name(entry, seed), e), **report)
            raise
        if comm.rank == 0 and len(summaries) < len(runs):
            _write_report(out, summaries, **report)
    if comm.rank == 0:
        from .plots import plot_runs
        text = _write_report(out, summaries, **report)
        if figures:
            plot_runs([Path(_run_config(base_cfg, e, out, s).out) for e, s in runs], out)
        print("\n" + text, flush=True)
    return summaries


def _run_name(entry: dict, seed: int | None) -> str:
    return entry["label"] + (f" (seed {seed})" if seed is not None else "")


def _write_report(out: Path, summaries: list[dict], runs: list[tuple], target, seeds: list[int] | None,
                  within: float | None, failed=None) -> str:
    """Write ``compare.md`` (header, table or statistics over seeds, and while
    runs are missing which ones and why) and ``compare.json`` for the runs
    finished so far; returns the markdown."""
    first = summaries[0]
    network = "EMULATED " + first["network"] if first["network_emulated"] else "real"
    where = (f"VIRTUAL ranks (threads of one process), times projected on {first.get('projected_network')}"
             if first.get("virtual") else f"network: {network}")
    header = (f"# compare: {first['model']} on {first['data']}, {first['world_size']} rank(s), "
              f"batch {first['batch_size_per_rank']}/rank, {first['steps']} steps ({first['epochs']} complete "
              f"epoch(s) of {first['epochs_planned']} planned), "
              + (f"seeds {', '.join(map(str, seeds))}" if seeds else f"seed {first['seed']}")
              + f", {where}, progress: {first['progress']}; cpu: {first.get('cpu', 'not recorded')}, "
              f"load average at the end {first.get('load_average_end')}\n\n")
    shared = [s for s in summaries if s.get("oversubscribed")]
    if shared:
        o = shared[0]["oversubscribed"]
        header += (f"**Ranks shared cores** (oversubscribed: {o['ranks_on_node']} ranks on {o['cores']} core(s) of "
                   f"a node, in {len(shared)} of {len(summaries)} run(s)): they took turns, so every timing below "
                   "(images/s, step and phase ms, overlap, wall s) measures the sharing as much as the method; "
                   "run with at most as many ranks as cores per node to compare speeds.\n\n")
    if seeds:
        done_seeds = [s for s in seeds if any(x["seed"] == s for x in summaries)]
        table = seeds_report(summaries, within) + "\n" + "\n".join(
            f"## seed {s}\n\n" + markdown_table([x for x in summaries if x["seed"] == s], target) + "\n"
            for s in done_seeds)
    else:
        table = markdown_table(summaries, target)
    text = header + table
    missing = [_run_name(e, s) for e, s in runs[len(summaries):]]
    if missing:
        text += f"\n\n**Incomplete**: {len(summaries)} of {len(runs)} runs finished."
        if failed is not None:
            name, error = failed
            why = str(error).splitlines()[0] if str(error).strip() else ""
            text += f" {name} failed ({type(error).__name__}{': ' + why if why else ''})."
        rest = [m for m in missing if failed is None or m != failed[0]]
        if rest:
            text += f" Not run{' yet' if failed is None else ''}: {', '.join(rest)}."
    atomic_write_all({out / COMPARE_MD: text + "\n", out / COMPARE_JSON: json_text(summaries)})  # both or neither
    return text


def seeds_report(summaries: list[dict], within: float | None = None) -> str:
    """Statistics over seeds of a ``compare --seeds`` run: per algorithm the
    mean and 95 % t interval of the test metric (and of ``val_*`` when the
    runs held out a validation split: it decides, the test metric is
    reported), and each algorithm against the registry's baseline paired by
    seed (:func:`minips.stats.compare_with_baseline`); ``within``: a target
    gap in points (met / missed / unresolved). Without a validation split the
    report says that the test split decided. A run that ended at chance (an
    accuracy below 0.11: ten classes, as in every classification set minips
    ships) is a collapse: like a diverged run it is counted and left out of
    the means and pairs."""
    from .distributed.algorithms import BASELINE, resolve
    from .stats import NO_DIFFERENCE, compare_with_baseline, fmt_diff, fmt_over_seeds, fmt_target, \
        points_per_unit

    test = "bleu" if any(s.get("bleu") is not None for s in summaries) else "test_accuracy"
    val = "val_" + ("bleu" if test == "bleu" else "accuracy")
    metrics = ([val] if any(s.get(val) is not None for s in summaries) else []) + [test]
    chance = {m: (CHANCE_ACCURACY if "accuracy" in m else None) for m in metrics}
    decide = metrics[0]
    labels = list(dict.fromkeys(s["label"] for s in summaries))
    # the deciding metric says whether a run collapsed; its other metric is then left out with it
    out_runs = {(s["label"], s["seed"]) for s in summaries
                if chance[decide] is not None and s.get(decide) is not None
                and s[decide] < chance[decide] + COLLAPSE_MARGIN}
    by = {(lab, m): {s["seed"]: (Failure("collapsed") if (lab, s["seed"]) in out_runs else s.get(m))
                     for s in summaries if s["label"] == lab and s.get(m) is not None}
          for lab in labels for m in metrics}
    base = next((lab for lab in labels if resolve(next(s["algo"] for s in summaries if s["label"] == lab)).name
                 == BASELINE), None)
    digits = 2 if test == "bleu" else 4
    lines = ["## over seeds: mean ± 95 % t interval (n - 1 degrees of freedom)", ""]
    if decide == test:
        lines += [f"**Decided on the test split**: these runs held out no validation split, so {test} is both what "
                  "the comparison below judges and what it reports; a default chosen from it would be chosen on the "
                  "test set. Add `--val-fraction 0.1` to decide on a validation split and report the test split "
                  "beside it.", ""]
    lines += ["| algorithm | seeds | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for lab in labels:
        cells = [fmt_over_seeds(by[(lab, m)], chance[m], digits) for m in metrics]
        lines.append(f"| {lab} | {len(by[(lab, metrics[-1])])} | " + " | ".join(cells) + " |")
    if base is None:
        lines += ["", f"(No {BASELINE} run among the algorithms: no paired comparison.)"]
        return "\n".join(lines) + "\n"
    gap = None if within is None else within / points_per_unit(decide)
    head = ["algorithm"] + [f"{m} minus {base}'s (points)" for m in metrics] + (
        [f"within {within:g} of {base} ({decide})"] if within is not None else [])
    lines += ["", f"## against {base}, paired by seed (95 % t interval of the per-seed difference)", "",
              f"**better** / **worse**: the interval lies above / below 0; **{NO_DIFFERENCE}**: it holds 0 (these "
              "seeds cannot tell the two apart; that is not parity). A diverged or collapsed run is left out and "
              "counted."
              + (f" {decide} decides; {test} is reported." if decide != test else
                 f" {test} decides: no validation split.")
              + (f" Target met when the interval's lower end is above -{within:g}, missed when its upper end is "
                 f"below -{within:g}, else unresolved; an interval wider than the target cannot show parity, and "
                 "the seeds that would resolve it assume the mean and spread stay as observed."
                 if within is not None else ""), "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for lab in labels:
        if lab == base:
            continue
        cmp = {m: compare_with_baseline(by[(lab, m)], by[(base, m)], gap if m == decide else None)
               for m in metrics}
        row = [lab] + [fmt_diff(cmp[m], points_per_unit(m), by[(lab, m)]) for m in metrics]
        if within is not None:
            row.append(fmt_target(cmp[decide], points_per_unit(decide)))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"

"""What a finished run reports: the ``summary.json`` dict and its text form
(the timing breakdown printed at the end of ``train``)."""
from __future__ import annotations

import numpy as np

from .kernels import cpuinfo, reference_kernels
from .timing import PHASES

__all__ = ["summary", "format_breakdown", "format_final", "time_to_target", "evaluation_curve", "warmup_seconds",
           "projected_step_time", "reprojected_curve", "WARMUP_STEPS", "UNITS"]

#: the first steps of a process, left out of the timing means (Numba compiles its
#: kernels in the first step, a pipeline fills): trace.csv marks them warmup = 1
WARMUP_STEPS = 5

#: summary.json's "units": what each number measures (also in docs/architecture.md)
UNITS = {
    "time_breakdown": "seconds per step in each phase: mean over the steps after the warm-up and over ranks",
    "time_other_s": "seconds per step outside every phase (data slicing, logging): step_time_s minus the "
                    "phases' sum",
    "step_time_s": "seconds per step: mean over the steps after the warm-up, of the slowest rank",
    "wall_time_s": "seconds from the first step to the end of training (the epoch-end evaluations included, the "
                   "--eval-every ones not: eval_every_s)",
    "curve": "with --eval-every N: one row per evaluation on the validation split (every N steps and at each "
             "epoch's end; curve.csv): step, epoch (fraction of epochs trained), epoch_end (1: the epoch's own "
             "evaluation), the val_* metrics, wall_time_s (the run's clock, as above) and, virtual runs, "
             "projected_time_s",
    "eval_every_s": "seconds the mid-epoch --eval-every evaluations took: left out of wall_time_s, of each "
                    "history row's seconds and wall_time_s, and of the step times",
    "projected_grad_bytes": "virtual runs: the gradient's bytes the cost model was given (4 x parameters)",
    "images_per_s": "samples per second of the training step alone: samples_per_step / step_time_s "
                    "(steady state; no evaluation, no warm-up)",
    "wall_images_per_s": "samples trained (all ranks) / wall_time_s: includes the warm-up, evaluations and "
                         "the first step's compile",
    "comm_alone_s": "seconds of one blocking allreduce of the whole gradient with nothing else running "
                    "(median of 5)",
    "bytes_sent_per_rank": "bytes each rank sent during the training steps",
    "bytes_sent_per_step": "bytes per step per rank (mean over ranks)",
    "allreduce_inter_node_bytes_per_step": "allreduce bytes per step per rank (mean over ranks) that went to "
                                           "another node (part of bytes_sent_per_step)",
    "allreduce": "the allreduce the run used: flat or hierarchical (--allreduce; auto resolved)",
    "nodes": "nodes of the job (--ranks-per-node, else the machine's, or one per rank under --network)",
    "ranks_per_node": "--ranks-per-node as given (null: not given)",
    "warmup_steps": "steps left out of the timing means",
    "virtual": "true when the ranks were threads of one process (--virtual-ranks): measured times are not "
               "cluster times",
    "projected_step_time_s": "virtual runs: seconds per step the algorithm's cost model gives at this P on "
                             "projected_network, from projected_profile_s",
    "projected_profile_s": "virtual runs: thread CPU seconds per step of forward, backward and update, "
                           "mean over steps after the warm-up and over ranks",
    "projected_profile_extras": "virtual runs: what the algorithm's cost model reads beyond projected_profile_s "
                                "(its StepProfile extras, e.g. its own extra compute in seconds per step); "
                                "absent when none",
    "trace_columns": "the per-step trace.csv columns the algorithm declares for figures: name -> title and label",
    "projected_time_s": "virtual runs, per history row: step x projected_step_time_s (what time-to-accuracy uses)",
    "profile_steps": "steps step_time_s and the phase profile are means over: this process's after its warm-up "
                     "(a resumed run's: its last process's only)",
    "warmup_time_s": "seconds rank 0 spent in those steps (the first includes Numba's compile in a fresh process); "
                     "figures against wall time start after them",
    "oversubscribed": "null, or {ranks_on_node, cores} when more ranks ran on a node than the cores they could "
                      "use: the ranks took turns, so the timings are not comparable",
    "test_accuracy": "fraction 0..1",
    "lr": "base learning rate (before schedule and scaling)",
    "clip_norm": "--clip-norm: the largest global L2 norm of an update direction (0: no clipping)",
    "clipped_steps": "per rank, how many of its update directions the optimizer clipped (--clip-norm)",
    "cpu": "rank 0's CPU: model name, vendor family and model numbers, widest vector instruction set, cores",
    "load_average_end": "the 1, 5 and 15 minute load averages of rank 0's machine when the run ended",
}


def summary(trainer, wall: float, samples: int, stopped=None, wall_before: float = 0.0) -> dict:
    """The summary of a finished run (collective: reduces over ranks).

    ``wall`` is this process's training time, ``wall_before`` that of the runs
    a resumed run continues (``wall_time_s`` is their sum). ``epochs`` counts
    complete epochs. A run that trained no step here (a resumed finished run)
    has no timing: step time and throughput are None.

    Timing: the mean seconds per phase over steps and ranks (after the first
    steps: JIT warm-up, pipeline fill); the step time is the slowest rank's
    mean. Traffic: bytes this communication layer counted as sent by each
    rank during the training steps (not evaluation or checkpoints).
    """
    cfg, comm, algo, spec = trainer.cfg, trainer.comm, trainer.algo, trainer.spec
    skip = min(WARMUP_STEPS, max(0, len(algo.timer.rows) - 1))  # JIT warm-up steps, pipeline fill
    local = algo.timer.mean(skip)
    names = sorted(set().union(*comm.allgather(sorted(local))))  # a phase one rank lacks counts 0 there
    breakdown = {k: comm.allreduce_scalar(local.get(k, 0.0)) / comm.size for k in _ordered(names)}
    # Steady-state step time: skip the JIT warm-up steps; the slowest rank
    # sets the pace of the job, so take the max over ranks.
    times = trainer.step_times[skip:] or trainer.step_times
    step_time = comm.allreduce_scalar(float(np.mean(times)) if times else 0.0, "max") or None
    # Overlap efficiency = 1 - wait / (allreduce time when nothing else runs).
    overlap = None
    if trainer.comm_alone_s and algo.gradient_allreduce_per_step:
        overlap = max(0.0, 1.0 - breakdown["wait"] / trainer.comm_alone_s)
    # Samples per step over all ranks, as trained (an algorithm may grow the
    # batch, e.g. adaptive batch sizes): the configured batch x P otherwise.
    steps_here = max(1, len(trainer.step_times))
    samples_per_step = comm.allreduce_scalar(float(samples)) / steps_here if samples else \
        comm.allreduce_scalar(float(trainer.batch_size))
    sent = comm.allgather(int(sum(trainer.step_bytes)))
    steps_run = max(1, len(trainer.step_bytes))
    last = trainer.last_eval
    # every rank's shard (its size and class counts), not only rank 0's
    shards = comm.allgather(trainer.sampler.describe())
    out = {
        "label": cfg.label or spec.run_label,
        "model": cfg.model, "data": cfg.data, "algo": spec.name, "algo_spec": spec.text,
        "algo_options": spec.options_dict(), "family": spec.cls.family, "replicated": algo.replicated,
        **algo.report(),
        "trace_columns": {k: {"title": t, "label": lab}
                          for k, (t, lab) in spec.cls.trace_columns(spec.options).items()},
        "partition": {"spec": cfg.partition, "ranks": shards},
        "world_size": comm.size, "seed": cfg.seed,
        "epochs": sum(1 for r in trainer.history if not r.get("partial")),
        "epochs_planned": cfg.epochs,
        "steps": trainer.global_step, "batch_size_per_rank": trainer.batch_size,
        "global_batch_size": int(comm.allreduce_scalar(trainer.batch_size)),
        "samples_per_step": samples_per_step, "lr": cfg.lr, "val_fraction": cfg.val_fraction,
        "clip_norm": cfg.clip_norm, "clipped_steps": comm.allgather(int(trainer.optimizer.clips)),
        "test_accuracy": last.get("test_accuracy"), "test_loss": last.get("test_loss"),
        "wall_time_s": wall_before + wall,
        "images_per_s": samples_per_step / step_time if step_time else None,
        "wall_images_per_s": comm.allreduce_scalar(float(samples)) / wall if wall > 0 else None,
        "time_breakdown": breakdown, "time_other_s": None if step_time is None else step_time - sum(breakdown.values()),
        "step_time_s": step_time, "warmup_steps": skip, "profile_steps": len(times),
        "warmup_time_s": float(sum(trainer.step_times[:skip])),
        "comm_alone_s": trainer.comm_alone_s, "overlap_efficiency": overlap,
        "bytes_sent_per_rank": sent,
        "bytes_sent_per_step": float(np.mean(sent)) / steps_run,
        "allreduce_inter_node_bytes_per_step": float(np.mean(comm.allgather(int(sum(trainer.step_inter_bytes)))))
        / steps_run,
        "allreduce": "hierarchical" if comm.hierarchical else "flat",
        "nodes": comm.nodes, "ranks_per_node": comm.ranks_per_node,
        "network": str(comm.network) if comm.network else "real",
        "network_emulated": comm.emulated, "progress": comm.progress_mode,
        "threads_per_rank": trainer.threads,
        "cpu": cpuinfo.describe(),  # the model name alone does not tell the CPU generation (Zen 3 or 4)
        "load_average_end": _load_average(),
        # {"ranks_on_node", "cores"} when more ranks than cores ran on a node (timings not comparable), else None
        "oversubscribed": getattr(trainer, "oversubscribed", None),
        "reference_kernels": reference_kernels(),
        "stopped": stopped,
        "virtual": comm.virtual,
        "history": trainer.history,
        "eval_every": cfg.eval_every, "curve": trainer.curve, "eval_every_s": trainer.eval_every_s,
        "units": UNITS,
    }
    if comm.virtual:  # what each rank computed, without its turns waiting for a core: thread CPU seconds
        cpu = algo.timer.mean_cpu(skip)
        names = sorted(set().union(*comm.allgather(sorted(cpu))))  # a phase one rank lacks counts 0 there
        cpu = {k: comm.allreduce_scalar(cpu.get(k, 0.0)) / comm.size for k in names}
        out.update(project(trainer, cpu))
    for k, v in last.items():
        if k.startswith(("test_", "val_", "rank0_")) or k in ("bleu", "exact_match", "token_accuracy",
                                                             "consensus_distance"):
            out[k] = v
    return out


#: the network whose cost model projects the step time of a virtual run given no --network
PROJECTION_NETWORK = "10gbe"


def project(trainer, breakdown: dict) -> dict:
    """What a run on virtual ranks would take per step on a cluster: the
    algorithm's own cost model (``step_time``) at this P on the run's
    ``--network`` (default :data:`PROJECTION_NETWORK`), from ``breakdown``,
    the profile measured here per rank (seconds per phase per step: the
    summary passes the ranks' mean thread CPU seconds, one thread per rank).
    The profile holds forward, backward and update, and the algorithm's own
    extras (``Algorithm.profile_extras`` from the model's parameter shapes and
    ``breakdown``: e.g. a phase it computes in); its other phases wait for the
    other virtual ranks, so they are left out. Sets ``projected_time_s`` =
    step x that time on every history row and every ``--eval-every`` curve
    row. Returns the summary's ``projected_*`` entries (the step time None
    when the algorithm has no cost model); :func:`projected_step_time` reads
    them back to project the run onto another network."""
    from .distributed.costmodel import parse_network

    cfg, comm, spec = trainer.cfg, trainer.comm, trainer.spec
    net = cfg.network or PROJECTION_NETWORK
    params = trainer.algo.flat.params
    extras = spec.cls.profile_extras(spec.options, tuple(tuple(p.data.shape) for p in params), breakdown)
    out = {"projected_profile_s": {k: breakdown.get(k, 0.0) for k in ("forward", "backward", "update")},
           "projected_grad_bytes": 4.0 * sum(p.data.size for p in params)}
    if extras:
        out["projected_profile_extras"] = extras
    try:
        t = projected_step_time({"algo_spec": spec, "world_size": comm.size, **out}, net)
    except ValueError:
        t = None
    for row in trainer.history + trainer.curve:
        row["projected_time_s"] = None if t is None else row["step"] * t
    model = parse_network(net)
    return {"projected_network": model.name if model.name != "custom" else str(model), "projected_step_time_s": t,
            **out}


def _tuples(v):
    """Lists (JSON's arrays) back to tuples, nested: a profile extra read from
    summary.json as the algorithm gave it (e.g. parameter shapes)."""
    if isinstance(v, (list, tuple)):
        return tuple(_tuples(x) for x in v)
    if isinstance(v, dict):
        return {k: _tuples(x) for k, x in v.items()}
    return v


def projected_step_time(summary: dict, network, phi: float = 0.0) -> float:
    """Seconds per step of a virtual run on ``network`` (a preset name such
    as ``1gbe`` or ``alpha=..,beta=..``) with compute interference ``phi`` in
    [0, 1]: the algorithm's own cost model
    (:func:`minips.distributed.algorithms.step_time`) at the run's P from the
    compute it measured per rank. ``summary``: a summary.json (or a dict with
    its ``algo_spec``, ``world_size``, ``projected_profile_s``,
    ``projected_grad_bytes`` and, when present, ``algo`` with
    ``algo_options`` and ``projected_profile_extras``).
    The run's own ``projected_step_time_s`` is this at its
    ``projected_network`` and phi = 0.

    Raises:
        ValueError: the summary has no projection (not a virtual run, or one
            written before ``projected_grad_bytes`` was recorded: rerun it),
            an unknown network, phi outside [0, 1], or an algorithm without
            a cost model.
    """
    from .distributed.algorithms import resolve, step_time
    from .distributed.costmodel import StepProfile

    missing = [k for k in ("algo_spec", "world_size", "projected_profile_s", "projected_grad_bytes")
               if summary.get(k) is None]
    spec = summary.get("algo_spec")
    if not missing and isinstance(spec, str) and summary.get("algo") and summary.get("algo_options") is not None:
        spec = resolve(summary["algo"], summary["algo_options"])  # the options given by older flags too
    if missing:
        raise ValueError(f"the run has no {', '.join(missing)}: only a run on virtual ranks made by this minips "
                         "records its compute for the cost model; rerun it with --virtual-ranks P")
    prof = summary["projected_profile_s"]
    profile = StepProfile(forward=prof.get("forward", 0.0), backward=prof.get("backward", 0.0),
                          update=prof.get("update", 0.0), grad_bytes=float(summary["projected_grad_bytes"]),
                          extras=_tuples(summary.get("projected_profile_extras") or {}))
    return step_time(spec, profile, int(summary["world_size"]), network, phi)


def reprojected_curve(summary: dict, network, phi: float = 0.0, metric: str = "val_accuracy") -> list[dict]:
    """The evaluations of a finished virtual run on another network's time
    axis: per point of :func:`evaluation_curve` (the ``--eval-every`` curve
    when it holds ``metric``, else the complete epochs), ``step``, ``epoch``,
    ``metric``'s value and ``projected_time_s`` = step x
    :func:`projected_step_time` on ``network`` with interference ``phi``.
    The accuracies are the run's own: a method's accuracy does not depend on
    the network, its time does (docs/outputs.md, "Time to accuracy").

    Raises:
        ValueError: as :func:`projected_step_time`.
    """
    t = projected_step_time(summary, network, phi)
    return [{"step": p["step"], "epoch": p["epoch"], metric: p[metric], "projected_time_s": p["step"] * t}
            for p in evaluation_curve(summary, None, metric)]


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages when the run ended (None where the OS has none)."""
    import os
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _ordered(names) -> list[str]:
    """The standard phases first, then the others by name."""
    return [p for p in PHASES if p in names] + sorted(n for n in names if n not in PHASES)


def format_breakdown(summary: dict) -> str:
    """A small text table of the mean per-step timing breakdown (every phase
    the algorithm timed), the traffic, and the final metric."""
    b = summary["time_breakdown"]
    step = summary["step_time_s"]
    emulated = f" [EMULATED network: {summary['network']}]" if summary["network_emulated"] else ""
    if summary.get("virtual"):
        emulated = " [VIRTUAL ranks: threads of one process, not cluster times]"
    lines = [f"timing per step (mean over steps and ranks){emulated}:"]
    for k in _ordered(b):
        if k in ("forward", "backward", "wait", "update") or b[k] > 0:
            lines.append(f"  {k:<9}{b[k] * 1e3:9.2f} ms  {100 * b[k] / step:5.1f}%")
    other = summary.get("time_other_s", step - sum(b.values()))
    lines.append(f"  {'other':<9}{other * 1e3:9.2f} ms  {100 * other / step:5.1f}%  (data, logging)")
    lines.append(f"  {'step':<9}{step * 1e3:9.2f} ms  (slowest rank); {summary['images_per_s']:.0f} images/s "
                 "in the step (all ranks; the whole run, evaluations and warm-up included: "
                 f"{summary.get('wall_images_per_s') or 0:.0f} images/s)")
    if summary.get("virtual") and summary.get("projected_step_time_s") is not None:
        lines.append(f"  projected {summary['projected_step_time_s'] * 1e3:9.2f} ms per step on "
                     f"{summary['projected_network']} (the algorithm's cost model at P = {summary['world_size']} "
                     "from the compute measured per rank)")
    if summary.get("bytes_sent_per_step") is not None and summary.get("world_size", 1) > 1:
        lines.append(f"  sent     {summary['bytes_sent_per_step'] / 2**20:9.3f} MiB per step per rank (mean)")
    if summary.get("overlap_efficiency") is not None:
        lines.append(f"  blocking allreduce alone {summary['comm_alone_s'] * 1e3:.2f} ms; overlap efficiency "
                     f"{summary['overlap_efficiency']:.2f}  (1 - wait / allreduce alone)")
        if b["wait"] > summary["comm_alone_s"]:
            lines.append("  (the wait is longer than the allreduce itself: the rest is waiting for the "
                         "slowest rank, not communication)")
    if summary.get("consensus_distance") is not None:
        lines.append(f"  consensus distance at the end {summary['consensus_distance']:.4g} "
                     "((1/P) sum_i ||w_i - mean w||^2); metrics are of the averaged model")
    lines.append("  " + format_final(summary))
    return "\n".join(lines)


def format_final(summary: dict) -> str:
    """The final-metric line: test accuracy (0..1) to 4 decimals, or for the
    captioner BLEU-4 on sacrebleu's 0..100 scale (as summary.json stores it
    and docs/captioning.md reports it) with the exact-match fraction."""
    def num(v, fmt):
        return "n/a" if v is None else format(v, fmt)
    if summary.get("bleu") is not None:
        return (f"final BLEU-4 (0-100): {num(summary['bleu'], '.2f')}, "
                f"exact match {num(summary.get('exact_match'), '.4f')}")
    return f"final test accuracy: {num(summary.get('test_accuracy'), '.4f')}"


def _finest(summary: dict, metric: str) -> list[dict]:
    """The rows that hold ``metric`` at the finest spacing: the ``--eval-every``
    curve (every N steps and each epoch's end, validation metrics only) when
    its rows hold ``metric``, else the per-epoch ``history``."""
    curve = summary.get("curve") or []
    if any(r.get(metric) is not None for r in curve):
        return curve
    return summary.get("history") or []


def time_to_target(summary: dict, target: float | None, metric: str = "test_accuracy") -> float | None:
    """Wall seconds of training until the first evaluation whose ``metric`` is
    at or above ``target``: the ``wall_time_s`` of that row of the finest
    curve that holds ``metric`` (the ``--eval-every`` curve, whose rows are the
    validation metrics every N steps and at each epoch's end, when the run has
    one and ``metric`` is a ``val_*`` one; else the ``history``, one row per
    epoch, whose time includes the epoch-end evaluations before it; the
    ``--eval-every`` evaluations are in no clock); for a run on virtual ranks,
    whose wall time is not a cluster's, the ``projected_time_s`` of that row
    (steps x the cost model's step time); None when no evaluation reached it
    or no target is given. Used by ``compare`` and ``bench study`` alike."""
    if target is None:
        return None
    when = "projected_time_s" if summary.get("virtual") else "wall_time_s"
    for row in _finest(summary, metric):
        if row.get(metric) is not None and row[metric] >= target and row.get(when) is not None:
            return float(row[when])
    return None


def warmup_seconds(summary: dict, trace: list[dict] | None = None) -> float | None:
    """Seconds of the run's warm-up steps (``warmup_steps``; the first includes
    the JIT compile in a fresh process): the summary's ``warmup_time_s``, else
    the sum of ``trace.csv``'s ``step_s`` over its ``warmup`` rows, or over its
    first ``warmup_steps`` rows when the trace has no ``warmup`` column (runs
    made before these were recorded); None when there is no trace either."""
    if summary.get("warmup_time_s") is not None:
        return float(summary["warmup_time_s"])
    rows = [t for t in trace or [] if t.get("step_s") not in (None, "")]
    if rows and "warmup" in rows[0]:
        rows = [t for t in rows if str(t.get("warmup")) == "1"]
    else:
        rows = sorted(rows, key=lambda t: int(t["step"]))[:int(summary.get("warmup_steps", WARMUP_STEPS))]
    return sum(float(t["step_s"]) for t in rows) if rows else None


def evaluation_curve(summary: dict, trace: list[dict] | None = None, metric: str = "test_accuracy") -> list[dict]:
    """One point per complete-epoch evaluation of a finished run (per
    evaluation of its ``--eval-every`` curve when that holds ``metric``, a
    ``val_*`` one; ``epoch`` is then the fraction of epochs trained): ``epoch``,
    ``step``, ``wall_time_s`` (seconds since the start), ``wall_after_warmup_s``
    (the same less the warm-up steps' seconds, :func:`warmup_seconds`: the
    clock a figure should use, since the first run of a process also compiles
    the kernels there; None when unknown), ``mib_sent`` (MiB each rank had sent
    by then: mean over ranks) and ``metric``'s value.

    ``mib_sent`` is the running sum of ``trace.csv``'s ``bytes_sent`` (rank 0's,
    per step) over the steps before the evaluation, scaled by the mean over
    ranks of ``bytes_sent_per_rank`` over rank 0's total (1 when ranks send
    alike), so the last point is the summary's mean; without a trace,
    ``step * bytes_sent_per_step`` (traffic spread evenly over the steps);
    None when the run did not count its traffic. ``trace``: rows of
    ``trace.csv`` as :func:`minips.rundir.load_run` reads them (strings)."""
    per_rank = summary.get("bytes_sent_per_rank") or []
    scale = None
    cum = []  # cum[k]: bytes rank 0 sent in steps 0..k-1
    rows = [t for t in trace or [] if t.get("bytes_sent") not in (None, "")]
    if rows and per_rank:
        total0 = sum(float(t["bytes_sent"]) for t in rows)
        scale = (sum(per_rank) / len(per_rank)) / total0 if total0 > 0 else 1.0
        by_step = {int(t["step"]): float(t["bytes_sent"]) for t in rows}
        acc = 0.0
        for k in range(max(by_step) + 2):
            cum.append(acc)
            acc += by_step.get(k, 0.0)
    warm = warmup_seconds(summary, trace)
    out = []
    for h in _finest(summary, metric):
        if h.get("partial") or h.get(metric) is None:
            continue
        step = int(h.get("step") or 0)
        if scale is not None:
            mib = cum[min(step, len(cum) - 1)] * scale / 2**20
        elif summary.get("bytes_sent_per_step") is not None:
            mib = step * summary["bytes_sent_per_step"] / 2**20
        else:
            mib = None
        wall = h.get("wall_time_s")
        out.append({"epoch": h.get("epoch"), "step": step, "wall_time_s": wall,
                    "wall_after_warmup_s": None if wall is None or warm is None else wall - warm, "mib_sent": mib,
                    "projected_time_s": h.get("projected_time_s"), metric: h[metric]})
    return out

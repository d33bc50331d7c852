"""Issue 52, item 5: does the projected time axis hold? A whole run's projected time (the run on 2
virtual ranks, the cost model on 1 GbE) against its measured time (the same run under ``mpiexec -n 2``
on the emulated 1 GbE link), for sync, overlap-sync and the default pseudo-sync.

    python scripts/time_axis_check.py [RAW]      # RAW default docs/bench/time-to-accuracy/time-axis

RAW holds ``mpi-R/compare.json`` and ``virtual-R/compare.json`` for repetitions R (made by the
command in ``RAW/README.txt``). Writes ``RAW/time-axis.md`` (and prints it). Per method and
repetition: steps; the measured step time under mpiexec (mean after the warm-up, slowest rank) and
the projected one (:func:`minips.report.projected_step_time` of the virtual run); their ratio; and
the gap split in two: **compute** (the virtual run's per-rank thread CPU against the MPI ranks'
measured forward + backward + update) and **the rest** (what the cost model says the network and
overlap cost, against what the MPI run measured for them), by projecting once more from the MPI
run's own measured compute (:func:`minips.report.projected_step_time` fed with it). Whole-run
times are steps x step time (the projected axis the study reads) against the MPI run's training
wall time.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RAW = ROOT / "docs" / "bench" / "time-to-accuracy" / "time-axis"
NETWORK = "1gbe"


def _load(path: Path) -> dict:
    return {s["label"]: s for s in json.loads(path.read_text())}


def rows(raw: Path) -> list[dict]:
    from minips.report import projected_step_time
    out = []
    for mpi_dir in sorted(d for d in raw.glob("mpi-*") if d.is_dir()):
        rep = mpi_dir.name.split("-", 1)[1]
        mpi, virt = _load(mpi_dir / "compare.json"), _load(raw / f"virtual-{rep}" / "compare.json")
        for label, m in mpi.items():
            v = virt[label]
            proj = projected_step_time(v, NETWORK)
            proj_phi1 = projected_step_time(v, NETWORK, 1.0)
            tb = m["time_breakdown"]
            mpi_compute = {k: tb.get(k, 0.0) for k in ("forward", "backward", "update")}
            from_mpi = projected_step_time({**v, "projected_profile_s": mpi_compute}, NETWORK)
            out.append({"rep": rep, "label": label, "steps": m["steps"], "measured_s": m["step_time_s"],
                        "projected_s": proj, "projected_phi1_s": proj_phi1, "from_mpi_compute_s": from_mpi,
                        "virtual_compute_s": sum(v["projected_profile_s"].values()),
                        "mpi_compute_s": sum(mpi_compute.values()), "wait_s": tb.get("wait", 0.0),
                        "wall_s": m["wall_time_s"], "load": m.get("load_average_end")})
    return out


def table(rs: list[dict]) -> str:
    lines = [f"# Projected against measured: 2 ranks, {NETWORK} (emulated under mpiexec; cost model on virtual ranks)",
             "",
             "| rep | method | steps | measured step ms | projected step ms (phi 0 / 1) | "
             "projected / measured (phi 0) | compute ms (virtual / MPI) | projected from MPI's compute, ms | "
             "gap: compute / rest, ms | "
             "whole run: projected s / MPI training wall s | load at the end |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rs:
        gap_compute = 1e3 * (r["from_mpi_compute_s"] - r["projected_s"])
        gap_rest = 1e3 * (r["measured_s"] - r["from_mpi_compute_s"])
        load = "-" if r["load"] is None else ", ".join(f"{x:.2f}" for x in r["load"])
        lines.append(f"| {r['rep']} | {r['label']} | {r['steps']} | {1e3 * r['measured_s']:.1f} | "
                     f"{1e3 * r['projected_s']:.1f} / {1e3 * r['projected_phi1_s']:.1f} | "
                     f"{r['projected_s'] / r['measured_s']:.2f} | "
                     f"{1e3 * r['virtual_compute_s']:.1f} / {1e3 * r['mpi_compute_s']:.1f} | "
                     f"{1e3 * r['from_mpi_compute_s']:.1f} | {gap_compute:+.1f} / {gap_rest:+.1f} | "
                     f"{r['steps'] * r['projected_s']:.1f} / {r['wall_s']:.1f} | {load} |")
    lines += ["", "measured step: mean after the warm-up, slowest rank (compare.json's step_time_s); projected: the "
              "cost model at P = 2 on 1 GbE from the virtual run's per-rank thread CPU, with compute interference "
              "phi = 0 and 1 (the gap columns use phi = 0); gap, compute: "
              "the projection from the MPI ranks' own measured compute minus the projection from the virtual "
              "run's; gap, rest: the measured step minus the projection from the MPI ranks' compute (the model's "
              "network and overlap terms against the emulated link, the step's other phases). The MPI training "
              "wall time holds the evaluations and the warm-up steps; steps x step time holds neither."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    raw = Path(argv[0]) if argv else RAW
    text = table(rows(raw))
    (raw / "time-axis.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The benches explain themselves: bench scaling writes its tables to a report
file and says what each "-" means; bench kernels warns on a busy machine."""
from __future__ import annotations

from pathlib import Path

from minips.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_scaling_writes_a_report_and_explains_dashes(tmp_path, capsys):
    src = ROOT / "docs" / "bench" / "scaling-1gbe-t3.json"  # measured P = 1 and 2: P = 1 has no allreduce
    assert main(["bench", "scaling", "--from-json", str(src), "--out", str(tmp_path), "--project-networks",
                 "10gbe", "--project-max", "64"]) == 0
    printed = capsys.readouterr().out
    report = (tmp_path / "scaling.txt").read_text()
    assert (tmp_path / "scaling.json").exists()
    assert "allreduce alone -: one rank, nothing to communicate" in report
    assert "(-: not projected, beyond --project-max)" in report  # P = 128 .. 1024 are shown as -
    assert report.strip() in printed.strip() or report.splitlines()[1] in printed


def test_kernels_warns_on_a_busy_machine(capsys):
    from minips.bench.kernels.cli import _warn_if_busy
    _warn_if_busy(5.0, 2, 1)
    assert "warning: this machine is busy (load average 5.0 on 2 cores)" in capsys.readouterr().out
    _warn_if_busy(0.3, 2, 1)
    assert capsys.readouterr().out == ""

"""Coverage counts kernels/ (installed as minips.kernels from its own folder
through setup.cfg's package_dir, so a plain ``--cov=minips`` misses it)."""
import json
import subprocess
import sys

import pytest

from .conftest import ROOT, subprocess_env

pytest.importorskip("coverage")


def test_coverage_reports_the_kernels(tmp_path):
    script = tmp_path / "use_kernels.py"
    script.write_text("import minips\n")  # imports no kernel: only the configured source lists them
    data, report = tmp_path / ".coverage", tmp_path / "cov.json"
    env = subprocess_env({"COVERAGE_FILE": str(data)})
    r = subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={ROOT / 'pyproject.toml'}",
                        str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "coverage", "json", f"--rcfile={ROOT / 'pyproject.toml'}",
                        "-o", str(report)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    files = json.loads(report.read_text())["files"]
    names = [f.replace("\\", "/") for f in files]
    # files never imported are reported (at 0 %) only when the source names
    # their folder: kernels/ as well as minips/
    assert any(f.endswith("kernels/pool.py") for f in names), names
    assert any(f.endswith("minips/train.py") for f in names), names

"""Every timing file names its CPU: kernels.cpuinfo.describe() gives the model
name with the vendor's family and model numbers and the vector instruction set
(a virtual machine's "AMD EPYC" was a Zen 3 in one session and a Zen 4 in
another), and a study's report says which CPUs and loads its times come from."""
from minips.bench.study.report import _machines
from minips.kernels import cpuinfo

ZEN4 = {"model name": "AMD EPYC", "vendor_id": "AuthenticAMD", "cpu family": "25", "model": "17",
        "flags": "fpu sse sse2 avx avx2 fma avx512f avx512bw"}
ZEN3 = {**ZEN4, "model": "1", "flags": "fpu sse sse2 avx avx2 fma"}


def test_describe_tells_two_epycs_apart(monkeypatch):
    monkeypatch.setattr(cpuinfo, "_cpuinfo_fields", lambda: dict(ZEN4))
    monkeypatch.setattr("minips.kernels.threads.cores_on_node", lambda: 2)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    zen4 = cpuinfo.describe()
    monkeypatch.setattr(cpuinfo, "_cpuinfo_fields", lambda: dict(ZEN3))
    zen3 = cpuinfo.describe()
    assert zen4 == "AMD EPYC, AuthenticAMD family 25 model 17, AVX-512 on 256-bit units, 2 cores"
    assert zen3 == "AMD EPYC, AuthenticAMD family 25 model 1, AVX2, 2 cores"


def test_describe_names_the_machines_cores_when_this_process_is_bound_to_fewer(monkeypatch):
    """A rank under ``mpiexec -bind-to core`` may use 1 core of 2: the header of
    compare.md said "1 cores" for the 2-core machine."""
    monkeypatch.setattr(cpuinfo, "_cpuinfo_fields", lambda: dict(ZEN3))
    monkeypatch.setattr("minips.kernels.threads.cores_on_node", lambda: 1)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert cpuinfo.describe() == "AMD EPYC, AuthenticAMD family 25 model 1, AVX2, 2 cores (1 usable by this process)"


def test_describe_without_proc_cpuinfo_still_names_something(monkeypatch):
    monkeypatch.setattr(cpuinfo, "_cpuinfo_fields", lambda: {})
    text = cpuinfo.describe()
    assert text and "family" not in text and " cores" in text


def test_a_study_report_names_the_cpus_and_loads_of_its_runs():
    runs = [{"status": "ok", "cpu": "AMD EPYC, AuthenticAMD family 25 model 1, AVX2, 2 cores",
             "load_average_end": [4.3, 5.0, 5.1]},
            {"status": "ok", "cpu": "AMD EPYC, AuthenticAMD family 25 model 1, AVX2, 2 cores",
             "load_average_end": [6.8, 5.0, 5.1]},
            {"status": "diverged"}]
    assert _machines(runs) == ("Times taken on: AMD EPYC, AuthenticAMD family 25 model 1, AVX2, 2 cores; "
                               "1-minute load average at the runs' ends 4.3-6.8.")
    assert "did not record" in _machines([{"status": "ok"}])

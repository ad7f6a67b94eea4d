"""GPU exporter on the fake NVML, which raises pynvml's real error classes."""

import subprocess
import sys
import threading
import time

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from goodput.exporters.fake_nvml import FakeNvml, load_fake
from goodput.exporters.gpu import DeploymentMapping, GpuCollector, Sampler
from goodput.foundation.errors import ConfigError
from goodput.foundation.http import health_route
from tests.conftest import REPO, require

SPEC = {
    "driver_version": "550.54.15", "hostname": "node-a",
    "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "utilization": {0: 0.3, 10: 0.99}, "memory_used_bytes": 60e9,
         "power_watts": 420, "processes": [{"pid": 4242, "used_memory_bytes": 59e9}]},
        {"name": "NVIDIA H100 80GB HBM3", "unsupported": ["power_watts", "ecc"], "memory_used_bytes": 1e9},
        {"name": "NVIDIA H100 80GB HBM3"},
    ],
    "faults": [{"at": 5, "gpu": 2, "kind": "lost"}, {"at": 7, "gpu": 0, "kind": "xid", "xid": 79},
               {"at": 8, "gpu": 0, "kind": "xid", "xid": 79}],
}


def _sample(values, name):
    return {(s.labels.get("gpu"), s.labels.get("kind") or s.labels.get("xid")): s.value for s in values[name].samples
            if not s.name.endswith("_created")}


def _families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


@pytest.fixture
def clock():
    class Clock:
        t = 0.0

        def __call__(self):
            return self.t

    return Clock()


def _collector(clock, tmp_path):
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "cmdline").write_bytes(b"python3\0-m\0vllm.entrypoints.openai.api_server\0--served-model-name\0chat-8b\0")
    mapping = DeploymentMapping.load({"rules": [{"cmdline": r"--served-model-name (?P<deployment>\S+)",
                                                 "replica": "{pid}"}]}, "mapping.yaml", proc_root=tmp_path / "proc")
    c = GpuCollector(FakeNvml(load_fake(SPEC, "fake.yaml"), clock=clock), mapping, hostname="node-a")
    c.init()
    return c


def test_fields_a_gpu_does_not_support_are_omitted_not_zero(clock, tmp_path):
    c = _collector(clock, tmp_path)
    c.sample()
    f = _families(c.render())
    power = _sample(f, "llm_gpu_power_watts")
    assert power == {("0", None): 420.0, ("2", None): 100.0}  # GPU 1 has no power reading at all
    ecc = _sample(f, "llm_gpu_ecc_errors")
    assert ("1", "corrected") not in ecc and ("0", "corrected") in ecc
    assert _sample(f, "llm_gpu_utilization_ratio")[("0", None)] == 0.3
    info = f["llm_gpu_info"].samples[0].labels
    assert info["gpu_model"] == "NVIDIA H100 80GB HBM3" and info["driver_version"] == "550.54.15"


def test_lost_gpu_reports_down_while_others_keep_reporting(clock, tmp_path):
    c = _collector(clock, tmp_path)
    c.sample()
    uuid2 = [s.labels["uuid"] for s in _families(c.render())["llm_gpu_up"].samples if s.labels["gpu"] == "2"][0]
    clock.t = 12.0
    c.sample()
    f = _families(c.render())
    up = {s.labels["gpu"]: (s.value, s.labels["uuid"]) for s in f["llm_gpu_up"].samples}
    assert up == {"0": (1.0, up["0"][1]), "1": (1.0, up["1"][1]), "2": (0.0, uuid2)}
    assert ("2", None) not in _sample(f, "llm_gpu_memory_used_bytes")
    assert _sample(f, "llm_gpu_utilization_ratio")[("0", None)] == 0.99  # values over time
    errors = {s.labels["kind"]: s.value for s in f["llm_exporter_errors"].samples if s.name.endswith("_total")}
    assert errors["GpuIsLost"] == 1


def test_fake_raises_the_real_pynvml_errors(clock):
    nv = FakeNvml(load_fake(SPEC, "fake.yaml"), clock=clock)
    nv.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetPowerUsage(nv.nvmlDeviceGetHandleByIndex(1))
    clock.t = 6
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nv.nvmlDeviceGetHandleByIndex(2)
    with pytest.raises(pynvml.NVMLError_Timeout):
        nv.nvmlEventSetWait_v2(nv.nvmlEventSetCreate(), 0)


def test_xid_events_and_process_attribution(clock, tmp_path):
    c = _collector(clock, tmp_path)
    clock.t = 9.0
    c.sample()
    f = _families(c.render())
    assert _sample(f, "llm_gpu_xid_errors") == {("0", "79"): 2.0}
    procs = f["llm_gpu_process_memory_bytes"].samples
    assert [(s.labels["pid"], s.labels["deployment"], s.value) for s in procs] == [("4242", "chat-8b", 59e9)]
    dep = f["llm_gpu_deployment_info"].samples[0].labels
    assert (dep["gpu"], dep["deployment"], dep["replica"]) == ("0", "chat-8b", "4242")
    require("promtool")
    r = subprocess.run(["promtool", "check", "metrics"], input=c.render(), capture_output=True, text=True)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


def test_fake_file_is_validated():
    with pytest.raises(ConfigError, match=r"faults\[0\].gpu"):
        load_fake({"gpus": [{}], "faults": [{"at": 1, "gpu": 3, "kind": "lost"}]}, "f.yaml")
    with pytest.raises(ConfigError, match=r"gpus\[0\].colour: unknown key"):
        load_fake({"gpus": [{"colour": "green"}]}, "f.yaml")


@pytest.mark.parametrize(("gpu", "key"), [
    ({"utilization": "high"}, "gpus[0].utilization"),  # used to kill the sampler thread at the first sample
    ({"utilization": 1.5}, "gpus[0].utilization"),
    ({"utilization": {0: 0.2, 60: "high"}}, "gpus[0].utilization.60"),
    ({"utilization": {"soon": 0.2}}, "gpus[0].utilization.soon"),
    ({"memory_used_bytes": float("nan")}, "gpus[0].memory_used_bytes"),
    ({"power_watts": -3}, "gpus[0].power_watts"),
    ({"temperature_celsius": True}, "gpus[0].temperature_celsius"),
    ({"ecc": {"corrected": "x"}}, "gpus[0].ecc.corrected"),
    ({"ecc": [1]}, "gpus[0].ecc"),
    ({"processes": [{"pid": "init"}]}, "gpus[0].processes[0].pid"),
    ({"processes": [{"pid": 1, "used_memory_bytes": "lots"}]}, "gpus[0].processes[0].used_memory_bytes"),
    ({"unsupported": ["colour"]}, "gpus[0].unsupported"),
    ({"name": 5}, "gpus[0].name"),
])
def test_every_fake_value_is_checked_at_load(gpu, key):
    with pytest.raises(ConfigError) as e:
        load_fake({"gpus": [gpu]}, "f.yaml")
    assert str(e.value).startswith(f"f.yaml: {key}: "), str(e.value)


def test_an_unexpected_error_costs_one_gpu_its_values_not_the_sampler(clock):
    broken = threading.Event()

    def driver(i):
        if i == 0 and broken.is_set():
            raise ValueError("a driver bug")
        return {}

    c = GpuCollector(FakeNvml(load_fake(SPEC, "fake.yaml"), clock=clock, driver=driver), hostname="node-a")
    c.init()
    broken.set()
    assert c.sample()
    f = _families(c.render())
    assert _sample(f, "llm_gpu_up") == {("0", None): 1.0, ("1", None): 1.0, ("2", None): 1.0}
    assert set(_sample(f, "llm_gpu_memory_used_bytes")) == {("1", None), ("2", None)}
    errors = {s.labels["kind"]: s.value for s in f["llm_exporter_errors"].samples if s.name.endswith("_total")}
    assert errors["internal"] == 1


def test_the_sampler_outlives_a_failing_sample_and_healthz_says_so(clock):
    c = GpuCollector(FakeNvml(load_fake(SPEC, "fake.yaml"), clock=clock), hostname="node-a")
    c.init()
    failures = threading.Semaphore(0)

    def broken() -> bool:
        failures.release()
        raise RuntimeError("a bug in sampling")

    c.sample = broken
    sampler = Sampler(c, 0.1)
    sampler.heartbeat.grace_s = 0.5
    sampler.start()
    try:
        for _ in range(3):
            assert failures.acquire(timeout=30), "the sampler stopped sampling after an exception"
        assert sampler.heartbeat.thread.is_alive()
        deadline = time.monotonic() + 30
        while health_route(sampler.heartbeat.problem)(None, b"")[0] == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        status, _, body, _ = health_route(sampler.heartbeat.problem)(None, b"")
        assert status == 503 and b"GPU sampling loop has not finished a round" in body
        assert c.errors["sample_RuntimeError"] >= 3
    finally:
        sampler.stop()


def _nvml_present() -> bool:
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except pynvml.NVMLError:
        return False


@pytest.mark.skipif(_nvml_present(), reason="a real NVML library is installed here")
def test_missing_nvml_library_is_one_clear_line():
    r = subprocess.run([sys.executable, "-m", "goodput", "exporter", "gpu", "--port", "0"],
                       capture_output=True, text=True, cwd=REPO, timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert "NVML Shared Library Not Found" in r.stderr and "--fake" in r.stderr


def test_mapping_by_environment_and_cgroup(tmp_path):
    for pid, env, cgroup in ((11, b"HOME=/root\0GOODPUT_DEPLOYMENT=rag-70b\0", b""),
                             (12, b"HOME=/root\0", b"0::/kubepods/burstable/pod1234-abcd/cri-containerd-99\n")):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "environ").write_bytes(env)
        (d / "cgroup").write_bytes(cgroup)
        (d / "cmdline").write_bytes(b"python3\0serve\0")
    m = DeploymentMapping.load({"rules": [
        {"env": "GOODPUT_DEPLOYMENT", "pattern": "(?P<deployment>.+)", "replica": "{pid}"},
        {"cgroup": r"kubepods/.*/pod(?P<replica>[0-9a-f-]+)/", "deployment": "chat-8b"}]}, "m.yaml", proc_root=tmp_path)
    assert m.for_process(11) == ("rag-70b", "11")
    assert m.for_process(12) == ("chat-8b", "1234-abcd")
    assert m.for_process(13) is None  # no such process: no attribution, no error
    with pytest.raises(ConfigError, match=r"rules\[0\].cmdline: bad regular expression"):
        DeploymentMapping.load({"rules": [{"cmdline": "("}]}, "m.yaml")

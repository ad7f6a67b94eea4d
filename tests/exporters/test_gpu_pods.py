"""Pod attribution in the GPU exporter: a real gRPC server on a unix socket answers the kubelet's PodResourcesLister v1
``List``; the exporter runs on the fake NVML and labels each GPU's series with the pod that holds it."""

import contextlib
import re
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from goodput.exporters.fake_nvml import FakeNvml, load_fake
from goodput.exporters.gpu import GpuCollector, health_with_pods
from goodput.exporters.liveness import Heartbeat
from goodput.exporters.podresources import _SCHEMA, LIST_METHOD, MESSAGES, PodAttribution, PodResourcesClient
from tests.conftest import REPO, free_port_block

M = MESSAGES
PROTO = REPO / "tests" / "fixtures" / "podresources" / "podresources_v1_list.proto"
SPEC = {"driver_version": "550.54.15", "hostname": "node-a",
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "utilization": {0: 0.4}, "memory_used_bytes": 60e9},
                 {"name": "NVIDIA H100 80GB HBM3", "utilization": {0: 0.5}},
                 {"name": "NVIDIA H100 80GB HBM3"}]}
UUID = [f"GPU-00000000-0000-0000-0000-{i:012d}" for i in range(3)]


class Kubelet:
    """A PodResourcesLister on a unix socket; ``pods`` is what List answers; ``calls`` counts the Lists."""

    def __init__(self, path) -> None:
        self.path, self.calls = path, 0
        self.pods: list[tuple[str, str, str, str, list[str]]] = []  # namespace, pod, container, resource, device ids
        self.server = None

    def _list(self, request, context):
        self.calls += 1
        answer = M["ListPodResourcesResponse"]()
        for ns, pod, container, resource, ids in self.pods:
            c = answer.pod_resources.add(name=pod, namespace=ns).containers.add(name=container)
            c.devices.add(resource_name=resource, device_ids=ids)
        return answer

    def start(self) -> "Kubelet":
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(self._list,
                                                      request_deserializer=M["ListPodResourcesRequest"].FromString,
                                                      response_serializer=M["ListPodResourcesResponse"].SerializeToString)
        service, method = LIST_METHOD.strip("/").split("/")
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, {method: handler})])
        self.server.add_insecure_port(f"unix:{self.path}")
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(0).wait(5)


@pytest.fixture
def kubelet(tmp_path):
    k = Kubelet(tmp_path / "kubelet.sock")
    yield k
    if k.server is not None:
        k.stop()


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def _collector(sock, clock, interval_s=30.0):
    pods = PodAttribution(PodResourcesClient(sock), interval_s, clock=clock)
    c = GpuCollector(FakeNvml(load_fake(SPEC, "fake.yaml")), hostname="node-a", pods=pods)
    c.init()
    return c, pods


def _owners(text: str, family: str = "llm_gpu_up") -> dict[str, tuple]:
    fam = {f.name: f for f in text_string_to_metric_families(text)}[family]
    return {s.labels["gpu"]: tuple(s.labels.get(k) for k in ("namespace", "pod", "container")) for s in fam.samples}


def test_messages_are_the_kubelet_api_field_for_field():
    """Name, number, repeated and type of each field List uses, against the published api.proto messages."""
    text = PROTO.read_text()
    assert re.search(r"^package v1;", text, re.M) and "rpc List(ListPodResourcesRequest) returns" in text
    assert LIST_METHOD == "/v1.PodResourcesLister/List"
    for name, fields in _SCHEMA.items():
        body = re.search(rf"message {name} {{(.*?)}}", text, re.S)
        assert body, name
        published = {m[3]: (int(m[4]), bool(m[1]), m[2]) for m in
                     re.finditer(r"^\s*(repeated )?(\w+) (\w+) = (\d+);", body[1], re.M)}
        for fname, number, many, kind in fields:
            assert published[fname] == (number, many, kind), (name, fname)


def test_gpus_held_by_pods_carry_pod_namespace_container_and_a_free_one_none(kubelet):
    kubelet.pods = [("llm", "chat-8b-7d4b9c6f5-q7x2k", "vllm", "nvidia.com/gpu", [UUID[0], UUID[1]]),
                    ("llm", "embed-0", "tei", "nvidia.com/mig-1g.10gb", ["MIG-9c1e"]),
                    ("kube-system", "nvidia-device-plugin-x", "plugin", "example.com/nic", [UUID[2]])]
    kubelet.start()
    c, pods = _collector(kubelet.path, Clock())
    assert c.sample()
    text = c.render()
    assert _owners(text) == {"0": ("llm", "chat-8b-7d4b9c6f5-q7x2k", "vllm"),
                             "1": ("llm", "chat-8b-7d4b9c6f5-q7x2k", "vllm"), "2": (None, None, None)}
    assert _owners(text, "llm_gpu_utilization_ratio")["0"] == ("llm", "chat-8b-7d4b9c6f5-q7x2k", "vllm")
    assert _owners(text, "llm_gpu_info")["1"] == ("llm", "chat-8b-7d4b9c6f5-q7x2k", "vllm")
    assert pods.problem is None and "pod_resources" not in c.errors
    status, _, body, _ = health_with_pods(Heartbeat("GPU sampling", 60), pods)(None, b"")
    assert (status, body) == (200, b"ok\n")


def test_index_and_time_sliced_device_ids_and_a_shared_gpu_keeps_one_owner(kubelet):
    kubelet.pods = [("llm", "rag-b", "vllm", "nvidia.com/gpu", [f"{UUID[1]}::0"]),
                    ("llm", "rag-a", "vllm", "nvidia.com/gpu", [f"{UUID[1]}::1"]),
                    ("batch", "embed-0", "tei", "nvidia.com/gpu", ["2"])]
    kubelet.start()
    c, _ = _collector(kubelet.path, Clock())
    c.sample()
    owners = _owners(c.render())
    assert owners == {"0": (None, None, None), "1": ("llm", "rag-a", "vllm"), "2": ("batch", "embed-0", "tei")}


def test_the_kubelet_is_asked_at_most_once_per_interval_and_changes_are_seen_after_it(kubelet):
    kubelet.pods = [("llm", "chat-0", "vllm", "nvidia.com/gpu", [UUID[0]])]
    kubelet.start()
    clock = Clock()
    c, _ = _collector(kubelet.path, clock, interval_s=30.0)
    for _ in range(5):
        c.sample()
        clock.t += 1
    assert kubelet.calls == 1
    kubelet.pods = [("llm", "chat-1", "vllm", "nvidia.com/gpu", [UUID[0]])]
    c.sample()
    assert _owners(c.render())["0"] == ("llm", "chat-0", "vllm")  # not asked again yet
    clock.t = 31
    c.sample()
    assert kubelet.calls == 2 and _owners(c.render())["0"] == ("llm", "chat-1", "vllm")


def test_an_unreachable_socket_serves_gpus_without_pod_labels_says_so_and_recovers(kubelet, capsys):
    clock = Clock()
    c, pods = _collector(kubelet.path, clock, interval_s=10.0)  # no kubelet listening yet
    assert c.sample()
    text = c.render()
    assert _owners(text) == {str(i): (None, None, None) for i in range(3)}
    fam = {f.name: f for f in text_string_to_metric_families(text)}
    errors = {s.labels["kind"]: s.value for s in fam["llm_exporter_errors"].samples if s.name.endswith("_total")}
    assert errors["pod_resources"] == 1
    status, _, body, _ = health_with_pods(Heartbeat("GPU sampling", 60), pods)(None, b"")
    assert status == 200 and b"degraded: pod attribution off: kubelet pod-resources" in body
    assert b"UNAVAILABLE" in body and str(kubelet.path).encode() in body
    assert "GPUs are served without pod labels" in capsys.readouterr().err

    kubelet.pods = [("llm", "chat-0", "vllm", "nvidia.com/gpu", [UUID[2]])]
    kubelet.start()
    deadline = time.monotonic() + 30  # gRPC's reconnect backoff is capped at 5 s
    while pods.problem is not None and time.monotonic() < deadline:
        clock.t += 10
        c.sample()
        time.sleep(0.2)
    assert pods.problem is None and _owners(c.render())["2"] == ("llm", "chat-0", "vllm")
    assert "works again" in capsys.readouterr().err


def test_a_kubelet_that_goes_away_drops_the_labels_instead_of_keeping_stale_ones(kubelet):
    kubelet.pods = [("llm", "chat-0", "vllm", "nvidia.com/gpu", [UUID[0]])]
    kubelet.start()
    clock = Clock()
    c, pods = _collector(kubelet.path, clock, interval_s=10.0)
    c.sample()
    assert _owners(c.render())["0"] == ("llm", "chat-0", "vllm")
    kubelet.stop()
    clock.t = 11
    c.sample()
    assert _owners(c.render())["0"] == (None, None, None) and pods.problem and c.errors["pod_resources"] == 1


def test_the_cli_flag_end_to_end(kubelet, tmp_path):
    kubelet.pods = [("llm", "chat-0", "vllm", "nvidia.com/gpu", [UUID[1]])]
    kubelet.start()
    (tmp_path / "fake.yaml").write_text(yaml.safe_dump(SPEC))
    port = free_port_block(1)
    proc = subprocess.Popen([sys.executable, "-m", "goodput", "exporter", "gpu", "--fake", str(tmp_path / "fake.yaml"),
                             "--port", str(port), "--interval", "0.2", "--kubelet-pod-resources", str(kubelet.path)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Timer(60, proc.kill)
    stop.start()
    try:
        deadline, owners = time.monotonic() + 30, {}
        while time.monotonic() < deadline and owners.get("1") != ("llm", "chat-0", "vllm"):
            with contextlib.suppress(httpx.HTTPError, KeyError):  # starting up
                owners = _owners(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text)
            time.sleep(0.2)
        assert owners == {"0": (None, None, None), "1": ("llm", "chat-0", "vllm"), "2": (None, None, None)}
        r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        assert (r.status_code, r.text) == (200, "ok\n")
    finally:
        stop.cancel()
        proc.terminate()
        proc.wait(timeout=20)
    help_text = subprocess.run([sys.executable, "-m", "goodput", "exporter", "gpu", "--help"], cwd=REPO,
                               capture_output=True, text=True).stdout
    assert "--kubelet-pod-resources SOCKET" in help_text and "--pod-resources-interval" in help_text

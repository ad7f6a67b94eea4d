"""Which pod holds each GPU: the kubelet's PodResourcesLister v1 ``List`` over its unix socket, as dcgm-exporter asks it.

The messages are the subset of kubelet's ``pkg/apis/podresources/v1/api.proto`` that ``List`` needs, declared
here with the same names and field numbers (Kubernetes' device-plugins documentation prints them); fields this
module does not declare (CPU ids, memory, topology, DRA claims) are skipped by the protobuf parser.

Device IDs of ``nvidia.com/gpu`` are what NVIDIA's device plugin advertises: GPU UUIDs (its default), GPU
indexes (``DEVICE_ID_STRATEGY=index``), or ``UUID::N`` replicas when a GPU is time-sliced. MIG devices
(``nvidia.com/mig-*``, MIG UUIDs) are not attributed: their parent GPU is not in the answer.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

__all__ = ["GPU_RESOURCE", "LIST_METHOD", "MESSAGES", "PodAttribution", "PodRef", "PodResourcesClient"]

GPU_RESOURCE = "nvidia.com/gpu"
LIST_METHOD = "/v1.PodResourcesLister/List"
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # a node's whole pod list; the gRPC default of 4 MiB can be short on big nodes
MAX_RECONNECT_BACKOFF_MS = 5000  # a restarted kubelet is found again within seconds, not gRPC's default 2 minutes

_STRING, _MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_ONE, _MANY = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
# message -> its fields (name, number, repeated, type: "string" or a message name), as in api.proto
_SCHEMA = {
    "ListPodResourcesRequest": (),
    "ListPodResourcesResponse": (("pod_resources", 1, True, "PodResources"),),
    "PodResources": (("name", 1, False, "string"), ("namespace", 2, False, "string"),
                     ("containers", 3, True, "ContainerResources")),
    "ContainerResources": (("name", 1, False, "string"), ("devices", 2, True, "ContainerDevices")),
    "ContainerDevices": (("resource_name", 1, False, "string"), ("device_ids", 2, True, "string")),
}


def _messages() -> dict[str, type[message.Message]]:
    f = descriptor_pb2.FileDescriptorProto(name="goodput/podresources_v1.proto", package="v1", syntax="proto3")
    for name, fields in _SCHEMA.items():
        m = f.message_type.add(name=name)
        for fname, number, many, kind in fields:
            fd = m.field.add(name=fname, number=number, label=_MANY if many else _ONE)
            if kind == "string":
                fd.type = _STRING
            else:
                fd.type, fd.type_name = _MESSAGE, f".v1.{kind}"
    pool = descriptor_pool.DescriptorPool()  # a private pool: never clashes with another copy of these names
    pool.Add(f)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}")) for name in _SCHEMA}


MESSAGES = _messages()


@dataclass(frozen=True)
class PodRef:
    namespace: str
    pod: str
    container: str


class PodResourcesClient:
    """One ``List`` call per :meth:`gpus`, with a deadline; raises ``grpc.RpcError`` or ``DecodeError``."""

    def __init__(self, socket_path: Path, timeout_s: float = 2.0) -> None:
        self.socket_path, self.timeout_s = socket_path, timeout_s
        self.channel = grpc.insecure_channel(f"unix:{socket_path.absolute()}",
                                             options=[("grpc.max_receive_message_length", MAX_ANSWER_BYTES),
                                                      ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS)])
        self._list = self.channel.unary_unary(LIST_METHOD,
                                              request_serializer=MESSAGES["ListPodResourcesRequest"].SerializeToString,
                                              response_deserializer=MESSAGES["ListPodResourcesResponse"].FromString)

    def gpus(self) -> dict[str, PodRef]:
        """Device ID (a ``UUID::N`` replica's UUID) -> the first container, in pod order, that holds it."""
        answer = self._list(MESSAGES["ListPodResourcesRequest"](), timeout=self.timeout_s)
        out: dict[str, PodRef] = {}
        for pod in sorted(answer.pod_resources, key=lambda p: (p.namespace, p.name)):
            for c in pod.containers:
                for dev in c.devices:
                    if dev.resource_name != GPU_RESOURCE:
                        continue
                    for device_id in dev.device_ids:
                        out.setdefault(device_id.split("::", 1)[0], PodRef(pod.namespace, pod.name, c.name))
        return out

    def close(self) -> None:
        self.channel.close()


class PodAttribution:
    """The kubelet's GPU -> pod map, asked at most every ``interval_s``; kept empty (not stale) while it fails.

    ``problem`` says why attribution is off (None while it works).
    """

    def __init__(self, client: PodResourcesClient, interval_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.interval_s, self.clock = client, interval_s, clock
        self.by_device: dict[str, PodRef] = {}
        self.problem: str | None = "not asked yet"
        self._next = float("-inf")
        self._lock = threading.Lock()

    def refresh(self) -> bool:
        """Ask the kubelet when due; False when that ask failed: then the map is dropped (a GPU may have changed
        hands) and the log says why, once per change."""
        if self.clock() < self._next:
            return True
        self._next = self.clock() + self.interval_s
        try:
            found, problem = self.client.gpus(), None
        except grpc.RpcError as e:
            found, problem = {}, f"{e.code().name}: {e.details()}"
        except message.DecodeError as e:
            found, problem = {}, f"undecodable List answer: {e}"
        if problem is not None:
            problem = f"kubelet pod-resources {self.client.socket_path}: {problem}; GPUs are served without pod labels"
        if problem != self.problem and (problem or self.problem != "not asked yet"):
            print(f"gpu exporter: {problem or 'pod attribution from the kubelet works again'}", file=sys.stderr,
                  flush=True)
        with self._lock:
            self.by_device, self.problem = found, problem
        return problem is None

    def owner(self, uuid: str, index: int) -> PodRef | None:
        with self._lock:
            return self.by_device.get(uuid) or self.by_device.get(str(index))

"""A replica's ``/metrics`` in vLLM V1's exposition: the same names, labels, buckets and ``_created`` families.

Names, buckets and label sets follow vLLM's ``vllm/v1/metrics/loggers.py`` (as recorded in
shared/reference/engine-metrics.md section 1.2). The engine observes events through the replica's
observer hooks; histograms accumulate with weights, because one decode step yields one
inter-token-latency observation per running sequence and a run of steps is applied at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from goodput.foundation.histogram import Histogram

if TYPE_CHECKING:  # the gauges read the replica; its compiled module is not imported to expose metrics
    from goodput.simulator.replica import Replica

__all__ = ["FINISHED_REASONS", "TTFT_BUCKETS", "VllmMetrics"]

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
# the NIXL KV connector's (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py, NixlPromMetrics)
NIXL_XFER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_BYTES_BUCKETS = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))  # 2 KiB .. 8 GiB


def _one_two_five(limit: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 token buckets up to ``max_model_len``."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > limit:
                return tuple(out)
            out.append(v)
        exp += 1


def _family(h: Histogram, name: str, help_text: str, labels: list[str], values: list[str]) -> Metric:
    fam = HistogramMetricFamily(name, help_text, labels=labels)
    fam.add_metric(values, h.cumulative(), h.sum)
    fam.add_sample(name + "_created", dict(zip(labels, values, strict=True)), h.created)
    return fam


class VllmMetrics:
    """Observer of one replica (see ``Replica.obs``) and the collector that renders its ``/metrics``."""

    def __init__(self, model_name: str, engine_cfg, num_blocks: int, max_model_len: int, clock=time.time,
                 kv_connector: bool = False) -> None:
        """``kv_connector``: a replica of a disaggregated deployment, started with vLLM's NixlConnector: it shows
        the connector's ``vllm:nixl_*`` families (observed where the KV is read, on the decode replica)."""
        now = clock()
        self.kv_connector = kv_connector
        self.model_name = model_name
        self.cfg = engine_cfg
        self.num_blocks = num_blocks
        self.replica: Replica | None = None  # set by the live fleet; read for gauges
        self.created = now
        # the process collector's start time, as vLLM's prometheus_client publishes it (the live fleet sets it to
        # the replica's own start); the engine exporter measures the cold start from it
        self.process_start = now
        tok = _one_two_five(max_model_len)
        self.h = {
            "ttft": Histogram(TTFT_BUCKETS, now),
            "itl": Histogram(ITL_BUCKETS, now),
            "tpot": Histogram(ITL_BUCKETS, now),
            "e2e": Histogram(REQUEST_LATENCY_BUCKETS, now),
            "queue": Histogram(REQUEST_LATENCY_BUCKETS, now),
            "inference": Histogram(REQUEST_LATENCY_BUCKETS, now),
            "prefill": Histogram(REQUEST_LATENCY_BUCKETS, now),
            "decode": Histogram(REQUEST_LATENCY_BUCKETS, now),
            "iteration_tokens": Histogram(ITERATION_TOKEN_BUCKETS, now),
            "prompt_tokens": Histogram(tok, now),
            "generation_tokens": Histogram(tok, now),
            "max_tokens": Histogram(tok, now),
            "n": Histogram(N_BUCKETS, now),
        }
        if kv_connector:
            self.h["nixl_xfer"] = Histogram(NIXL_XFER_BUCKETS, now)
            self.h["nixl_bytes"] = Histogram(NIXL_BYTES_BUCKETS, now)
        self.c = {"prompt": 0.0, "generation": 0.0, "preemptions": 0.0, "cache_queries": 0.0, "cache_hits": 0.0,
                  "nixl_failed": 0.0}
        self.finished = dict.fromkeys(FINISHED_REASONS, 0.0)

    # ------------------------------------------------------------------ observer hooks

    def on_prompt_tokens(self, rep, n: int) -> None:
        self.c["prompt"] += n

    def on_scheduled(self, rep, req, t: float) -> None:
        pass

    def on_prefix_cache(self, rep, queried: int, hit: int) -> None:
        self.c["cache_queries"] += queried
        self.c["cache_hits"] += hit

    def on_first_token(self, rep, req, t: float) -> None:
        self.c["generation"] += 1
        self.h["ttft"].observe(t - req.queue_start)

    def on_decode(self, rep, n: int, n_dec: int) -> None:
        """``n`` steps of the replica's current segment, each giving ``n_dec`` tokens."""
        self.c["generation"] += n * n_dec
        for dt, tokens in rep.segment_steps(n):
            self.h["itl"].observe(dt, n_dec)
            self.h["iteration_tokens"].observe(tokens)

    def on_abort(self, rep, req) -> None:
        self.finished["abort"] += 1

    def on_preempt(self, rep, req) -> None:
        self.c["preemptions"] += 1

    def on_handoff(self, rep, req, t: float) -> None:
        """A prefill replica's request ends with its first token (the proxy's ``max_tokens=1`` leg of vLLM's P/D)."""
        self._finished(req, t, "length")

    def on_kv_transfer(self, rep, req, seconds: float, n_bytes: int) -> None:
        self.h["nixl_xfer"].observe(seconds)
        self.h["nixl_bytes"].observe(n_bytes)

    def on_kv_transfer_failed(self, rep, req) -> None:
        self.c["nixl_failed"] += 1

    def on_finish(self, rep, req, t: float) -> None:
        self._finished(req, t, "stop" if req.natural_stop else "length")

    def _finished(self, req, t: float, reason: str) -> None:
        self.finished[reason] += 1
        if req.kv_ready == req.kv_ready:  # a decode replica's leg: the request arrived here with its KV
            arrived, scheduled, first = req.kv_ready, req.decode_start, req.decode_start
        else:
            arrived, scheduled, first = req.queue_start, req.scheduled, req.first_token
        h = self.h
        h["e2e"].observe(t - arrived)
        h["queue"].observe(scheduled - arrived)
        h["prefill"].observe(first - scheduled)
        h["decode"].observe(t - first)
        h["inference"].observe(t - scheduled)
        if req.generated > 1:
            h["tpot"].observe((t - first) / (req.generated - 1))
        h["prompt_tokens"].observe(req.prompt_tokens)
        h["generation_tokens"].observe(req.generated)
        h["max_tokens"].observe(req.max_tokens)
        h["n"].observe(1)

    # ------------------------------------------------------------------ exposition

    def collect(self) -> Iterable[Metric]:
        labels, values = ["engine", "model_name"], ["0", self.model_name]
        yield GaugeMetricFamily("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                                value=self.process_start)
        rep = self.replica
        running = len(rep.running) if rep else 0
        waiting = rep.n_waiting if rep else 0
        usage = rep.kv_usage if rep else 0.0
        gauges = (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage),
        )
        for name, help_text, v in gauges:
            g = GaugeMetricFamily(name, help_text, labels=labels)
            g.add_metric(values, v)
            yield g
        cfg = self.cfg
        info_labels = {
            "block_size": str(cfg.block_size), "cache_dtype": "auto" if cfg.kv_dtype == "fp16" else cfg.kv_dtype,
            "enable_prefix_caching": str(cfg.prefix_cache), "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
            "num_cpu_blocks": "0", "num_gpu_blocks": str(self.num_blocks), "engine": "0",
        }
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                 labels=sorted(info_labels))
        info.add_metric([info_labels[k] for k in sorted(info_labels)], 1.0)
        yield info
        counters = (
            ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", "cache_queries"),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", "cache_hits"),
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", "preemptions"),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt"),
            ("vllm:generation_tokens", "Number of generation tokens processed.", "generation"),
        )
        for name, help_text, key in counters:
            c = CounterMetricFamily(name, help_text, labels=labels)
            c.add_metric(values, self.c[key], created=self.created)
            yield c
        fin = CounterMetricFamily("vllm:request_success", "Count of successfully processed requests.",
                                  labels=["engine", "finished_reason", "model_name"])
        for reason, v in self.finished.items():
            fin.add_metric(["0", reason, self.model_name], v, created=self.created)
        yield fin
        hists = (
            ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "iteration_tokens"),
            ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
            ("vllm:request_generation_tokens", "Number of generation tokens processed.", "generation_tokens"),
            ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "max_tokens"),
            ("vllm:request_params_n", "Histogram of the n request parameter.", "n"),
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
            ("vllm:request_time_per_output_token_seconds",
             "Histogram of time_per_output_token_seconds per request.", "tpot"),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e"),
            ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "queue"),
            ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", "inference"),
            ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", "prefill"),
            ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", "decode"),
        )
        for name, help_text, key in hists:
            yield _family(self.h[key], name, help_text, labels, values)
        if self.kv_connector:
            yield _family(self.h["nixl_xfer"], "vllm:nixl_xfer_time_seconds",
                          "Histogram of transfer duration for NIXL KV Cache transfers.", labels, values)
            yield _family(self.h["nixl_bytes"], "vllm:nixl_bytes_transferred",
                          "Histogram of bytes transferred per NIXL KV Cache transfers.", labels, values)
            c = CounterMetricFamily("vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers.",
                                    labels=labels)
            c.add_metric(values, self.c["nixl_failed"], created=self.created)
            yield c

    def registry(self) -> CollectorRegistry:
        reg = CollectorRegistry(auto_describe=False)
        reg.register(self)
        return reg

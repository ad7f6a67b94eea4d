"""Hand-written OTLP JSON traces of a prefill/decode-disaggregated deployment, in the span shape docs/analyzer.md gives
(``llm.kv_transfer`` between ``llm.prefill`` and ``llm.decode``, ``llm.kv_transfer.bytes`` and ``llm.prefill_replica`` on
it, ``llm.replica`` the decode replica), beside an aggregated deployment of the same traffic without the span.

The KV transfer of each request moves its prompt's KV cache (``BYTES_PER_TOKEN``, Llama-3.1-8B in bf16) over a link of
``link_gbps`` plus ``LINK_LATENCY_S``; from ``degrade_at_s`` the link runs at ``degraded_gbps`` (a degraded
interconnect). Everything else stays as it was, so the KV transfer is the one segment that grows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

START_NS = 1_795_424_400 * 10**9  # 2026-11-23T09:00:00Z
BYTES_PER_TOKEN = 131_072  # 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes
LINK_LATENCY_S = 0.002
DISAGGREGATED, AGGREGATED = "pd-chat", "chat"
REQUESTS_PER_DOCUMENT = 200


def _attrs(**kv) -> list[dict]:
    out = []
    for k, v in kv.items():
        key = k.replace("__", ".")
        out.append({"key": key, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": str(v)}})
    return out


def _span(trace: str, span: str, parent: str, name: str, kind: int, start: int, end: int, **attrs) -> dict:
    return {"traceId": trace, "spanId": span, "parentSpanId": parent, "name": name, "kind": kind,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end), "attributes": _attrs(**attrs),
            "status": {}}


def write_traces(path: Path, *, seconds: float = 2400.0, rate: float = 1.2, degrade_at_s: float = 1800.0,
                 link_gbps: float = 400.0, degraded_gbps: float = 4.0, aggregated_share: float = 0.25,
                 seed: int = 7) -> dict:
    """Write the traces (one OTLP JSON document per line) to ``path``; returns what was written: requests per
    deployment and the mean KV transfer before and after the link degraded."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    arrivals = np.sort(rng.uniform(0.0, seconds, n))
    docs, spans, counts, kv = [], [], {DISAGGREGATED: 0, AGGREGATED: 0}, {"before": [], "after": []}
    for i, at in enumerate(arrivals):
        dep = AGGREGATED if rng.random() < aggregated_share else DISAGGREGATED
        counts[dep] += 1
        prompt = int(np.clip(rng.lognormal(np.log(2000), 0.3), 200, 8000))
        output = int(np.clip(rng.lognormal(np.log(100), 0.3), 10, 400))
        a = START_NS + int(at * 1e9)
        gw = a + int(rng.uniform(0.001, 0.003) * 1e9)
        q = gw + int(rng.exponential(0.02) * 1e9)
        pf = q + int(prompt * 1e-4 * rng.uniform(0.9, 1.1) * 1e9)
        cut = [("llm.gateway", a, gw, {}), ("llm.queue", gw, q, {}), ("llm.prefill", q, pf, {})]
        first = pf
        replica = f"{dep}-0" if dep == AGGREGATED else f"{dep}-decode-{i % 2}"
        if dep == DISAGGREGATED:
            gbps = degraded_gbps if at >= degrade_at_s else link_gbps
            moved = prompt * BYTES_PER_TOKEN
            transfer = LINK_LATENCY_S + moved * 8 / (gbps * 1e9) * rng.uniform(0.95, 1.05)
            kv["after" if at >= degrade_at_s else "before"].append(transfer)
            first = pf + int(transfer * 1e9)
            cut.append(("llm.kv_transfer", pf, first, {"llm__kv_transfer__bytes": moved,
                                                        "llm__prefill_replica": f"{dep}-prefill-{i % 3}"}))
        last = first + int(output * 0.015 * rng.uniform(0.9, 1.1) * 1e9)
        done = last + int(rng.uniform(0.001, 0.002) * 1e9)
        cut += [("llm.decode", first, last, {}), ("llm.send", last, done, {})]
        trace, root = f"{i + 1:032x}", f"{(i + 1) << 8:016x}"
        common = {"llm__deployment": dep, "llm__tenant": "acme", "llm__tier": "P0", "llm__route": "chat",
                  "gen_ai__request__model": "Llama-3.1-8B", "llm__request_id": f"r{i}"}
        spans.append(_span(trace, root, "", "llm.request", 2, a, done, **common, llm__replica=replica,
                           gen_ai__usage__input_tokens=prompt, gen_ai__usage__output_tokens=output,
                           llm__outcome="ok", llm__finish_reason="stop"))
        for k, (name, s, e, extra) in enumerate(cut, start=1):
            spans.append(_span(trace, f"{((i + 1) << 8) | k:016x}", root, name, 1, s, e,
                               **(common if name == "llm.gateway" else {}), **extra))
        if (i + 1) % REQUESTS_PER_DOCUMENT == 0 or i == n - 1:
            docs.append({"resourceSpans": [{"resource": {"attributes": _attrs(service__name="goodput-simulator")},
                                            "scopeSpans": [{"scope": {"name": "tests.pd"}, "spans": spans}]}]})
            spans = []
    path.write_text("".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs))
    return {"requests": counts, "kv_mean_before_s": float(np.mean(kv["before"])),
            "kv_mean_after_s": float(np.mean(kv["after"]))}


if __name__ == "__main__":  # python -m tests.analyzer.pd_traces OUT.jsonl: the traces, to try the analyzer on them
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.analyzer.pd_traces OUT.jsonl")
    print(json.dumps(write_traces(Path(sys.argv[1]))))

"""Demand files the plan tests share: a chat pool of three candidates and a long-prompt RAG pool; a load-test run
with a known knee."""

from goodput.loadtest.results import new_summary, write_run

CHAT = """\
growth: 1.2
slos:
  P0: {ttft_s: 0.5, tpot_s: 0.05, objective: 0.95}
  P1: {ttft_s: 1.0, tpot_s: 0.075, objective: 0.95}
deployments:
  chat:
    streams:
      - {scene: chat, tier: P0, peak_rps: 24, input_tokens: {p50: 700, p95: 2600, max: 6000},
         output_tokens: {p50: 130, p95: 480, max: 1000}}
      - {scene: code, tier: P1, peak_rps: 8, input_tokens: {p50: 1500, p95: 5200, max: 7500},
         output_tokens: {p50: 13, p95: 120, max: 250}}
    headroom: {failure_domains: 3, tolerate: 1, release_surge: 0.25, cold_start_s: 180, burst_factor: 1.5,
               burst_rise_s: 600}
    candidates:
      - {name: h100, model: Llama-3.1-8B, gpu: H100-80GB-SXM, tp: 1}
      - {name: a100, model: Llama-3.1-8B, gpu: A100-80GB, tp: 1}
      - {name: l40s, model: Llama-3.1-8B, gpu: L40S-48GB, tp: 1, engine: {max_num_seqs: 128, max_model_len: 16384}}
"""

# long prompts, short answers, one P0 tier: a burst shows up as queued prefill work while few sequences run
RAG = """\
slos:
  P0: {ttft_s: 1.0, tpot_s: 0.05, objective: 0.95}
deployments:
  rag:
    streams:
      - {scene: rag, tier: P0, peak_rps: 12, input_tokens: {p50: 3000, p95: 6000, max: 8000},
         output_tokens: {p50: 80, p95: 200, max: 300}}
    headroom: {tolerate: 1, cold_start_s: 180, burst_factor: 1.5, burst_rise_s: 600}
    candidates:
      - {name: h100, model: Llama-3.1-8B, gpu: H100-80GB-SXM, tp: 1}
"""


def knee_run(tmp_path, name, arrival_rate=2.0, e2e_mean=1.5):
    s = new_summary()
    s["comparability"].update(model="llama-8b", hardware="H100", slo="ttft_p95=500ms",
                              arrival={"pattern": "sweep", "rates": [1.0, arrival_rate]})
    s["steps"] = [{"index": 0, "label": "rate=1", "offered_rate": 1.0, "achieved_rate": 1.0, "slo_met": True,
                   "goodput_requests_per_s": 0.9, "input_tokens_per_s": 900.0, "output_tokens_per_s": 100.0,
                   "e2e_s": {"mean": e2e_mean}},
                  {"index": 1, "label": f"rate={arrival_rate:g}", "offered_rate": arrival_rate, "achieved_rate": 2.0,
                   "slo_met": True, "goodput_requests_per_s": 1.6, "input_tokens_per_s": 1600.0,
                   "output_tokens_per_s": 400.0, "e2e_s": {"mean": e2e_mean}}]
    s["knee"] = {"step": 1, "offered_rate": arrival_rate}
    return str(write_run(tmp_path / name, None, s))

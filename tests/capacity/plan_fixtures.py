"""Demand files the plan tests share: a chat pool of three candidates and a long-prompt RAG pool."""

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

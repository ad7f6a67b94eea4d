"""Edges of the normalizer that mutation testing (mutmut over goodput/exporters/normalize.py) found unguarded.

Each case is a few hand-written lines with the value worked out by hand.
"""

from __future__ import annotations

import pytest

from goodput.exporters.exposition import labels
from goodput.exporters.normalize import normalize


def _flat(text: str, engine: str = "auto") -> dict[tuple[str, str], float]:
    return {k: v for fam in normalize(text, engine).families.values() for k, v in fam.items()}


def test_escaped_label_values_are_read_unescaped_and_written_escaped():
    n = normalize('vllm:num_requests_running{model_name="a\\"b\\\\c\\nd",engine="0"} 2\n')
    assert n.model == 'a"b\\c\nd'
    (line,) = n.lines_by_model(lambda m: labels(("model",), (m,)))["llm_requests_running"]
    assert line == 'llm_requests_running{model="a\\"b\\\\c\\nd"} 2.0'


def test_a_timestamp_after_the_value_is_ignored():
    assert _flat('vllm:num_requests_running{model_name="m"} 6 1700000000000\n') == {("llm_requests_running", ""): 6}


def test_parse_errors_are_counted_one_each_and_the_rest_is_kept():
    text = ('vllm:num_requests_running{model_name="m"} six\n'
            'vllm:num_requests_waiting{model_name="m"} 3\n'
            'vllm:time_to_first_token_seconds_bucket{model_name="m"} 1\n'  # a bucket without le
            'vllm:time_to_first_token_seconds_bucket{model_name="m",le="soon"} 1\n')
    n = normalize(text)
    assert n.errors == {"parse": 3}  # no bucket was usable, so there is no histogram to call truncated
    assert n.families["llm_requests_waiting"] == {("llm_requests_waiting", ""): 3}
    assert "llm_requests_running" not in n.families
    assert n.samples_in == 4


@pytest.mark.parametrize(("tp", "pp", "kept"), [("0", "0", True), ("1", "0", False), ("0", "1", False)])
def test_sglang_keeps_only_rank_zero_of_tensor_and_pipeline_parallelism(tp, pp, kept):
    text = f'sglang:num_running_reqs{{model_name="m",tp_rank="{tp}",pp_rank="{pp}"}} 5\nsglang:num_queue_reqs 1\n'
    assert (("llm_requests_running", "") in _flat(text)) is kept


def test_triton_bucket_bounds_convert_to_seconds_and_inf_stays_inf():
    text = "".join(f'nv_inference_first_response_histogram_ms_bucket{{model="t",version="1",le="{le}"}} {c}\n'
                   for le, c in (("100", 1), ("250", 3), ("+Inf", 4)))
    text += ('nv_inference_first_response_histogram_ms_sum{model="t",version="1"} 700\n'
             'nv_inference_first_response_histogram_ms_count{model="t",version="1"} 4\n')
    v = _flat(text, "triton")
    assert v == pytest.approx({("llm_time_to_first_token_seconds_bucket", 'le="0.1"'): 1,
                 ("llm_time_to_first_token_seconds_bucket", 'le="0.25"'): 3,
                 ("llm_time_to_first_token_seconds_bucket", 'le="+Inf"'): 4,
                 ("llm_time_to_first_token_seconds_sum", ""): 0.7,
                 ("llm_time_to_first_token_seconds_count", ""): 4}, rel=1e-12)


@pytest.mark.parametrize("missing", ["_count", "_sum", '_bucket{model_name="m",le="+Inf"}'])
def test_a_histogram_missing_any_of_inf_sum_count_is_dropped_whole(missing):
    parts = {'_bucket{model_name="m",le="0.5"}': 1, '_bucket{model_name="m",le="+Inf"}': 2,
             '_sum{model_name="m"}': 0.7, '_count{model_name="m"}': 2}
    text = "".join(f"vllm:e2e_request_latency_seconds{k} {v}\n" for k, v in parts.items() if not k.startswith(missing))
    text += 'vllm:num_requests_running{model_name="m"} 1\n'
    n = normalize(text)
    assert "llm_e2e_request_latency_seconds" not in n.families and n.errors == {"truncated_histogram": 1}


def test_trtllm_capacity_without_a_block_size_has_an_empty_block_size_label():
    text = ('nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="t",version="1"} 6239\n'
            'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="t",version="1"} 0.5\n')
    v = _flat(text, "triton")
    assert v[("llm_kv_cache_capacity_blocks", 'block_size=""')] == 6239


def test_counts_of_duplicates_are_exact():
    line = 'vllm:num_requests_running{model_name="m"} '
    n = normalize(f"{line}1\n{line}2\n{line}3\n")
    assert n.errors == {"duplicate_series": 2} and n.families["llm_requests_running"] == {("llm_requests_running", ""): 3}

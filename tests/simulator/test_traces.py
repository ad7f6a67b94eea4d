import json

import numpy as np
import pytest

from goodput.foundation.errors import ConfigError
from goodput.simulator.traces import load_trace
from goodput.simulator.workload import generate
from tests.conftest import BASE_WORKLOAD, TRACES, make_fleet


def test_azure_conv_trace_matches_its_published_statistics():
    t = load_trace(TRACES / "azure_llm_inference_2023_conv.csv", "azure")
    assert len(t) == 19_366
    assert t.times[0] == 0.0 and np.all(np.diff(t.times) >= 0)
    assert t.span_s == pytest.approx(3501.7, abs=0.5)
    assert len(t) / t.span_s == pytest.approx(5.53, abs=0.01)
    assert np.percentile(t.input_tokens, 50) == 1020
    assert np.percentile(t.output_tokens, 99) == pytest.approx(601, abs=1)


def test_mooncake_trace_has_prefix_blocks():
    t = load_trace(TRACES / "mooncake_fast25_conversation_trace.jsonl", "mooncake")
    assert len(t) == 12_031
    assert t.block_tokens == 512
    first = t.hash_ids[0]
    assert first[:3] == (0, 1, 2)
    assert len(first) == -(-t.input_tokens[0] // 512)


def test_malformed_trace_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nnot-a-time,1,2\n")
    with pytest.raises(ConfigError, match=r"bad.csv: line 3: bad row"):
        load_trace(bad, "azure")
    bad2 = tmp_path / "bad.jsonl"
    bad2.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl: line 2: bad record"):
        load_trace(bad2, "mooncake")


@pytest.mark.parametrize(("ids", "says"), [
    (list(range(1_000_000)), "1000000 hash_ids for 1024 input tokens (one per 512-token block: at most 2)"),
    ("0123", "hash_ids must be a list, got str"),  # read as four block ids before
])
def test_a_mooncake_line_with_more_blocks_than_its_prompt_is_one_bad_record(tmp_path, ids, says):
    """A million ids on one line held the memory of a whole trace (killed at the memory cap, with a few lines)."""
    bad = tmp_path / "huge.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [0, 1]}\n'
                   + json.dumps({"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": ids}) + "\n")
    with pytest.raises(ConfigError) as e:
        load_trace(bad, "mooncake")
    assert str(e.value) == f"{bad}: line 2: bad record: {says}"


def test_trace_replay_workload_uses_trace_lengths_and_time_scale():
    wl = dict(BASE_WORKLOAD, arrival=None, input_tokens=None, output_tokens=None, max_tokens=100_000,
              trace={"path": str(TRACES / "azure_llm_inference_2023_conv.csv"), "format": "azure", "time_scale": 4.0})
    fleet = make_fleet(workloads=[wl])
    a = generate(fleet, 600.0, seed=1)
    # 4x compression of a 5.53 req/s trace: about 22 req/s over 600 s
    assert len(a) / 600 == pytest.approx(4 * 5.53, rel=0.1)
    trace = load_trace(TRACES / "azure_llm_inference_2023_conv.csv", "azure")
    n = len(a)
    assert sorted(a.prompt.tolist()) == sorted(trace.input_tokens[:n].tolist())

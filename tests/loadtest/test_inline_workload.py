"""`--workload prompt_tokens=256,output_tokens=128`: GuideLLM's inline synthetic lengths, fixed or spread."""

from __future__ import annotations

import numpy as np
import pytest

from goodput.foundation.errors import ConfigError
from goodput.loadtest.workload import load_workload


def lengths(spec: str, n: int = 20_000):
    specs = load_workload(spec).specs(n, 0)
    return np.array([s.input_tokens for s in specs]), np.array([s.output_tokens for s in specs])


def test_fixed_lengths_are_exactly_what_was_typed():
    w = load_workload("prompt_tokens=256, output_tokens=128")
    prompt, output = lengths("prompt_tokens=256,output_tokens=128", 500)
    assert set(prompt) == {256} and set(output) == {128}
    assert w.name == "prompt_tokens=256,output_tokens=128" and w.chat
    assert not load_workload("prompt_tokens=1,output_tokens=1,api=completions").chat


def test_a_stdev_spreads_the_lengths_normally_and_min_max_clip_them():
    prompt, output = lengths("prompt_tokens=256,prompt_tokens_stdev=64,output_tokens=128,output_tokens_stdev=20,"
                             "output_tokens_max=140")
    assert prompt.mean() == pytest.approx(256, rel=0.02) and prompt.std() == pytest.approx(64, rel=0.05)
    assert np.mean(np.abs(prompt - 256) <= 64) == pytest.approx(0.683, abs=0.02)  # one stdev holds 68%
    assert output.max() == 140 and np.mean(output == 140) == pytest.approx(0.274, abs=0.02)  # P(z > 0.6) clipped
    narrow, _ = lengths("prompt_tokens=20,prompt_tokens_stdev=30,prompt_tokens_min=10,output_tokens=4")
    assert narrow.min() == 10


@pytest.mark.parametrize("spec, says", [
    ("prompt_tokens=256", "needs output_tokens=N"),
    ("prompt_tokens=2.5,output_tokens=3", "prompt_tokens=2.5: prompt_tokens must be a whole number"),
    ("prompt_tokens=8,output_tokens=3,output_tokens_max=2", "output_tokens=3 is outside"),
    ("prompt_tokens=8,prompt_tokens=9,output_tokens=3", "given twice"),
    ("prompt_tokens=8,output_tokens=3,output_tokens_stdev=-1", "from 0 to"),
    ("prompt_tokens=8,output_tokens=3,api=grpc", "api is chat or completions"),
    ("prompt_tokens=8,output_tokens=3,samples=10", "samples=10: expected KEY=N with KEY one of"),
])
def test_a_bad_term_is_named(spec, says):
    with pytest.raises(ConfigError) as e:
        load_workload(spec)
    assert says in str(e.value) and str(e.value).startswith("--workload: ")

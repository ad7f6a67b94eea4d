"""The fleet counts tokens with its shipped BPE: a client's N-token English prompt reaches it as N +/- 10%.

The client side is GPT-2's own byte-level BPE (vocab.json and merges.txt, tests/fixtures/tokenizer), an
independent tokenizer trained on different text; prompts are the real AIPerf and inference-perf clients' own
synthetic prompts, and windows of public-domain prose of exactly N of its tokens.
"""

import copy
import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from goodput.foundation.errors import ConfigError
from goodput.simulator.live import LiveFleet
from goodput.simulator.openai_api import _text
from goodput.simulator.openai_protocol import CHAT, COMPLETIONS, validate
from goodput.simulator.tokenizer import EXACT_CHARS, FILLER_WORDS, count_tokens, tokenizer
from goodput.simulator.tokenizer_recipe import VOCAB_SIZE
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "tokenizer"
PROSE = ("pride_and_prejudice_ch1-3.txt", "shakespeare_coriolanus_i1.txt")
MODEL = BASE_DEPLOYMENT["model"]


@pytest.fixture(scope="module")
def gpt2() -> Tokenizer:
    tok = Tokenizer(models.BPE.from_file(str(FIXTURES / "gpt2_vocab.json"), str(FIXTURES / "gpt2_merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _prompts(tok: Tokenizer, n: int, name: str) -> list[str]:
    """Every window of exactly ``n`` of ``tok``'s tokens in the prose, one every 200 tokens."""
    ids = tok.encode((FIXTURES / name).read_text()).ids
    return [tok.decode(ids[s:s + n]) for s in range(0, len(ids) - n, 200)]


def test_the_shipped_file_is_a_byte_level_bpe():
    vocab = tokenizer().get_vocab()
    assert len(vocab) == VOCAB_SIZE  # what the recipe makes
    assert count_tokens("naïve café ☃ \x00") >= 4  # byte-level: any text encodes, nothing is unknown


@pytest.mark.parametrize("n", [256, 1024])
def test_a_prose_prompt_of_n_gpt2_tokens_counts_n_within_10_percent(gpt2, n):
    prompts = _prompts(gpt2, n, PROSE[0])
    assert prompts and all(len(gpt2.encode(p).ids) == n for p in prompts)
    ratios = [count_tokens(p) / n for p in prompts]
    assert all(0.9 <= r <= 1.1 for r in ratios), (min(ratios), max(ratios))


@pytest.mark.parametrize("n", [256, 1024])
def test_play_dialogue_counts_n_on_average(gpt2, n):
    """Speaker tags ("MENENIUS:") split differently from window to window (0.83-1.00 x 256 here); on average
    the count is within 10%."""
    ratios = [count_tokens(p) / n for p in _prompts(gpt2, n, PROSE[1])]
    assert 0.9 <= sum(ratios) / len(ratios) <= 1.1
    assert all(0.8 <= r <= 1.2 for r in ratios), (min(ratios), max(ratios))


@pytest.mark.parametrize("client", ["aiperf 0.13.0", "inference-perf 0.7.0"])
def test_the_real_clients_prompts_count_as_gpt2_counts_them_on_average(gpt2, client):
    """What the clients sent the fleet (Shakespeare without punctuation, cut at their own tokenizer's 256): on
    average within 10% of GPT-2's count (1.07 and 1.01 here; 1.17 and 1.11 with a 6,000-token vocabulary)."""
    prompts = json.loads((FIXTURES / "client_prompts.json").read_text())[client]
    ratios = [count_tokens(p) / len(gpt2.encode(p).ids) for p in prompts]
    assert len(prompts) == 40 and 0.9 <= sum(ratios) / len(ratios) <= 1.1, sum(ratios) / len(ratios)
    assert all(0.75 <= r <= 1.25 for r in ratios), (min(ratios), max(ratios))


def test_the_openai_face_counts_prompts_with_it(gpt2):
    prompt = _prompts(gpt2, 256, PROSE[0])[0]
    completion = validate(COMPLETIONS, {"model": MODEL, "prompt": prompt}, MODEL, 4096)
    assert completion.prompt_tokens == count_tokens(prompt)
    assert abs(completion.prompt_tokens - 256) <= 25.6
    chat = validate(CHAT, {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}, MODEL, 4096)
    assert chat.prompt_tokens == count_tokens(prompt) + 7  # 3 priming the reply, 4 framing the message


def test_the_fleets_own_words_are_one_token_each():
    assert all(len(tokenizer().encode(w).ids) == 1 and len(w) == 4 for w in FILLER_WORDS)
    for i0, i1 in ((0, 1), (0, 12), (5, 133), (0, 2000)):
        assert count_tokens(_text(i0, i1)) == i1 - i0


def test_a_huge_prompt_is_counted_from_its_head():
    """Past EXACT_CHARS the count scales the head's: exact for uniform text, and bounded in time."""
    assert count_tokens(" the" * (EXACT_CHARS // 4)) == EXACT_CHARS // 4
    assert count_tokens(" the" * EXACT_CHARS) == EXACT_CHARS
    assert count_tokens(" the" * (EXACT_CHARS // 4) + "y" * 3 * EXACT_CHARS) == EXACT_CHARS


@pytest.fixture(scope="module")
def quiet_fleet():
    dep = copy.deepcopy(BASE_DEPLOYMENT) | {"replicas": 1}
    dep["engine"]["max_model_len"] = 4096
    cfg = make_fleet(deployments=[dep], workloads=[copy.deepcopy(BASE_WORKLOAD)])
    base = free_port_block(2)
    lf = LiveFleet(cfg, base_port=base, traffic=0.0)
    lf.start()
    yield base
    lf.close()


def _prompt_tokens_total(base: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{base}/metrics", timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return sum(s.value for s in fams["vllm:prompt_tokens"].samples if s.name.endswith("_total"))


def test_the_live_fleets_usage_and_metrics_follow_the_tokenizer(gpt2, quiet_fleet):
    base = quiet_fleet
    prompt = _prompts(gpt2, 256, PROSE[1])[3]
    before = _prompt_tokens_total(base)
    r = httpx.post(f"http://127.0.0.1:{base}/v1/completions", timeout=30, json={
        "model": MODEL, "prompt": prompt, "max_tokens": 40, "ignore_eos": True})
    assert r.status_code == 200, r.text
    usage, text = r.json()["usage"], r.json()["choices"][0]["text"]
    assert abs(usage["prompt_tokens"] - 256) <= 25.6 and usage["prompt_tokens"] == count_tokens(prompt)
    assert usage["completion_tokens"] == 40 == count_tokens(text)
    assert _prompt_tokens_total(base) - before == usage["prompt_tokens"]


@pytest.fixture(scope="module")
def gpt2_file(gpt2, tmp_path_factory) -> Path:
    """GPT-2's BPE as a Hugging Face ``tokenizer.json``: a served model's own tokenizer, as its repository ships it."""
    path = tmp_path_factory.mktemp("model") / "tokenizer.json"
    gpt2.save(str(path))
    return path


@pytest.fixture(scope="module")
def gpt2_fleet(gpt2_file):
    dep = copy.deepcopy(BASE_DEPLOYMENT) | {"replicas": 1, "tokenizer": str(gpt2_file)}
    dep["engine"]["max_model_len"] = 4096
    base = free_port_block(2)
    lf = LiveFleet(make_fleet(deployments=[dep], workloads=[copy.deepcopy(BASE_WORKLOAD)]), base_port=base, traffic=0.0)
    lf.start()
    yield base
    lf.close()


def test_a_fleet_given_the_models_tokenizer_counts_a_clients_n_tokens_as_n(gpt2, gpt2_fleet):
    """GuideLLM, inference-perf and AIPerf cut a synthetic prompt at exactly N tokens of the tokenizer they are given
    and decode it; given the served model's tokenizer, the fleet counts what the client counted. With the shipped BPE
    these eight count 240-257, and a client's tokenizer further from it much less (issue 38: 183-216 for 256)."""
    prompts = [*_prompts(gpt2, 256, PROSE[0])[:4], *_prompts(gpt2, 256, PROSE[1])[:4]]
    assert any(count_tokens(p) != 256 for p in prompts)  # the shipped BPE does not count them as the client did
    for prompt in prompts:
        r = httpx.post(f"http://127.0.0.1:{gpt2_fleet}/v1/completions", timeout=30, json={
            "model": MODEL, "prompt": prompt, "max_tokens": 2, "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == len(gpt2.encode(prompt).ids) == 256


def test_a_tokenizer_that_is_not_one_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}')
    for path, problem in ((bad, "not a Hugging Face tokenizer.json"), (tmp_path / "absent.json", "cannot read")):
        dep = copy.deepcopy(BASE_DEPLOYMENT) | {"tokenizer": str(path)}
        with pytest.raises(ConfigError, match=problem) as e:
            make_fleet(deployments=[dep], workloads=[copy.deepcopy(BASE_WORKLOAD)])
        assert "tokenizer" in e.value.key and "\n" not in str(e.value)

"""The normalizer's shortcuts against prometheus_client's full parse of the same body: a histogram series' bucket
lines after its first (read by le and value alone) and a large body's runs of families no rule reads (counted,
not split). Each body is built so a shortcut that confused two series, or skipped a line it must read, differs."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from prometheus_client.parser import text_string_to_metric_families

from goodput.exporters.exposition import escape, fmt_float
from goodput.exporters.normalize import _RUNS_MIN_CHARS, normalize

TTFT = "vllm:time_to_first_token_seconds"
LES = ("0.01", "0.1", "1.0", "+Inf")


def _truth(text: str) -> dict[tuple[str, str], float]:
    """(model, le) -> summed bucket value of vLLM's TTFT histogram, from prometheus_client's parse."""
    got: dict[tuple[str, str], float] = defaultdict(float)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == TTFT + "_bucket":
                le = s.labels["le"]
                got[(s.labels["model_name"], "+Inf" if le == "+Inf" else fmt_float(float(le)))] += s.value
    return dict(got)


def _ours(text: str) -> dict[tuple[str, str], float]:
    n = normalize(text, "vllm")
    out = {}
    for model, fams in ((n.model, n.families), *n.others.items()):
        for (name, extra), v in fams.get("llm_time_to_first_token_seconds", {}).items():
            if name.endswith("_bucket"):
                out[(model, extra.removeprefix('le="').removesuffix('"'))] = v
    return out


def _series(labels: dict[str, str], counts: list[float]) -> list[str]:
    """One TTFT histogram series: buckets (le placed among ``labels`` in sorted order), _count and _sum."""
    def block(extra: dict[str, str]) -> str:
        return ",".join(f'{k}="{escape(v)}"' for k, v in sorted((labels | extra).items()))

    lines = [f"{TTFT}_bucket{{{block({'le': le})}}} {c}" for le, c in zip(LES, counts, strict=True)]
    return lines + [f"{TTFT}_count{{{block({})}}} {counts[-1]}", f"{TTFT}_sum{{{block({})}}} 1.5"]


def _body(series: list[list[str]]) -> str:
    return f"# HELP {TTFT} ttft\n# TYPE {TTFT} histogram\n" + "\n".join(ln for s in series for ln in s) + "\n"


# label blocks that share the text before le, or after it, or hide le="..." and quotes inside other values
TRICKY = [
    {"model_name": "a", "engine": "0"},
    {"model_name": "a", "engine": "1"},  # same tail as the one before, another head: summed with it
    {"model_name": "ab", "engine": "0"},  # the head of the first, a tail that only starts like its tail
    {"model_name": 'q"le="9",x', "engine": "0"},  # le=" inside an escaped value
    {"model_name": "back\\slash\nnewline", "engine": "0"},
    {"model_name": "a", "engine": "0", "zone": 'le="0.1"'},  # a label after le that holds le="..."
]


def test_bucket_lines_of_series_sharing_text_around_le_are_kept_apart():
    series = [_series(lab, [i + 1, 2 * i + 3, 3 * i + 7, 4 * i + 9]) for i, lab in enumerate(TRICKY)]
    text = _body(series)
    assert _ours(text) == _truth(text)
    assert len({m for m, _ in _ours(text)}) == 4  # the four models, none merged into another


def test_a_series_split_by_other_lines_reads_as_if_it_were_whole():
    series = [_series(lab, [1, 2, 3, 4]) for lab in TRICKY[:3]]
    whole = _body(series)
    rng = random.Random(7)
    lines = [ln for s in series for ln in s]
    rng.shuffle(lines)
    split = _body([lines])
    assert _ours(split) == _ours(whole) == _truth(whole)
    assert normalize(split, "vllm").errors == {}  # no series is repeated, so none is counted as one


def test_a_repeated_bucket_line_inside_a_series_keeps_its_last_sample_and_is_counted():
    lines = _series(TRICKY[0], [1, 2, 3, 4])
    lines.insert(2, lines[1].replace(" 2", " 20"))  # le=0.1 twice in a row: 2, then 20
    n = normalize(_body([lines]), "vllm")
    assert n.errors == {"duplicate_series": 1}
    assert _ours(_body([lines]))[("a", "0.1")] == 20


def test_a_large_body_skips_unread_families_but_not_a_read_line_among_them():
    per = 1 + 2 * _RUNS_MIN_CHARS // 60  # lines enough to cross the size at which runs are skipped
    unread = [f'vllm:request_params_n_bucket{{engine="{i}",le="1.0",model_name="a"}} {i}' for i in range(per)]
    unread.insert(per // 2, 'vllm:num_requests_running{engine="0",model_name="a"} 5')  # a read line among them
    unread.insert(per // 3, "")  # a blank line
    text = ("# TYPE vllm:request_params_n histogram\n" + "\n".join(unread) + "\n"
            + _body([_series(TRICKY[0], [1, 2, 3, 4])]))
    assert len(text) > _RUNS_MIN_CHARS
    n = normalize(text, "vllm")
    assert n.families["llm_requests_running"] == {("llm_requests_running", ""): 5}
    assert n.samples_in == per + 1 + 6
    assert _ours(text) == _truth(text)


@pytest.mark.parametrize("timestamp", [" 1700000000000", ""])
def test_bucket_lines_with_timestamps_read_the_value_not_the_time(timestamp):
    lines = [ln + timestamp for ln in _series(TRICKY[0], [1, 2, 3, 4])]
    assert _ours(_body([lines])) == {("a", le): v for le, v in zip(("0.01", "0.1", "1.0", "+Inf"), (1, 2, 3, 4),
                                                                       strict=True)}

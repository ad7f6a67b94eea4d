"""Arrival schedules, checked statistically with fixed seeds; each tolerance is a multiple (4σ or more) of the
standard error for the sample size, so a correct generator fails about once in 10^4 seeds and a wrong rate, cv or
burst shape fails every time."""

import math

import numpy as np
import pytest

from goodput.foundation.errors import ConfigError
from goodput.loadtest.patterns import longtail_lengths, schedule
from tests.conftest import REPO

MOONCAKE = REPO / "tests" / "fixtures" / "loadtest" / "mooncake_small.jsonl"


def _cv(times):
    gaps = np.diff(times)
    return gaps.std() / gaps.mean(), len(gaps)


def test_poisson_rate_and_cv():
    rate, duration = 50.0, 400.0
    [step] = schedule("poisson", duration_s=duration, rate=rate, seed=1).steps
    n, expected = len(step.arrivals_s), rate * duration
    tol = 4 * math.sqrt(expected)
    assert abs(n - expected) < tol, f"{n} arrivals, expected {expected} ± {tol:.0f}"
    cv, m = _cv(step.arrivals_s)
    assert abs(cv - 1.0) < 4 * math.sqrt(2.0 / m)  # SE of exponential gaps' sample cv: test_gamma_cv's formula at cv=1
    assert step.offered_rate == rate and step.concurrency is None
    assert np.all(np.diff(step.arrivals_s) >= 0) and step.arrivals_s[0] >= 0 and step.arrivals_s[-1] < duration


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_cv(cv):
    [step] = schedule("gamma", duration_s=400.0, rate=50.0, cv=cv, seed=2).steps
    got, m = _cv(step.arrivals_s)
    # Gamma gaps: kurtosis excess 6cv², so SE(sample cv) ≈ cv/2 · sqrt((2 + 6cv²)/m)
    se = cv / 2 * math.sqrt((2 + 6 * cv * cv) / m)
    assert abs(got - cv) < 5 * se, f"cv {got:.3f}, wanted {cv} ± {5 * se:.3f}"
    assert abs(len(step.arrivals_s) - 20000) < 5 * cv * math.sqrt(20000)  # count variance of a renewal process ≈ cv²·n


def test_seeded_and_reproducible():
    a = schedule("poisson", duration_s=10, rate=5, seed=7).steps[0].arrivals_s
    b = schedule("poisson", duration_s=10, rate=5, seed=7).steps[0].arrivals_s
    c = schedule("poisson", duration_s=10, rate=5, seed=8).steps[0].arrivals_s
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_burst_shape():
    rate, factor, length, period, duration = 20.0, 5.0, 10.0, 40.0, 800.0
    [step] = schedule("burst", duration_s=duration, rate=rate, burst="factor=5,length=10s,period=40s", seed=3).steps
    t = step.arrivals_s
    in_spike = (t % period) >= period - length
    spikes, base = int(in_spike.sum()), int((~in_spike).sum())
    n_periods = duration / period
    exp_spike, exp_base = rate * factor * length * n_periods, rate * (period - length) * n_periods
    assert abs(spikes - exp_spike) < 4 * math.sqrt(exp_spike), (spikes, exp_spike)
    assert abs(base - exp_base) < 4 * math.sqrt(exp_base), (base, exp_base)
    assert step.offered_rate == pytest.approx(rate * (period - length + factor * length) / period)


def test_rate_steps_hold_each_level_with_settle():
    sched = schedule("step", duration_s=300, steps="rate=5,20,40", settle_s=10, seed=4)
    assert [s.label for s in sched.steps] == ["rate=5", "rate=20", "rate=40"]
    for s, level in zip(sched.steps, (5, 20, 40), strict=True):
        assert (s.start_s, s.end_s, s.settle_s) == (s.index * 100.0, (s.index + 1) * 100.0, 10.0)
        assert np.all((s.arrivals_s >= s.start_s) & (s.arrivals_s < s.end_s))
        expected = level * 100
        assert abs(len(s.arrivals_s) - expected) < 4 * math.sqrt(expected)
    assert sched.duration_s == 300.0


def test_concurrency_steps_are_closed_loop():
    sched = schedule("step", duration_s=60, steps={"concurrency": [1, 8, 32]}, step_s=20)
    got = [(s.concurrency, s.arrivals_s, s.offered_rate) for s in sched.steps]
    assert got == [(1, None, None), (8, None, None), (32, None, None)]
    [s] = schedule("concurrency", duration_s=30, concurrency=4).steps
    assert (s.concurrency, s.arrivals_s, s.label) == (4, None, "concurrency=4")


def test_replay_timing_lengths_and_prefixes():
    [s] = schedule("replay", duration_s=100, trace=MOONCAKE, time_scale=0.5).steps
    assert s.arrivals_s.tolist() == [0.0, 0.125, 0.5, 0.75, 2.0, 4.5]  # ms timestamps / 1000 × 0.5
    assert s.input_tokens.tolist() == [1024, 600, 1536, 300, 512, 2048]
    assert s.output_tokens.tolist() == [12, 40, 7, 90, 1, 64]
    assert s.hash_ids[0] == (0, 1) and s.hash_ids[2] == (0, 1, 3) and s.block_tokens == 512
    [cut] = schedule("replay", duration_s=1.0, trace=MOONCAKE, time_scale=1.0).steps
    assert cut.arrivals_s.tolist() == [0.0, 0.25] and len(cut.hash_ids) == 2 and cut.offered_rate == 2.0


def test_longtail_puts_the_fraction_near_the_limit():
    rng = np.random.default_rng(5)
    base = np.full(1000, 200)
    out = longtail_lengths(base, rng, context_limit=8192, fraction=0.05)
    long = out > 200
    assert long.sum() == 50 and np.all((out[long] >= int(0.9 * 8192)) & (out[long] <= 8192))
    assert base.tolist() == [200] * 1000  # the input is not changed
    [s] = schedule("longtail", duration_s=10, rate=3, seed=1).steps
    assert s.offered_rate == 3 and s.arrivals_s is not None


@pytest.mark.parametrize(("kwargs", "names"), [
    ({"pattern": "zigzag", "duration_s": 10}, "zigzag"),
    ({"pattern": "poisson", "duration_s": 10}, "--rate"),
    ({"pattern": "gamma", "duration_s": 10, "rate": 1}, "--cv"),
    ({"pattern": "poisson", "duration_s": 10, "rate": -1}, "--rate"),
    ({"pattern": "concurrency", "duration_s": 10}, "--concurrency"),
    ({"pattern": "step", "duration_s": 10, "steps": "rate=1,x"}, "--steps"),
    ({"pattern": "step", "duration_s": 10, "steps": "concurrency=1.5"}, "--steps"),
    ({"pattern": "step", "duration_s": 10, "steps": "rate=1,2", "settle_s": 5}, "--settle"),
    ({"pattern": "burst", "duration_s": 10, "rate": 1, "burst": "factor=2,length=9"}, "--burst"),
    ({"pattern": "burst", "duration_s": 10, "rate": 1, "burst": "factor=2,length=9,period=5"}, "--burst"),
    # non-finite and outsized levels were a traceback (int(inf), NaN seconds) or a run of 1e9 streams
    ({"pattern": "step", "duration_s": 10, "steps": "concurrency=inf"}, "up to 10000"),
    ({"pattern": "step", "duration_s": 10, "steps": "concurrency=20000"}, "up to 10000"),
    ({"pattern": "step", "duration_s": 10, "steps": "rate=nan"}, "--steps"),
    ({"pattern": "step", "duration_s": 10, "steps": {"rate": ["fast"]}}, "--steps"),
    ({"pattern": "step", "duration_s": 10, "steps": {"rate": 3}}, "--steps"),
    ({"pattern": "burst", "duration_s": 10, "rate": 1, "burst": "factor=2,length=1,period=inf"}, "burst period"),
    ({"pattern": "burst", "duration_s": 10, "rate": 1, "burst": "factor=1e308,length=1,period=5"}, "over 1000"),
    ({"pattern": "burst", "duration_s": 10, "rate": 1, "burst": {"factor": "x", "length": 1, "period": 5}},
     "--burst"),
    ({"pattern": "poisson", "duration_s": 1e6, "rate": 1e3}, "limit"),
    ({"pattern": "replay", "duration_s": 10, "trace": "nope.txt"}, "nope.txt"),
])
def test_bad_options_are_one_config_error(kwargs, names):
    pattern = kwargs.pop("pattern")
    with pytest.raises(ConfigError) as err:
        schedule(pattern, **kwargs)
    assert names in str(err.value) and "\n" not in str(err.value)


def test_replay_of_an_azure_csv_is_relative_and_time_scaled(tmp_path):
    f = tmp_path / "azure.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.9951690,396,109\n"
                 "2023-11-16 18:15:47.1805900,879,3\n")
    [s] = schedule("replay", duration_s=60, trace=f, time_scale=2.0).steps
    assert s.arrivals_s.tolist() == pytest.approx([0.0, 1.0, 2 * 4.314579])  # sorted by time, then × 2
    assert s.input_tokens.tolist() == [374, 879, 396] and s.hash_ids is None

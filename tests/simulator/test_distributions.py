import numpy as np
import pytest

from goodput.simulator.distributions import QuantileDistribution

PROFILES = [
    {"p50": 1020, "p95": 3000, "p99": 4142, "max": 14050},  # Azure conv input
    {"p50": 129, "p95": 480, "p99": 601, "max": 1000},  # Azure conv output
    {"p50": 13, "p95": 120, "p99": 251.5, "max": 1899},  # Azure code output: small integers
    {"p50": 6909, "p95": 40000, "p99": 85400},  # Mooncake input, no max given
]


@pytest.mark.parametrize("spec", PROFILES)
def test_sampled_quantiles_within_3_percent(spec):
    d = QuantileDistribution.from_quantiles(spec)
    x = d.sample(np.random.default_rng(1), 100_000)
    for key, q in (("p50", 50), ("p95", 95), ("p99", 99)):
        got = np.percentile(x, q)
        assert got == pytest.approx(spec[key], rel=0.03), (key, got)
    assert x.min() >= 1
    if "max" in spec:
        assert x.max() <= spec["max"]


def test_decreasing_quantiles_are_rejected():
    with pytest.raises(ValueError, match="p95=100 is below p50=500"):
        QuantileDistribution.from_quantiles({"p50": 500, "p95": 100})


def test_unknown_key_is_rejected():
    with pytest.raises(ValueError, match="unknown quantile"):
        QuantileDistribution.from_quantiles({"p50": 5, "median": 5})


def test_quantiles_that_are_all_the_same_are_a_fixed_length():
    """min defaults to 1; {p50: X, max: X} would then draw half its values between 1 and X (a trap a benchmark of
    ours fell into), so equal quantiles mean X every time."""
    rng = np.random.default_rng(7)
    fixed = QuantileDistribution.from_quantiles({"p50": 172, "p95": 172, "max": 172})
    assert set(fixed.sample(rng, 1000).tolist()) == {172}
    spread = QuantileDistribution.from_quantiles({"p50": 172, "max": 400})
    assert spread.sample(rng, 1000).min() < 100  # distinct values keep min at 1

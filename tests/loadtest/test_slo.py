import pytest

from goodput.foundation.errors import ConfigError
from goodput.loadtest.slo import Slo, SloTerm, parse_slo
from tests.loadtest.loadtest_records import rec


def test_parses_terms_units_and_percentiles():
    slo = parse_slo("ttft_p95=0.8s,tpot_p95=50ms, e2e_p99.9=2s,itl_p50=20ms")
    assert slo.terms == (
        SloTerm("ttft", 95.0, 0.8), SloTerm("tpot", 95.0, 0.05), SloTerm("e2e", 99.9, 2.0), SloTerm("itl", 50.0, 0.02),
    )


@pytest.mark.parametrize("text", ["ttft_p95=0.8s,tpot_p95=50ms,e2e_p99=2s", "itl_p99.9=7ms", "e2e_p50=1.25s,ttft_p99=0.3s"])
def test_str_round_trips(text):
    slo = parse_slo(text)
    assert parse_slo(str(slo)) == slo
    assert str(parse_slo(str(slo))) == str(slo)


def test_str_is_readable():
    assert str(parse_slo("ttft_p95=0.8s,e2e_p99=2s")) == "ttft_p95=800ms,e2e_p99=2s"


@pytest.mark.parametrize(("text", "names"), [
    ("ttft_p95=0.8", "ttft_p95=0.8"),            # no unit
    ("ttft_p95=0.8s,foo_p95=1s", "foo_p95=1s"),  # unknown metric, named
    ("ttft_p100=1s", "ttft_p100=1s"),            # percentile out of range
    ("ttft_p40=1s", "ttft_p40=1s"),
    ("ttft_p95=0s", "ttft_p95=0s"),
    ("ttft_p95=1s,ttft_p95=2s", "ttft_p95=2s"),  # same term twice
    ("ttft_p95=1s,,e2e_p99=2s", "empty"),
    ("ttft=1s", "ttft=1s"),
    ("ttft_p95=1 s", "ttft_p95=1 s"),
])
def test_bad_terms_name_the_term(text, names):
    with pytest.raises(ConfigError) as err:
        parse_slo(text, source="--slo")
    line = str(err.value)
    assert line.startswith("--slo: ") and names in line and "\n" not in line


def test_a_request_meets_when_every_own_value_is_within():
    slo = parse_slo("ttft_p95=0.5s,tpot_p95=100ms")
    assert slo.meets(rec(0, ttft=0.4, e2e=0.4 + 9 * 0.1, out=10))          # tpot exactly at the threshold
    assert not slo.meets(rec(1, ttft=0.6, e2e=1.0, out=10))                # ttft over
    assert not slo.meets(rec(2, ttft=0.1, e2e=0.1 + 9 * 0.11, out=10))     # tpot over
    assert not slo.meets(rec(3, ttft=0.1, e2e=0.5, error="http_5xx"))      # failed
    assert not slo.meets(rec(4, ttft=0.1, e2e=None))                       # never finished
    assert slo.meets(rec(5, ttft=0.2, e2e=5.0, out=1))                     # one token: no TPOT, not failed by it


def test_itl_term_uses_the_requests_own_percentile_of_gaps():
    slo = parse_slo("itl_p50=50ms")
    assert slo.meets(rec(0, itl=[0.01, 0.02, 0.2]))       # median gap 20 ms; one slow gap allowed at p50
    assert not slo.meets(rec(1, itl=[0.06, 0.07, 0.01]))  # median 60 ms


def test_empty_slo_meets_every_success():
    slo = Slo(())
    assert slo.meets(rec(0)) and not slo.meets(rec(1, error="timeout"))


def test_percentile_is_numpys_linear_on_short_and_long_lists_and_takes_inf():
    import math

    import numpy as np

    from goodput.foundation.quantiles import percentile

    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 10, 256, 257, 5000):  # 256 and below: plain Python; above: numpy's sort
        values = list(rng.exponential(0.05, n))
        for pct in (50.0, 90.0, 95.0, 99.0, 99.9):
            assert percentile(values, pct) == pytest.approx(np.percentile(values, pct), rel=1e-12, abs=1e-15)
    assert percentile([0.1, 0.2, math.inf, math.inf], 50) == math.inf
    assert percentile([0.1, 0.2, 0.3, math.inf], 50) == pytest.approx(0.25)
    assert percentile([0.1, 0.2, math.inf], 50) == 0.2  # numpy would give nan here (inf × 0)

import numpy as np
import pytest

from goodput.simulator.arrivals import ArrivalSpec, Batch, Burst, Diurnal, Step, arrival_times


def _cv(t):
    gaps = np.diff(t)
    return gaps.std() / gaps.mean()


def test_poisson_rate_and_cv():
    t = arrival_times(ArrivalSpec("poisson", rate=20.0), 2000.0, np.random.default_rng(0))
    assert len(t) / 2000.0 == pytest.approx(20.0, rel=0.03)
    assert _cv(t) == pytest.approx(1.0, abs=0.05)
    assert np.all(np.diff(t) >= 0) and t.min() >= 0 and t.max() < 2000


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_burstiness(cv):
    t = arrival_times(ArrivalSpec("gamma", rate=10.0, cv=cv), 20000.0, np.random.default_rng(1))
    assert len(t) / 20000.0 == pytest.approx(10.0, rel=0.08)
    assert _cv(t) == pytest.approx(cv, rel=0.1)


def test_step_changes_rate_at_given_times():
    spec = ArrivalSpec("step", steps=(Step(0, 5.0), Step(500, 20.0), Step(1000, 2.0)))
    t = arrival_times(spec, 1500.0, np.random.default_rng(2))
    counts = [np.sum((t >= a) & (t < b)) / (b - a) for a, b in ((0, 500), (500, 1000), (1000, 1500))]
    assert counts == pytest.approx([5.0, 20.0, 2.0], rel=0.1)


def test_burst_multiplies_rate_for_its_window():
    spec = ArrivalSpec("burst", rate=10.0, bursts=(Burst(600, 4.0, 120),))
    t = arrival_times(spec, 1200.0, np.random.default_rng(3))
    inside = np.sum((t >= 600) & (t < 720)) / 120
    outside = np.sum(t < 600) / 600
    assert inside / outside == pytest.approx(4.0, rel=0.12)


def test_scheduled_batch_adds_n_requests_at_t():
    spec = ArrivalSpec("batch", rate=0.0, batches=(Batch(100.0, 500, 0.0), Batch(300.0, 200, 10.0)))
    t = arrival_times(spec, 400.0, np.random.default_rng(4))
    assert np.sum(t == 100.0) == 500
    assert np.sum((t >= 300.0) & (t <= 310.0)) == 200
    assert len(t) == 700


def test_diurnal_peak_and_trough():
    spec = ArrivalSpec("diurnal", rate=10.0, diurnal=Diurnal(0.5, 86400.0, 43200.0))
    t = arrival_times(spec, 86400.0, np.random.default_rng(5))
    peak = np.sum(np.abs(t - 43200.0) < 1800) / 3600
    trough = np.sum(t < 1800) / 1800
    assert peak == pytest.approx(15.0, rel=0.1)
    assert trough == pytest.approx(5.0, rel=0.12)
    assert len(t) / 86400 == pytest.approx(10.0, rel=0.03)

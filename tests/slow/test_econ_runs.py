"""The Spot economics simulator over a day of preemptions: the same seed gives
the same run, and spotline's real handlers (over the local cloud, VMs as
records, and the in-memory store, on a virtual clock) recover as fast as its
model says. Seconds each; the rest is in ``tests/unit/test_econ.py``."""

from __future__ import annotations

import pytest

from benchmarks.econ import baselines, traces
from benchmarks.econ.model import Job
from tests.unit.test_econ import GANG, PARAMS, spotline


def test_the_same_seed_gives_the_same_run_and_another_seed_another() -> None:
    job = Job("short", "g2-standard-4", hours=0.5)
    first = traces.poisson(4.0, 1, 24, seed=7)
    assert first == traces.poisson(4.0, 1, 24, seed=7)
    assert first != traces.poisson(4.0, 1, 24, seed=8)
    assert spotline(job, first) == spotline(job, traces.poisson(4.0, 1, 24, seed=7))


@pytest.mark.parametrize("job", [Job("short", "n1-standard-8-t4", 1.0), GANG], ids=["1", "4"])
def test_spotline_real_code_recovers_as_fast_as_its_model(job: Job) -> None:
    """Many preemptions, some while booting, on every node: the handlers add
    no delay to the relaunch (nor drop one) that the model does not have; a
    gang's lost VMs deleted one after another, not together, would."""
    trace = traces.poisson(3.0, job.nodes, 24, seed=3)
    real = spotline(job, trace)
    model = baselines.run(baselines.SPOTLINE_MODEL, job, trace, PARAMS)
    assert real.preemptions == model.preemptions >= 3
    assert real.vm_s == pytest.approx(model.vm_s)
    assert real.makespan_s == pytest.approx(model.makespan_s)
    assert real.cost_usd == pytest.approx(model.cost_usd, abs=1e-4)

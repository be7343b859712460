"""The Spot economics simulator over a day of preemptions: the same seed gives
the same run, and spotline's real handlers (over the local cloud, VMs as
records, and the in-memory store, on a virtual clock) recover as fast as its
model says, and replace-one as near its model as their choices allow. Seconds
each (half a minute for replace-one); the rest is in ``tests/unit/test_econ.py``
and ``tests/unit/test_econ_replace_one.py``."""

from __future__ import annotations

import pytest

from benchmarks.econ import baselines, gang_handlers, gang_model, traces
from benchmarks.econ.gang_model import Latencies
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


def test_replace_one_and_elastic_through_the_handlers_agree_with_their_model() -> None:
    """A 4-node L4 gang at 2 preemptions per VM-hour, Google's latencies and
    drawn boots: the whole relaunch through the handlers is the model's to
    the cent; replace-one (the stand-in agents waiting for the regroup the
    functions write) stays within a point of its model, which replaces
    every loss where the functions relaunch the gang whole on a loss while
    booting or replacing. Elastic (training on at the smaller size, growing
    back on the functions' request) is dearer and slower than its model by
    such relaunches alone: 4 of this trace's 20 losses come while the gang
    is smaller or growing back, where the model shrinks again."""
    rows = gang_handlers.compare("L4", "g2-standard-4", 4, 2.0, 2.0, 1, Latencies())
    by = {row.strategy: row for row in rows}
    relaunch, replace_one = by[gang_model.RELAUNCH], by[gang_model.REPLACE_ONE]
    assert relaunch.finished == replace_one.finished == 1
    assert relaunch.savings == pytest.approx(relaunch.model_savings, abs=1e-6)
    assert relaunch.makespan == pytest.approx(relaunch.model_makespan, abs=1e-6)
    assert relaunch.replacements == 0
    assert replace_one.preemptions >= 20 and replace_one.replacements >= 15
    assert replace_one.savings == pytest.approx(replace_one.model_savings, abs=1.0)
    assert replace_one.makespan == pytest.approx(replace_one.model_makespan, abs=1.0)
    elastic = by[gang_model.ELASTIC]
    assert elastic.finished == 1 and elastic.replacements >= 15
    assert elastic.model_savings - 2.0 <= elastic.savings <= elastic.model_savings + 0.5
    assert elastic.model_makespan - 0.5 <= elastic.makespan <= elastic.model_makespan + 3.0

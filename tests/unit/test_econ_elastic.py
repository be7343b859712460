"""An elastic gang (``min_nodes``) through spotline's real handlers in the
economics simulator (``benchmarks/econ``): the survivors regroup without the
lost node and train on at their size once node 0's save is reported; when
the replacement is up the functions ask them to stop (``spotline-gang-stop``),
they save and regroup at the full size. Exact timings of one loss, and the
two changes of size counted on the job."""

from __future__ import annotations

import pytest

from benchmarks.econ.model import Job, Outcome
from benchmarks.econ.spotline_run import SpotlineRun
from benchmarks.econ.traces import Preemption, Trace
from spotline.shared.domain.states import JobStatus
from tests.unit.test_econ import GANG, HIT_S, PARAMS

ORIGINAL = {f"sl-econ-a1-n{rank}" for rank in range(GANG.nodes)}


def elastic(trace: Trace, job: Job = GANG) -> tuple[SpotlineRun, Outcome]:
    run = SpotlineRun(job, trace, PARAMS, replace_one=True, min_nodes=job.nodes // 2)
    return run, run.run()


def test_the_survivors_train_on_at_their_size_and_the_gang_grows_back_from_a_save() -> None:
    """Node 2's notice at 900.6 s: node 0 saves 810 s of work (reported 10 s
    on); the three survivors restart from it and do 3/4 of the work a second
    until the replacement's boot is heard; they stop, node 0 saves again, and
    the four nodes restart from that save."""
    p = PARAMS
    run, outcome = elastic(Trace("node 2", (Preemption(HIT_S / 3600, 2),)))
    job = run.store.get_job("econ")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert job.attempt == 1 and job.resizes == 2 and outcome.finished
    assert set(run.compute.billing.born) == ORIGINAL | {"sl-econ-a1-n2-g1"}
    shrunk = HIT_S + p.checkpoint_s + p.deliver_s + p.restart_s
    inserted = HIT_S + p.step_s + p.deliver_s  # node 2's own report
    asked = inserted + p.boot_s + p.deliver_s  # the replacement's boot, handled
    saved = p.saved_on_notice(810 + (asked - shrunk) * 3 / 4)
    grown = asked + p.checkpoint_s + p.deliver_s + p.restart_s
    assert outcome.makespan_s == pytest.approx(grown + GANG.work_s - saved + p.deliver_s)
    assert outcome.kept_s == GANG.work_s


def test_a_survivor_lost_while_the_gang_is_smaller_shrinks_it_again() -> None:
    """Node 2, then node 1 while the three train without node 2's
    replacement: the two left (``min_nodes``) shrink again from the smaller
    gang's save, and the gang grows back once both replacements are up: one
    attempt, three changes of size, every second of work kept."""
    hits = ((HIT_S, 2), (HIT_S + 50, 1))
    run, outcome = elastic(Trace("two", tuple(Preemption(t / 3600, node) for t, node in hits)))
    job = run.store.get_job("econ")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert job.attempt == 1 and run.preemptions == 2 and job.resizes == 3
    assert set(run.compute.billing.born) == ORIGINAL | {"sl-econ-a1-n2-g1", "sl-econ-a1-n1-g3"}
    assert outcome.kept_s == GANG.work_s


def test_elastic_needs_replace_one() -> None:
    with pytest.raises(ValueError, match="min_nodes"):
        SpotlineRun(GANG, Trace("none", ()), PARAMS, min_nodes=2)

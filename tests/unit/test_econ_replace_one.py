"""A gang's lost node replaced through spotline's real handlers in the
economics simulator (``benchmarks/econ``): the stand-in agents stop at the
shared step, node 0 saves, and every node waits for the ``spotline-regroup``
metadata the functions write on the local cloud, then restarts from the save.
Exact timings of one loss, one insert per loss, the survivors kept, and the
a second loss while replacing replaced too."""

from __future__ import annotations

from itertools import pairwise

import pytest

from benchmarks.econ.model import Job, Outcome, Params
from benchmarks.econ.spotline_run import SpotlineRun
from benchmarks.econ.traces import Preemption, Trace
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.unit.test_econ import GANG, HIT_S, PARAMS

ORIGINAL = {f"sl-econ-a1-n{rank}" for rank in range(GANG.nodes)}


def replaced(trace: Trace, params: Params = PARAMS) -> tuple[SpotlineRun, Outcome]:
    run = SpotlineRun(GANG, trace, params, replace_one=True)
    return run, run.run()


def inserted(run: SpotlineRun) -> set[str]:
    return set(run.compute.billing.born)


def replacements_recorded(run: SpotlineRun) -> int:
    """The gang's waits for its replacements: its moves to REPLACING_NODE (a
    loss while it waits already is a line of the same wait)."""
    job = run.store.get_job("econ")
    assert job is not None
    waiting = [h.substatus == JobSubstatus.REPLACING_NODE for h in job.history]
    return sum(1 for before, now in pairwise([False, *waiting]) if now and not before)


def test_a_worker_lost_is_replaced_alone_and_the_gang_restarts_from_the_save() -> None:
    """Node 2's notice: its agent reports a step on, the functions insert one
    VM for rank 2 at once; it boots, reports, the functions regroup the gang
    (node 0's save came at HIT + 10 s), and every rank restarts from 810 s."""
    p = PARAMS
    run, outcome = replaced(Trace("node 2", (Preemption(HIT_S / 3600, 2),)))
    job = run.store.get_job("econ")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert job.attempt == 1 and outcome.preemptions == 1 and outcome.finished
    assert inserted(run) == ORIGINAL | {"sl-econ-a1-n2-g1"}  # one insert: the replacement
    assert set(job.nodes) == (ORIGINAL - {"sl-econ-a1-n2"}) | {"sl-econ-a1-n2-g1"}
    reported = HIT_S + p.step_s + p.deliver_s
    regrouped = reported + p.boot_s + p.deliver_s  # the replacement's boot, handled
    makespan = regrouped + p.restart_s + GANG.work_s - 810 + p.deliver_s
    assert outcome.makespan_s == pytest.approx(makespan)
    # The survivors bill throughout, the lost VM to its notice's end, the
    # replacement from its insert; every VM a delete after the end.
    end = makespan + p.delete_s
    survivors = (GANG.nodes - 1) * end
    assert outcome.vm_s == pytest.approx(survivors + HIT_S + p.notice_s + end - reported)


def test_node_0_lost_is_replaced_once_its_own_save_is_reported() -> None:
    p = PARAMS
    run, outcome = replaced(Trace("node 0", (Preemption(HIT_S / 3600, 0),)))
    job = run.store.get_job("econ")
    assert job is not None and job.status == JobStatus.COMPLETED and job.attempt == 1
    assert inserted(run) == ORIGINAL | {"sl-econ-a1-n0-g1"}
    reported = HIT_S + p.checkpoint_s + p.deliver_s  # its agent reports after the save
    makespan = reported + p.boot_s + p.deliver_s + p.restart_s + GANG.work_s - 810 + p.deliver_s
    assert outcome.makespan_s == pytest.approx(makespan)


def test_every_loss_is_one_insert_and_a_second_loss_while_replacing_is_replaced_too() -> None:
    """Node 2 and, 30 s later while its replacement boots, node 3: the
    functions replace that one too (at the gang's next generation) and the
    gang regroups once both are up, on its first attempt; a later loss is
    replaced again."""
    hits = ((HIT_S, 2), (HIT_S + 30, 3), (HIT_S + 1800, 1))
    trace = Trace("three", tuple(Preemption(t / 3600, node) for t, node in hits))
    run, _ = replaced(trace)
    job = run.store.get_job("econ")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert job.attempt == 1 and run.preemptions == job.preemptions == 3
    made = {"sl-econ-a1-n2-g1", "sl-econ-a1-n3-g2", "sl-econ-a1-n1-g3"}
    assert inserted(run) == ORIGINAL | made and run.replacements == 3
    assert replacements_recorded(run) == 2  # one wait for both, one for the later loss
    joined = [h.note for h in job.history if "joined" in h.note]
    assert joined[0].startswith("sl-econ-a1-n2-g1, sl-econ-a1-n3-g2 joined")


def test_a_gang_that_replaced_sixteen_nodes_still_hears_its_node_0() -> None:
    """Node 1 lost 16 times, 200 s apart; node 0 never: every loss is
    replaced within attempt 1, and the job completes there."""
    params = Params(max_hours=6.0)
    trace = Trace("node 1", tuple(Preemption((300 + 200 * k) / 3600, 1) for k in range(16)))
    run = SpotlineRun(Job("2 nodes", GANG.machine_id, 2.0, 2), trace, params, replace_one=True)
    run.run()
    job = run.store.get_job("econ")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert run.replacements == 16
    assert job.attempt == 1, [h.note for h in job.history if h.substatus == JobSubstatus.STALLED]


def test_a_node_lost_as_the_gang_boots_is_replaced_and_the_gang_starts_once_up() -> None:
    """Node 2 taken 30 s into the gang's 90 s boot (only the log sink can
    tell): the functions replace it with nothing to save; the gang regroups
    once it is up and trains from the start, on its first attempt."""
    run, outcome = replaced(Trace("node 2 booting", (Preemption(30 / 3600, 2),)))
    job = run.store.get_job("econ")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert job.attempt == 1 and outcome.preemptions == 1 and outcome.finished
    assert inserted(run) == ORIGINAL | {"sl-econ-a1-n2-g1"}
    assert replacements_recorded(run) == 1

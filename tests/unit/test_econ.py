"""The Spot economics simulator (``benchmarks/econ``): with no preemption
spotline costs the Spot price of its VM time and on-demand the on-demand
price; one preemption loses exactly what each strategy's rules say. The runs
go through the real handlers over the local cloud (VMs are records) and the
in-memory store, on a virtual clock: under a second each. Determinism per
seed and the real handlers against the model over a day of preemptions are
in ``tests/slow/test_econ_runs.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.econ import baselines, traces
from benchmarks.econ.model import Job, Outcome, Params
from benchmarks.econ.report import run_strategy
from benchmarks.econ.spotline_run import SpotlineRun
from benchmarks.econ.traces import Preemption, Trace

PARAMS = Params()
ONE_GPU = Job("1 GPU", "g2-standard-4", hours=1.0)
GANG = Job("4 nodes", "g2-standard-4", hours=1.0, nodes=4)
NONE = Trace("none", ())
# 900.6 s in: 810.6 s of training after the 90 s boot; the notice checkpoint
# keeps 810 s (the step in progress, 0.6 s, is lost).
HIT_S = 900.6
ONE = Trace("one", (Preemption(HIT_S / 3600, 0),))


def spotline(job: Job, trace: Trace, params: Params = PARAMS) -> Outcome:
    return SpotlineRun(job, trace, params).run()


@pytest.mark.parametrize("job", [ONE_GPU, GANG], ids=["one VM", "gang of 4"])
def test_with_no_preemption_each_pays_its_price_for_the_vm_time(job: Job) -> None:
    # The VMs run from the insert at submission: boot, the work, the finish
    # event's delivery, which ends the job and deletes them, and the delete.
    p = PARAMS
    vm_s = job.nodes * (p.boot_s + job.work_s + p.deliver_s + p.delete_s)
    spot = spotline(job, NONE)
    on_demand = SpotlineRun(job, NONE, PARAMS, on_demand=True).run()
    assert spot.cost_usd == pytest.approx(job.machine.spot_usd_per_hour * vm_s / 3600)
    assert on_demand.cost_usd == pytest.approx(job.machine.on_demand_usd_per_hour * vm_s / 3600)
    for run in (spot, on_demand):
        assert run.finished and run.preemptions == 0
        assert run.vm_s == pytest.approx(vm_s)
        assert run.makespan_s == pytest.approx(p.boot_s + job.work_s + p.deliver_s)
        assert run.lost_gpu_hours(job) == pytest.approx(
            job.gpus * (p.boot_s + p.deliver_s + p.delete_s) / 3600
        )


def one_preemption(strategy: str, job: Job, p: Params) -> tuple[float, float]:
    """(makespan, VM-seconds) of ``job`` with node 0 preempted at HIT_S, by
    each strategy's rules: the preempted VM bills to its notice's end, the
    gang's others until deleted; the replacement is inserted once they are
    gone (spotline's at the report, restoring once they are gone); every VM
    bills a delete after the end."""
    others = job.nodes - 1
    notice_end = HIT_S + p.notice_s
    if strategy == "SkyPilot-like poller":  # sees the VM gone; nothing saved yet
        gone = notice_end + p.detect_s + (p.delete_s if others else 0.0)
        others_end, relaunch, kept, finish = notice_end + p.detect_s + p.delete_s, gone, 0.0, 0.0
    else:
        kept = 810.0 if strategy == "spotline" else 0.0  # the notice's save, or none
        reported = HIT_S + (p.checkpoint_s if strategy == "spotline" else 0.0) + p.deliver_s
        others_end = reported + p.delete_s
        relaunch = max(notice_end, others_end if others else notice_end)
        finish = p.deliver_s
        if strategy == "spotline":  # inserted at the report; restores once they are gone
            makespan = max(reported + p.boot_s, relaunch) + job.work_s - kept + finish
            vm_s = notice_end + others * others_end + job.nodes * (makespan - reported + p.delete_s)
            return makespan, vm_s
    makespan = relaunch + p.boot_s + job.work_s - kept + finish
    vm_s = notice_end + others * others_end + job.nodes * (makespan - relaunch + p.delete_s)
    return makespan, vm_s


@pytest.mark.parametrize("job", [ONE_GPU, GANG], ids=["one VM", "gang of 4"])
@pytest.mark.parametrize("strategy", ["spotline", "scratch on Spot", "SkyPilot-like poller"])
def test_one_preemption_of_node_0_costs_what_each_strategy_says(job: Job, strategy: str) -> None:
    makespan, vm_s = one_preemption(strategy, job, PARAMS)
    run = run_strategy(strategy, job, ONE, PARAMS)
    assert run.finished and run.preemptions == 1
    assert run.makespan_s == pytest.approx(makespan)
    assert run.vm_s == pytest.approx(vm_s)
    assert run.cost_usd == pytest.approx(job.machine.spot_usd_per_hour * vm_s / 3600)


def test_a_notice_on_another_node_of_a_gang_is_saved_by_rank_0() -> None:
    """Node 2's notice stops the gang at the step's end (its ranks tell the
    others in the step's collective): its agent reports a step on, with no
    step saved; rank 0 saves that step on node 0, whose agent reports the
    gang's stop; the gang resumes at 810 s of the 810.6 s trained."""
    p = PARAMS
    trace = Trace("node 2", (Preemption(HIT_S / 3600, 2),))
    relaunch = HIT_S + p.step_s + p.deliver_s  # inserted at the report, the deletes not waited for
    makespan = relaunch + p.boot_s + GANG.work_s - 810 + p.deliver_s
    for run in (spotline(GANG, trace, p), baselines.run(baselines.SPOTLINE_MODEL, GANG, trace, p)):
        assert run.finished and run.preemptions == 1
        assert run.makespan_s == pytest.approx(makespan)
    real = spotline(GANG, trace, p)
    assert real.breakdown is not None
    assert real.breakdown.lost_work_s == pytest.approx(0.6)  # the step in progress
    assert real.breakdown.detection_s == pytest.approx(p.step_s + p.deliver_s)


def test_the_breakdown_adds_up_to_the_makespan_past_on_demand() -> None:
    run = spotline(GANG, ONE)
    on_demand = SpotlineRun(GANG, NONE, PARAMS, on_demand=True).run()
    parts = run.breakdown
    assert parts is not None and parts.stops == 1
    assert parts.detection_s == pytest.approx(PARAMS.checkpoint_s + PARAMS.deliver_s)
    assert parts.teardown_s == pytest.approx(0.0)  # inserted first: the deletes not waited for
    assert parts.placement_s == pytest.approx(0.0)  # placed at once
    assert parts.boot_s == pytest.approx(PARAMS.boot_s)
    assert parts.lost_work_s == pytest.approx(0.6)  # the step in progress
    assert parts.total_s == pytest.approx(run.makespan_s - on_demand.makespan_s)


def test_the_poller_resumes_from_its_last_periodic_checkpoint() -> None:
    params = Params(period_s=600.0)  # one checkpoint at 600 s of the 810.6 s trained
    run = baselines.run(baselines.SKYPILOT_LIKE, ONE_GPU, ONE, params)
    assert run.vm_s == pytest.approx(
        (HIT_S + params.notice_s) + (params.boot_s + ONE_GPU.work_s - 600 + params.delete_s)
    )


def test_a_preemption_while_booting_is_reported_by_the_log_sink_and_loses_the_boot() -> None:
    trace = Trace("booting", (Preemption(30 / 3600, 0),))
    run = spotline(ONE_GPU, trace)
    p = PARAMS
    # 30 s of boot, billed to the notice's end (Compute Engine takes it: the
    # log sink's report keeps it through its notice); replaced at the log
    # entry's delivery: a whole run, its finish and its delete.
    expected = (30 + p.notice_s) + p.boot_s + ONE_GPU.work_s + p.deliver_s + p.delete_s
    assert run.preemptions == 1 and run.finished
    assert run.vm_s == pytest.approx(expected)
    assert run.makespan_s == pytest.approx(30 + p.deliver_s + p.boot_s + ONE_GPU.work_s + 0.43)


def test_a_run_that_cannot_finish_is_cut_off() -> None:
    params = Params(max_hours=2.0)
    trace = traces.poisson(6.0, 1, 24, seed=1)
    run = baselines.run(baselines.SCRATCH, ONE_GPU, trace, params)
    assert not run.finished and run.makespan_s == 2 * 3600
    assert run.kept_s < ONE_GPU.work_s


def test_the_example_trace_file_loads() -> None:
    path = Path(__file__).parents[2] / "benchmarks/econ/traces/example.jsonl"
    trace = traces.load(path)
    assert trace.preemptions[:2] == (Preemption(1.5, 0), Preemption(3.25, 2))
    assert [p.node for p in trace.for_nodes(1)] == [0, 0, 0]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{", "not JSON"),
        ('{"t_h": -1}', "t_h must be a number of hours >= 0"),
        ('{"t_h": 1, "node": "a"}', "node must be a rank >= 0"),
        ('{"at": 1}', 'expected {"t_h": HOURS, "node": RANK}'),
    ],
)
def test_a_bad_trace_line_is_named(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"t_h": 1}\n' + line + "\n")
    with pytest.raises(ValueError, match=rf"bad.jsonl:2: .*{problem[:12]}"):
        traces.load(path)


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ValueError, match="does not fit in the notice"):
        Params(checkpoint_s=45.0)
    with pytest.raises(ValueError, match="not in the catalog"):
        Job("x", "no-such-machine", 1.0)

"""The Spot economics simulator (``benchmarks/econ``): deterministic per seed;
with no preemption spotline costs the Spot price of its VM time and on-demand
the on-demand price; one preemption loses exactly what each strategy's rules
say; and spotline's real handlers take no longer to recover than its model
says. The runs go through the real handlers over the local cloud (VMs are
records) and the in-memory store, on a virtual clock: a few seconds each."""

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


def test_the_same_seed_gives_the_same_run_and_another_seed_another() -> None:
    job = Job("short", "g2-standard-4", hours=0.5)
    first = traces.poisson(4.0, 1, 24, seed=7)
    assert first == traces.poisson(4.0, 1, 24, seed=7)
    assert first != traces.poisson(4.0, 1, 24, seed=8)
    assert spotline(job, first) == spotline(job, traces.poisson(4.0, 1, 24, seed=7))


@pytest.mark.parametrize("job", [ONE_GPU, GANG], ids=["one VM", "gang of 4"])
def test_with_no_preemption_each_pays_its_price_for_the_vm_time(job: Job) -> None:
    # The VMs run from the insert at submission: boot, the work, and the
    # finish event's delivery, which deletes them.
    vm_s = job.nodes * (PARAMS.boot_s + job.work_s + PARAMS.deliver_s)
    spot = spotline(job, NONE)
    on_demand = SpotlineRun(job, NONE, PARAMS, on_demand=True).run()
    assert spot.cost_usd == round(job.machine.spot_usd_per_hour * vm_s / 3600, 6)
    assert on_demand.cost_usd == round(job.machine.on_demand_usd_per_hour * vm_s / 3600, 6)
    for run in (spot, on_demand):
        assert run.finished and run.preemptions == 0
        assert run.makespan_s == pytest.approx(PARAMS.boot_s + job.work_s + PARAMS.deliver_s)
        assert run.lost_gpu_hours(job) == pytest.approx(
            job.gpus * (PARAMS.boot_s + PARAMS.deliver_s) / 3600
        )


@pytest.mark.parametrize("job", [ONE_GPU, GANG], ids=["one VM", "gang of 4"])
def test_one_preemption_loses_what_each_strategy_says(job: Job) -> None:
    p = PARAMS
    boot, deliver = p.boot_s, p.deliver_s
    # Per VM: the time billed that the result does not contain.
    lost_s = {
        # Booted twice; the checkpoint on the notice; the report's and the
        # finish's deliveries; the 0.6 s of the step in progress.
        "spotline": 2 * boot + p.checkpoint_s + 2 * deliver + 0.6,
        # Everything before the preemption, redone.
        "scratch on Spot": HIT_S + deliver + boot + deliver,
        # Its VM runs to the notice's end; the 810.6 s trained were never
        # checkpointed (the first periodic one is at 1800 s); detection adds
        # no VM time (the VM is gone) but makespan.
        "SkyPilot-like poller": HIT_S + p.notice_s + boot,
    }
    makespan_extra = {**lost_s, "SkyPilot-like poller": lost_s["SkyPilot-like poller"] + p.detect_s}
    for strategy, lost in lost_s.items():
        run = run_strategy(strategy, job, ONE, p)
        assert run.finished and run.preemptions == 1, strategy
        assert run.vm_s == pytest.approx(job.nodes * (job.work_s + lost)), strategy
        assert run.lost_gpu_hours(job) == pytest.approx(job.gpus * lost / 3600), strategy
        assert run.makespan_s == pytest.approx(job.work_s + makespan_extra[strategy]), strategy
        spot = job.machine.spot_usd_per_hour
        assert run.cost_usd == pytest.approx(spot * run.vm_s / 3600, abs=1e-5), strategy


def test_the_poller_resumes_from_its_last_periodic_checkpoint() -> None:
    params = Params(period_s=600.0)  # one checkpoint at 600 s of the 810.6 s trained
    run = baselines.run(baselines.SKYPILOT_LIKE, ONE_GPU, ONE, params)
    assert run.vm_s == pytest.approx(
        (HIT_S + params.notice_s) + (params.boot_s + ONE_GPU.work_s - 600)
    )


def test_a_preemption_while_booting_is_reported_by_the_log_sink_and_loses_the_boot() -> None:
    trace = Trace("booting", (Preemption(30 / 3600, 0),))
    run = spotline(ONE_GPU, trace)
    # 30 s of boot, the log entry's delivery, then a whole run.
    expected = 30 + PARAMS.deliver_s + PARAMS.boot_s + ONE_GPU.work_s + PARAMS.deliver_s
    assert run.preemptions == 1 and run.finished
    assert run.vm_s == pytest.approx(expected)


@pytest.mark.parametrize("job", [Job("short", "n1-standard-8-t4", 1.0), GANG], ids=["1", "4"])
def test_spotline_real_code_recovers_as_fast_as_its_model(job: Job) -> None:
    """Many preemptions, some while booting: the handlers add no delay to
    the relaunch (nor drop one) that the model does not have."""
    trace = traces.poisson(3.0, job.nodes, 24, seed=3)
    real = spotline(job, trace)
    model = baselines.run(baselines.SPOTLINE_MODEL, job, trace, PARAMS)
    assert real.preemptions == model.preemptions >= 3
    assert real.vm_s == pytest.approx(model.vm_s)
    assert real.makespan_s == pytest.approx(model.makespan_s)
    assert real.cost_usd == pytest.approx(model.cost_usd, abs=1e-4)


def test_a_run_that_cannot_finish_is_cut_off() -> None:
    params = Params(max_hours=2.0)
    trace = traces.poisson(6.0, 1, 24, seed=1)
    run = baselines.run(baselines.SCRATCH, ONE_GPU, trace, params)
    assert not run.finished and run.makespan_s == 2 * 3600
    assert run.kept_s < ONE_GPU.work_s


def test_the_example_trace_file_loads() -> None:
    path = Path(__file__).parent.parent / "benchmarks/econ/traces/example.jsonl"
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

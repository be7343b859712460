"""Two recovery policies tried in the economics model
(``benchmarks/econ/gang_variants``): a warm spare for replace-one, and an
elastic gang that grows back only when it pays. Exact timings of a loss
with fixed boot times, and the overhead by cause adding up to the
makespan past on demand."""

from __future__ import annotations

import pytest

from benchmarks.econ import gang_model, gang_variants, traces
from benchmarks.econ.gang_model import Latencies
from benchmarks.econ.model import Job
from benchmarks.econ.traces import Preemption, Trace

FIXED = Latencies(boot_sigma=0.0)  # every boot the median
GANG = Job("2 nodes", "g2-standard-4", hours=1.0, nodes=2)
UP_S = FIXED.insert_s + FIXED.boot_median_s  # every VM can train 85 s after its insert
HIT_S = 1000.4  # node 1 taken 915.4 s into training
SAVED_S = 915.0  # the notice's save keeps whole steps


def at(*hits: tuple[float, int]) -> Trace:
    return Trace("fixed", tuple(Preemption(t / 3600, node) for t, node in hits))


def test_a_warm_spare_takes_the_lost_rank_once_the_lost_vm_is_gone() -> None:
    f = FIXED
    run, spent = gang_variants.warm_spare(GANG, at((HIT_S, 1)), f, seed=1)
    reported = HIT_S + f.step_s + f.deliver_s  # node 1 stopped its ranks and reported
    gone = HIT_S + f.notice_s  # the restore gate: the save on the notice is complete
    resumed = gone + f.restart_s  # the spare was up long before
    done = resumed + GANG.work_s - SAVED_S + f.deliver_s
    assert run.makespan_s == pytest.approx(done) and run.finished
    # Node 0 and the spare bill throughout; the lost VM until the notice's
    # end, and the new spare from its insert at the report.
    assert run.vm_s == pytest.approx(2 * (done + f.delete_s) + gone + done + f.delete_s - reported)
    assert spent.heard_s == pytest.approx(f.step_s + f.deliver_s)
    assert spent.gate_s == pytest.approx(gone - reported)
    assert spent.restart_s == f.restart_s and spent.boot_s == pytest.approx(0.0)
    base = gang_model.on_demand(GANG, f, seed=1)
    assert spent.total_s == pytest.approx(run.makespan_s - base.makespan_s)


def test_the_idle_spare_lost_is_replaced_and_the_gang_does_not_stop() -> None:
    f = FIXED
    run, spent = gang_variants.warm_spare(GANG, at((HIT_S, 2)), f, seed=1)
    base = gang_model.on_demand(GANG, f, seed=1)
    assert run.makespan_s == pytest.approx(base.makespan_s) and spent.total_s == 0
    done = base.makespan_s
    spare = HIT_S + f.notice_s + done + f.delete_s - (HIT_S + f.deliver_s)
    assert run.vm_s == pytest.approx(2 * (done + f.delete_s) + spare)
    assert run.preemptions == 1


def test_a_loss_while_the_next_spare_boots_waits_for_its_boot() -> None:
    f = FIXED
    second = HIT_S + 55.0  # node 0, 5 s after the gang resumed; the new spare still boots
    run, spent = gang_variants.warm_spare(GANG, at((HIT_S, 1), (second, 0)), f, seed=1)
    first_reported = HIT_S + f.step_s + f.deliver_s
    resumed = HIT_S + f.notice_s + f.restart_s
    assert resumed < second < first_reported + UP_S
    booted = first_reported + UP_S + f.deliver_s  # its boot reported
    again = booted + f.restart_s
    trained = second - resumed
    done = again + GANG.work_s - SAVED_S - trained + f.deliver_s
    assert run.makespan_s == pytest.approx(done) and run.preemptions == 2
    assert spent.boot_s == pytest.approx(booted - (second + f.notice_s))
    base = gang_model.on_demand(GANG, f, seed=1)
    assert spent.total_s == pytest.approx(run.makespan_s - base.makespan_s)


def test_a_trace_with_one_more_node_gives_the_gang_the_same_preemptions() -> None:
    lat = Latencies()
    job = Job("4 nodes", "g2-standard-4", hours=6.0, nodes=4)
    for seed in (1, 2, 3):
        gang = traces.poisson(1.0, 4, lat.max_hours, seed)
        spared = traces.poisson(1.0, 5, lat.max_hours, seed)
        assert spared.for_nodes(4) == gang.for_nodes(4)
        assert len(spared.for_nodes(5)) > len(gang.for_nodes(4))
        strategy = gang_model.REPLACE_ONE
        assert gang_model.run(strategy, job, spared, lat, seed) == gang_model.run(
            strategy, job, gang, lat, seed
        )


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_the_variants_overhead_by_cause_adds_up_to_the_makespan_past_on_demand(
    nodes: int,
) -> None:
    job = Job(f"{nodes} nodes", "g2-standard-4", hours=6.0, nodes=nodes)
    lat = Latencies()
    for seed in (1, 2, 3):
        trace = traces.poisson(2.0, nodes + 1, lat.max_hours, seed)
        base = gang_model.on_demand(job, lat, seed)
        for run, spent in (
            gang_variants.warm_spare(job, trace, lat, seed),
            gang_variants.growing_when_it_pays(job, trace, lat, seed, 2.0),
        ):
            assert run.finished and run.preemptions > 0
            assert spent.total_s == pytest.approx(run.makespan_s - base.makespan_s), run.strategy
            causes = {name: value for name, value in vars(spent).items() if name != "overlap_s"}
            assert min(causes.values()) >= -1e-6, (run.strategy, spent)


def test_a_grow_pays_when_the_time_it_saves_exceeds_a_change_of_size() -> None:
    lat = Latencies()
    change_s = lat.checkpoint_s + lat.deliver_s + lat.restart_s  # 32 s
    grows = gang_variants.grow_when_it_pays(lat, 1.0, nodes=4)
    # From 2 to 4 nodes: w of work takes 2w at 2 nodes, w at 4; the next
    # loss is expected in 900 s.
    assert grows(10_000.0, 2, 4)
    assert not grows(change_s - 1, 2, 4) and grows(change_s + 1, 2, 4)
    # From 3 to 4 nodes the bigger gang saves a third of the work: 96 s of it pays.
    assert not grows(3 * change_s - 1, 3, 4) and grows(3 * change_s + 1, 3, 4)
    # Losses so frequent that the next is expected before a grow pays for itself.
    assert not gang_variants.grow_when_it_pays(lat, 120.0, nodes=4)(10_000.0, 3, 4)


def test_a_gang_that_never_grows_trains_on_smaller_to_the_end() -> None:
    f = FIXED
    run, spent = gang_model.elastic("never", GANG, at((HIT_S, 1)), f, 1, lambda *_: False)
    restarted = HIT_S + f.checkpoint_s + f.deliver_s + f.restart_s  # after rank 0's save
    done = restarted + 2 * (GANG.work_s - SAVED_S) + f.deliver_s  # at half the speed
    assert run.makespan_s == pytest.approx(done)
    base = gang_model.on_demand(GANG, f, seed=1)
    assert spent.total_s == pytest.approx(run.makespan_s - base.makespan_s)
    always = gang_model.elastic("always", GANG, at((HIT_S, 1)), f, 1, lambda *_: True)[0]
    default = gang_model.run(gang_model.ELASTIC, GANG, at((HIT_S, 1)), f, seed=1)
    assert (always.makespan_s, always.vm_s) == (default.makespan_s, default.vm_s)


def test_the_declined_replacement_joins_at_the_next_change_of_size() -> None:
    f = FIXED
    job = Job("4 nodes", "g2-standard-4", hours=1.0, nodes=4)
    trace = at((HIT_S, 3), (HIT_S + 600.0, 1))
    never = gang_model.elastic("never", job, trace, f, 1, lambda *_: False)[0]
    # Without it, the second loss would leave 2 of 4 nodes to the end.
    first = HIT_S + f.checkpoint_s + f.deliver_s + f.restart_s
    second = HIT_S + 600.0 + f.checkpoint_s + f.deliver_s + f.restart_s
    at_three = SAVED_S + (HIT_S + 600.0 - first) * 3 / 4
    work_left = job.work_s - at_three
    assert never.makespan_s == pytest.approx(second + work_left * 4 / 3 + f.deliver_s, abs=1.0)

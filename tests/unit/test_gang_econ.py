"""The multi-node economics model (``benchmarks/econ/gang_model``): exact
timings of one preemption with fixed boot times, the same seed giving
the same run, the strategies' labels, and the benchmark's cells named when wrong."""

from __future__ import annotations

import pytest

from benchmarks import bench_gang_econ
from benchmarks.econ import gang_model, traces
from benchmarks.econ.gang_model import Latencies
from benchmarks.econ.model import Job
from benchmarks.econ.traces import Preemption, Trace

FIXED = Latencies(boot_sigma=0.0)  # every boot the median
GANG = Job("2 nodes", "g2-standard-4", hours=1.0, nodes=2)
NONE = Trace("none", ())
HIT_S = 1000.4  # node 1 taken 915.4 s into training (after 10 s insert + 75 s boot)
ONE = Trace("one", (Preemption(HIT_S / 3600, 1),))


def test_with_no_preemption_spot_pays_its_price_for_the_on_demand_vm_time() -> None:
    base = gang_model.on_demand(GANG, FIXED, seed=1)
    for strategy in (gang_model.RELAUNCH, gang_model.REPLACE_ONE, gang_model.ELASTIC):
        run = gang_model.run(strategy, GANG, NONE, FIXED, seed=1)
        assert run.vm_s == pytest.approx(base.vm_s)
        assert run.makespan_s == pytest.approx(base.makespan_s)
        machine = GANG.machine
        assert run.cost_usd / base.cost_usd == pytest.approx(
            machine.spot_usd_per_hour / machine.on_demand_usd_per_hour
        )


def test_a_relaunch_inserts_at_the_report_and_restores_once_the_old_nodes_are_gone() -> None:
    f = FIXED
    start = f.insert_s + f.boot_median_s
    saved = 915.0  # the notice's save keeps whole steps
    reported = HIT_S + f.step_s + f.deliver_s  # node 1's agent reports once its ranks stopped
    gone = max(HIT_S + f.notice_s, reported + f.delete_s)
    rest = GANG.work_s - saved
    now = gang_model.run(gang_model.RELAUNCH, GANG, ONE, f, seed=1)
    assert start < HIT_S
    assert now.makespan_s == pytest.approx(
        max(reported + f.insert_s + f.boot_median_s, gone) + rest + f.deliver_s
    )
    before = gang_model.run(gang_model.RELAUNCH_WAITING, GANG, ONE, f, seed=1)
    assert before.makespan_s == pytest.approx(
        gone + f.insert_s + f.boot_median_s + rest + f.deliver_s
    )
    # The same VM time either way (the old nodes bill until they are gone,
    # the new ones from their insert): the overlap costs nothing, and ends sooner.
    assert now.vm_s == pytest.approx(before.vm_s)
    assert before.makespan_s - now.makespan_s == pytest.approx(gone - reported)


def test_replace_one_keeps_the_survivor_and_restarts_every_rank_from_the_save() -> None:
    f = FIXED
    reported = HIT_S + f.step_s + f.deliver_s
    up = reported + f.insert_s + f.boot_median_s
    run = gang_model.run(gang_model.REPLACE_ONE, GANG, ONE, f, seed=1)
    regrouped = up + f.deliver_s  # its boot reported
    assert run.makespan_s == pytest.approx(
        regrouped + f.restart_s + GANG.work_s - 915.0 + f.deliver_s
    )
    survivor = run.makespan_s + f.delete_s  # node 0 billed throughout
    lost = HIT_S + f.notice_s + (run.makespan_s + f.delete_s - reported)
    assert run.vm_s == pytest.approx(survivor + lost)


def test_elastic_trains_on_at_half_size_and_grows_back() -> None:
    f = FIXED
    reported = HIT_S + f.step_s + f.deliver_s
    asked = reported + f.insert_s + f.boot_median_s + f.deliver_s  # its boot reported
    restarted = HIT_S + f.checkpoint_s + f.deliver_s + f.restart_s  # after rank 0's save
    at_half = (asked - restarted) / 2
    grown = asked + f.checkpoint_s + f.deliver_s + f.restart_s
    run = gang_model.run(gang_model.ELASTIC, GANG, ONE, f, seed=1)
    assert run.makespan_s == pytest.approx(grown + GANG.work_s - 915.0 - at_half + f.deliver_s)


def test_the_same_seed_gives_the_same_runs() -> None:
    trace = traces.poisson(1.0, 4, 168, seed=3)
    job = Job("4 nodes", "n1-standard-8-t4", hours=4.0, nodes=4)
    for strategy in gang_model.STRATEGIES:
        first = gang_model.run(strategy, job, trace, Latencies(), seed=3)
        assert first == gang_model.run(strategy, job, trace, Latencies(), seed=3)
        assert first.finished


def test_an_unknown_strategy_is_named() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'spare'"):
        gang_model.run("spare", GANG, NONE, FIXED, seed=1)


def test_the_strategies_are_labelled_as_the_tables_name_them() -> None:
    assert gang_model.REPLACE_ONE == "replace-one"
    assert gang_model.ELASTIC == "elastic (min_nodes n/2)"


@pytest.mark.parametrize(
    ("cells", "problem"),
    [
        ("A100:4:1", "is not GPU:NODES:RATE with GPU one of T4, L4"),
        ("L4:four:1", "NODES is a whole number, RATE a number"),
        ("L4:1:1", "a gang has NODES >= 2"),
    ],
)
def test_a_bad_handler_cell_is_named(
    cells: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_gang_econ.main(["--nodes", "2", "--rates", "1", "--seeds", "1", "--handlers", cells])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--handlers: '{cells}'" in err and problem in err


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_the_overhead_by_cause_adds_up_to_the_makespan_past_on_demand(nodes: int) -> None:
    job = Job(f"{nodes} nodes", "g2-standard-4", hours=6.0, nodes=nodes)
    for seed in (1, 2, 3):
        trace = traces.poisson(2.0, nodes, 168, seed)
        base = gang_model.on_demand(job, Latencies(), seed)
        for strategy in gang_model.STRATEGIES:
            run, spent = gang_model.explained(strategy, job, trace, Latencies(), seed)
            if not run.finished:  # (the 30 min poller's 8-node gang never finishes)
                continue
            assert run.preemptions > 0
            assert spent.total_s == pytest.approx(run.makespan_s - base.makespan_s), strategy
            # (a further loss may shorten the wait: a new replacement's faster boot)
            causes = {name: value for name, value in vars(spent).items() if name != "overlap_s"}
            assert min(causes.values()) >= -1e-6, (strategy, spent)


def test_one_loss_is_charged_to_its_causes() -> None:
    """Replace-one: the report, the replacement's insert and boot, the
    restart, the step in progress; elastic: its two changes of size and the
    work the smaller gang did not do."""
    f = FIXED
    _, spent = gang_model.explained(gang_model.REPLACE_ONE, GANG, ONE, f, seed=1)
    assert spent.heard_s == pytest.approx(f.step_s + 2 * f.deliver_s)
    assert spent.boot_s == pytest.approx(f.insert_s + f.boot_median_s)
    assert spent.restart_s == f.restart_s and spent.lost_s == pytest.approx(0.4)
    assert spent.gate_s == spent.resize_s == spent.smaller_s == 0
    _, spent = gang_model.explained(gang_model.ELASTIC, GANG, ONE, f, seed=1)
    assert spent.resize_s == pytest.approx(2 * (f.checkpoint_s + f.deliver_s + f.restart_s))
    asked = HIT_S + f.step_s + 2 * f.deliver_s + f.insert_s + f.boot_median_s
    shrunk = HIT_S + f.checkpoint_s + f.deliver_s + f.restart_s
    assert spent.smaller_s == pytest.approx((asked - shrunk) / 2)
    assert spent.boot_s == spent.heard_s == 0


def test_an_unknown_handler_strategy_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_gang_econ.main(["--nodes", "2", "--rates", "1", "--handler-strategies", "spare"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--handler-strategies: unknown spare" in err and gang_model.ELASTIC in err

"""Regional quotas end to end on the local stack: placement moves past a machine
the quotas refuse, and `spotline machines` shows the capacity they leave."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.cli.commands import main as cli
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from tests.conftest import SPEC

pytestmark = pytest.mark.emulators


def capacities(shown: str) -> dict[str, str]:
    """MACHINE_ID -> CAPACITY of the machines table (GPUS is one word, "-" or "1xnvidia-l4"),
    after any log lines; the line under it says how old the prices are."""
    lines = shown.splitlines()
    header = next(n for n, line in enumerate(lines) if line.startswith("MACHINE_ID"))
    assert lines[header].split()[:5] == ["MACHINE_ID", "GPUS", "VCPUS", "USD_PER_HOUR", "CAPACITY"]
    rows = [line for line in lines[header + 1 :] if not line.startswith("prices of ")]
    return {line.split()[0]: line.split()[4] for line in rows}


def test_a_machine_over_quota_is_passed_over_for_the_next(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    # No L4 quota at all: a Spot g2-standard-4 is refused in every zone.
    host.quota_limits.update({"NVIDIA_L4_GPUS": 0, "PREEMPTIBLE_NVIDIA_L4_GPUS": 0})

    # g2-standard-4, then n1-standard-8-t4.od at once: wait_request_s 0 asks
    # for every option in one pass (by default the first is asked for that
    # long before the next: tests/unit/test_option_waiting.py).
    call("submit_job", "submit", {**SPEC, "wait_request_s": 0})

    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.machine_id == "n1-standard-8-t4.od"
    assert [vm["machine_type"] for vm in host.list()] == ["n1-standard-8"]


def test_machines_shows_the_capacity_the_quotas_leave(
    call: Callable[..., Any], host: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    # Three L4s and no preemptible L4 quota: Spot L4 VMs take standard quota.
    host.quota_limits.update({"NVIDIA_L4_GPUS": 3, "PREEMPTIBLE_NVIDIA_L4_GPUS": 0})
    call("submit_job", "submit", SPEC)  # one Spot g2-standard-4: 1 L4, 4 preemptible vCPUs

    assert cli(["machines"]) == 0

    shown = capacities(capsys.readouterr().out)
    assert (shown["g2-standard-4"], shown["g2-standard-4.od"]) == ("2", "2")
    assert shown["g2-standard-48"] == "0"  # 4 L4s a VM
    assert (shown["e2-standard-4"], shown["e2-standard-4.od"]) == ("95", "96")  # 384 vCPUs
    assert shown["n1-standard-16-t4x4"] == "4"  # 16 preemptible T4s


def test_machines_without_readable_quotas_shows_why(
    host: LocalCloud,
    project: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPOTLINE_COMPUTE_ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    deps.reset()

    assert cli(["machines"]) == 0

    out, err = capsys.readouterr()
    assert set(capacities(out).values()) == {"?"}
    assert out.splitlines()[-1].startswith("prices of us-central1 as of 2025-06-01 (source: ")
    assert err.startswith("CAPACITY unknown: cannot read the quotas of us-central1: ")
    assert err.count("\n") == 1


def test_machines_counts_the_projects_global_gpu_quota(
    host: LocalCloud, project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new project: regional GPU quotas granted, GPUS_ALL_REGIONS still 0."""
    host.quota_limits.update({"GPUS_ALL_REGIONS": 0})

    assert cli(["machines"]) == 0

    shown = capacities(capsys.readouterr().out)
    assert shown["g2-standard-4"] == shown["n1-standard-8-t4.od"] == "0"
    assert shown["e2-standard-4"] == "96"

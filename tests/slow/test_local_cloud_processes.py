"""The local cloud with the process launcher: each VM a process (a tiny agent
stand-in) with its metadata server, driven through GceCompute on Compute
Engine's REST routes and through the local chaos routes."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotline.infra.localcloud.chaos_client import ChaosClient, ChaosError
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import ProcessLauncher
from spotline.infra.localcloud.model import CapacityRule
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.domain.errors import CapacityError, PermanentError
from spotline.shared.domain.vms import (
    JOB_METADATA_KEY,
    Accelerator,
    GangRequest,
    Provisioning,
    Quota,
    VmRequest,
    VmState,
)
from tests.agent_stand_in import (
    AGENT,
    alive,
    metadata_get,
    proc_stat,
    processes_mentioning,
    read_events,
    wait_event,
    wait_for,
    zombie_children,
)

ZONE = "us-central1-a"


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return path


@pytest.fixture
def out(tmp_path: Path) -> Path:
    path = tmp_path / "out"
    path.mkdir()
    return path


@pytest.fixture
def host(tmp_path: Path, agent: Path, out: Path) -> Iterator[LocalCloud]:
    launcher = ProcessLauncher(
        tmp_path / "host", [sys.executable, str(agent)], {"AGENT_OUT": str(out)}
    )
    cloud = LocalCloud(
        "demo-project",
        launcher,
        capacity_errors={
            ("a2-highgpu-1g", ZONE): "ZONE_RESOURCE_POOL_EXHAUSTED",
            "europe-west4-b": CapacityRule("QUOTA_EXCEEDED", status=403),
        },
    )
    cloud.start()
    try:
        yield cloud
    finally:
        cloud.close()
    assert processes_mentioning(str(agent)) == []
    assert zombie_children() == []


@pytest.fixture
def compute(host: LocalCloud) -> GceCompute:
    return GceCompute("demo-project", api_endpoint=host.endpoint, read_retry_s=1.0)


@pytest.fixture
def chaos(host: LocalCloud) -> ChaosClient:
    return ChaosClient(host.endpoint, "demo-project")


def _request(name: str, mode: str = "watch", zone: str = ZONE, **labels: str) -> VmRequest:
    return VmRequest(
        name=name,
        zone=zone,
        machine_type="n1-standard-4",
        provisioning=Provisioning.SPOT,
        request_id=str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
        image="projects/demo/global/images/family/spotline",
        labels={"spotline": "1", **labels},
        metadata={JOB_METADATA_KEY: json.dumps({"job_id": name}), "agent-mode": mode},
    )


def _state(compute: GceCompute, name: str) -> VmState | None:
    vm = compute.get(ZONE, name)
    return None if vm is None else vm.state


def _metadata_host(host: LocalCloud, name: str) -> str:
    vm = host.get(name)
    assert vm is not None
    return str(vm["metadata_host"])


def test_insert_starts_an_agent_that_sees_its_name_and_job(
    compute: GceCompute, out: Path, tmp_path: Path
) -> None:
    started = time.time()
    vm = compute.insert(_request("job-1-a0"))
    event = wait_event(out, "job-1-a0", "started")

    assert vm.name == "job-1-a0" and vm.zone == ZONE and vm.state == VmState.RUNNING
    assert vm.id.isdigit() and vm.machine_type == "n1-standard-4"
    assert event["name"] == "job-1-a0"
    assert json.loads(event["job"]) == {"job_id": "job-1-a0"}
    assert event["t"] - started < 5.0
    assert (tmp_path / "host" / "vms" / "job-1-a0.log").exists()


def test_insert_twice_starts_one_process(compute: GceCompute, agent: Path, out: Path) -> None:
    first = compute.insert(_request("job-2-a0"))
    second = compute.insert(_request("job-2-a0"))
    wait_event(out, "job-2-a0", "watching")

    assert first.id == second.id
    assert len(processes_mentioning(str(agent))) == 1


def test_list_by_labels(compute: GceCompute) -> None:
    compute.insert(_request("job-3-a0", job="a"))
    compute.insert(_request("job-3-b0", job="b"))

    assert [vm.name for vm in compute.list({"job": "a"})] == ["job-3-a0"]
    assert sorted(vm.name for vm in compute.list({"spotline": "1"})) == ["job-3-a0", "job-3-b0"]
    assert compute.list({"job": "c"}) == []
    assert len(compute.list({})) == 2


def test_delete_kills_the_process_group_and_is_idempotent(compute: GceCompute, out: Path) -> None:
    compute.insert(_request("job-4-a0", mode="spawn"))
    started = wait_event(out, "job-4-a0", "started")
    assert alive(started["pid"]) and alive(started["child"])

    compute.delete(ZONE, "job-4-a0")

    assert compute.get(ZONE, "job-4-a0") is None
    assert not alive(started["pid"])
    wait_for(lambda: not alive(started["child"]), timeout_s=2.0)
    assert [e["event"] for e in read_events(out, "job-4-a0")][-1] == "sigterm"
    compute.delete(ZONE, "job-4-a0")


def test_a_stopped_vm_keeps_its_identity_and_boots_with_new_metadata(
    compute: GceCompute, out: Path
) -> None:
    first = compute.insert(_request("job-9-a0"))
    started = wait_event(out, "job-9-a0", "started")

    assert compute.stop(ZONE, "job-9-a0") is True
    stopped = compute.get(ZONE, "job-9-a0")
    assert stopped is not None and stopped.state == VmState.TERMINATED
    assert not alive(started["pid"])
    assert compute.stop(ZONE, "job-9-a0") is True  # stopping a stopped VM
    compute.set_metadata(ZONE, "job-9-a0", {"spotline-job": '{"job_id": "job-10"}'})
    compute.start(ZONE, "job-9-a0")
    compute.start(ZONE, "job-9-a0")  # starting a running VM

    booted = wait_for(
        lambda: next(
            (e for e in read_events(out, "job-9-a0") if e["event"] == "started" and e != started),
            None,
        ),
        timeout_s=5.0,
    )
    again = compute.get(ZONE, "job-9-a0")
    assert again is not None and again.state == VmState.RUNNING and again.id == first.id
    assert json.loads(booted["job"]) == {"job_id": "job-10"}
    assert compute.stop(ZONE, "no-such-vm") is False
    with pytest.raises(PermanentError):
        compute.start(ZONE, "no-such-vm")


def test_zone_must_match(compute: GceCompute) -> None:
    compute.insert(_request("job-5-a0"))

    assert compute.get("us-east1-b", "job-5-a0") is None
    compute.delete("us-east1-b", "job-5-a0")
    assert compute.get(ZONE, "job-5-a0") is not None


def test_a_process_that_exits_shows_terminated(compute: GceCompute, host: LocalCloud) -> None:
    compute.insert(_request("job-6-a0", mode="exit"))

    wait_for(lambda: _state(compute, "job-6-a0") == VmState.TERMINATED)
    assert (host.get("job-6-a0") or {})["exit_code"] == 3
    assert compute.insert(_request("job-6-a0")).state == VmState.TERMINATED
    compute.delete(ZONE, "job-6-a0")
    assert compute.get(ZONE, "job-6-a0") is None


@pytest.mark.slow
def test_preempt_wakes_the_watcher_at_once_and_kills_after_the_notice(
    compute: GceCompute, chaos: ChaosClient, host: LocalCloud, out: Path
) -> None:
    compute.insert(_request("job-7-a0", mode="stubborn"))
    pid = wait_event(out, "job-7-a0", "started")["pid"]
    wait_event(out, "job-7-a0", "watching")

    called = time.time()
    chaos.preempt(ZONE, "job-7-a0", notice_s=1.0)
    woke = wait_event(out, "job-7-a0", "preempted")["t"]

    assert _state(compute, "job-7-a0") == VmState.STOPPING
    assert (host.get("job-7-a0") or {})["preempted"] is True
    assert woke - called < 2.0
    time.sleep(0.3)
    assert alive(pid), "SIGTERM is ignored: only the end of the notice may kill it"
    wait_for(lambda: compute.get(ZONE, "job-7-a0") is None, timeout_s=3.0)
    assert time.time() - called >= 1.0
    assert not alive(pid)


def test_preempted_agent_that_exits_is_gone_before_the_notice_ends(
    compute: GceCompute, chaos: ChaosClient, out: Path
) -> None:
    compute.insert(_request("job-8-a0", mode="graceful"))
    wait_event(out, "job-8-a0", "watching")

    called = time.monotonic()
    chaos.preempt(ZONE, "job-8-a0", notice_s=30.0)
    wait_for(lambda: compute.get(ZONE, "job-8-a0") is None)

    assert time.monotonic() - called < 5.0
    assert read_events(out, "job-8-a0")[-1]["event"] == "preempted"


def test_an_on_demand_vm_cannot_be_preempted(
    compute: GceCompute, chaos: ChaosClient, out: Path
) -> None:
    request = dataclasses.replace(_request("job-8b-a0"), provisioning=Provisioning.STANDARD)
    compute.insert(request)
    wait_event(out, "job-8b-a0", "watching")

    with pytest.raises(ChaosError, match="not a Spot VM"):
        chaos.preempt(ZONE, "job-8b-a0", notice_s=1.0)
    assert _state(compute, "job-8b-a0") == VmState.RUNNING
    compute.delete(ZONE, "job-8b-a0")


def test_kill_gives_no_notice(compute: GceCompute, chaos: ChaosClient, out: Path) -> None:
    compute.insert(_request("job-9-a0"))
    pid = wait_event(out, "job-9-a0", "started")["pid"]
    wait_event(out, "job-9-a0", "watching")

    chaos.kill(ZONE, "job-9-a0")

    assert compute.get(ZONE, "job-9-a0") is None
    assert not alive(pid)
    assert read_events(out, "job-9-a0")[-1]["event"] == "watching"


def test_capacity_errors_raise_capacity_error(compute: GceCompute) -> None:
    big = dataclasses.replace(_request("job-10-a0"), machine_type="a2-highgpu-1g")

    with pytest.raises(CapacityError) as exhausted:
        compute.insert(big)
    with pytest.raises(CapacityError) as quota:
        compute.insert(_request("job-10-a1", zone="europe-west4-b"))

    assert exhausted.value.reason == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert quota.value.reason == "QUOTA_EXCEEDED"
    assert compute.list({}) == []


def _l4(name: str, provisioning: Provisioning = Provisioning.STANDARD) -> VmRequest:
    """A g2-standard-4: 4 vCPUs and one built-in L4 (no accelerators on the request)."""
    return dataclasses.replace(
        _request(name), machine_type="g2-standard-4", provisioning=provisioning
    )


def test_region_quotas_count_the_live_vms(compute: GceCompute) -> None:
    t4 = dataclasses.replace(
        _request("job-20-a0"),
        machine_type="n1-standard-8",
        accelerators=(Accelerator("nvidia-tesla-t4", 1),),
    )
    compute.insert(t4)  # Spot: charged to the preemptible quotas, granted by default
    compute.insert(_l4("job-20-a1"))
    # A machine type no catalog machine has: created, charged to no quota.
    compute.insert(dataclasses.replace(_request("job-20-a2"), machine_type="f1-micro"))

    quotas = compute.region_quotas("us-central1")

    assert quotas["PREEMPTIBLE_CPUS"] == Quota("PREEMPTIBLE_CPUS", 384.0, 8.0)
    assert quotas["PREEMPTIBLE_NVIDIA_T4_GPUS"] == Quota("PREEMPTIBLE_NVIDIA_T4_GPUS", 16.0, 1.0)
    assert quotas["CPUS"] == Quota("CPUS", 384.0, 4.0)
    assert quotas["NVIDIA_L4_GPUS"] == Quota("NVIDIA_L4_GPUS", 16.0, 1.0)
    assert quotas["NVIDIA_T4_GPUS"].usage == 0.0
    compute.stop(ZONE, "job-20-a1")  # a stopped VM keeps only its disk
    assert compute.region_quotas("us-central1")["NVIDIA_L4_GPUS"].usage == 0.0


def test_an_insert_past_a_quota_limit_is_quota_exceeded(
    compute: GceCompute, host: LocalCloud
) -> None:
    host.quota_limits["NVIDIA_L4_GPUS"] = 1
    compute.insert(_l4("job-21-a0"))

    with pytest.raises(CapacityError) as refused:
        compute.insert(_l4("job-21-a1"))
    compute.insert(_l4("job-21-a2", Provisioning.SPOT))  # the preemptible quota has room
    host.quota_limits["PREEMPTIBLE_NVIDIA_L4_GPUS"] = 0  # not granted: Spot takes standard
    with pytest.raises(CapacityError):
        compute.insert(_l4("job-21-a3", Provisioning.SPOT))

    assert refused.value.reason == "QUOTA_EXCEEDED"
    assert "NVIDIA_L4_GPUS" in str(refused.value)
    assert sorted(vm.name for vm in compute.list({})) == ["job-21-a0", "job-21-a2"]


def test_a_gang_past_a_quota_limit_creates_no_node(compute: GceCompute, host: LocalCloud) -> None:
    host.quota_limits["PREEMPTIBLE_NVIDIA_L4_GPUS"] = 3
    compute.insert(_l4("job-22-a0", Provisioning.SPOT))
    # One bulk insert: the nodes differ in their names only.
    shared = {JOB_METADATA_KEY: json.dumps({"job_id": "job-22"})}
    nodes = tuple(
        dataclasses.replace(_l4(f"job-22-a1-n{k}", Provisioning.SPOT), metadata=shared)
        for k in range(3)
    )

    with pytest.raises(CapacityError) as refused:
        compute.insert_gang(
            GangRequest(
                nodes, "us-central1", (ZONE,), str(uuid.uuid5(uuid.NAMESPACE_DNS, "gang-22"))
            )
        )

    assert refused.value.reason == "QUOTA_EXCEEDED"
    assert [vm.name for vm in compute.list({})] == ["job-22-a0"]


def test_starting_a_stopped_vm_past_a_quota_limit_is_quota_exceeded(
    compute: GceCompute, host: LocalCloud
) -> None:
    host.quota_limits["NVIDIA_L4_GPUS"] = 1
    compute.insert(_l4("job-23-a0"))
    compute.stop(ZONE, "job-23-a0")
    compute.insert(_l4("job-23-a1"))  # the stopped VM left its GPU to this one

    with pytest.raises(CapacityError) as refused:
        compute.start(ZONE, "job-23-a0")
    compute.delete(ZONE, "job-23-a1")
    compute.start(ZONE, "job-23-a0")

    assert refused.value.reason == "QUOTA_EXCEEDED"
    assert _state(compute, "job-23-a0") == VmState.RUNNING


def test_chaos_on_a_missing_vm_is_refused(chaos: ChaosClient, host: LocalCloud) -> None:
    with pytest.raises(ChaosError, match="404"):
        chaos.kill(ZONE, "job-11-a0")

    [sent] = host.requests
    assert sent.path == f"/local/v1/projects/demo-project/zones/{ZONE}/instances/job-11-a0/kill"


@pytest.mark.slow
def test_freeze_stops_the_processes_and_delete_ends_them(
    compute: GceCompute, chaos: ChaosClient, out: Path
) -> None:
    compute.insert(_request("job-15-a0"))
    pid = wait_event(out, "job-15-a0", "started")["pid"]
    wait_event(out, "job-15-a0", "watching")

    chaos.freeze(ZONE, "job-15-a0")

    wait_for(lambda: (proc_stat(pid) or ("?", 0))[0] == "T")
    assert _state(compute, "job-15-a0") == VmState.RUNNING  # hung, not ended
    compute.delete(ZONE, "job-15-a0")
    assert not alive(pid)


def test_metadata_server_speaks_gce(compute: GceCompute, host: LocalCloud) -> None:
    compute.insert(_request("job-12-a0"))
    md = _metadata_host(host, "job-12-a0")

    assert metadata_get(md, "instance/name", flavor=False)[0] == 403
    status, headers, name = metadata_get(md, "instance/name")
    assert (status, headers["Metadata-Flavor"], name) == (200, "Google", "job-12-a0")
    assert headers["ETag"]
    assert metadata_get(md, "instance/zone")[2].endswith(f"/zones/{ZONE}")
    assert metadata_get(md, "instance/id")[2].isdigit()
    assert metadata_get(md, "instance/preempted")[2] == "FALSE"
    assert metadata_get(md, "instance/maintenance-event")[2] == "NONE"
    assert metadata_get(md, "project/project-id")[2] == "demo-project"
    assert metadata_get(md, "project/numeric-project-id")[2].isdigit()
    assert metadata_get(md, "instance/attributes/")[2].split() == ["agent-mode", JOB_METADATA_KEY]
    assert metadata_get(md, "instance/attributes/missing")[0] == 404
    recursive = json.loads(metadata_get(md, "instance/attributes/?recursive=true")[2])
    assert recursive["agent-mode"] == "watch"


@pytest.mark.slow
def test_wait_for_change_times_out_with_the_unchanged_value(
    compute: GceCompute, host: LocalCloud
) -> None:
    compute.insert(_request("job-13-a0"))
    md = _metadata_host(host, "job-13-a0")
    path = f"instance/attributes/{JOB_METADATA_KEY}"
    _, headers, value = metadata_get(md, path)

    started = time.monotonic()
    _, waited_headers, waited = metadata_get(md, f"{path}?wait_for_change=true&timeout_sec=1")

    assert 0.9 <= time.monotonic() - started < 5.0  # timeout_sec=1, with room for load
    assert (waited, waited_headers["ETag"]) == (value, headers["ETag"])
    stale = f"{path}?wait_for_change=true&timeout_sec=10&last_etag=stale"
    started = time.monotonic()
    assert metadata_get(md, stale)[2] == value
    assert time.monotonic() - started < 5.0  # answered at once, not after timeout_sec=10


def test_set_metadata_wakes_an_attribute_watcher(compute: GceCompute, host: LocalCloud) -> None:
    compute.insert(_request("job-14-a0"))
    md = _metadata_host(host, "job-14-a0")
    path = f"instance/attributes/{JOB_METADATA_KEY}?wait_for_change=true&timeout_sec=10"
    answers: list[tuple[float, str]] = []
    watcher = threading.Thread(
        target=lambda: answers.append((time.monotonic(), metadata_get(md, path)[2]))
    )
    watcher.start()
    time.sleep(0.2)

    called = time.monotonic()
    compute.set_metadata(ZONE, "job-14-a0", {JOB_METADATA_KEY: '{"job_id": "new"}'})
    watcher.join(timeout=5)

    assert answers and answers[0][1] == '{"job_id": "new"}'
    assert answers[0][0] - called < 1.0
    assert compute.get(ZONE, "job-14-a0") is not None
    # GceCompute.set_metadata keeps the other items, under the read fingerprint.
    assert metadata_get(md, "instance/attributes/")[2].split() == ["agent-mode", JOB_METADATA_KEY]

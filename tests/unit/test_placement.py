import json

import pytest

from spotline.shared.contract.assignment import Assignment
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.placement import (
    build_gang_request,
    build_vm_request,
    node_names,
    option_of,
    options,
    parse_machine_id,
    request_id,
    vm_attempt,
    vm_name,
)
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.vms import EVENT_TOKEN_METADATA_KEY, JOB_METADATA_KEY, Provisioning


def test_machine_ids_in_order_each_across_zones() -> None:
    found = list(options(["g2-standard-4", "n1-standard-8-t4.od"], ["z-a", "z-b"], load_catalog()))
    assert [(o.machine_id, o.zone) for o in found] == [
        ("g2-standard-4", "z-a"),
        ("g2-standard-4", "z-b"),
        ("n1-standard-8-t4.od", "z-a"),
        ("n1-standard-8-t4.od", "z-b"),
    ]
    assert found[0].provisioning == Provisioning.SPOT
    assert found[2].price_per_hour == load_catalog()["n1-standard-8-t4"].on_demand_usd_per_hour


def test_an_unknown_machine_names_the_catalog() -> None:
    with pytest.raises(PermanentError, match=r"'p2\.xlarge' is not in the catalog"):
        list(options(["p2.xlarge"], ["z"], load_catalog()))


def test_parse_machine_id() -> None:
    assert parse_machine_id("a2-highgpu-1g") == ("a2-highgpu-1g", Provisioning.SPOT)
    assert parse_machine_id("a2-highgpu-1g.od") == ("a2-highgpu-1g", Provisioning.STANDARD)


def test_names_and_request_ids_are_deterministic_per_attempt() -> None:
    assert vm_name("j1", 2) == vm_name("j1", 2) == "sl-j1-a2"
    assert request_id("j1", 1) == request_id("j1", 1) != request_id("j1", 2)
    # Each try of an attempt (a placement pass, an option) has its own requestId.
    assert len({request_id("j1", 1, key) for key in ("", "0/m/z-a", "0/m/z-b", "1/m/z-a")}) == 4
    assert len(vm_name("a" * 40, 999)) <= 63  # GCE's limit on instance names


def test_a_vm_name_tells_its_job_and_attempt() -> None:
    for job_id in ("j1", "run-a7-x", "a-a2"):
        for name in [vm_name(job_id, 3), *node_names(job_id, 3, 4)]:
            assert vm_attempt(name) == (job_id, 3)
    assert vm_attempt("my-own-vm") is None and vm_attempt("sl-j1-b2") is None


def test_the_request_carries_the_job_and_labels() -> None:
    spec = JobSpec(user="alice", machine_ids=["n1-standard-8-t4"], trainer="digits_mlp")
    assignment = Assignment(
        job_id="j1",
        attempt=1,
        project="p",
        spec=spec,
        checkpoint_dir="file:///c",
        output_dir="file:///o",
    )
    option = next(options(spec.machine_ids, ["z-a"], load_catalog()))
    request = build_vm_request(option, assignment, "img", "alice")
    assert request.accelerators[0].type == "nvidia-tesla-t4"
    assert json.loads(request.metadata[JOB_METADATA_KEY])["job_id"] == "j1"
    assert request.metadata["shutdown-script"].endswith("exec /opt/spotline/scripts/shutdown.sh\n")
    assert request.labels["spotline-job"] == "j1" and request.labels["spotline-attempt"] == "1"
    # A capacity error in one zone must not answer the next zone's or pass's insert.
    other_zone = next(options(spec.machine_ids, ["z-b"], load_catalog()))
    tries = {
        build_vm_request(option, assignment, "img", "alice").request_id,
        build_vm_request(other_zone, assignment, "img", "alice").request_id,
        build_vm_request(option, assignment, "img", "alice", placement=3).request_id,
    }
    assert len(tries) == 3
    assert build_vm_request(option, assignment, "img", "alice").request_id == request.request_id
    assert option_of(request.labels, "z-a", load_catalog()) == option
    # The event token has a metadata item of its own, not in the printed assignment.
    signed = build_vm_request(option, assignment, "img", "alice", event_token="s3cret-token")
    assert signed.metadata[EVENT_TOKEN_METADATA_KEY] == "s3cret-token"
    assert "s3cret-token" not in signed.metadata[JOB_METADATA_KEY]
    assert signed.request_id == request.request_id


def test_built_in_gpus_are_not_attached_twice() -> None:
    option = next(options(["g2-standard-4"], ["z"], load_catalog()))
    spec = JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp")
    assignment = Assignment(
        job_id="j1", attempt=1, project="p", spec=spec, checkpoint_dir="c", output_dir="o"
    )
    assert build_vm_request(option, assignment, "img", "alice").accelerators == ()


def test_a_gang_is_one_request_of_identical_nodes() -> None:
    spec = JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp", nodes=3)
    names = node_names("j1", 2, 3)
    assignment = Assignment(
        job_id="j1",
        attempt=2,
        project="p",
        spec=spec,
        checkpoint_dir="c",
        output_dir="o",
        nodes=names,
        hosts=names,
        master_port=20001,
    )
    option = next(options(spec.machine_ids, ["z-a"], load_catalog()))
    gang = build_gang_request(
        option, assignment, "img", "alice", "r", ["z-a", "z-b"], event_token="tok"
    )
    assert [node.name for node in gang.nodes] == ["sl-j1-a2-n0", "sl-j1-a2-n1", "sl-j1-a2-n2"]
    assert len({(n.labels["spotline-job"], n.metadata[JOB_METADATA_KEY]) for n in gang.nodes}) == 1
    assert {n.metadata[EVENT_TOKEN_METADATA_KEY] for n in gang.nodes} == {"tok"}  # one for all
    assert gang.zones == ("z-a", "z-b")
    assert gang.request_id == request_id("j1", 2, f"0/{option.machine.machine_id}/z-a,z-b")
    assert node_names("j1", 1, 1) == ["sl-j1-a1"]  # one node keeps the plain name

"""A gang's VMs accept connections from the nodes of their own attempt only.

Each gang attempt gets a firewall rule on spotline's network, made before its
VMs are inserted, whose source and target are the attempt's network tag,
which every node carries; a one-node job gets none (its VM accepts nothing).
The rule goes when the attempt is over, whatever order the events take.
The local cloud records the rules (validated against Compute Engine's
discovery document) but cannot enforce them: its VMs share one loopback.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.contract.events import CancelRequest, Heartbeat, ReaperTick, SpotPreempted
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.gang_network import rule_attempt, rule_is_over
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import Vm, VmState
from tests.conftest import SPEC, vm_event

pytestmark = pytest.mark.emulators
GANG = {**SPEC, "nodes": 2}
RULE1, RULE2 = "sl-job1-a1", "sl-job1-a2"


def firewall_calls(host: LocalCloud) -> list[str]:
    """Firewall inserts and deletes and gang inserts, in order, by what they name."""
    calls = []
    for r in host.requests:
        if r.path.endswith("/global/firewalls") and r.method == "POST":
            calls.append(f"rule {(r.body or {})['name']}")
        elif "/global/firewalls/" in r.path and r.method == "DELETE":
            calls.append(f"end {r.path.rsplit('/', 1)[-1]}")
        elif r.path.endswith("/bulkInsert"):
            calls.append("gang")
    return calls


def test_a_gang_s_nodes_accept_only_each_other(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Before, every VM of a user reached every other VM of that user: one
    job's trainer could reach another job's rendezvous (torch's TCPStore and
    the Ray head take unauthenticated connections)."""
    call("submit_job", "submit", GANG, message_id="s1")
    assert firewall_calls(host) == [f"rule {RULE1}", "gang"]  # the rule first
    rule = host.firewalls[RULE1]
    assert rule["sourceTags"] == rule["targetTags"] == [RULE1]
    assert rule["network"].endswith(f"projects/{project}/global/networks/spotline")
    assert rule["direction"] == "INGRESS" and "sourceRanges" not in rule
    assert {a["IPProtocol"] for a in rule["allowed"]} == {"tcp", "udp", "icmp"}
    [gang] = [r for r in host.requests if r.path.endswith("/bulkInsert")]
    assert gang.body["instanceProperties"]["tags"] == {"items": [RULE1]}


def test_a_single_vm_gets_no_rule_and_no_tag(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", SPEC, message_id="s1")
    [insert] = host.requests_to("POST", "/instances")
    assert "tags" not in insert.body
    assert firewall_calls(host) == [] and host.firewalls == {}


def test_a_cancel_ends_the_rule(call: Callable[..., Any], host: LocalCloud, project: str) -> None:
    call("submit_job", "submit", GANG, message_id="s1")
    call("cancel_job", "cancel", CancelRequest(job_id="job1", reason="enough"), message_id="c1")
    assert host.firewalls == {}
    assert firewall_calls(host)[-1] == f"end {RULE1}"


def test_a_rule_that_cannot_be_deleted_does_not_hold_the_cancel(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", GANG, message_id="s1")
    host.api.fail_next("DELETE", r"/global/firewalls/", 403, "forbidden")
    call("cancel_job", "cancel", CancelRequest(job_id="job1", reason="enough"), message_id="c1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.status == JobStatus.CANCELED and host.list() == []
    closed = {i.status for i in FirestoreStore(project).list_instances()}
    assert closed == {InstanceStatus.CLOSED}  # the release went on to its end
    assert set(host.firewalls) == {RULE1}  # left to the reaper
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert host.firewalls == {}


def test_a_replaced_attempt_s_rule_ends_once_its_nodes_are_gone(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    relaunched = {**GANG, "replace_node_timeout_s": 0}  # a loss relaunches the whole gang
    call("submit_job", "submit", relaunched, message_id="s1")
    beat = vm_event(Heartbeat, instance="sl-job1-a1-n0", phase="TRAINING")
    call("on_epoch_done", "epoch_done", beat, message_id="h0")
    notice = vm_event(SpotPreempted, instance="sl-job1-a1-n1")
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.attempt == 2
    assert host.list({"spotline-attempt": "1"}) == []  # the agent's report: its state is saved
    assert set(host.firewalls) == {RULE2}
    # The new attempt's rule before its nodes; the old one's after its nodes went.
    assert firewall_calls(host) == [
        f"rule {RULE1}",
        "gang",
        f"rule {RULE2}",
        "gang",
        f"end {RULE1}",
    ]


def test_a_node_replaced_in_place_keeps_its_attempt_s_rule(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """One node lost, one replacement inserted in the same attempt: the same
    rule lets the replacement reach the survivors; none is made or ended."""
    call("submit_job", "submit", GANG, message_id="s1")
    for name in ("sl-job1-a1-n0", "sl-job1-a1-n1"):
        beat = vm_event(Heartbeat, instance=name, phase="TRAINING")
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    notice = vm_event(SpotPreempted, instance="sl-job1-a1-n1")
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and (job.attempt, job.substatus) == (1, JobSubstatus.REPLACING_NODE)
    assert set(host.firewalls) == {RULE1}
    assert firewall_calls(host) == [f"rule {RULE1}", "gang"]
    [insert] = [r for r in host.requests if r.method == "POST" and r.path.endswith("/instances")]
    assert insert.body["name"] == "sl-job1-a1-n1-g1"
    assert insert.body["tags"] == {"items": [RULE1]}


def test_a_rule_made_twice_is_one_rule(host: LocalCloud, project: str) -> None:
    compute = GceCompute(project, api_endpoint=host.endpoint)
    compute.allow_gang(RULE1)
    compute.allow_gang(RULE1)  # a redelivery: Compute Engine answers 409, which is success
    assert compute.gang_rules() == [RULE1]
    compute.end_gang(RULE1)
    compute.end_gang(RULE1)  # a missing rule is deleted already
    assert compute.gang_rules() == []


def test_a_rule_whose_insert_never_came_goes_with_its_job(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The function dies between the rule and the insert: the rule stays while
    the attempt may still be placed, and the reaper removes it once the job ends."""
    host.api.fail_next("POST", r"/bulkInsert$", 500, times=3)
    assert call("submit_job", "submit", GANG, message_id="s1").status_code == 500
    assert set(host.firewalls) == {RULE1} and host.list() == []
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert set(host.firewalls) == {RULE1}  # its job may still place the attempt
    call("cancel_job", "cancel", CancelRequest(job_id="job1", reason="enough"), message_id="c1")
    call("reaper", "reaper_tick", ReaperTick(), message_id="t2")
    assert host.firewalls == {}


def test_a_rule_made_after_its_job_ended_is_removed(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The job ends while its rule is being made: the placement, working from
    what it read before, makes the rule after the cancel has looked for it."""
    call("submit_job", "submit", GANG, message_id="s1")
    rule = dict(host.firewalls[RULE1])
    call("cancel_job", "cancel", CancelRequest(job_id="job1", reason="enough"), message_id="c1")
    assert host.firewalls == {}
    # A retried insert of the rule is answered with its first operation (the
    # same requestId) and makes nothing: a rule made late is the placement's first.
    GceCompute(project, api_endpoint=host.endpoint).allow_gang(RULE1)
    assert host.firewalls == {}
    host.firewalls[RULE1] = rule  # made just after the cancel looked for it
    GceCompute(project, api_endpoint=host.endpoint).allow_gang("sl-gone-a3")  # no such job
    host.firewalls["not-spotline"] = {**rule, "name": "not-spotline"}
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert set(host.firewalls) == {"not-spotline"}  # a rule spotline did not make stays


def test_someone_else_s_rule_of_the_same_name_is_neither_taken_nor_deleted(
    host: LocalCloud, project: str
) -> None:
    """A job's id chooses its rule's name: a rule of that name that is not a
    gang's (an administrator's) is not taken for the gang's own, and the
    gang's end does not delete it."""
    compute = GceCompute(project, api_endpoint=host.endpoint)
    compute.allow_gang("sl-other-a1")
    theirs = {**host.firewalls.pop("sl-other-a1"), "name": RULE1, "sourceRanges": ["10.0.0.0/8"]}
    del theirs["sourceTags"]
    host.firewalls[RULE1] = theirs
    with pytest.raises(PermanentError, match="not a spotline gang rule"):
        compute.allow_gang(RULE1)
    compute.end_gang(RULE1)
    assert host.firewalls[RULE1] == theirs
    assert compute.gang_rules() == []


def test_a_gang_whose_rule_is_refused_fails_saying_why(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """A deployment whose functions lack the firewall role (made before it
    existed): the gang is not placed without its rule, and the job says what to do."""
    host.api.fail_next("POST", r"/global/firewalls$", 403, "forbidden")
    call("submit_job", "submit", GANG, message_id="s1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.status == JobStatus.FAILED, job
    assert job.error is not None and "spotline deploy" in job.error and RULE1 in job.error
    assert host.list() == [] and host.firewalls == {}


def _job(status: JobStatus, attempt: int) -> JobDoc:
    now = datetime.now(UTC)
    spec = JobSpec.model_validate(GANG)
    return JobDoc(job_id="job1", user="alice", spec=spec, status=status, attempt=attempt,
                  created_at=now, updated_at=now)  # fmt: skip


def _vm(attempt: int, state: VmState) -> Vm:
    return Vm(name=f"sl-job1-a{attempt}-n0", zone="us-central1-a", state=state, labels={})


def test_when_a_rule_is_over() -> None:
    assert rule_attempt("sl-job1-a2") == ("job1", 2)
    assert rule_attempt("sl-job1-a2-n0") is None  # a VM's name, not a rule's
    assert rule_attempt("spotline-peers") is None
    assert rule_is_over(1, None)
    assert rule_is_over(1, _job(JobStatus.CANCELED, 1), [_vm(1, VmState.RUNNING)])
    assert not rule_is_over(1, _job(JobStatus.TRAINING, 1))
    assert not rule_is_over(2, _job(JobStatus.RECOVERING, 1))  # made before its job said so
    # An earlier attempt's nodes may still be saving together while they shut down.
    assert not rule_is_over(1, _job(JobStatus.RECOVERING, 2), [_vm(1, VmState.STOPPING)])
    assert rule_is_over(1, _job(JobStatus.RECOVERING, 2), [_vm(1, VmState.TERMINATED)])
    assert rule_is_over(1, _job(JobStatus.RECOVERING, 2), [_vm(2, VmState.RUNNING)])

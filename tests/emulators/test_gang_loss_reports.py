"""What a gang waiting for its replacement makes of its further losses'
reports, through the real handlers on the emulators with the local cloud's
VMs: each loss is a line in the job's history and a published job event,
once however often it is reported; and node 0 lost, then its replacement,
regroups on node 0's own report of its save, never before it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.domain.job_events import JobEvent
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.topics import TOPICS
from tests.conftest import drained
from tests.emulators.test_gang_further_losses import R2, three_training
from tests.emulators.test_gang_replacement import boot, job_of, preempt
from tests.emulators.test_gang_resize import N0, N1, N2, R1, gang_stop, regroup, told
from tests.emulators.test_recovery import log_sink_entry

pytestmark = pytest.mark.emulators
S = JobSubstatus
R0 = "sl-job1-a1-n0-g1"
R0_AGAIN = "sl-job1-a1-n0-g2-1"  # node 0's replacement after the first was lost


class JobEvents:
    """A pull subscription on the job events topic (emulator), made before
    the job's first event."""

    def __init__(self, project: str) -> None:
        from google.api_core.exceptions import AlreadyExists
        from google.cloud import pubsub_v1

        self.subscriber = pubsub_v1.SubscriberClient()
        publisher = pubsub_v1.PublisherClient()
        topic = publisher.topic_path(project, TOPICS["job_events"])
        self.subscription = self.subscriber.subscription_path(project, f"t-{uuid.uuid4().hex}")
        with contextlib.suppress(AlreadyExists):
            publisher.create_topic(name=topic)
        self.subscriber.create_subscription(name=self.subscription, topic=topic)
        self.seen: dict[str, JobEvent] = {}

    def pull(self) -> list[JobEvent]:
        """Every event published so far, each once (copies share an id), in order."""
        # Published before the handler answered: nothing is on its way.
        for message in drained(self.subscriber, self.subscription):
            event = JobEvent.model_validate_json(message.data)
            self.seen.setdefault(event.event_id, event)
        return sorted(self.seen.values(), key=lambda event: event.sequence)


def test_each_loss_while_waiting_is_one_history_line_and_one_event(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    events = JobEvents(project)
    three_training(call)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    # Node 2's loss: the log sink's report, then its agent's, redelivered.
    call("on_spot_preempted", "spot_preempted", log_sink_entry(host, N2), message_id="ls2")
    for mid in ("p2", "p2-again"):
        preempt(call, N2, step=40, mid=mid)
    job = job_of(project)
    assert (job.substatus, job.attempt, job.preemptions) == (S.REPLACING_NODE, 1, 2)
    first = f"{N1} preempted (reported by the agent); replacing it with {R1}"
    second = f"{N2} preempted (reported by the preemption log); replacing it with {R2}"
    losses = [h.note for h in job.history if " preempted " in h.note]
    assert losses == [first, second]
    published = events.pull()
    assert [e.sequence for e in published] == list(range(1, job.event_sequence + 1))
    lost = [e for e in published if " preempted " in e.reason]
    assert [(e.reason, e.substatus, e.preemptions) for e in lost] == [
        (first, S.REPLACING_NODE, 1),
        (second, S.REPLACING_NODE, 2),
    ]
    boot(call, R1, mid="b1")
    boot(call, R2, mid="b2")
    assert told(host, N0) == regroup(2, [N0, R1, R2])
    assert job_of(project).substatus == S.TRAINING
    assert events.pull()[-1].substatus == S.TRAINING


def test_node_zero_then_its_replacement_lost_regroups_on_node_zeros_save_report(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Node 0's loss heard from the log sink (its notice's start), its
    replacement lost before it joined: the gang regroups once node 0's
    agent reports its save, well within the notice, and not before."""
    three_training(call)
    call("on_spot_preempted", "spot_preempted", log_sink_entry(host, N0), message_id="ls0")
    assert job_of(project).nodes == [R0, N1, N2]
    boot(call, R0, mid="b0")
    preempt(call, R0, mid="p-r0")  # its agent's report: it never trained, nor saved
    job = job_of(project)
    assert (job.substatus, job.attempt, job.nodes) == (S.REPLACING_NODE, 1, [R0_AGAIN, N1, N2])
    boot(call, R0_AGAIN, mid="b0-again")
    gang_stop(call, N1, None, generation=0, mid="g1")  # a survivor's stop is no save
    for name in (R0_AGAIN, N1, N2):
        assert told(host, name) is None
    assert job_of(project).substatus == S.REPLACING_NODE
    preempt(call, N0, step=40, mid="p0-agent")  # stale as a loss; its save completes the wait
    for name in (R0_AGAIN, N1, N2):
        assert told(host, name) == regroup(2, [R0_AGAIN, N1, N2])
    job = job_of(project)
    assert (job.substatus, job.attempt, job.attempts[0].checkpoint_step) == (S.TRAINING, 1, 40)
    assert [h.note for h in job.history if " preempted " in h.note] == [
        f"{N0} preempted (reported by the preemption log); replacing it with {R0}",
        f"{R0} preempted (reported by the agent); replacing it with {R0_AGAIN}",
    ]

"""A deterministic simulation of spotline under Pub/Sub's delivery rules, for
the adversarial suites (``tests/slow/test_replay.py``, ``tests/slow/test_crash_points.py``).

One ``World`` holds one shared ``Deps``: the in-memory store (or a wrapper of
it), GceCompute on a local cloud whose VMs are records, a RecordingBus and a
clock the simulation moves in steps of ``STEP_S``. Each step:

1. users publish what their plan says (a submission, a cancel);
2. each VM's agent (``AgentSim``) acts as ``spotline.vm_image.agent`` does, from the
   assignment in the VM's metadata: boot, heartbeats with its phases, one
   epoch a step, the end; or its VM is preempted (the agent's notice, the log
   sink's entry, both, or nobody reports it and the reaper must notice);
3. Cloud Scheduler publishes a reaper tick every ``TICK_EVERY`` steps;
4. the ``Delivery`` policy hands the step's copies of published messages to
   the real handlers (through their Pub/Sub wrapper, with a real CloudEvent).

A message is never delivered before it is published (an agent only exists
once its VM does, and a copy is only due at or after its publish step).
"""

from __future__ import annotations

import base64
import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Self

from cloudevents.http import CloudEvent
from pydantic import BaseModel

from spotline.functions import deps as process_deps
from spotline.functions.deps import Deps
from spotline.functions.handlers.cancel_job import cancel_job
from spotline.functions.handlers.on_epoch_done import on_epoch_done
from spotline.functions.handlers.on_job_finished import on_job_finished
from spotline.functions.handlers.on_spot_preempted import on_spot_preempted
from spotline.functions.handlers.on_vm_booted import on_vm_booted
from spotline.functions.handlers.reaper import reaper
from spotline.functions.handlers.reaper_page import reaper_page
from spotline.functions.handlers.submit_job import submit_job
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.infra.localcloud.quotas import DEFAULT_LIMITS
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.contract.assignment import Assignment, Regroup
from spotline.shared.contract.events import (
    PREEMPTED_METHOD,
    CancelRequest,
    EpochDone,
    Heartbeat,
    JobFinished,
    ReaperTick,
    SpotPreempted,
    VmBooted,
)
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.vms import (
    EVENT_TOKEN_METADATA_KEY,
    GANG_STOP_METADATA_KEY,
    JOB_METADATA_KEY,
    MANAGED_LABEL,
    REGROUP_METADATA_KEY,
    RESTORE_GO,
    RESTORE_METADATA_KEY,
)
from spotline.shared.ports.compute import Compute
from spotline.shared.ports.store import Store
from spotline.shared.settings import TOPICS, Settings
from spotline.vm_image.agent.regroup import regroup_wait_s

PROJECT = "spotline-replay"
ZONES = ("us-central1-a", "us-central1-b")
T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
STEP_S = 10.0
TICK_EVERY = 3  # steps: Cloud Scheduler's minute, shortened
STEPS_PER_EPOCH = 45  # the trainer's optimizer steps in one epoch
# The first copy of these fixes when something happens (a VM is made, an
# attempt or the job ends, the reaper looks), hence what it costs: it is
# delivered in the step it is published, in any order within the step, so a
# run's costs can be compared with the clean run's. Every other message may
# come up to MAX_DELAY steps late, and any copy may come again later.
TIMING = frozenset({"submit", "cancel", "job_finished", "spot_preempted", "reaper_tick"})
MAX_DELAY = 3
MAX_REDELIVERY = 8
# A replacing gang's bound (``replace_node_timeout_s``): past the crash
# suite's pauses (2 x 130 s), so a crash alone never makes it relaunch.
REPLACE_BOUND_S = 400

HANDLERS: dict[str, Callable[[Any], None]] = {
    "submit": submit_job,
    "cancel": cancel_job,
    "vm_booted": on_vm_booted,
    "epoch_done": on_epoch_done,
    "job_finished": on_job_finished,
    "spot_preempted": on_spot_preempted,
    "reaper_tick": reaper,
    "reaper_page": reaper_page,
}

# How a lost VM is reported: by its agent, by the log sink, by both, by nobody.
LOSS_REPORTS = ("agent", "log-sink", "both", "silent")
# Another node lost while a gang waits for its replacement (``Plan.second_loss``).
SECOND_LOSSES = ("worker", "node-0", "replacement", "last-survivor", "unjoined")
# Steps a replacement's VM takes to boot in a plan with a second loss of a
# gang's node: that loss is heard while the gang still waits.
SLOW_BOOT_STEPS = 3
# An elastic gang's node lost while it trains at its smaller size
# (``Plan.second_loss``): the smaller gang's last node (a worker), or its
# head (its rank 0, which saves), once it trained an epoch at that size; or
# its worker as it is asked to stop and grow back.
SMALLER_LOSSES = ("smaller-worker", "smaller-head", "asked-worker")
# Steps an elastic gang's replacement VM takes to boot: past a shrink that
# waits for a lost node 0's notice (the reaper's sweep sees it over), so the
# gang shrinks before the replacement's boot is heard, however late.
ELASTIC_BOOT_STEPS = 14


class Crash(BaseException):
    """The function's process died here: no handler or sweep catches it."""


def settings(endpoint: str) -> Settings:
    """Timeouts as deployed, quotas out of the way (the replay is about delivery)."""
    return Settings(
        project=PROJECT,
        compute_endpoint=endpoint,
        zones=ZONES,
        storage_root="memory://spotline-replay",
        heartbeat_s=STEP_S,
        stall_timeout_s=300.0,
        boot_timeout_s=600.0,
        request_timeout_s=120.0,
        max_active_jobs=1000,
        max_active_instances=1000,
    )


# -- what each job does --


@dataclass
class Plan:
    """One job's course, drawn before the run.

    Args:
        losses: attempt -> (the epoch its VM is taken while running, who reports
            it); an attempt that resumed past that epoch loses it in its first;
            0: taken before its agent booted (only the log sink can tell).
        cancel_epoch: the user cancels once attempt ``cancel_attempt`` has run
            this epoch (or a later one, when it resumed past it).
        twice: the user publishes the submission twice (two messages).
        fail_epoch: the trainer exits 3 instead of running this epoch.
        lost_at_finish: the VM is taken as the trainer exits 0, and the
            preemption's report (``LOSS_REPORTS``; "agent": the shutdown
            script's) is published before the JobFinished, which comes late.
        nodes: a gang of this many VMs (one bulk insert); ``losses`` take
            the node of rank ``lost_node``, and its peers' ranks stop with it
            (node 0's agent reports the gang's stop with rank 0's save, the
            others' with none), as the built-in trainer's stop flag does.
        replace: the gang's lost node is replaced within its attempt
            (``replace_node_timeout_s`` is ``REPLACE_BOUND_S``): the others
            wait for the regroup, then every node restarts from the save.
            Otherwise the gang is relaunched whole on every loss.
        replacement_boots: False: the replacement's VM never runs its agent
            (a bad host), and the gang is relaunched whole past the bound.
        cancel_replacing: the user cancels while the gang waits for its
            replacement (the step after the loss).
        setup_steps: each node of the gang (its replacement too) installs
            its requirements for this many steps before its trainer starts.
        install_loss_step: a loss at epoch 0 takes its node at this step of
            installing (its agent up: any report); 0: before its agent ran.
        second_loss: while the gang waits for the first loss's replacement,
            another node is lost (``SECOND_LOSSES``): a surviving "worker"
            (rank > 0), "node-0", the "replacement" before its agent ran
            (only the log sink can tell), or a 2-node gang's
            "last-survivor" (nothing of the gang is left: it is relaunched
            whole). A node's loss comes ``second_after`` steps after the
            first, reported as ``second_report`` says, the replacements'
            VMs taking ``SLOW_BOOT_STEPS`` to boot meanwhile. Or, once the
            gang regrouped, a surviving worker told the regroup before it
            took it ("unjoined"): no step of the gang since, reported as
            ``second_report`` says (the log sink's report alone names no
            generation). An elastic gang (``min_nodes``): a node of the
            smaller gang (``SMALLER_LOSSES``), leaving fewer than ``min_nodes``.
        min_nodes: an elastic gang (``gang_resize``): the survivors train on
            at the smaller size while the replacement boots (its VM taking
            ``ELASTIC_BOOT_STEPS``), then are asked to stop
            (``spotline-gang-stop``) and grow back.
        ends_smaller: an elastic gang that trains to its end at the smaller
            size, before its replacement is up (few epochs left at its loss).
        elastic_boot_steps: an elastic gang's replacement VM boots in this
            many steps (each message delivered once and in order, fewer do).
    """

    job_id: str
    user: str
    epochs: int
    submit_step: int
    losses: dict[int, tuple[int, str]] = field(default_factory=dict)
    cancel_epoch: int | None = None
    cancel_attempt: int = 1
    fail_epoch: int | None = None
    twice: bool = False
    lost_at_finish: str = ""
    cool_down_s: int = 0
    nodes: int = 1
    lost_node: int = 0
    replace: bool = False
    replacement_boots: bool = True
    cancel_replacing: bool = False
    setup_steps: int = 0
    install_loss_step: int = 0
    second_loss: str = ""
    second_after: int = 1
    second_report: str = "agent"
    min_nodes: int | None = None
    ends_smaller: bool = False
    elastic_boot_steps: int = ELASTIC_BOOT_STEPS
    regrouped_from: int = 0  # the step the gang last restarted from on a regroup
    saved_epoch: int = 0  # the newest checkpoint in the job's storage
    canceled: bool = False
    taken: set[int] = field(default_factory=set)  # the attempts whose loss came
    lost_step: int | None = None  # the world's step a node was lost in
    second_taken: bool = False

    def fresh(self) -> Plan:
        """The plan before any run (a run writes what its agents saved and did)."""
        return replace(
            self,
            losses=dict(self.losses),
            saved_epoch=0,
            regrouped_from=0,
            canceled=False,
            taken=set(),
            lost_step=None,
            second_taken=False,
        )

    def spec(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "user": self.user,
            "machine_ids": ["g2-standard-4"],
            "trainer": "digits_mlp",
            "epochs": self.epochs,
            "cool_down_period_s": self.cool_down_s,
            **(
                {"nodes": self.nodes, "replace_node_timeout_s": self.replace_bound_s()}
                if self.nodes > 1
                else {}
            ),
            **({"min_nodes": self.min_nodes} if self.min_nodes is not None else {}),
        }

    def replace_bound_s(self) -> int:
        return REPLACE_BOUND_S if self.replace else 0

    def regroups(self) -> bool:
        """Whether the gang's loss ends in a regroup, not a whole relaunch."""
        return (
            self.replace
            and self.replacement_boots
            and bool(self.losses)
            and not self.cancel_replacing
            and self.second_loss != "last-survivor"
        )

    def lost_nodes(self) -> int:
        """The nodes lost: each a preemption, each replaced when it regroups."""
        return len(self.losses) + bool(self.second_loss)

    def second_rank(self) -> int | None:
        """The rank of the surviving node the second loss takes (None: the
        replacement's, or no second loss)."""
        survivors = [rank for rank in range(self.nodes) if rank != self.lost_node]
        if self.second_loss == "node-0":
            return 0
        if self.second_loss in ("worker", "unjoined"):
            return survivors[-1]
        return survivors[0] if self.second_loss == "last-survivor" else None

    def boot_steps(self) -> int:
        """Steps a replacement's VM takes to boot (``second_loss``, ``min_nodes``)."""
        if self.min_nodes is not None:
            return self.elastic_boot_steps
        return SLOW_BOOT_STEPS if self.second_rank() is not None else 0

    def resizes(self) -> int:
        """The changes of size an elastic gang that regroups goes through: it
        shrinks, then grows back (below ``min_nodes``, once all are up)."""
        if self.min_nodes is None or not self.regroups():
            return 0
        return 1 if self.ends_smaller else 2

    def expected(self) -> tuple[JobStatus, int, int]:
        """(status, attempt, preemptions) a run of this plan ends with."""
        if self.cancel_replacing:
            return JobStatus.CANCELED, 1, len(self.losses)
        if self.cancel_epoch is not None:
            return JobStatus.CANCELED, self.cancel_attempt, self.cancel_attempt - 1
        status = JobStatus.FAILED if self.fail_epoch is not None else JobStatus.COMPLETED
        relaunches = 0 if self.regroups() else len(self.losses)
        return status, 1 + relaunches, self.lost_nodes()


def draw_plans(
    rng: random.Random,
    jobs: int,
    *,
    cooling: bool = False,
    gangs: bool = False,
    replacing: bool = False,
) -> list[Plan]:
    """``jobs`` plans; ``cooling``: some jobs keep their VM cooling, and the
    submissions are spread out, so the users' next jobs claim those VMs;
    ``gangs``: every job a gang of 2 or 3, its losses on a node drawn too;
    ``replacing``: every job a gang of 2 or 3 whose lost node is replaced
    (``draw_replacing``)."""
    if replacing:
        drawn: list[Plan] = []
        for n in range(jobs):  # the times of loss and the second losses in turn
            lost = sum(1 for p in drawn if p.losses)
            second = ("", *SECOND_LOSSES)[lost % (len(SECOND_LOSSES) + 1)]
            drawn.append(draw_replacing(rng, n, lost % 3, second))
        return drawn
    plans = []
    spread = 8 * TICK_EVERY if cooling else 2 * TICK_EVERY
    for n in range(jobs):
        epochs = rng.randint(1, 4)
        plan = Plan(f"r{n:03d}", f"u{n % 7}", epochs, submit_step=rng.randint(1, spread))
        if cooling and rng.random() < 0.6:
            plan.cool_down_s = rng.choice([30, 60, 120])
        plan.twice = rng.random() < 0.1
        if gangs:
            plan.nodes = rng.choice([2, 3])
            plan.lost_node = rng.randrange(plan.nodes)
        fate = rng.random()
        if fate < 0.2:
            plan.cancel_epoch = rng.randint(1, epochs)
            if rng.random() < 0.5:  # on its second attempt
                plan.cancel_attempt = 2
                plan.losses[1] = (rng.randint(0, epochs), rng.choice(LOSS_REPORTS))
        elif fate < 0.3:
            plan.fail_epoch = rng.randint(1, epochs)
        elif fate < 0.75:
            for attempt in range(1, rng.randint(1, 2) + 1):
                plan.losses[attempt] = (rng.randint(0, epochs), rng.choice(LOSS_REPORTS))
        plans.append(plan)
    return plans


def draw_replacing(rng: random.Random, n: int, when: int, second: str = "") -> Plan:
    """A gang of 2 or 3 that replaces a lost node: most lose a drawn node in
    attempt 1 (reported by its agent, the log sink or both), some with a
    replacement that never comes up or a cancel while it boots; the others
    are canceled, fail, or run to the end.

    The loss comes at one of three times (``when``: 0, 1 or 2):

    * while the gang sets up (``states.SETTING_UP``): its nodes install for
      a few steps, and the node is taken before its agent ran (only the log
      sink can tell) or as it installs. Nothing was trained, so the gang
      regroups once the replacement is up: the others take the regroup
      before their trainers start, or, started, wait in their rendezvous
      with the lost node (these agents' ranks never step without it) and
      start again with the new node list;
    * in the gang's first two epochs, its TRAINING reports possibly still on
      their way (up to ``MAX_DELAY`` steps): the loss may be heard while
      the job reads as setting up, and a survivor's stop or an epoch heard
      after it shows the gang was training (``node_replacement.trained``);
    * later in training, the survivors stopping with it.

    A plan with a loss and a ``second`` (``Plan.second_loss``) loses another
    node while the gang waits for the replacement, which then boots: 3
    nodes, or 2 for a "last-survivor"; node 0 first lost for a "node-0" is
    moved to a worker."""
    first = MAX_DELAY + 1
    epochs = rng.randint(first, first + 2)
    plan = Plan(f"r{n:03d}", f"u{n % 7}", epochs, submit_step=rng.randint(1, 2 * TICK_EVERY))
    plan.nodes = rng.choice([2, 3])
    plan.lost_node = rng.randrange(plan.nodes)
    plan.replace = True
    plan.twice = rng.random() < 0.1
    reports = ("agent", "log-sink", "both")
    fate = rng.random()
    if fate < 0.1:
        plan.cancel_epoch = rng.randint(1, epochs)
    elif fate < 0.2:
        plan.fail_epoch = rng.randint(1, epochs)
    elif fate < 0.9:
        if when == 0:
            plan.setup_steps = rng.randint(3, 6)
            plan.install_loss_step = rng.randint(0, 2)
            report = rng.choice(reports) if plan.install_loss_step else "log-sink"
            plan.losses[1] = (0, report)
        elif when == 1:
            plan.losses[1] = (rng.randint(1, 2), rng.choice(reports))
        else:
            plan.losses[1] = (rng.randint(first, epochs), rng.choice(reports))
        plan.replacement_boots = rng.random() < 0.8
        plan.cancel_replacing = rng.random() < 0.1
        if second:
            plan.replacement_boots, plan.cancel_replacing = True, False
            plan.second_loss = second
            plan.nodes = 2 if second == "last-survivor" else 3
            plan.lost_node = rng.randrange(1 if second == "node-0" else 0, plan.nodes)
            plan.second_after = rng.randint(1, SLOW_BOOT_STEPS - 1)
            # A node lost before it rejoined: its agent's report says so; the
            # log sink's alone does not.
            told = ("log-sink", "both") if second == "unjoined" else reports
            plan.second_report = rng.choice(told)
    return plan


def draw_elastic(rng: random.Random, jobs: int) -> list[Plan]:
    """``jobs`` elastic gangs of 3 (``min_nodes`` 2), each losing a drawn
    node in training (reported by its agent, the log sink or both): the
    other two shrink and train at 2 while the replacement boots, then grow
    back to 3. In turn: nothing more; the smaller gang trains to its end
    before the replacement is up (``Plan.ends_smaller``); or it loses a
    node (``SMALLER_LOSSES``), the one left waiting for both replacements,
    then the gang grows back whole."""
    reports = ("agent", "log-sink", "both")
    plans = []
    for n in range(jobs):
        first = MAX_DELAY + 1  # its TRAINING reports heard: the loss is of a training gang
        lost = rng.randint(first, first + 2)
        course = ("", "ends-smaller", *SMALLER_LOSSES)[n % (len(SMALLER_LOSSES) + 2)]
        # Epochs enough for the smaller gang to train on until the grow.
        epochs = lost + (2 if course == "ends-smaller" else 25)
        plan = Plan(f"e{n:03d}", f"u{n % 7}", epochs, submit_step=rng.randint(1, 2 * TICK_EVERY))
        plan.nodes, plan.min_nodes, plan.replace = 3, 2, True
        plan.lost_node = rng.randrange(plan.nodes)
        plan.losses[1] = (lost, rng.choice(reports))
        plan.twice = rng.random() < 0.1
        plan.ends_smaller = course == "ends-smaller"
        plan.second_loss = course if course in SMALLER_LOSSES else ""
        plan.second_report = rng.choice(reports)
        plans.append(plan)
    return plans


# -- the messages --


@dataclass(frozen=True)
class Published:
    message_id: str
    topic: str
    data: bytes
    step: int
    at: datetime


def cloud_event(message: Published) -> CloudEvent:
    """What Eventarc hands the function: the Pub/Sub message in MessagePublishedData."""
    topic = f"projects/{PROJECT}/topics/{TOPICS[message.topic]}"
    attributes = {
        "id": message.message_id,
        "source": f"//pubsub.googleapis.com/{topic}",
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "specversion": "1.0",
    }
    data = {
        "message": {
            "data": base64.b64encode(message.data).decode(),
            "messageId": message.message_id,
            "publishTime": message.at.isoformat().replace("+00:00", "Z"),
        },
        "subscription": f"projects/{PROJECT}/subscriptions/{message.topic}",
    }
    return CloudEvent(attributes, data)


class Delivery:
    """The clean run: each message once, in publishing order, in its step."""

    def __init__(self) -> None:
        self.due: dict[int, list[Published]] = defaultdict(list)

    def published(self, message: Published) -> None:
        self.due[message.step].append(message)

    def take(self, step: int) -> list[Published]:
        """The copies due by ``step``, oldest first."""
        return [m for due in sorted(s for s in self.due if s <= step) for m in self.due.pop(due)]

    def again(self, message: Published) -> None:
        """Copies of a message delivered once already: none, in order."""

    def failed(self, message: Published, step: int) -> None:
        """A 500: Pub/Sub redelivers it (here, in the next step)."""
        self.due[step + 1].append(message)

    def pending(self) -> int:
        return sum(len(copies) for copies in self.due.values())


class Shuffled(Delivery):
    """Pub/Sub's at-least-once: 1 to 5 copies of each message, no order across
    messages, a copy possibly long after another was acknowledged."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    def published(self, message: Published) -> None:
        rng = self.rng
        first = message.step
        if message.topic not in TIMING:
            first += rng.randint(0, MAX_DELAY)
        self.due[first].append(message)
        for _ in range(rng.randint(1, 5) - 1):
            # Scheduler's duplicates come in the same minute: a later tick
            # would notice a vanished VM earlier than the clean run does.
            late = 0 if message.topic == "reaper_tick" else rng.randint(0, MAX_REDELIVERY)
            self.due[first + late].append(message)

    def again(self, message: Published) -> None:
        # A tick's page, redelivered later: past its age, it is dropped.
        for _ in range(self.rng.randint(0, 2)):
            self.due[message.step + self.rng.randint(0, MAX_REDELIVERY)].append(message)

    def take(self, step: int) -> list[Published]:
        copies = super().take(step)
        self.rng.shuffle(copies)
        return copies


# -- the world --


class _PagesBus(RecordingBus):
    """The bus, keeping the reaper tick's pages for the world to deliver as
    the page topic's push subscription would: at once, each to its function."""

    def __init__(self, project: str) -> None:
        super().__init__(project)
        self.pages: list[tuple[str, bytes]] = []

    def publish(
        self, key: str, event: BaseModel | bytes, timeout_s: float = 30.0, **attributes: str
    ) -> str:
        message_id = super().publish(key, event, timeout_s, **attributes)
        if key == "reaper_page":
            data = event if isinstance(event, bytes) else event.model_dump_json().encode()
            self.pages.append((message_id, data))
        return message_id

    def take_pages(self) -> list[tuple[str, bytes]]:
        pages, self.pages = self.pages, []
        return pages


class World:
    """One shared Deps over the local cloud (records), the store and the bus."""

    def __init__(
        self,
        delivery: Delivery | None = None,
        *,
        wrap_store: Callable[[InMemoryStore], Store] | None = None,
        wrap_compute: Callable[[GceCompute], Compute] | None = None,
    ) -> None:
        self.launcher = RecordLauncher()
        # Quotas out of the way too: every insert is accepted, so each attempt
        # has exactly one.
        limits = {metric: 1e6 for metric in DEFAULT_LIMITS}
        # The cloud's VMs are made on the world's clock (their creationTimestamp).
        self.cloud = LocalCloud(
            PROJECT, self.launcher, stop_grace_s=0.0, quota_limits=limits, clock=lambda: self.now
        )
        self.delivery = delivery or Delivery()
        self.memory = InMemoryStore()
        self.bus = _PagesBus(PROJECT)
        self.step = 0
        self.now = T0
        self.plans: dict[str, Plan] = {}
        self.agents: dict[str, AgentSim] = {}
        self.delivered = 0
        self.failures: list[str] = []
        self._wrap_store = wrap_store
        self._wrap_compute = wrap_compute
        self._times: list[tuple[int, datetime]] = []
        self.made: dict[str, int] = {}  # each VM's first step seen running

    def __enter__(self) -> Self:
        self.cloud.start()
        self.gce = GceCompute(
            PROJECT, api_endpoint=self.cloud.endpoint, operation_timeout_s=5.0, read_retry_s=1.0
        )
        store: Store = self._wrap_store(self.memory) if self._wrap_store else self.memory
        compute: Compute = self._wrap_compute(self.gce) if self._wrap_compute else self.gce
        self.deps = Deps(
            settings(self.cloud.endpoint),
            store=store,
            compute=compute,
            bus=self.bus,
            clock=lambda: self.now,
        )
        return self

    def __exit__(self, *_: object) -> None:
        self.cloud.close()

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The handlers' wrapper takes the process's Deps: this world's, for now."""
        process_deps._current = self.deps
        try:
            yield
        finally:
            process_deps.reset()

    # -- publishing --

    def publish(self, topic: str, event: BaseModel | bytes, *, scheduled: bool = True) -> Published:
        """On the bus; ``scheduled``: its copies are the delivery policy's to hand out."""
        message_id = self.bus.publish(topic, event)
        data = event if isinstance(event, bytes) else event.model_dump_json().encode()
        message = Published(message_id, topic, data, self.step, self.now)
        if scheduled:
            self.delivery.published(message)
        return message

    def submit(self, plan: Plan) -> Published:
        self.plans[plan.job_id] = plan
        message = self.publish("submit", json.dumps(plan.spec()).encode())
        if plan.twice:  # another message, the same job id: refused
            self.publish("submit", json.dumps(plan.spec()).encode())
        return message

    def cancel(self, job_id: str) -> Published:
        return self.publish("cancel", CancelRequest(job_id=job_id, reason="replay cancel"))

    def tick(self, *, scheduled: bool = True) -> Published:
        return self.publish("reaper_tick", ReaperTick(sent_at=self.now), scheduled=scheduled)

    # -- delivering --

    def deliver(self, message: Published) -> bool:
        """Run the message's function once. False: it failed (a 500). A tick's
        pages are delivered right after it, and may come again later."""
        self.delivered += 1
        ok = True
        with self.installed():
            try:
                HANDLERS[message.topic](cloud_event(message))
            except Exception as err:
                self.failures.append(f"{message.topic} {message.message_id}: {err!r}")
                ok = False
        # Published before a failure, or not: they are on the topic.
        for message_id, data in self.bus.take_pages():
            page = Published(f"page-{message_id}", "reaper_page", data, self.step, self.now)
            if not self.deliver(page):
                self.delivery.failed(page, self.step)
            self.delivery.again(page)
        return ok

    def deliver_due(self) -> None:
        for message in self.delivery.take(self.step):
            if not self.deliver(message):
                self.delivery.failed(message, self.step)

    # -- time --

    def advance(self, seconds: float = STEP_S) -> None:
        self.step += 1
        self.now += timedelta(seconds=seconds)

    def run_step(self) -> None:
        """One step: users, agents, the scheduler, then the due deliveries."""
        self.advance()
        for plan in self.plans.values():
            if plan.submit_step == self.step:
                self.submit(plan)
        self.wake_agents()
        for agent in list(self.agents.values()):
            agent.act()
        if self.step % TICK_EVERY == 0:
            self.tick()
        self.deliver_due()

    def run(self, plans: list[Plan], max_steps: int = 400) -> None:
        """Every plan to its end, every copy delivered."""
        for plan in plans:
            self.plans[plan.job_id] = plan
        while self.step < max_steps:
            self.run_step()
            busy = any(not a.done for a in self.agents.values()) or self.cloud.list()
            waiting = any(p.submit_step > self.step for p in self.plans.values())
            # A job whose VM vanished unreported waits for the reaper's tick.
            active = self.memory.list_jobs(JobStatus.active())
            if not (busy or waiting or active or self.delivery.pending()):
                break

    def idle(self, seconds: float) -> None:
        """Time passes with no agent moving on: each still heartbeats."""
        for _ in range(round(seconds / STEP_S)):
            self.advance()
            self.heartbeats()

    def settle(self, sweeps: int = 3, seconds: float = 600.0) -> None:
        """A few reaper sweeps with the clock well past every timeout."""
        for _ in range(sweeps):
            self.advance(seconds)
            self.deliver(self.tick(scheduled=False))

    # -- agents --

    def wake_agents(self) -> None:
        """An agent for each VM booted since the last step (a VM exists first),
        and a new job's run for each cooling VM handed one in its metadata."""
        for vm in self.cloud.list({MANAGED_LABEL: "true"}):
            if vm["state"] != "RUNNING":
                continue
            assignment = Assignment.model_validate_json(vm["metadata"][JOB_METADATA_KEY])
            running = self.agents.get(vm["name"])
            reused = running is not None
            if running is not None:
                same = (running.assignment.job_id, running.assignment.attempt)
                if not running.done or same == (assignment.job_id, assignment.attempt):
                    continue
            plan = self.plans[assignment.job_id]
            if assignment.generation > 0 and not plan.replacement_boots:
                continue  # a replacement that never comes up
            made = self.made.setdefault(vm["name"], self.step)
            if assignment.generation > 0 and self.step - made < plan.boot_steps():
                continue  # a replacement still booting
            self.agents[vm["name"]] = AgentSim(self, vm, assignment, plan, reused=reused)

    def heartbeats(self) -> None:
        """Every booted agent still running says it is alive (delivered now)."""
        for agent in self.agents.values():
            if agent.stage > 0 and not agent.done and agent.vm_running():
                beat = agent.beat(agent.phase)
                self.deliver(self.publish("epoch_done", beat, scheduled=False))


class AgentSim:
    """A VM's agent (``spotline.vm_image.agent.Agent``), one move per step, its events
    built from the VM's assignment as the agent builds them."""

    def __init__(
        self,
        world: World,
        vm: dict[str, Any],
        assignment: Assignment,
        plan: Plan,
        *,
        reused: bool = False,
    ) -> None:
        self.world = world
        self.name: str = vm["name"]
        self.zone: str = vm["zone"]
        self.instance_id = str(vm["id"])
        self.assignment = assignment
        # Read with the assignment, as the agent reads it; its events carry it.
        self.token = str(vm["metadata"].get(EVENT_TOKEN_METADATA_KEY, ""))
        self.plan = plan
        self.stage = 0
        self.reused = reused  # a cooling VM's agent, handed its next job: no boot
        self.done = False
        self.phase = JobSubstatus.GEARING_UP_ENV
        self.phases: dict[JobSubstatus, datetime] = {}
        self.installing = 0  # steps spent installing (``Plan.setup_steps``)
        self.resumed = plan.saved_epoch
        self.next_epoch = plan.saved_epoch + 1
        self.last_epoch: EpochDone | None = None
        # A gang's node: rank 0 leads (reports the epochs, saves, decides
        # each step's fate for every node, as the ranks' collectives do).
        self.rank = assignment.nodes.index(self.name) if self.name in assignment.nodes else 0
        self.gang = len(assignment.nodes) > 1
        # Its ranks stopped with the gang, waiting for it to regroup around a
        # replacement (``spotline.vm_image.agent.regroup``): since when.
        self.waiting_since: datetime | None = None
        self.regroups: list[Regroup] = []  # what it was told, in order
        self.regrouped_setting_up = False  # told before its trainer started
        self.led = 0  # epochs led at its gang's generation

    def peers(self) -> list[AgentSim]:
        """The other nodes' agents of this attempt in this node's gang, woken so far."""
        return [
            agent
            for agent in self.world.agents.values()
            if agent is not self
            and agent.name in self.assignment.nodes
            and (agent.assignment.job_id, agent.assignment.attempt)
            == (self.assignment.job_id, self.assignment.attempt)
        ]

    def gang_training(self) -> bool:
        """Every node up, its agent training: the gang's ranks can take a step."""
        peers = self.peers()
        if len(peers) != len(self.assignment.nodes) - 1:
            return False
        return all(p.stage >= 2 and not p.done and p.vm_running() for p in peers)

    def vm_running(self) -> bool:
        vm = self.world.cloud.get(self.name, self.zone)
        return vm is not None and vm["state"] == "RUNNING"

    def metadata(self, key: str) -> str | None:
        vm = self.world.cloud.get(self.name, self.zone)
        return None if vm is None else vm["metadata"].get(key)

    def common(self) -> dict[str, Any]:
        return {
            "job_id": self.assignment.job_id,
            "attempt": self.assignment.attempt,
            "instance": self.name,
            "sent_at": self.world.now,
            "phases": dict(self.phases),
            "token": self.token,
        }

    def enter(self, phase: JobSubstatus) -> None:
        self.phase = phase
        self.phases[phase] = self.world.now
        self.world.publish("epoch_done", self.beat(phase))

    def beat(self, phase: JobSubstatus, **fields: Any) -> Heartbeat:
        step = self.last_epoch.step if self.last_epoch else None
        return Heartbeat(**self.common(), phase=phase, step=step, **fields)

    def act(self) -> None:
        if self.done:
            return
        if not self.vm_running():
            self.done = True  # deleted or stopped under it: the agent is gone
            return
        world, plan, attempt = self.world, self.plan, self.assignment.attempt
        loss = plan.losses.get(attempt) if self.rank == plan.lost_node else None
        if attempt in plan.taken:
            loss = None
        if self.second_loss_due():
            plan.second_taken = True
            self.lose("log-sink" if self.stage == 0 else plan.second_report)
            return
        lost_before = plan.lost_step is not None and plan.lost_step < world.step
        if plan.cancel_replacing and not plan.canceled and lost_before:
            plan.canceled = True  # while the replacement boots
            world.cancel(plan.job_id)
        if self.waiting_since is not None:
            self.await_regroup()
            return
        if self.gang and self.stage >= 1:
            self.take_regroup()
        if self.stage == 1 and self.assignment.generation > 0 and not self.gate_open():
            # A replacement's trainer restores once its gang regroups; its
            # agent's heartbeat goes on meanwhile.
            world.publish("epoch_done", self.beat(self.phase))
            return
        if self.stage == 1 and self.installing < plan.setup_steps:
            self.install(loss)
            return
        if self.gang and self.stage >= 2 and not self.gang_training():
            # Its ranks wait in their rendezvous for a node (lost as the
            # gang set up, or still setting up): no step without it.
            world.publish("epoch_done", self.beat(self.phase))
            return
        if self.gang and self.stage >= 2 and self.rank != 0:
            return  # a worker follows its leader
        if self.gang and self.stage >= 2:
            self.lead()
            return
        if self.stage == 0 and loss and loss[0] == 0 and not plan.install_loss_step:
            # Taken before its agent ran: only the log sink can report it.
            self.lose("log-sink" if loss[1] in ("log-sink", "both") else "silent")
        elif self.stage == 0 and self.reused:
            self.enter(JobSubstatus.SENDING_MODEL_AND_DATA)
        elif self.stage == 0:
            self.phases[JobSubstatus.GEARING_UP_ENV] = world.now
            world.publish(
                "vm_booted", VmBooted(**self.common(), zone=self.zone, instance_id=self.instance_id)
            )
            self.enter(JobSubstatus.SENDING_MODEL_AND_DATA)
        elif self.stage == 1:
            self.enter(JobSubstatus.TRAINING)
            if self.resumed:
                step = self.resumed * STEPS_PER_EPOCH
                world.publish(
                    "epoch_done",
                    Heartbeat(
                        **self.common(),
                        phase=self.phase,
                        step=step,
                        resumed_from_step=step,
                    ),
                )
        elif loss and loss[0] <= self.next_epoch:
            self.lose(loss[1])
        elif plan.fail_epoch == self.next_epoch:
            self.finish(3)
        elif self.next_epoch <= plan.epochs:
            self.epoch()
            cancel = plan.cancel_epoch is not None and plan.cancel_epoch < self.next_epoch
            if cancel and attempt == plan.cancel_attempt and not plan.canceled:
                plan.canceled = True
                world.cancel(plan.job_id)
        else:
            self.finish(0)
        self.stage += 1

    def second_loss_due(self) -> bool:
        """Whether the plan's second loss (``Plan.second_loss``) takes this
        node now: the replacement before its agent ran, or a node of the
        first attempt the gang kept, ``second_after`` steps after the first
        loss, or once told the gang's regroup, before taking it."""
        plan = self.plan
        if not plan.second_loss or plan.second_taken or plan.lost_step is None:
            return False
        if plan.second_loss in SMALLER_LOSSES:
            return False  # the smaller gang's head decides (``lead``)
        if self.assignment.attempt != 1:
            return False
        if plan.second_loss == "replacement":
            return self.stage == 0 and self.assignment.generation > 0
        if plan.second_loss == "unjoined":
            told = self.metadata(REGROUP_METADATA_KEY)
            regroup = Regroup.model_validate_json(told) if told else None
            newer = regroup is not None and regroup.generation > self.assignment.generation
            return newer and self.rank == plan.second_rank()
        due = self.world.step == plan.lost_step + plan.second_after
        return due and self.assignment.generation == 0 and self.rank == plan.second_rank()

    def install(self, loss: tuple[int, str] | None) -> None:
        """One step of installing the job's requirements, or the plan's loss
        during setup (``Plan.install_loss_step``)."""
        self.installing += 1
        if loss and loss[0] == 0 and self.installing == self.plan.install_loss_step:
            self.lose(loss[1])
        elif self.installing == 1:
            self.enter(JobSubstatus.INSTALLING_REQUIREMENTS)
        else:
            self.world.publish("epoch_done", self.beat(self.phase))

    def gate_open(self) -> bool:
        return self.metadata(RESTORE_METADATA_KEY) == RESTORE_GO

    def take_regroup(self) -> None:
        """A regroup told while this node set up, or while its ranks waited
        in a rendezvous with a node lost before it trained (the agent's
        ``watch_regroup``): its ranks start with the new node list."""
        told = self.metadata(REGROUP_METADATA_KEY)
        regroup = Regroup.model_validate_json(told) if told else None
        if regroup is None or regroup.generation <= self.assignment.generation:
            return
        if self.name in regroup.nodes:
            self.assignment = self.assignment.regrouped(regroup)
            self.rank = self.assignment.nodes.index(self.name)
            self.regroups.append(regroup)
            self.regrouped_setting_up |= self.stage == 1

    def await_regroup(self) -> None:
        """A node whose ranks stopped with its gang: once the functions tell it
        the gang's new node list (a newer generation), its ranks restart from
        the gang's last save; past the job's bound and a margin, it stops."""
        since = self.waiting_since
        assert since is not None
        told = self.metadata(REGROUP_METADATA_KEY)
        regroup = Regroup.model_validate_json(told) if told else None
        if regroup is not None and regroup.generation > self.assignment.generation:
            self.assignment = self.assignment.regrouped(regroup)
            self.rank = self.assignment.nodes.index(self.name)
            self.waiting_since = None
            self.next_epoch = self.plan.saved_epoch + 1
            self.plan.regrouped_from = self.plan.saved_epoch * STEPS_PER_EPOCH
            self.led = 0
            self.regroups.append(regroup)
            self.world.publish("epoch_done", self.beat(JobSubstatus.TRAINING))
            return
        if (self.world.now - since).total_seconds() > regroup_wait_s(self.assignment):
            self.done = True  # it did not regroup: this node's agent stops
            return
        self.world.publish("epoch_done", self.beat(self.phase))  # its heartbeat goes on

    def lead(self) -> None:
        """Rank 0's step, for the whole gang: the loss the plan puts on a node
        (its peers' ranks stop with it), a failure, an epoch, or the end."""
        plan, attempt = self.plan, self.assignment.attempt
        nodes = {agent.rank: agent for agent in [self, *self.peers()]}
        loss = plan.losses.get(attempt) if attempt not in plan.taken else None
        asked = any(agent.stop_asked() for agent in nodes.values())
        smaller = self.smaller_loss(asked)
        if smaller is not None:
            plan.second_taken = True
            nodes[smaller].lose(plan.second_report)
            for agent in nodes.values():
                if agent.rank != smaller:
                    agent.stop_with_gang(noticed=True)
        elif asked:
            # Asked to stop and grow back: the asked node's ranks raise the
            # stop flag, and every rank stops at the step they agree on.
            for agent in nodes.values():
                agent.stop_with_gang(noticed=True)
        elif loss and loss[0] <= self.next_epoch:
            nodes[plan.lost_node].lose(loss[1])
            for agent in nodes.values():
                if agent.rank != plan.lost_node:
                    agent.stop_with_gang(noticed=loss[1] != "silent")
        elif plan.fail_epoch == self.next_epoch:
            for agent in sorted(nodes.values(), key=lambda a: -a.rank):  # workers die too
                agent.finish(3 if agent.rank == 0 else 1)
        elif self.next_epoch <= plan.epochs:
            self.epoch()
            self.led += 1
            for agent in nodes.values():
                agent.next_epoch = self.next_epoch
            cancel = plan.cancel_epoch is not None and plan.cancel_epoch < self.next_epoch
            if cancel and attempt == plan.cancel_attempt and not plan.canceled:
                plan.canceled = True
                self.world.cancel(plan.job_id)
        else:  # workers first: node 0's exit ends the job
            for agent in sorted(nodes.values(), key=lambda a: -a.rank):
                agent.finish(0)
        self.stage += 1

    def smaller_loss(self, asked: bool) -> int | None:
        """The rank of the node of an elastic gang at its smaller size the
        plan's second loss takes now (``SMALLER_LOSSES``): once it trained
        an epoch at that size, or as it is ``asked`` to stop and grow back;
        None: none."""
        plan = self.plan
        if plan.second_loss not in SMALLER_LOSSES or plan.second_taken:
            return None
        smaller = self.assignment.generation > 0 and len(self.assignment.nodes) < plan.nodes
        due = asked if plan.second_loss == "asked-worker" else self.led >= 1
        if not smaller or not due:
            return None
        return 0 if plan.second_loss == "smaller-head" else len(self.assignment.nodes) - 1

    def stop_asked(self) -> bool:
        """Whether spotline asked this node's gang, at its generation, to stop
        and grow back (the agent's ``watch_gang_stop``, while its ranks run)."""
        asked = self.metadata(GANG_STOP_METADATA_KEY) or ""
        return asked.strip() == str(self.assignment.generation)

    def stop_with_gang(self, noticed: bool) -> None:
        """Another node was taken. Its notice seen (its ranks raise the stop
        flag), every rank stops at the step, rank 0 saves, and each agent
        reports the gang's stop. Missed, the ranks die in the next collective
        and each agent reports a failed run (held: ``gang_finish``)."""
        if not noticed:
            self.finish(1)
            return
        saved = self.last_epoch if self.rank == 0 else None
        event = SpotPreempted(
            **self.common(),
            checkpoint_uri=saved.checkpoint_uri if saved else None,
            step=saved.step if saved else None,
            gang_stop=True,
            generation=self.assignment.generation,
        )
        self.world.publish("spot_preempted", event)
        if self.assignment.spec.replace_node_timeout_s > 0:
            self.waiting_since = self.world.now  # for the gang to regroup
        else:
            self.done = True

    def epoch(self) -> None:
        epoch = self.next_epoch
        uri = f"{self.assignment.checkpoint_dir}/epoch-{epoch}"
        event = EpochDone(
            **self.common(),
            epoch=epoch,
            epochs=self.plan.epochs,
            step=epoch * STEPS_PER_EPOCH,
            metrics={"val_acc": round(0.5 + epoch / (2 * self.plan.epochs), 4)},
            checkpoint_uri=uri,
        )
        self.world.publish("epoch_done", event)
        self.world.publish("epoch_done", self.beat(JobSubstatus.TRAINING))
        self.last_epoch = event
        self.plan.saved_epoch = epoch  # the checkpoint is in storage before it is reported
        self.next_epoch += 1

    def finish(self, exit_code: int) -> None:
        self.enter(JobSubstatus.RETURNING)
        if exit_code == 0 and self.plan.lost_at_finish:
            self.world.cloud.preempt(self.name, zone=self.zone, notice_s=0.0)
            self.report_loss(self.plan.lost_at_finish)
        event = JobFinished(
            **self.common(),
            exit_code=exit_code,
            log_tail="" if exit_code == 0 else "ValueError: replayed failure\n",
            checkpoint_uri=self.last_epoch.checkpoint_uri if self.last_epoch else None,
            last_epoch=self.last_epoch,
        )
        self.world.publish("job_finished", event)
        self.done = True

    def lose(self, report: str) -> None:
        """Compute Engine takes the Spot VM; who reports it is the plan's."""
        self.plan.taken.add(self.assignment.attempt)
        self.plan.lost_step = self.world.step
        self.world.cloud.preempt(self.name, zone=self.zone, notice_s=0.0)
        self.report_loss(report)
        self.done = True

    def report_loss(self, report: str) -> None:
        world = self.world
        saved = self.last_epoch
        if report in ("agent", "both"):
            event = SpotPreempted(
                **self.common(),
                checkpoint_uri=saved.checkpoint_uri if saved else None,
                step=saved.step if saved else None,
                generation=self.assignment.generation,  # the one it last ran in
            )
            world.publish("spot_preempted", event)
        if report in ("log-sink", "both"):
            sink = log_entry(PROJECT, self.zone, self.name, self.instance_id)
            world.publish("spot_preempted", sink)


def log_entry(project: str, zone: str, name: str, instance_id: str) -> bytes:
    """The Cloud Logging sink's message for a preemption: the VM's name, and
    its numeric id in the entry's resource labels."""
    return json.dumps(
        {
            "protoPayload": {
                "methodName": PREEMPTED_METHOD,
                "resourceName": f"projects/{project}/zones/{zone}/instances/{name}",
            },
            "resource": {
                "type": "gce_instance",
                "labels": {"zone": zone, "instance_id": instance_id},
            },
        }
    ).encode()

"""Tell spotline of a Spot preemption from the instance's shutdown script.

The agent reports a preemption itself (``agent.py``); this covers an agent that
is gone by then (crashed, OOM-killed). Compute Engine runs the shutdown script
(``vm_image/scripts/shutdown.sh``) on every shutdown, so this first reads
``instance/preempted``: a normal shutdown or a self-delete is not a preemption
and publishes nothing. The spot-preempted handler ignores a second event of the
same attempt, so publishing after the agent did is harmless.

Run: ``python -m spotline.vm_image.agent.shutdown_notice``. Exit status 0: nothing to do,
or the event was published; 1: it could not be (the reason is logged).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError

from spotline.shared import logs
from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.events import SpotPreempted
from spotline.shared.domain.vms import EVENT_TOKEN_METADATA_KEY, JOB_METADATA_KEY
from spotline.shared.ports.bus import Bus
from spotline.vm_image.agent.metadata import Metadata, MetadataError

# The notice is 30 s and the shutdown script kills this after 20 s: everything
# below fits in BUDGET_S, so the event goes out (perhaps without a checkpoint)
# before anyone kills us.
BUDGET_S = 15.0
METADATA_TIMEOUT_S = 2.0
LISTING_TIMEOUT_S = 6.0
TOPIC = "spot_preempted"


class NoticeError(RuntimeError):
    """The preemption could not be reported; the message says why."""


@dataclass(frozen=True)
class Found:
    """The newest checkpoint of the job, or none (``uri`` and ``step`` None)."""

    uri: str | None = None
    step: int | None = None


def is_preempted(metadata: Metadata) -> bool:
    """Whether Compute Engine has flagged this instance as preempted.

    Raises:
        MetadataError: the metadata server did not answer.
    """
    return metadata.get("instance/preempted").strip().upper() == "TRUE"


def read_assignment(metadata: Metadata) -> tuple[str, Assignment, str]:
    """The instance name, its ``spotline-job`` assignment and the attempt's
    event token (``spotline.shared.domain.event_auth``).

    Raises:
        NoticeError: the metadata server did not answer, or the assignment or
            the token is missing or invalid.
    """
    try:
        name = metadata.get("instance/name")
        raw = metadata.get(f"instance/attributes/{JOB_METADATA_KEY}")
        token = metadata.get(f"instance/attributes/{EVENT_TOKEN_METADATA_KEY}").strip()
        return name, Assignment.model_validate_json(raw), token
    except (MetadataError, ValidationError) as err:
        raise NoticeError(f"cannot read the job assignment: {err}") from err


def find_checkpoint(checkpoint_dir: str, timeout_s: float) -> Found:
    """The newest checkpoint in ``checkpoint_dir``, looked up within ``timeout_s``:
    a PyTorch ``ckpt-<step>.pt`` with its step, or the Keras state (no step in
    its name, so none is sent).

    A listing that fails or takes too long answers no checkpoint: the event
    matters more than its details, and the next attempt finds the file anyway.
    """
    # Imported only once preempted: an ordinary shutdown needs no fsspec.
    # Neither torch nor TensorFlow: their imports would eat the notice.
    from spotline.vm_image.trainers.checkpoint_files import latest_saved_state, step_of

    answers: queue.Queue[str | Exception | None] = queue.Queue(maxsize=1)

    def look() -> None:
        try:
            answers.put(latest_saved_state(checkpoint_dir))
        except Exception as err:  # handed to the caller, who logs it
            answers.put(err)

    # fsspec calls take no overall timeout (gcsfs retries with backoff): a daemon thread
    # that we stop waiting for bounds it, and does not hold up the exit.
    threading.Thread(target=look, name="checkpoint-listing", daemon=True).start()
    try:
        answer = answers.get(timeout=max(timeout_s, 0.0))
    except queue.Empty:
        logs.warning(f"listing {checkpoint_dir} took over {timeout_s:.1f} s; no checkpoint sent")
        return Found()
    if isinstance(answer, Exception):
        logs.warning(f"cannot list {checkpoint_dir}: {answer!r}; no checkpoint sent")
        return Found()
    if answer is None:
        return Found()
    return Found(answer, step_of(answer))


def publish(bus: Bus, event: SpotPreempted, timeout_s: float) -> str:
    """Publish ``event`` to spot-preempted; the server's message id.

    Raises:
        NoticeError: not published within ``timeout_s`` (every retry included).
    """
    try:
        return bus.publish(TOPIC, event, timeout_s=timeout_s)
    except Exception as err:
        raise NoticeError(f"publish to {bus.topic_path(TOPIC)} failed: {err!r}") from err


def report(metadata: Metadata, deadline: float) -> int:
    """Publish SpotPreempted if this instance is preempted; the exit status.

    ``deadline`` is a ``time.monotonic()`` value by which to be done.
    """
    # 1. Is this shutdown a preemption at all?
    try:
        if not is_preempted(metadata):
            logs.info("not preempted: nothing to report")
            return 0
    except MetadataError as err:
        logs.error(f"cannot read instance/preempted: {err}")
        return 1
    try:
        # 2. Which job and attempt ran here, and where its checkpoints go.
        instance, assignment, token = read_assignment(metadata)
        # 3. The newest checkpoint, if it can be found in time.
        listing_s = min(LISTING_TIMEOUT_S, (deadline - time.monotonic()) / 2)
        found = find_checkpoint(assignment.checkpoint_dir, listing_s)
        # 4. The event; a duplicate of the agent's is ignored by the handler.
        event = SpotPreempted(
            job_id=assignment.job_id,
            attempt=assignment.attempt,
            instance=instance,
            sent_at=datetime.now(UTC),
            token=token,
            checkpoint_uri=found.uri,
            step=found.step,
        )
        publish_s = max(deadline - time.monotonic(), 1.0)
        bus = PubsubBus(assignment.project, assignment.event_topics())  # its user's, if own
        message_id = publish(bus, event, publish_s)
    except NoticeError as err:
        logs.error(f"preempted, but spotline was not told: {err}")
        return 1
    logs.warning(
        "preempted: spotline told",
        job_id=event.job_id,
        attempt=event.attempt,
        checkpoint_uri=event.checkpoint_uri,
        step=event.step,
        message_id=message_id,
    )
    return 0


def main() -> int:
    """Entry point of the shutdown script; the exit status."""
    deadline = time.monotonic() + BUDGET_S
    return report(Metadata(timeout_s=METADATA_TIMEOUT_S), deadline)


if __name__ == "__main__":
    sys.exit(main())

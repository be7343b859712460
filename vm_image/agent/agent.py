"""The VM agent: learns its job from metadata, runs the trainer, reports.

1. read the instance's name, zone, ``spotline-job`` assignment and the
   attempt's event token (every event carries it: ``spotline.shared.domain.event_auth``);
2. publish VM booted, then heartbeats (with the current phase) until done;
3. fetch code, data set and requirements (``trainer_launch.prepare``),
   restore the trainer's local checkpoint folder from storage, then run the
   trainer, relaying each reported epoch and mirroring its local checkpoint
   and output folders to storage (``checkpoint_mirror``);
4. watch ``instance/preempted`` (wait_for_change) and SIGTERM: on the 30 s
   notice the trainer checkpoints at its next step and exits; what its
   folders hold is uploaded, then spotline is told where;
5. publish job finished with the exit code and the tail of the log (a trainer
   that cannot start is a failed job too), retrying for FINISH_PUBLISH_S; if
   spotline still was not told, exit 1: the unit's FailureAction powers the VM
   off, and the reaper notices.

It needs no Firestore access: only the metadata server, Pub/Sub and storage.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spotline.shared import logs
from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.contract.assignment import Assignment, Regroup
from spotline.shared.contract.events import (
    EpochDone,
    Heartbeat,
    JobFinished,
    SpotPreempted,
    VmBooted,
)
from spotline.shared.contract.exit_codes import exit_status
from spotline.shared.contract.ranks import EXIT_STOPPED
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.vms import EVENT_TOKEN_METADATA_KEY, JOB_METADATA_KEY, RESTORE_WAIT_S
from spotline.shared.ports.bus import Bus
from spotline.vm_image.agent.checkpoint_mirror import SETTLE_S, FolderMirror
from spotline.vm_image.agent.metadata import Metadata, MetadataError
from spotline.vm_image.agent.privileges import AccountMissing, TrainerAccount, trainer_account
from spotline.vm_image.agent.rank_group import RankGroup
from spotline.vm_image.agent.recorded import (
    SnapshotChanged,
    check_snapshot,
    expected_digest,
    job_sources,
)
from spotline.vm_image.agent.regroup import (
    await_regroup,
    newer_regroup,
    regroup_wait_s,
    watch_gang_stop,
    watch_regroup,
)
from spotline.vm_image.agent.restore_gate import await_restore
from spotline.vm_image.agent.trainer_launch import (
    EXIT_PREPARE_FAILED,
    Prepared,
    launch_trainer,
    prepare,
    remove_earlier_containers,
)
from spotline.vm_image.agent.trainer_process import TENSORBOARD_DIR, CannotStart, TrainerProcess
from spotline.vm_image.agent.transfers import download_folder, restore_modes, upload_folder
from spotline.vm_image.agent.workspace import CHECKPOINTS_DIR, OUTPUTS_DIR, job_folder
from spotline.vm_image.trainers.state_mirror import local_path

JOB_ATTRIBUTE = f"instance/attributes/{JOB_METADATA_KEY}"


def preempted_run(exit_code: int, notice_at: float | None, exited_at: float) -> bool:
    """Whether the trainer's run ended by the preemption (SpotPreempted) rather
    than on its own (JobFinished). A notice before the trainer exited means it
    was sent SIGTERM and its exit is the notice's, whatever its code. A notice
    after a trainer exited 0 is the VM's, not the run's: the job completed and
    must be said so (spotline takes a finish and a preemption in either order,
    ``spotline.shared.domain.late_finish``); a failed run with a notice after it is left
    to the next attempt, which resumes from the last save."""
    if notice_at is None:
        return False
    return notice_at <= exited_at or exit_code != 0


def gang_stopped(exit_code: int, notice_at: float | None, nodes: int, asked: bool = False) -> bool:
    """Whether a node of a gang that got no notice of its own stopped with its
    gang: another node was noticed (or spotline ``asked`` an elastic gang to
    stop and grow back, a gang of one node too), the ranks agreed on a step to
    stop at, rank 0 saved it, and every rank exited 143 (what a shell reports
    for SIGTERM, the contract's "stopped to save"). Reported as such, not as
    a failed run: a JobFinished with 143 would fail (or restart) the job for a
    preemption (``spotline.shared.contract.events.SpotPreempted``).

    Once ``asked`` to grow back, any exit is the stop asked for: a rank
    killed by the request before its trainer installed its stop handler
    (143 too), a peer that failed in a collective with it, one killed past
    ``RANKS_STOP_GRACE_S`` (blocked with it), or a trainer that took the
    stop for its end and exited 0 (as a notice's SIGTERM, the ask came
    before the exit: reported finished, the job would end short of its
    epochs; one that really finished just then resumes at its last save).
    The gang then resumes from its last save (``Agent.saved_step``)."""
    if notice_at is not None:
        return False
    if asked:
        return True
    return nodes > 1 and exit_code == EXIT_STOPPED


TOKEN_ATTRIBUTE = f"instance/attributes/{EVENT_TOKEN_METADATA_KEY}"
# A cooling agent idles a little past the period: the reaper deletes the VM at
# its end, and a claim racing the end must still find the agent listening.
COOLING_GRACE_S = 60
# While training, TensorBoard logs go up on an epoch's report at most this
# often (and always once the trainer exits): each upload copies every event
# file again, which for short epochs cost the agent more than the epoch's event.
TENSORBOARD_UPLOAD_S = 30.0
# The last upload of the trainer's folders after the notice ends by then, so
# that the report goes out before the VM stops (the notice is 30 s); after a
# trainer's own exit it may take longer (a large final checkpoint).
NOTICE_SYNC_S = 20.0
FINISH_SYNC_S = 600.0
# The agent's setting (not the job's): how long a save in the trainer's
# folders must stay unchanged to be stored while the trainer runs.
MIRROR_SETTLE_ENV = "SPOTLINE_MIRROR_SETTLE_S"
# How long the trainer's ranks have to stop once the agent asked them to
# (SIGTERM) for its gang's sake, as long as a preemption notice gives: past
# it, they are killed. Asked to grow back (``watch_gang_stop``), a rank may be
# blocked with a peer that died of the same request before its trainer
# installed its stop handler; stopped for a regroup while it ran
# (``watch_regroup``), it may wait in a rendezvous with a node lost as the
# gang set up: a stop flag is read between steps, and neither has one. The
# agent's setting, for tests.
RANKS_STOP_GRACE_S = 30.0
RANKS_STOP_GRACE_ENV = "SPOTLINE_RANKS_STOP_GRACE_S"
# How long the agent tries to publish job finished before it gives up and
# exits: the reaper's default stall timeout, after which it would act anyway.
FINISH_PUBLISH_S = 300.0
# Each try's own limit (the client retries transient errors within it), and
# the longest wait between tries.
_FINISH_TRY_S = 30.0
_FINISH_BACKOFF_MAX_S = 30.0


class Agent:
    def __init__(
        self,
        metadata: Metadata,
        workdir: Path,
        bus: Bus | None = None,
        finish_publish_s: float = FINISH_PUBLISH_S,
        restore_wait_s: float = RESTORE_WAIT_S,
    ) -> None:
        self.metadata = metadata
        self.workdir = workdir
        self.finish_publish_s = finish_publish_s
        self.restore_wait_s = restore_wait_s
        self.name = metadata.get("instance/name")
        self.zone = metadata.get("instance/zone").rsplit("/", 1)[-1]
        self.instance_id = metadata.get("instance/id")
        self._job_raw, self._job_etag = metadata.get_with_etag(JOB_ATTRIBUTE)
        self.assignment = Assignment.model_validate_json(self._job_raw)
        self._given_bus = bus
        self.bus = self._bus_for(self.assignment)
        self.preempted = threading.Event()
        self._notice_at: float | None = None  # monotonic time of the preemption notice
        self.stopped = threading.Event()  # the agent is exiting
        self._report_lock = threading.Lock()
        try:
            self.account: TrainerAccount | AccountMissing = trainer_account()
        except AccountMissing as err:  # each job fails, saying why; none runs as root
            self.account = err
        self._start(self.assignment, read_event_token(metadata), reused=False)

    def _bus_for(self, assignment: Assignment) -> Bus:
        """The bus the agent was given (tests), else Pub/Sub on the topics
        ``assignment`` names: its user's own, in the per-user mode, the only
        ones its account may publish on."""
        return self._given_bus or PubsubBus(assignment.project, assignment.event_topics())

    def _start(self, assignment: Assignment, event_token: str, reused: bool) -> None:
        """Reset the per-job state; a reused (cooling) VM skips gearing up."""
        self.assignment = assignment
        # Every line from here on is this job's, on this node: the attempt's
        # Cloud Logging query finds them by these fields (shared/logs.py).
        logs.labelled(
            job_id=assignment.job_id,
            attempt=assignment.attempt,
            # (A name not in the gang fails at the trainer's start, saying so.)
            node=assignment.nodes.index(self.name) if self.name in assignment.nodes else 0,
        )
        # The token of the attempt this VM runs now: a cooling VM handed the
        # next job gets that job's with it, and every event from then on
        # carries the new one.
        self.event_token = event_token
        # ... and the topics of its user (the per-user mode): a cooling VM is
        # handed only a job of the user whose account it runs as.
        self.bus = self._bus_for(assignment)
        self.phase = JobSubstatus.SENDING_MODEL_AND_DATA if reused else JobSubstatus.GEARING_UP_ENV
        self.phases: dict[JobSubstatus, datetime] = {}
        if not reused:
            self.phases[self.phase] = datetime.now(UTC)
        self.step: int | None = None
        # The step of ``checkpoint_uri``: the last one saved (``step`` may be
        # an epoch's that was not).
        self.saved_step: int | None = None
        self.checkpoint_uri: str | None = None
        self.trainer: TrainerProcess | RankGroup | None = None
        # What the trainer was started from, kept for a restart after a regroup.
        self._launch: tuple[Path, Prepared] | None = None
        self.checkpoints: FolderMirror | None = None
        self.outputs: FolderMirror | None = None
        self.last_epoch: EpochDone | None = None
        self._tensorboard_uploaded_at = float("-inf")  # the first epoch's logs go up
        self.job_done = threading.Event()
        self._preemption_reported = False
        self._asked_to_grow = False  # an elastic gang's stop to grow back (``watch_gang_stop``)
        # The gang regrouped while this node's ranks ran (``watch_regroup``).
        self._regrouped_under: Regroup | None = None
        # Each job its own folder: a cooling or restarted VM runs several, and
        # must not replay one job's reports, upload its logs for the next, or
        # show the next job its files (workspace: earlier folders are removed).
        key = f"{assignment.job_id}-a{assignment.attempt}"
        self.job_dir = job_folder(self.workdir, key, self.account)

    # -- events -----------------------------------------------------------

    def _common(self) -> dict[str, Any]:
        return {
            "job_id": self.assignment.job_id,
            "attempt": self.assignment.attempt,
            "instance": self.name,
            "sent_at": datetime.now(UTC),
            "phases": dict(self.phases),
            "token": self.event_token,
        }

    def _heartbeat(self) -> None:
        self.bus.publish(
            "epoch_done", Heartbeat(**self._common(), phase=self.phase, step=self.step)
        )

    def _enter(self, phase: JobSubstatus) -> None:
        self.phase = phase
        self.phases[phase] = datetime.now(UTC)
        try:
            self._heartbeat()
        except Exception as err:  # the next beat or event carries the phase too
            logs.warning(f"heartbeat on entering {phase} failed: {err}")

    def _on_report(self, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if kind == "epoch":
            self.step = int(record.get("step", 0))
            reported = self._stored_uri(record.get("checkpoint_uri"))
            self.checkpoint_uri = reported or self.checkpoint_uri
            if reported:
                self.saved_step = self.step
            event = EpochDone(
                **self._common(),
                epoch=record["epoch"],
                epochs=record["epochs"],
                step=self.step,
                metrics=record.get("metrics", {}),
                checkpoint_uri=reported,
            )
            self.bus.publish("epoch_done", event)
            self.last_epoch = event
            if time.monotonic() - self._tensorboard_uploaded_at >= TENSORBOARD_UPLOAD_S:
                self._upload_tensorboard()
        elif kind == "resumed":
            self.step = self.saved_step = int(record.get("step", 0))
            self.bus.publish(
                "epoch_done",
                Heartbeat(
                    **self._common(),
                    phase=self.phase,
                    step=self.step,
                    resumed_from_step=self.step,
                ),
            )
        elif kind == "checkpoint":
            self.step = self.saved_step = int(record.get("step", 0))
            uri = record.get("uri")
            self.checkpoint_uri = self._stored_uri(uri) if uri else self.checkpoint_uri
            if not self.preempted.is_set():
                return
            if self._stored_uri(uri) == uri:
                # The state is durable once reported: tell spotline now rather
                # than after the trainer (and torch) finish exiting.
                self._report_preempted()
            else:
                self._report_once_mirrored(uri)

    def _report_once_mirrored(self, uri: str | None) -> None:
        """A save on the notice in the local checkpoint folder: spotline is
        told once the mirror has stored it, not only after the trainer exits
        (a Ray head's launcher waits for Ray to drain, which may outlast the
        notice, and the VM would go with the report unsent)."""
        mirror, path = self.checkpoints, local_path(uri) if uri else None
        unit = mirror.unit_of(path) if mirror is not None and path else None
        if mirror is None or unit is None:
            return  # told after the trainer's exit, as ever
        done = self.job_done

        def report_when_stored() -> None:
            while not done.wait(0.2) and not self._preemption_reported:
                if mirror.holds(*unit):
                    self._report_preempted()
                    return

        threading.Thread(target=report_when_stored, daemon=True).start()

    # -- background watchers ------------------------------------------------

    def _beat(self, done: threading.Event) -> None:
        while not done.wait(self.assignment.heartbeat_s):
            try:
                self._heartbeat()
            except Exception as err:  # a missed heartbeat must not kill the agent
                logs.warning(f"heartbeat failed: {err}")

    def _watch_preemption(self) -> None:
        etag: str | None = None
        while not self.stopped.is_set():
            try:
                value, etag = self.metadata.wait_for_change("instance/preempted", etag, 60)
            except MetadataError:
                if self.stopped.wait(1.0):
                    return
                continue
            if value.strip().upper() == "TRUE":
                self._on_notice("metadata instance/preempted")
                return

    def _on_notice(self, source: str) -> None:
        if self.preempted.is_set():
            return
        self._notice_at = time.monotonic()
        self.preempted.set()
        logs.warning(f"preemption notice ({source}): checkpointing now", instance=self.name)
        if self.trainer is not None:
            self.trainer.signal(signal.SIGTERM)

    # -- the run ------------------------------------------------------------

    def run(self) -> int:
        """Run the VM's job; with a cooling period, idle for the next one and
        run it too, until the period ends or the VM is taken away.

        Returns:
            The exit status: 0, or 1 when spotline could not be told that a
            job finished (the VM must not wait for a delete that will not come).
        """
        signal.signal(signal.SIGTERM, lambda *_: self._on_notice("SIGTERM"))
        threading.Thread(target=self._watch_preemption, daemon=True).start()
        booted = VmBooted(**self._common(), zone=self.zone, instance_id=self.instance_id)
        try:
            self.bus.publish("vm_booted", booted)
        except Exception as err:
            # Pub/Sub did not answer within the publish's deadline: the job
            # must run regardless (dying here left it to the boot timeout and
            # a second attempt); every heartbeat says when the VM booted.
            logs.warning(f"vm booted not published ({err!r}); the heartbeats carry it")
        try:
            while True:
                if not self._run_job():
                    return 1
                period = self.assignment.spec.cool_down_period_s
                if self.preempted.is_set() or self._preemption_reported or period <= 0:
                    return 0
                following = self._wait_for_next_job(period + COOLING_GRACE_S)
                if following is None:
                    return 0
                self._start(following, read_event_token(self.metadata), reused=True)
        finally:
            self.stopped.set()

    def _wait_for_next_job(self, timeout_s: float) -> Assignment | None:
        """Idle until spotline hands this VM a new job through its metadata
        (``wait_for_change``: no polling), or ``timeout_s`` passes."""
        logs.labelled()  # no job's lines until the next one
        logs.info(f"cooling: waiting up to {timeout_s:.0f} s for the next job", instance=self.name)
        deadline = time.monotonic() + timeout_s
        while not self.preempted.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                raw, self._job_etag = self.metadata.wait_for_change(
                    JOB_ATTRIBUTE, self._job_etag, min(remaining, 60)
                )
            except MetadataError:
                time.sleep(1.0)
                continue
            if raw != self._job_raw:
                self._job_raw = raw
                return Assignment.model_validate_json(raw)
        return None

    def _run_job(self) -> bool:
        """Run the current job to its end; whether spotline was told of it."""
        threading.Thread(target=self._beat, args=(self.job_done,), daemon=True).start()
        try:
            self._enter(JobSubstatus.SENDING_MODEL_AND_DATA)
            code_uri, data_uri = job_sources(self.assignment)
            exit_code, log_tail, unrecoverable = self._train(code_uri, data_uri)
            while True:
                exited_at = time.monotonic()
                # Before any report: the next attempt must find what was saved.
                self._finish_mirrors()
                self._upload_tensorboard()
                if preempted_run(exit_code, self._notice_at, exited_at):
                    self._report_preempted()
                    return True
                regrouped, self._regrouped_under = self._regrouped_under, None
                if regrouped is not None and regrouped.generation <= self.assignment.generation:
                    regrouped = None  # taken already, from the wait for the regroup
                if regrouped is not None:
                    # Stopped for the regroup: nothing of this run to report,
                    # whatever its code (a trainer may take any stop for its
                    # end and exit 0: reported, that completed the job).
                    exit_code, log_tail, unrecoverable = self._rejoin(regrouped)
                    continue
                nodes = len(self.assignment.nodes)
                if not gang_stopped(exit_code, self._notice_at, nodes, self._asked_to_grow):
                    break
                if exit_code != EXIT_STOPPED:
                    logs.warning(
                        f"the trainer exited with code {exit_code} after the request to stop "
                        "and grow back: reported as that stop, from the last save"
                    )
                self._report_preempted(gang_stop=True)
                # A lost node replaced: the gang restarts its ranks from the save.
                regroup = await_regroup(
                    self.metadata, self.assignment, self.preempted, regroup_wait_s(self.assignment)
                )
                if self.preempted.is_set():
                    # Its own notice as it waited: spotline hears of this loss
                    # now, not from the log sink late, after regrouping around it.
                    self._report_preempted(again=True)
                    return True
                if regroup is None:
                    return True
                exit_code, log_tail, unrecoverable = self._rejoin(regroup)
            self._enter(JobSubstatus.RETURNING)
            event = JobFinished(
                **self._common(),
                exit_code=exit_code,
                log_tail=log_tail,
                checkpoint_uri=self.checkpoint_uri,
                last_epoch=self.last_epoch,
                unrecoverable=unrecoverable,
                mirrored_checkpoints=_units(self.checkpoints),
                mirrored_outputs=_units(self.outputs),
            )
            return self._publish_finished(event)
        finally:
            self.job_done.set()

    def _rejoin(self, regroup: Regroup) -> tuple[int, str, bool]:
        """Restart this node's ranks with the regrouped gang (``regroup``),
        from the gang's last save, as the first start does (the mirrors
        restored first); the trainer's exit code, output and False."""
        self.assignment = self.assignment.regrouped(regroup)
        self._preemption_reported = False
        self._asked_to_grow = False
        logs.info(
            f"the gang regrouped (generation {regroup.generation}: {', '.join(regroup.nodes)}); "
            "restarting this node's ranks from the last save",
            instance=self.name,
        )
        assert self._launch is not None  # the trainer ran once: its launch is kept
        try:
            remove_earlier_containers(self.assignment)
            self._start_mirrors()
            return self._run_trainer(*self._launch)
        except CannotStart as err:
            return self._cannot_start(err)

    def _train(self, code_uri: str | None, data_uri: str | None) -> tuple[int, str, bool]:
        """Prepare the job (code, data set, requirements), then run the trainer;
        its exit code, last output lines, and whether no new VM could do better.
        A job that cannot be prepared, or a trainer that cannot start, fails
        with the reason as its output."""
        try:
            # Before anything is fetched: a container left running (its
            # agent died) writes into this attempt's folder.
            remove_earlier_containers(self.assignment)
            code_dir = self._fetch_code(code_uri)
            prepared = prepare(
                self.assignment,
                self.account,
                self.workdir,
                self.job_dir,
                code_dir,
                data_uri,
                lambda: self._enter(JobSubstatus.INSTALLING_REQUIREMENTS),
            )
            self._check_snapshot(code_uri, data_uri, code_dir, prepared.data_dir)
            # The trainer restores the last save: only once the lost attempt's
            # VMs are gone (the restore gate), and then from storage.
            # A gang's replacement node waits for its gang's regroup, as long
            # as the job lets a replacement take.
            wait_s = self.restore_wait_s
            if self.assignment.generation > 0:
                wait_s = max(wait_s, regroup_wait_s(self.assignment))
            await_restore(self.metadata, wait_s)
            if len(self.assignment.nodes) > 1:
                # The gang regrouped as this node set up (a node lost before
                # training), or, on a replacement, an elastic gang shrank and
                # grew back since this VM was made: it joins at that generation.
                regroup = newer_regroup(self.metadata, self.assignment)
                if regroup is not None and self.name in regroup.nodes:
                    self.assignment = self.assignment.regrouped(regroup)
            self._launch = (code_dir, prepared)
            self._start_mirrors()
            self._enter(JobSubstatus.TRAINING)
            return self._run_trainer(code_dir, prepared)
        except CannotStart as err:
            return self._cannot_start(err)

    def _run_trainer(self, code_dir: Path, prepared: Prepared) -> tuple[int, str, bool]:
        """Start the trainer from ``code_dir`` (the mirrors started) and
        wait for it: its exit code, last output lines and False. A death by a
        signal is reported as a shell reports it (SIGABRT: 134, not -6), so
        restart_on_exit_codes can name it. Raises CannotStart."""
        self.trainer = launch_trainer(
            self.assignment,
            self.account,
            self.metadata,
            self.job_dir,
            code_dir,
            self.name,
            self._on_report,
            prepared,
        )
        done = threading.Event()
        if self.assignment.spec.min_nodes is not None and self.assignment.nodes:
            generation = self.assignment.generation
            threading.Thread(
                target=watch_gang_stop,
                args=(self.metadata, generation, done, lambda: self._on_grow(generation, done)),
                daemon=True,
            ).start()
        if len(self.assignment.nodes) > 1 and self.assignment.spec.replace_node_timeout_s > 0:
            threading.Thread(
                target=watch_regroup,
                args=(
                    self.metadata,
                    self.assignment,
                    self.name,
                    done,
                    lambda regroup: self._on_regroup(regroup, done),
                ),
                daemon=True,
            ).start()
        try:
            return exit_status(self.trainer.wait()), self.trainer.log_tail(), False
        finally:
            done.set()

    def _on_regroup(self, regroup: Regroup, exited: threading.Event) -> None:
        """The gang regrouped while this node's ranks ran: they are stopped
        (``_stop_ranks``), then started again with the new node list
        (``_run_job``). Not after this VM's own notice."""
        trainer = self.trainer
        if trainer is None or self.preempted.is_set():
            return
        self._regrouped_under = regroup
        logs.info(
            f"the gang regrouped (generation {regroup.generation}) while this node's ranks "
            "ran: stopping them to start again with the new node list"
        )
        self._stop_ranks(trainer, exited, "the regroup")

    def _on_grow(self, generation: int, exited: threading.Event) -> None:
        """spotline asked the elastic gang of ``generation`` to stop and grow
        back: this node's ranks stop as on a peer's notice (rank 0 saves),
        and the node then waits for the regroup at the full size."""
        trainer = self.trainer
        if trainer is None or self.assignment.generation != generation:
            return
        self._asked_to_grow = True
        logs.info("the gang's replacement is up: stopping at the next step to grow back")
        self._stop_ranks(trainer, exited, "the request to grow back")

    def _stop_ranks(
        self, trainer: TrainerProcess | RankGroup, exited: threading.Event, why: str
    ) -> None:
        """SIGTERM to the ranks of ``trainer``, and SIGKILL to those still
        running ``RANKS_STOP_GRACE_S`` later (``exited``: set once it exits):
        a rank blocked with a peer never returns to see its signal."""
        trainer.signal(signal.SIGTERM)
        grace_s = float(os.environ.get(RANKS_STOP_GRACE_ENV) or RANKS_STOP_GRACE_S)

        def kill_unstopped() -> None:
            if exited.wait(grace_s):
                return
            logs.warning(f"the trainer did not stop within {grace_s:.0f} s of {why}: killing it")
            trainer.signal(signal.SIGKILL)

        threading.Thread(target=kill_unstopped, daemon=True).start()

    def _cannot_start(self, err: CannotStart) -> tuple[int, str, bool]:
        """A job that cannot be prepared, or a trainer that cannot start: it
        ends with the reason as its output."""
        logs.error(str(err), job_id=self.assignment.job_id, attempt=self.assignment.attempt)
        return err.exit_code, f"{err}\n", err.unrecoverable

    def _publish_finished(self, event: JobFinished) -> bool:
        """Publish job finished, trying again with backoff for
        ``finish_publish_s``; whether it went out. Every failure is retried,
        a permanent-looking one too: a topic or a permission may be repaired
        meanwhile, and this event is what lets spotline end the job."""
        deadline = time.monotonic() + self.finish_publish_s
        wait_s = 1.0
        while True:
            remaining = deadline - time.monotonic()
            try:
                self.bus.publish(
                    "job_finished", event, timeout_s=max(min(_FINISH_TRY_S, remaining), 1.0)
                )
                return True
            except Exception as err:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    logs.error(
                        f"job finished (exit code {event.exit_code}) could not be published "
                        f"to {self.bus.topic_path('job_finished')} in "
                        f"{self.finish_publish_s:.0f} s: {err!r}; exiting, so that the VM "
                        "powers off (the reaper then acts on its silence)",
                        job_id=event.job_id,
                        attempt=event.attempt,
                    )
                    return False
                logs.warning(
                    f"job finished not published ({err!r}); trying again in {wait_s:.0f} s",
                    job_id=event.job_id,
                    attempt=event.attempt,
                )
            time.sleep(min(wait_s, remaining))
            wait_s = min(wait_s * 2, _FINISH_BACKOFF_MAX_S)

    def _report_preempted(self, gang_stop: bool = False, again: bool = False) -> None:
        """Publish spot-preempted once (``again``: this node's own loss after
        its stop with the gang was reported), with the newest saved state."""
        with self._report_lock:
            if self._preemption_reported and not again:
                return
            self._preemption_reported = True
            event = SpotPreempted(
                **self._common(),
                checkpoint_uri=self.checkpoint_uri,
                # A gang's stop: its save, never a step trained to after it.
                step=self.saved_step if gang_stop else self.step,
                gang_stop=gang_stop,
                mirrored_checkpoints=_units(self.checkpoints),
                generation=self.assignment.generation,
            )
            self.bus.publish("spot_preempted", event)
        what = "stopped with its gang (another node's notice)" if gang_stop else "preempted"
        if self.step is None:  # e.g. a gang's node other than 0: its ranks save nothing
            logs.warning(f"{what}; no checkpoint was reported on this node")
        else:
            logs.warning(f"{what} at step {self.step}; checkpoint {self.checkpoint_uri}")

    def _start_mirrors(self) -> None:
        """Restore the trainer's local checkpoint folder from storage, then
        mirror it and the outputs folder while the trainer runs. Storage out
        of reach: the trainer starts with what could be restored, and says so
        in the log."""
        reader = self.account if isinstance(self.account, TrainerAccount) else None
        settle_s = float(os.environ.get(MIRROR_SETTLE_ENV) or SETTLE_S)
        local = self.job_dir / CHECKPOINTS_DIR
        try:
            self.checkpoints = FolderMirror(
                local, self.assignment.checkpoint_dir, reader, settle_s=settle_s
            )
            self.outputs = FolderMirror(
                self.job_dir / OUTPUTS_DIR, self.assignment.output_dir, reader, settle_s=settle_s
            )
            restored = self.checkpoints.restore()
        except Exception as err:
            logs.error(
                f"could not restore {self.assignment.checkpoint_dir} into {local}: {err!r}; "
                "the trainer starts without what earlier attempts saved there"
            )
        else:
            if restored:
                logs.info(f"restored {restored} saved unit(s) into {local}")
        for mirror in (self.checkpoints, self.outputs):
            if mirror is not None:
                mirror.start()

    def _finish_mirrors(self) -> None:
        """Upload what the trainer's folders hold and storage does not, within
        what is left of the notice (NOTICE_SYNC_S) or FINISH_SYNC_S."""
        started = time.monotonic()
        if self._notice_at is not None:
            deadline = self._notice_at + NOTICE_SYNC_S
        else:
            deadline = started + FINISH_SYNC_S
        for mirror in (self.checkpoints, self.outputs):
            if mirror is None:
                continue
            done = mirror.finish(max(deadline - time.monotonic(), 1.0))
            if done is not None and (done.stored or done.deleted):
                logs.info(
                    f"last upload of {mirror.local} to {mirror.url}: stored {done.stored} "
                    f"({done.bytes / 1e6:.1f} MB), deleted {done.deleted}, "
                    f"in {time.monotonic() - started:.2f} s"
                )

    def _stored_uri(self, uri: str | None) -> str | None:
        """A reported checkpoint's location in storage: a path in the local
        checkpoint folder (or its ``file://`` URL, as ``spotline.torch``
        returns it) is where the mirror puts it."""
        local = str(self.job_dir / CHECKPOINTS_DIR)
        path = local_path(uri) if uri else None
        if path and (path == local or path.startswith(local + "/")):
            return self.assignment.checkpoint_dir.rstrip("/") + path[len(local) :]
        return uri

    def _upload_tensorboard(self) -> None:
        """Copy the trainer's TensorBoard logs to ``{output_dir}/tensorboard``:
        one folder for every attempt (event files are named per host and time,
        so TensorBoard joins the attempts into one curve)."""
        self._tensorboard_uploaded_at = time.monotonic()
        local = self.job_dir / TENSORBOARD_DIR
        remote = f"{self.assignment.output_dir.rstrip('/')}/{TENSORBOARD_DIR}"
        try:
            upload_folder(local, remote)
        except Exception as err:  # logs must never stop a job
            logs.warning(f"could not upload TensorBoard logs: {err}")

    def _check_snapshot(
        self, code_uri: str | None, data_uri: str | None, code_dir: Path, data_dir: Path | None
    ) -> None:
        """A recorded job's (or a replay's) downloaded snapshot is what was recorded.

        Raises:
            CannotStart: it is not (no VM would download another).
        """
        expected = expected_digest(self.assignment, code_uri, data_uri)
        try:
            check_snapshot(expected, code_dir if code_uri else None, data_dir)
        except SnapshotChanged as err:
            raise CannotStart(
                f"cannot start the trainer: {err}", EXIT_PREPARE_FAILED, unrecoverable=True
            ) from None

    def _fetch_code(self, uri: str | None) -> Path:
        """Copy ``uri`` (any fsspec URL of a folder) into the workdir; run there.

        Raises:
            CannotStart: nothing is stored at ``uri`` (no VM would find more).
        """
        code_dir = self.job_dir / "code"
        code_dir.mkdir(parents=True, exist_ok=True)
        if uri:
            try:
                download_folder(uri, code_dir)
                restore_modes(uri, code_dir)
            except FileNotFoundError:
                raise CannotStart(
                    f"cannot start the trainer: code_uri {uri}: nothing is stored there",
                    EXIT_PREPARE_FAILED,
                    unrecoverable=True,
                ) from None
        return code_dir


def _units(mirror: FolderMirror | None) -> int | None:
    """How many units ``mirror`` holds in storage (None: no mirror ran)."""
    return None if mirror is None else len(mirror.stored)


def read_event_token(metadata: Metadata) -> str:
    """The attempt's event token; read after the assignment, which is set with
    it in one change. Empty when the VM has none (its events are refused,
    and the reaper acts on the silence): never logged."""
    try:
        return metadata.get(TOKEN_ATTRIBUTE).strip()
    except MetadataError as err:
        logs.error(f"no event token in the metadata ({TOKEN_ATTRIBUTE}): {err}")
        return ""


def main() -> int:
    workdir = Path(os.environ.get("SPOTLINE_WORKDIR") or tempfile.mkdtemp(prefix="spotline-vm-"))
    workdir.mkdir(parents=True, exist_ok=True)
    finish_publish_s = float(os.environ.get("SPOTLINE_FINISH_PUBLISH_S") or FINISH_PUBLISH_S)
    return Agent(Metadata(), workdir, finish_publish_s=finish_publish_s).run()

"""Cloud Functions entry points: each name here is one deployed function.

Deployed with ``--entry-point NAME`` and a Pub/Sub trigger (see infra/topology.py);
locally, ``spotline up`` serves each with ``functions-framework --target NAME``.
"""

from functions.cancel_job import cancel_job
from functions.on_epoch_done import on_epoch_done
from functions.on_job_finished import on_job_finished
from functions.on_spot_preempted import on_spot_preempted
from functions.on_vm_booted import on_vm_booted
from functions.reaper import reaper
from functions.submit_job import submit_job

__all__ = [
    "cancel_job",
    "on_epoch_done",
    "on_job_finished",
    "on_spot_preempted",
    "on_vm_booted",
    "reaper",
    "submit_job",
]

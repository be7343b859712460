"""Cloud Functions entry points: each name here is one deployed function.

Deployed with ``--entry-point NAME`` and a Pub/Sub trigger (see infra/topology.py);
locally, ``spotline up`` serves each with ``functions-framework --target NAME``.
"""

from functions.handlers.cancel_job import cancel_job
from functions.handlers.notify_webhook import notify_webhook
from functions.handlers.on_epoch_done import on_epoch_done
from functions.handlers.on_job_finished import on_job_finished
from functions.handlers.on_spot_preempted import on_spot_preempted
from functions.handlers.on_vm_booted import on_vm_booted
from functions.handlers.reaper import reaper
from functions.handlers.reaper_page import reaper_page
from functions.handlers.submit_job import submit_job

__all__ = [
    "cancel_job",
    "notify_webhook",
    "on_epoch_done",
    "on_job_finished",
    "on_spot_preempted",
    "on_vm_booted",
    "reaper",
    "reaper_page",
    "submit_job",
]

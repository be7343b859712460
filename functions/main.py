"""Cloud Functions entry points: each name here is one deployed function.

Cloud Functions loads ``main.py`` from the root of the source archive: the
archive writes this file there too (``spotline.infra.deploy.source``). Deployed
with ``--entry-point NAME`` and a Pub/Sub trigger (``spotline.infra.topology``);
locally, ``spotline up`` serves each with ``functions-framework --target NAME
--source`` this file, wherever spotline is installed.
"""

from spotline.functions.handlers.cancel_job import cancel_job
from spotline.functions.handlers.notify_webhook import notify_webhook
from spotline.functions.handlers.on_epoch_done import on_epoch_done
from spotline.functions.handlers.on_job_finished import on_job_finished
from spotline.functions.handlers.on_spot_preempted import on_spot_preempted
from spotline.functions.handlers.on_vm_booted import on_vm_booted
from spotline.functions.handlers.reaper import reaper
from spotline.functions.handlers.reaper_page import reaper_page
from spotline.functions.handlers.submit_job import submit_job

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

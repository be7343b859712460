"""What a submission must be, beyond its schema, for the deployment to take it.

Known at submission and never to change for the job: its machine ids are in
the catalog, its zones are in the region spotline is deployed in, a job id
of its own does not take the form spotline derives from message ids, and no
secret-like ``env`` variable holds a literal value (``secret_env``), its
webhook is one the deployment may call (``webhooks``), and the built-in Keras
trainer's batch splits evenly across each machine's GPUs. A job
refused here is a rejected submission: no job document, no slot.

Pure: the caller passes the catalog and the region (the settings' business).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spotline.shared.domain.catalog import Machine
from spotline.shared.domain.lifecycle import DERIVED_JOB_ID
from spotline.shared.domain.placement import parse_machine_id
from spotline.shared.domain.secret_env import env_refusals
from spotline.shared.domain.spec import KERAS_TRAINERS, JobSpec
from spotline.shared.domain.webhooks import url_problem


def refusals(
    spec: JobSpec,
    catalog: Mapping[str, Machine],
    region: str,
    webhook_networks: Sequence[str] = (),
) -> list[str]:
    """Why the deployment cannot take the job, one line per problem; empty: it can.

    ``webhook_networks``: the networks a webhook may reach besides public
    addresses, over plain http too (``webhooks``)."""
    problems = [
        f"machine_ids: {machine_id!r} is not in the catalog ({', '.join(sorted(catalog))})"
        for machine_id in spec.machine_ids
        if parse_machine_id(machine_id)[0] not in catalog
    ]
    problems += [
        f"zones: {zone!r} is not a zone of {region}, the region spotline is deployed in"
        for zone in spec.zones
        if not in_region(zone, region)
    ]
    if spec.job_id is not None and DERIVED_JOB_ID.fullmatch(spec.job_id):
        problems.append(
            f"job_id: {spec.job_id!r} has the form spotline derives from message ids "
            "('j' and 12 hex digits); choose another"
        )
    problems += env_refusals(spec.env)
    webhook = spec.webhook_url and url_problem(spec.webhook_url, webhook_networks)
    if webhook:
        problems.append(webhook)
    problems += mirrored_batch_refusals(spec, catalog)
    return problems


def mirrored_batch_refusals(spec: JobSpec, catalog: Mapping[str, Machine]) -> list[str]:
    """The built-in Keras trainer trains with ``tf.distribute.MirroredStrategy``
    on a machine with several GPUs, which splits each batch evenly across them
    (so the batch size must be a multiple of the number of GPUs). Any machine id
    of the list may be the one placed, so each is checked."""
    if spec.trainer not in KERAS_TRAINERS:
        return []
    problems = []
    names = dict.fromkeys(parse_machine_id(machine_id)[0] for machine_id in spec.machine_ids)
    for name in names:
        machine = catalog.get(name)
        gpus = machine.gpu_count if machine else 0
        if gpus > 1 and spec.batch_size % gpus:
            below = spec.batch_size // gpus * gpus
            near = f"{below} or {below + gpus}" if below else str(gpus)
            problems.append(
                f"batch_size: {spec.batch_size} is not a multiple of the {gpus} GPUs of {name}: "
                f"the {spec.trainer} trainer's MirroredStrategy splits each batch evenly across "
                f"them (try {near})"
            )
    return problems


def in_region(zone: str, region: str) -> bool:
    """``us-central1-a`` is in ``us-central1``; ``us-central1`` and ``us-east1-b`` are not."""
    prefix, _, suffix = zone.rpartition("-")
    return prefix == region and suffix.isalnum()

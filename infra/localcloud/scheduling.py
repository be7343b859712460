"""What Compute Engine refuses in an instance's ``scheduling``, checked on every
insert and bulk insert of the local cloud.

* A VM with GPUs, attached (``guestAccelerators``) or built into its machine
  type (G2, A2, A3, from the catalog), cannot live-migrate:
  ``onHostMaintenance`` must be TERMINATE (MIGRATE is the default of an
  on-demand VM). Compute Engine answers 400, "Instances with guest accelerators
  do not support live migration."
* A Spot VM cannot restart automatically: ``automaticRestart`` must be sent
  false (true is the default). The message is Compute Engine's for a
  preemptible VM, which it words the same way for Spot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spotline.infra.localcloud.errors import Invalid, Unsupported
from spotline.shared.domain.catalog import built_in_gpus

LIVE_MIGRATION_WITH_GPUS = "Instances with guest accelerators do not support live migration."


def check_scheduling(
    scheduling: Mapping[str, Any], machine_type: str, accelerators: Sequence[tuple[str, int]]
) -> None:
    """Refuse, as Compute Engine does, a scheduling the VM cannot have.

    Raises:
        Unsupported: MIGRATE (said or by default) for a VM with GPUs.
        Invalid: a Spot VM without ``automaticRestart: false``.
    """
    model = str(scheduling.get("provisioningModel") or "STANDARD")
    spot = model == "SPOT" or scheduling.get("preemptible") is True
    default = "TERMINATE" if spot else "MIGRATE"
    maintenance = str(scheduling.get("onHostMaintenance") or default)
    gpus = sum(n for _, n in accelerators) + built_in_gpus(machine_type)
    if gpus and maintenance == "MIGRATE":
        raise Unsupported(LIVE_MIGRATION_WITH_GPUS)
    if spot and scheduling.get("automaticRestart", True) is not False:
        if model == "SPOT":
            field, value, must = "provisioningModel", "SPOT", "provisioningModel be STANDARD"
        else:
            field, value, must = "preemptible", "true", "preemptible be false"
        raise Invalid(
            f"Invalid value for field 'resource.scheduling.{field}': '{value}'. "
            f"Scheduling must have {must} when AutomaticRestart is true."
        )

"""spotline: train ML models on Spot GPU VMs in your own Google Cloud project,
or on the local stack (``spotline up``).

The Python API::

    import spotline

    job = spotline.submit({"user": "ada", "machine_ids": ["g2-standard-4"],
                           "trainer": "digits_mlp", "epochs": 3})
    job.watch()                    # live, until it ends
    job.checkpoints("runs")        # runs/JOB/checkpoints/...

Everything spotline installs lives under this one name: the repository's
folders ``functions/``, ``shared/``, ``infra/`` and ``vm_image/`` are
``spotline.functions``, ``spotline.shared``, ``spotline.infra`` and
``spotline.vm_image``; the API above is ``spotline.infra.client``.

Every public name here is loaded when first used: the functions and the VM agent
import ``spotline.functions`` and ``spotline.vm_image`` without any of it
(the functions' archive ships this file with neither the API nor the CLI).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spotline.infra.client.errors import (
        ConfigError,
        InputsError,
        JobNotFound,
        LogsUnreadable,
        NotConnected,
        NothingStored,
        ReplayError,
        SpecError,
        SpotlineError,
        WaitTimeout,
    )
    from spotline.infra.client.job import Job
    from spotline.infra.client.listing import jobs, machines
    from spotline.infra.client.records import JobState, MachineOffer
    from spotline.infra.client.replaying import replay
    from spotline.infra.client.submission import submit_job as submit
    from spotline.infra.client.submission import validate

__all__ = [
    "ConfigError",
    "InputsError",
    "Job",
    "JobNotFound",
    "JobState",
    "LogsUnreadable",
    "MachineOffer",
    "NotConnected",
    "NothingStored",
    "ReplayError",
    "SpecError",
    "SpotlineError",
    "WaitTimeout",
    "jobs",
    "machines",
    "replay",
    "submit",
    "validate",
]

# Each public name: (module, name there).
_WHERE = {
    **{
        name: ("spotline.infra.client.errors", name)
        for name in (
            "ConfigError",
            "InputsError",
            "JobNotFound",
            "LogsUnreadable",
            "NotConnected",
            "NothingStored",
            "ReplayError",
            "SpecError",
            "SpotlineError",
            "WaitTimeout",
        )
    },
    "Job": ("spotline.infra.client.job", "Job"),
    "JobState": ("spotline.infra.client.records", "JobState"),
    "MachineOffer": ("spotline.infra.client.records", "MachineOffer"),
    "jobs": ("spotline.infra.client.listing", "jobs"),
    "machines": ("spotline.infra.client.listing", "machines"),
    "replay": ("spotline.infra.client.replaying", "replay"),
    "submit": ("spotline.infra.client.submission", "submit_job"),
    "validate": ("spotline.infra.client.submission", "validate"),
}


# The trainer helpers, which ``spotline.keras.fit`` sits beside: a submodule too.
_SUBMODULES = frozenset({"keras", "lightning", "notice", "report", "torch", "transformers"})


def __getattr__(name: str) -> Any:
    """A public name, imported on first use (PEP 562)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"spotline.{name}")
    if name not in _WHERE:
        raise AttributeError(f"module 'spotline' has no attribute {name!r}")
    module, attribute = _WHERE[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

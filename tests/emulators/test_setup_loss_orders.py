"""A gang's loss heard while the job still reads as setting up, its
training reports late: a survivor's stop with the gang shows it was
training, whether that stop is heard after the loss (``node_replacement.trained``)
or before it. Either way a lost node 0's save is waited for (its report, or
its notice's end) before the gang regroups, or it would restore an older save.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.vms import REGROUP_METADATA_KEY
from tests.emulators.test_gang_replacement import (
    N0,
    N1,
    R0,
    boot,
    gang_stop,
    job_of,
    metadata,
    preempt,
)
from tests.emulators.test_gang_setup_replacement import installing_gang
from tests.emulators.test_recovery import log_sink_entry

pytestmark = pytest.mark.emulators
S = JobSubstatus


@pytest.mark.parametrize("stop_first", [False, True], ids=["stop-after", "stop-before"])
def test_a_workers_stop_makes_the_regroup_wait_out_a_lost_node_zeros_notice(
    call: Callable[..., Any], host: LocalCloud, project: str, stop_first: bool
) -> None:
    """Node 0 is taken mid-epoch, reported by the log sink (no save said);
    node 1's ranks stopped with the gang, its agent reports the stop. The
    regroup waits for node 0's notice to end, in either order. Before, a
    stop heard first was not taken as training: the gang regrouped as soon
    as the replacement booted, while node 0 may still have been saving."""
    installing_gang(call, project)
    if stop_first:
        gang_stop(call, N1, None)
    sink = log_sink_entry(host, N0)
    call("on_spot_preempted", "spot_preempted", sink, message_id="ls")
    if not stop_first:
        gang_stop(call, N1, None)
    boot(call, R0)
    job = job_of(project)
    assert (job.substatus, job.nodes) == (S.REPLACING_NODE, [R0, N1])
    assert REGROUP_METADATA_KEY not in metadata(host, N1)
    preempt(call, N0, step=12, mid="p-agent")  # node 0's agent: its save is complete
    job = job_of(project)
    assert (job.substatus, job.replacing, job.attempts[0].checkpoint_step) == (
        S.TRAINING,
        None,
        12,
    )
    assert json.loads(metadata(host, N1)[REGROUP_METADATA_KEY])["nodes"] == [R0, N1]

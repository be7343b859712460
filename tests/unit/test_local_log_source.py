"""``spotline logs`` on the local stack reads each VM's output file: a gang's
node replaced within its attempt is read from the lost VM's file, then from
the replacement's."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from spotline.infra.client.log_sources import LocalSource
from spotline.shared.domain.documents import AttemptRecord, ReplacedNode

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def line(message: str, node: int) -> str:
    record = {"message": message, "job_id": "gang", "attempt": 1, "node": node}
    return json.dumps({**record, "time": T0.isoformat()}) + "\n"


def test_a_replaced_rank_is_read_from_the_lost_vm_then_its_replacement(tmp_path: Path) -> None:
    (tmp_path / "sl-gang-a1-n0.log").write_text(line("rank 0 epoch 1", 0))
    (tmp_path / "sl-gang-a1-n1.log").write_text(line("rank 1 epoch 1", 1))
    (tmp_path / "sl-gang-a1-n1-g1.log").write_text(line("rank 1 restored", 1))
    record = AttemptRecord(
        attempt=1,
        instance="sl-gang-a1-n0",
        zone="us-central1-a",
        machine_id="g2-standard-4",
        started_at=T0,
        nodes=2,
        node_names=["sl-gang-a1-n0", "sl-gang-a1-n1-g1"],
        replaced_nodes=[
            ReplacedNode(rank=1, lost="sl-gang-a1-n1", replacement="sl-gang-a1-n1-g1", at=T0)
        ],
    )
    read = LocalSource(tmp_path).new_lines("gang", record, None)
    assert [(x.node, x.instance, x.message) for x in read] == [
        (0, "sl-gang-a1-n0", "rank 0 epoch 1"),
        (1, "sl-gang-a1-n1", "rank 1 epoch 1"),
        (1, "sl-gang-a1-n1-g1", "rank 1 restored"),
    ]

"""``Job.watch()``'s lines (a pipe, a notebook) show each further loss of a
gang waiting for its replacement, which moves the job nowhere."""

from __future__ import annotations

import io

from spotline.infra.client.watching import _LineView
from spotline.shared.adapters.firestore_listen import JobChanged
from tests.unit.test_further_losses import R2, waiting_gang
from tests.unit.test_node_replacement import N2, T0, lose


def test_a_further_loss_is_a_line_and_a_redelivery_none() -> None:
    out = io.StringIO()
    view = _LineView(out, lambda: T0)
    waiting = waiting_gang()
    lost = lose(waiting, N2, seconds=20)
    for job in (waiting, lost, lost):
        view.apply(JobChanged(job))
    lines = [line.split("  ", 2)[2] for line in out.getvalue().splitlines()]
    assert lines == [
        "RECOVERING/REPLACING_NODE",
        f"RECOVERING/REPLACING_NODE  {N2} preempted; replacing it with {R2}",
    ]

"""A stop report from a replacement that has not joined its gang
(``node_replacement.stopped``): its trainer never trained with the gang
(it ran, if at all, on its own once its restore gate's wait ran out), so
its stop is no save, least of all the lost node 0's. Pure: no emulator."""

from __future__ import annotations

import pytest

from spotline.shared.domain import node_replacement
from tests.unit.test_node_replacement import N0, R0, at, lose, training_gang


@pytest.mark.parametrize("generation", [None, 0, 1])
def test_node_zeros_replacements_stop_is_not_node_zeros_save(generation: int | None) -> None:
    """Node 0 lost, reported by the log sink (its save not reported yet),
    its replacement up: a stop report from that replacement (its trainer
    exited 143) does not let the gang regroup before the lost node's save."""
    job = node_replacement.booted(lose(training_gang(3), N0, saved=False), R0, 1)
    assert node_replacement.plan(job, at(11)) is None
    after = node_replacement.stopped(job, R0, 1, None, None, generation)
    assert node_replacement.plan(after, at(11)) is None
    assert after.gang_stops == []
    # The lost node's own report still completes the wait.
    assert node_replacement.plan(node_replacement.lost_node_saved(after, N0, 1), at(11))

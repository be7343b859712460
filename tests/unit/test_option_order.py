"""The waiting rule, pure: which machine option a waiting job asks for."""

from __future__ import annotations

from spotline.shared.domain.option_waiting import ask_order, option_index, total_wait_s, window_end
from spotline.shared.domain.spec import JobSpec
from tests.documents import T0, at

IDS = ["a", "b", "c"]


def test_each_option_has_its_window_in_order_then_they_come_round_again() -> None:
    assert [option_index(T0, at(s), 60, 3) for s in (0, 59, 60, 119, 120, 180, 200)] == [
        0, 0, 1, 1, 2, 0, 0,
    ]  # fmt: skip
    assert option_index(None, at(500), 60, 3) == 0  # not waiting yet: the first
    assert option_index(T0, at(500), 0, 3) == 0  # no windows: all at once, from the first


def test_a_pass_asks_for_the_current_option_first() -> None:
    assert ask_order(IDS, 0) == ["a", "b", "c"]
    assert ask_order(IDS, 2) == ["c", "a", "b"]


def test_a_window_ends_on_its_boundary() -> None:
    assert window_end(T0, at(0), 60) == at(60)
    assert window_end(T0, at(60), 60) == at(120)
    assert window_end(T0, at(61), 0) is None


def test_the_total_defaults_to_one_window_per_option() -> None:
    def spec(**fields: int) -> JobSpec:
        base = {
            "user": "u",
            "machine_ids": ["g2-standard-4", "e2-standard-4"],
            "trainer": "digits_mlp",
        }
        return JobSpec.model_validate({**base, **fields})

    assert total_wait_s(spec(wait_request_s=30)) == 60
    assert total_wait_s(spec(wait_request_s=30, wait_total_s=500)) == 500
    assert total_wait_s(spec(wait_total_s=-1)) is None

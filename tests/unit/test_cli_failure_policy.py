"""``spotline status JOB`` shows the failure policy's counters against their
limits, and an elastic gang's changes of size, for a person and in
``--json``. Pure: the text and the JSON are built from the job document."""

from __future__ import annotations

from spotline.infra.cli.job_detail import detail_text
from spotline.infra.cli.job_fields import summary
from tests.documents import T0, job

POLICY = {"max_restarts_on_errors": 2, "restart_on_exit_codes": [134], "max_preemptions": 5}


def test_status_shows_restarts_and_preemptions_with_their_limits() -> None:
    shown = job(
        "one",
        attempt=7,
        spec=POLICY,
        preemptions=3,
        restarts_on_errors=2,
        restarts_on_exit_codes=1,
    )
    text = detail_text(shown, [], "file:///ckpt", "p", local=True, now=T0)
    assert (
        "restarts     2 on errors (max_restarts_on_errors=2), 1 on exit codes [134]; "
        "preemptions 3 (max_preemptions=5)" in text
    )
    counts = summary(shown, T0)
    assert (counts["restarts_on_errors"], counts["restarts_on_exit_codes"]) == (2, 1)


def test_with_no_policy_set_status_says_there_is_no_preemption_limit() -> None:
    text = detail_text(job("one", preemptions=1), [], "file:///ckpt", "p", local=True, now=T0)
    assert (
        "restarts     0 on errors (max_restarts_on_errors=0); "
        "preemptions 1 (max_preemptions: no limit)" in text
    )


def test_status_counts_an_elastic_gangs_changes_of_size() -> None:
    elastic = {"nodes": 3, "min_nodes": 2}
    shown = job("one", spec=elastic, preemptions=1, resizes=2)
    text = detail_text(shown, [], "file:///ckpt", "p", local=True, now=T0)
    assert "attempt 1, preemptions 1, resizes 2 (min_nodes=2)" in text
    assert summary(shown, T0)["resizes"] == 2
    fixed = detail_text(job("two", preemptions=1), [], "file:///ckpt", "p", local=True, now=T0)
    assert "resizes" not in fixed

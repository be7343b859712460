"""The same job id submitted again with ``record`` (its first publish failed,
or the user reused the id) finds a whole snapshot and copies nothing. That
snapshot must be of the same ``code_uri`` and ``data_uri``: of others, the
job would run one code and ``spotline replay`` another, so the CLI refuses
it, naming both. Local folders through fsspec's ``file://``."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotline.infra.client.recording import take_snapshot
from spotline.shared.domain.recording import record_for
from spotline.shared.domain.spec import JobSpec
from tests.unit.test_recording import BASE, folder


def test_a_snapshot_of_other_sources_under_the_same_job_id_is_refused(tmp_path: Path) -> None:
    first = folder(tmp_path / "code-a", {"train.py": "a"})
    second = folder(tmp_path / "code-b", {"train.py": "b"})
    prefix = (tmp_path / "store" / "jobs" / "exp1").as_uri()
    spec = JobSpec.model_validate({**BASE, "record": True, "code_uri": first})
    record = record_for(prefix, spec)
    assert record is not None and take_snapshot(record, spec) is not None

    again = JobSpec.model_validate({**BASE, "record": True, "code_uri": second})
    with pytest.raises(FileExistsError, match="code-a") as refused:
        take_snapshot(record, again)
    assert "code-b" in str(refused.value)
    # The same sources again: the snapshot is kept, nothing copied twice.
    assert take_snapshot(record, spec) is None

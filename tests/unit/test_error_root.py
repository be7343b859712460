"""Every error spotline raises on purpose derives from one root,
``SpotlineError``: the CLI turns each into one line with a documented exit
code, never the "unexpected error" of a bug."""

from __future__ import annotations

import pytest

from spotline.infra.cli.exit_codes import Exit
from spotline.infra.cli.failures import describe
from spotline.infra.deploy.errors import DeployError
from spotline.infra.localstack.errors import StackError
from spotline.shared.domain.errors import SpotlineError
from spotline.shared.settings import SettingsError


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SettingsError(["SPOTLINE_REGION='x': not a region"]), Exit.USAGE),
        (DeployError("the project's network spotline is not in auto mode: delete it"), Exit.FAILED),
        (
            StackError("the local stack needs its Cloud Storage emulator: pip install ..."),
            Exit.FAILED,
        ),
    ],
)
def test_spotlines_errors_share_one_root_and_end_in_one_line(error: Exception, code: Exit) -> None:
    assert isinstance(error, SpotlineError)
    exit_code, message = describe(error)
    assert (exit_code, message) == (code, str(error))

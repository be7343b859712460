"""``import spotline`` costs nothing until a public name is used: a function's
cold start and the VM agent import their own modules without the API, the
CLI, or anything else of ``spotline.infra``."""

from __future__ import annotations

import subprocess
import sys

import pytest

import spotline

_LOADED = "import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('{prefix}')))"


def loaded(module: str, prefix: str) -> str:
    code = _LOADED.format(module=module, prefix=prefix)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip()


@pytest.mark.parametrize(
    "module", ["spotline.functions.handlers.submit_job", "spotline.vm_image.agent", "spotline"]
)
def test_a_function_and_the_agent_import_nothing_of_infra(module: str) -> None:
    assert loaded(module, "spotline.infra") == "[]"


def test_every_public_name_is_there_when_asked_for() -> None:
    for name in spotline.__all__:
        assert getattr(spotline, name) is not None, name
    assert set(spotline.__all__) <= set(dir(spotline))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        spotline.nothing  # noqa: B018

"""The trainer runs as an unprivileged account, not as the agent's root.

The real agent, as root (as on a VM), told to run its trainer as ``nobody``
(an account every Linux has: no test edits /etc/passwd); the trainer is a
shell that reports who it is and what it may write.
"""

from __future__ import annotations

import pwd

import pytest

from spotline.vm_image.agent.privileges import trainer_account
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import Vm, next_finished, require_root

pytestmark = pytest.mark.emulators
NOBODY = pwd.getpwnam("nobody").pw_uid

WHO_AM_I = """
echo "uid=$(id -ru) euid=$(id -u) groups=$(id -G)"
echo "home=$HOME"
echo "tmpdir=$TMPDIR"
echo "umask=$(umask)"
for place in /etc /root; do
  if (echo x > "$place/spotline-trainer-test-$$") 2>/dev/null; then
    echo "$place=written"; rm -f "$place/spotline-trainer-test-$$"
  else
    echo "$place=denied"
  fi
done
echo ok > here.txt && echo "cwd=written"
"""


def test_the_trainer_runs_as_the_configured_account(vm: Vm, agent_topics: Topics) -> None:
    require_root()
    agent = vm.boot(
        vm.assignment("j1", ["/bin/sh", "-c", WHO_AM_I]), SPOTLINE_TRAINER_USER="nobody"
    )

    assert agent.wait(60) == 0, agent.log.read_text(errors="replace")[-3000:]
    event = next_finished(agent_topics)
    tail = event.log_tail
    assert event.exit_code == 0, tail
    folder = vm.workdir / "jobs" / "j1-a1"
    assert f"uid={NOBODY} euid={NOBODY} groups={NOBODY}\n" in tail  # none of root's groups
    assert f"home={folder / 'home'}\n" in tail and f"tmpdir={folder / 'tmp'}\n" in tail
    assert "umask=0077\n" in tail
    assert "/etc=denied\n" in tail and "/root=denied\n" in tail
    assert "cwd=written\n" in tail
    assert (folder / "code" / "here.txt").stat().st_uid == NOBODY
    assert agent.said("INFO", "the trainer runs as 'nobody'")


def test_a_missing_account_fails_the_job_and_runs_nothing_as_root(
    vm: Vm, agent_topics: Topics
) -> None:
    require_root()
    marker = vm.tmp_path / "ran"
    agent = vm.boot(
        vm.assignment("j1", ["/bin/sh", "-c", f"touch {marker}"]),
        SPOTLINE_TRAINER_USER="no-such-spotline-account",
    )

    assert agent.wait(60) == 0, agent.log.read_text(errors="replace")[-3000:]
    event = next_finished(agent_topics)
    assert event.exit_code == 126
    assert "the trainer account 'no-such-spotline-account'" in event.log_tail
    assert not marker.exists()


def test_an_empty_setting_runs_the_trainer_as_the_agents_user(
    capsys: pytest.CaptureFixture[str],
) -> None:
    account = trainer_account({"SPOTLINE_TRAINER_USER": ""})
    assert not account.dedicated and account.popen_kwargs() == {}
    assert account.uid == pwd.getpwnam(account.name).pw_uid
    # The local stack's choice, made for every VM at every attempt: no line for it.
    assert "own user" not in capsys.readouterr().out

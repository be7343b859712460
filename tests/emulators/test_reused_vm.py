"""A reused VM (cooling, or a stopped VM booted again) gives the next job a
clean slate: job B's trainer finds none of job A's files, and none of its
processes.

The real agent runs job A, cools, and gets job B through new metadata, as the
submit function hands a cooling VM its next job. A stopped VM's next job is
the first job of a new agent on the same disk: the same clearing, at start.
"""

from __future__ import annotations

import os
import pwd
import uuid

import pytest

from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import Vm, next_finished, require_root

pytestmark = pytest.mark.emulators

# Job A leaves files in every place a trainer writes to, and a process behind.
JOB_A = """
echo a > a.txt
mkdir -p "$HOME/.cache" && echo a > "$HOME/.cache/a"
echo a > "${TMPDIR:-/tmp}/a"
echo a > "$SHARED_FILE"
sleep 300 > /dev/null 2>&1 &
echo "sleeper=$!"
"""
# Job B looks for each of them.
JOB_B = """
for path in $LOOK_FOR; do
  if [ -e "$path" ]; then echo "SEES $path"; else echo "GONE $path"; fi
done
ls "$JOBS_FOLDER"
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return "\nState:\tZ" not in status.read()
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", ["cooling", "restarted"])
def test_the_next_job_cannot_see_the_previous_jobs_files(
    vm: Vm, agent_topics: Topics, how: str
) -> None:
    require_root()
    shared_file = f"/tmp/spotline-test-{uuid.uuid4().hex}"
    jobs = vm.workdir / "jobs"
    folder_a = jobs / "ja-a1"
    look_for = [
        str(folder_a),
        str(folder_a / "code" / "a.txt"),
        str(folder_a / "home" / ".cache" / "a"),
        str(folder_a / "tmp" / "a"),
        shared_file,
    ]
    env = {"SHARED_FILE": shared_file, "LOOK_FOR": " ".join(look_for)}
    env["JOBS_FOLDER"] = str(jobs)
    sleeper = 0
    try:
        agent = vm.boot(
            vm.assignment("ja", ["/bin/sh", "-c", JOB_A], env=env, cool_down_period_s=60),
            SPOTLINE_TRAINER_USER="nobody",
        )
        first = next_finished(agent_topics)
        assert first.exit_code == 0, first.log_tail
        sleeper = int(first.log_tail.split("sleeper=")[1].split()[0])
        assert all(os.path.exists(path) for path in look_for)  # job A left them
        assert os.stat(shared_file).st_uid == pwd.getpwnam("nobody").pw_uid and alive(sleeper)

        job_b = vm.assignment("jb", ["/bin/sh", "-c", JOB_B], env=env)
        if how == "cooling":
            vm.assign(job_b)
        else:  # stopped, then booted again with its disk: a new agent, same workdir
            agent.kill()
            assert vm.server is not None
            vm.server.close()
            vm.boot(job_b, SPOTLINE_TRAINER_USER="nobody")
        second = next_finished(agent_topics)
    finally:
        if sleeper and alive(sleeper):
            os.kill(sleeper, 9)
        if os.path.exists(shared_file):
            os.remove(shared_file)

    assert second.job_id == "jb" and second.exit_code == 0, second.log_tail
    assert "SEES" not in second.log_tail, second.log_tail
    assert second.log_tail.count("GONE ") == len(look_for)
    assert second.log_tail.rstrip().endswith("\njb-a1")  # its own folder only
    assert not alive(sleeper)

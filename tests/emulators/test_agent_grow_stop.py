"""An elastic gang's node asked to stop and grow back (``spotline-gang-stop``)
whose trainer does not stop as asked, through the real agent: a rank blocked
with a peer that died of the same request (it had not installed its stop
handler yet: still importing) never returns to see its signal, and one whose
peer vanished from under a collective fails. Either way the node reports the
stop it asked for, with the step it last saved, so that the gang grows back
rather than waiting out its bound or being relaunched whole."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spotline.shared.contract.events import SpotPreempted
from spotline.shared.domain.vms import GANG_STOP_METADATA_KEY
from spotline.vm_image.agent.agent import RANKS_STOP_GRACE_ENV
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import INSTANCE, Vm, wait_started

pytestmark = pytest.mark.emulators

# Saves step 40, trains on to step 45 (reported, not saved), then on SIGTERM
# ignores it (blocked in a collective) or exits 1 (its peer gone from under one).
TRAINER = """
import json, os, signal, sys, time
from pathlib import Path
mode, ready = sys.argv[1], sys.argv[2]
if mode == "blocked":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
ckpt = os.environ["SPOTLINE_CHECKPOINT_DIR"] + "/step-40"
Path(ckpt).write_text("40")
with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
    events.write(json.dumps({"type": "checkpoint", "step": 40, "uri": ckpt}) + "\\n")
    events.write(json.dumps({"type": "epoch", "epoch": 1, "epochs": 4, "step": 45}) + "\\n")
Path(ready).write_text("ready")
time.sleep(600)
"""


def shrunk_node(vm: Vm, mode: str, ready: Path) -> str:
    """Node 0 of a 3-node elastic command gang training at 2 (generation 2)."""
    command = [sys.executable, "-c", TRAINER, mode, str(ready)]
    return vm.gang_node(command, [INSTANCE, "sl-j1-a1-n2"], generation=2, nodes=3, min_nodes=2)


@pytest.mark.parametrize("mode", ["blocked", "failed"])
def test_a_trainer_that_does_not_stop_as_asked_to_grow_is_reported_stopped_at_its_save(
    vm: Vm, agent_topics: Topics, mode: str
) -> None:
    agent_topics.create("spot_preempted")
    ready = vm.tmp_path / "ready"
    agent = vm.boot(shrunk_node(vm, mode, ready), **{RANKS_STOP_GRACE_ENV: "3"})
    wait_started(agent, ready)
    assert vm.server is not None
    vm.server.set_attributes({GANG_STOP_METADATA_KEY: "2"})
    (report,) = agent_topics.pull("spot_preempted", 60.0)
    stopped = SpotPreempted.model_validate_json(report)
    assert (stopped.instance, stopped.gang_stop, stopped.generation) == (INSTANCE, True, 2)
    # The step it saved, never the one it trained to after it.
    assert stopped.step == 40 and (stopped.checkpoint_uri or "").endswith("/step-40")
    assert agent_topics.pull("job_finished", 1.0) == []

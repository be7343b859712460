"""A Ray driver that resumes from its last save.

spotline's launcher has started Ray on every node, waited for all of them to
join and set RAY_ADDRESS, so ray.init() joins the cluster. Each step the
driver runs one task a node and adds what they return into its state; every
``STEPS_PER_EPOCH`` steps it saves the state in the local checkpoint folder
(the agent uploads it) and reports an epoch. On SIGTERM (the notice on the
head, or on another node: the launcher passes it on to the driver) it saves
the step it is at and exits 143, and the gang stops. Started again (a new
attempt, or a Ray cluster formed anew around a replaced node), it resumes
from that step.
"""

import json
import os
import signal
import sys
import threading
import time

import ray

from spotline.notice import EXIT_STOPPED, step_time_s, stored_uri
from spotline.report import report_checkpoint, report_epoch, report_resumed

STEPS_PER_EPOCH = 10
epochs = int(os.environ.get("SPOTLINE_EPOCHS", "3"))
checkpoint_dir = os.environ.get("SPOTLINE_CHECKPOINT_DIR", "checkpoints")
saved_state = os.path.join(checkpoint_dir, "state.json")


@ray.remote(num_cpus=1)
def work(step: int, part: int) -> tuple[float, str]:
    """One node's share of a step, and the node it ran on."""
    time.sleep(step_time_s())
    return float((step + 1) * (part + 1)), ray.get_runtime_context().get_node_id()


def save(step: int, total: float) -> str:
    """Written aside, then put in place: no half file is ever read."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    with open(saved_state + ".part", "w") as f:
        json.dump({"step": step, "total": total}, f)
    os.replace(saved_state + ".part", saved_state)
    return saved_state


def main() -> int:
    ray.init()
    # ray.init() set a SIGTERM handler that exits at once: the notice must
    # only ask for a stop at the step's end, after the save.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    nodes = sum(1 for node in ray.nodes() if node["Alive"])
    step, total = 0, 0.0
    if os.path.exists(saved_state):
        with open(saved_state) as f:
            saved = json.load(f)
        step, total = int(saved["step"]), float(saved["total"])
        report_resumed(step, stored_uri(saved_state))
    ran_on: set[str] = set()
    while step < epochs * STEPS_PER_EPOCH:
        results = ray.get([work.remote(step, part) for part in range(nodes)])
        total += sum(value for value, _ in results)
        step += 1
        ran_on |= {node for _, node in results}
        if stop.is_set():
            print(f"ray driver: stopping at step {step}", flush=True)
            report_checkpoint(step, save(step, total), "sigterm")
            return EXIT_STOPPED
        if step % STEPS_PER_EPOCH == 0:
            uri = stored_uri(save(step, total))
            report_epoch(step // STEPS_PER_EPOCH, epochs, step, {"total": total}, uri)
    print(
        f"ray driver: {step} steps, total={total:g}, tasks ran on {len(ran_on)} nodes", flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

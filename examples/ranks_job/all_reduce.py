"""A command job with several processes per node: torch.distributed over gloo.

The agent starts ``processes_per_node`` copies of this script on each node with
the variables torchrun would set (RANK, WORLD_SIZE, LOCAL_RANK, ...). Each step
every rank adds ``rank + 1`` into a sum with ``all_reduce``; after each epoch
rank 0 saves the state and reports the epoch. On SIGTERM (the Spot notice,
sent to every rank of the noticed node) the ranks agree on a step to stop at,
one flag in each step's collective, rank 0 saves and reports the checkpoint,
and every rank exits 143, on whichever node of a gang the notice came.
``CRASH_RANK`` (a global rank) in the spec's env makes that rank exit 7 after
rendezvous, to watch the node end with it.
"""

import json
import os
import signal
import sys
import time

import fsspec
import torch
import torch.distributed as dist

STEPS_PER_EPOCH = 20
stop_requested = False


def on_sigterm(signum, frame):
    global stop_requested
    stop_requested = True


def report(record):
    with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
        events.write(json.dumps(record) + "\n")


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")
    seen = {name: os.environ.get(name) for name in names}
    print("rank-env " + json.dumps(seen, sort_keys=True), flush=True)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    epochs = int(os.environ.get("SPOTLINE_EPOCHS", "2"))
    hyper = json.loads(os.environ.get("SPOTLINE_HYPERPARAMETERS") or "{}")
    step_time_s = float(hyper.get("step_time_s", 0.0))
    if os.environ.get("CRASH_RANK") == str(rank):
        print(f"rank {rank}: crashing on purpose", flush=True)
        return 7
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

    state_url = os.environ["SPOTLINE_CHECKPOINT_URL"].rstrip("/") + "/ranks.json"
    fs, path = fsspec.core.url_to_fs(state_url)
    state = {"step": 0, "total": 0.0}
    if fs.exists(path):
        with fs.open(path) as f:
            state = json.load(f)
        if rank == 0:
            report({"type": "resumed", "step": state["step"], "checkpoint_uri": state_url})

    def save():
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, json.dumps(state).encode())

    while state["step"] < epochs * STEPS_PER_EPOCH:
        # One collective a step carries the data and whether any rank was told to stop.
        values = torch.tensor([float(rank + 1), float(stop_requested)])
        dist.all_reduce(values)
        if values[1] > 0:
            # Every rank stops here, at one step, whichever was told: the
            # notice reaches one node's ranks only, and any node may get it.
            print(
                f"rank {rank}: stopping at step {state['step']}, sigterm={stop_requested}",
                flush=True,
            )
            if rank == 0:
                save()
                report({"type": "checkpoint", "step": state["step"], "uri": state_url})
            dist.barrier()
            print(f"rank {rank}: stopped, sigterm={stop_requested}", flush=True)
            dist.destroy_process_group()
            return 143
        state["total"] += float(values[0])
        state["step"] += 1
        time.sleep(step_time_s)
        if state["step"] % STEPS_PER_EPOCH == 0 and rank == 0:
            save()
            epoch = state["step"] // STEPS_PER_EPOCH
            metrics = {"total": state["total"], "world_size": world}
            record = {"type": "epoch", "epoch": epoch, "epochs": epochs, "step": state["step"]}
            report({**record, "metrics": metrics, "checkpoint_uri": state_url})
            print(f"epoch {epoch}/{epochs} total {state['total']}", flush=True)
    print(f"rank {rank}: done, total {state['total']}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

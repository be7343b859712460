"""A trainer with no framework and no spotline import: any command can be one.

Fits y = 3x + 1 by SGD on seeded synthetic data. It uses only the environment
contract: reads SPOTLINE_* variables, keeps its state in a JSON file in
SPOTLINE_CHECKPOINT_URL, reports each epoch as a JSON line appended to
SPOTLINE_EVENTS, and on SIGTERM (the Spot notice) saves at the next step and
exits 143.
"""

import json
import os
import random
import signal
import sys
import time

import fsspec  # on spotline VMs; any language and storage client would do

STEPS_PER_EPOCH = 50
stop_requested = False


def on_sigterm(signum, frame):
    global stop_requested
    stop_requested = True  # no I/O in a signal handler: the loop saves


def report(record):
    with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
        events.write(json.dumps(record) + "\n")


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    epochs = int(os.environ.get("SPOTLINE_EPOCHS", "3"))
    seed = int(os.environ.get("SPOTLINE_SEED", "0"))
    hyper = json.loads(os.environ.get("SPOTLINE_HYPERPARAMETERS") or "{}")
    lr, step_time_s = float(hyper.get("lr", 0.05)), float(hyper.get("step_time_s", 0.0))
    state_url = os.environ["SPOTLINE_CHECKPOINT_URL"].rstrip("/") + "/state.json"

    state = {"w": 0.0, "b": 0.0, "step": 0}
    fs, path = fsspec.core.url_to_fs(state_url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    if fs.exists(path):
        with fs.open(path) as f:
            state = json.load(f)
        report({"type": "resumed", "step": state["step"], "checkpoint_uri": state_url})
        print(f"resumed at step {state['step']}", flush=True)

    def save():
        data = json.dumps(state).encode()
        if "file" in fs.protocol:
            # On a disk: a temporary name, then a rename, so no reader sees half a file.
            fs.pipe_file(path + ".tmp", data)
            fs.mv(path + ".tmp", path)
        else:
            # Cloud Storage publishes an object whole once uploaded (and has no rename).
            fs.pipe_file(path, data)

    while state["step"] < epochs * STEPS_PER_EPOCH:
        if stop_requested:
            save()
            report({"type": "checkpoint", "step": state["step"], "uri": state_url})
            print(f"stopped at step {state['step']}", flush=True)
            return 143
        rng = random.Random(seed * 1_000_003 + state["step"])  # data for this exact step
        x = rng.uniform(-1, 1)
        error = state["w"] * x + state["b"] - (3 * x + 1)
        state["w"] -= lr * error * x
        state["b"] -= lr * error
        state["step"] += 1
        time.sleep(step_time_s)
        if state["step"] % STEPS_PER_EPOCH == 0:
            save()
            epoch = state["step"] // STEPS_PER_EPOCH
            loss = (
                sum(
                    (state["w"] * x + state["b"] - 3 * x - 1) ** 2
                    for x in (i / 10 - 1 for i in range(21))
                )
                / 21
            )
            metrics = {"loss": loss, "w": state["w"], "b": state["b"]}
            report(
                {
                    "type": "epoch",
                    "epoch": epoch,
                    "epochs": epochs,
                    "step": state["step"],
                    "metrics": metrics,
                    "checkpoint_uri": state_url,
                }
            )
            print(f"epoch {epoch}/{epochs} loss {loss:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

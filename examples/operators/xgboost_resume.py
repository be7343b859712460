"""XGBoost on a gang that may lose a node, resuming from its last save.

Every node trains on its own shard through XGBoost's tracker, which node 0
runs on MASTER_PORT. After each boosting round the nodes agree, in one
allreduce, whether any of them got the notice (SIGTERM): if one did, every
node stops after that round, node 0 saves the booster in the local checkpoint
folder (the agent uploads it), and every node exits 143. Started again (a new
attempt, or the gang regrouped around a replaced node, with the new node
list in the same variables), every node loads the saved booster and goes on
with ``xgb_model=``, as XGBoost's docs continue a training. Node 0 saves and
reports an epoch every ``ROUNDS_PER_EPOCH`` rounds.
"""

import hashlib
import os
import sys
import time

import numpy as np
import xgboost as xgb
from xgboost import collective
from xgboost.tracker import RabitTracker

from spotline.notice import EXIT_STOPPED, NoticeFlag, step_time_s, stored_uri
from spotline.report import report_checkpoint, report_epoch, report_resumed

ROUNDS_PER_EPOCH = 10
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
epochs = int(os.environ.get("SPOTLINE_EPOCHS", "3"))
checkpoint_dir = os.environ.get("SPOTLINE_CHECKPOINT_DIR", "checkpoints")
saved_model = os.path.join(checkpoint_dir, "booster.json")
round_time_s = step_time_s()


def save(booster: xgb.Booster) -> str:
    """Node 0's save: written aside, then put in place, so no half file is ever read."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    booster.save_model(saved_model + ".part.json")
    os.replace(saved_model + ".part.json", saved_model)
    return saved_model


class StopTogether(xgb.callback.TrainingCallback):
    """Each round: whether any node got the notice (one allreduce), and node 0's
    save at an epoch's end."""

    def __init__(self, flag: NoticeFlag) -> None:
        super().__init__()
        self.flag = flag
        self.stopped_at: int | None = None

    def after_iteration(self, model, epoch, evals_log) -> bool:
        time.sleep(round_time_s)
        done = model.num_boosted_rounds()
        told = np.array([float(self.flag.requested)])
        if collective.allreduce(told, collective.Op.MAX)[0] > 0:
            print(
                f"rank {rank}: stopping after round {done}, sigterm={self.flag.requested}",
                flush=True,
            )
            self.stopped_at = done
            return True
        if rank == 0 and done % ROUNDS_PER_EPOCH == 0:
            uri = stored_uri(save(model))
            report_epoch(done // ROUNDS_PER_EPOCH, epochs, done, {"rounds": done}, uri)
        return False


def main() -> int:
    tracker = None
    if rank == 0:  # node 0 runs the tracker on MASTER_PORT, as Kubeflow's operator does
        tracker = RabitTracker(n_workers=world, host_ip=addr, port=port, sortby="task")
        tracker.start()
    rng = np.random.default_rng(rank)  # each node its own shard, the same on any VM
    x = rng.normal(size=(400, 6))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(float)
    params = {"tree_method": "hist", "objective": "binary:logistic", "nthread": 1, "seed": 0}
    resumed = xgb.Booster(model_file=saved_model) if os.path.exists(saved_model) else None
    done = 0 if resumed is None else resumed.num_boosted_rounds()
    if resumed is not None and rank == 0:
        report_resumed(done, stored_uri(saved_model))
    with (
        NoticeFlag() as flag,
        collective.CommunicatorContext(
            dmlc_tracker_uri=addr, dmlc_tracker_port=port, dmlc_task_id=str(rank)
        ),
    ):
        callback = StopTogether(flag)
        booster = xgb.train(
            params,
            xgb.DMatrix(x, y),
            num_boost_round=epochs * ROUNDS_PER_EPOCH - done,
            xgb_model=resumed,
            callbacks=[callback],
        )
        if callback.stopped_at is not None and rank == 0:
            report_checkpoint(callback.stopped_at, save(booster), "sigterm")
        digest = hashlib.sha256(booster.save_raw("json")).hexdigest()[:16]
    if tracker is not None:
        tracker.wait_for()
    if callback.stopped_at is not None:
        return EXIT_STOPPED  # 143: the gang stopped, node 0's save complete
    print(
        f"xgboost rank {rank} trained {booster.num_boosted_rounds()} rounds model={digest}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two-node XGBoost through the variables spotline sets (MASTER_ADDR/PORT,
RANK, WORLD_SIZE): node 0 runs the tracker; every node trains on its shard,
and the collective makes one model."""

import hashlib
import os

import numpy as np
import xgboost as xgb
from xgboost import collective
from xgboost.tracker import RabitTracker

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
tracker = None
if rank == 0:  # node 0 runs XGBoost's tracker on MASTER_PORT, as Kubeflow's operator does
    tracker = RabitTracker(n_workers=world, host_ip=addr, port=port, sortby="task")
    tracker.start()
with collective.CommunicatorContext(
    dmlc_tracker_uri=addr, dmlc_tracker_port=port, dmlc_task_id=str(rank)
):
    rng = np.random.default_rng(rank)  # each node its own shard
    x = rng.normal(size=(200, 4))
    y = (x[:, 0] > 0).astype(float)
    params = {"tree_method": "hist", "objective": "binary:logistic", "nthread": 1}
    booster = xgb.train(params, xgb.DMatrix(x, y), num_boost_round=5)
    total = collective.allreduce(np.array([rank + 1.0]), collective.Op.SUM)
    digest = hashlib.sha256(booster.save_raw("json")).hexdigest()[:16]
    print(
        f"xgboost rank {collective.get_rank()} of {collective.get_world_size()} "
        f"sum={total[0]:g} model={digest}",
        flush=True,
    )
if tracker is not None:
    tracker.wait_for()

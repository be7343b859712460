"""JAX on a gang that may lose a node, resuming from its last save.

One JAX process a node joins the others through ``jax.distributed`` at the
coordinator spotline names (node 0, on the gang's port). The batch is
sharded over one global mesh, a CPU device a process, so each step's
gradient is averaged across the nodes by XLA's collectives (Gloo on CPU).
After each step the processes agree, in one cross-process gather, whether
any of them got the notice (SIGTERM): if one did, every process stops after
that step, process 0 saves the parameters in the local checkpoint folder
(the agent uploads it), and every process exits 143. Started again (a new
attempt, or the gang regrouped around a replaced node, with the new
coordinator in the same variables), process 0 loads the save and gives it
to the others, and every process goes on from its step. Process 0 saves and reports an epoch every
``STEPS_PER_EPOCH`` steps.
"""

import hashlib
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from spotline.notice import EXIT_STOPPED, NoticeFlag, step_time_s, stored_uri
from spotline.report import report_checkpoint, report_epoch, report_resumed

STEPS_PER_EPOCH = 10
FEATURES, BATCH = 8, 64  # a batch is each process's share
epochs = int(os.environ.get("SPOTLINE_EPOCHS", "3"))
checkpoint_dir = os.environ.get("SPOTLINE_CHECKPOINT_DIR", "checkpoints")
saved_params = os.path.join(checkpoint_dir, "params.npz")


def save(params: dict[str, jax.Array], step: int) -> str:
    """Process 0's save: written aside, then put in place, so no half file is ever read."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    with open(saved_params + ".part", "wb") as part:
        np.savez(part, step=step, w=np.asarray(params["w"]), b=np.asarray(params["b"]))
    os.replace(saved_params + ".part", saved_params)
    return saved_params


def batch_of(step: int, process: int) -> tuple[np.ndarray, np.ndarray]:
    """This process's share of a step's batch, the same on any VM and after any restart."""
    rng = np.random.default_rng([step, process])
    x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
    y = x @ np.linspace(-1.0, 1.0, FEATURES, dtype=np.float32) + 0.5
    return x, y


def loss(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


@jax.jit
def train_step(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> dict:
    grads = jax.grad(loss)(params, x, y)  # the mean over the whole, sharded batch
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads)


def main() -> int:
    # JAX reads JAX_COORDINATOR_ADDRESS by itself; the process count and id
    # are passed, as off a cluster JAX detects it cannot find them. Process 0
    # serves the coordinator on that address only.
    coordinator = os.environ["JAX_COORDINATOR_ADDRESS"]
    jax.distributed.initialize(
        coordinator,
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
        coordinator_bind_address=coordinator,
    )
    process, world = jax.process_index(), jax.process_count()
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    sharded = NamedSharding(mesh, PartitionSpec("batch"))
    replicated = NamedSharding(mesh, PartitionSpec())
    params = {"w": np.zeros(FEATURES, np.float32), "b": np.zeros((), np.float32)}
    done = 0
    if process == 0 and os.path.exists(saved_params):
        with np.load(saved_params) as saved:
            done = int(saved["step"])
            params = {name: saved[name] for name in params}
        report_resumed(done, stored_uri(saved_params))
    # Every process goes on from process 0's save, whatever its own folder holds.
    step, params = multihost_utils.broadcast_one_to_all((np.int32(done), params))
    done, params = int(step), jax.device_put(params, replicated)
    total, pause_s = epochs * STEPS_PER_EPOCH, step_time_s()
    stopped_at = None
    with NoticeFlag() as flag:
        while done < total:
            x, y = batch_of(done, process)
            params = train_step(
                params,
                jax.make_array_from_process_local_data(sharded, x),
                jax.make_array_from_process_local_data(sharded, y),
            )
            done += 1
            time.sleep(pause_s)
            told = multihost_utils.process_allgather(np.int32(flag.requested))
            if told.any():
                print(f"process {process}: stopping after step {done}", flush=True)
                stopped_at = done
                break
            if process == 0 and done % STEPS_PER_EPOCH == 0:
                uri = stored_uri(save(params, done))
                report_epoch(done // STEPS_PER_EPOCH, epochs, done, {"steps": done}, uri)
    if stopped_at is not None:
        if process == 0:
            report_checkpoint(stopped_at, save(params, stopped_at), "sigterm")
        multihost_utils.sync_global_devices("saved")  # no process leaves before the save
        jax.distributed.shutdown()
        return EXIT_STOPPED  # 143: the gang stopped, process 0's save complete
    weights = np.concatenate([np.asarray(params["w"]), np.asarray(params["b"])[None]])
    digest = hashlib.sha256(weights.tobytes()).hexdigest()[:16]
    print(f"jax process {process} of {world} trained {done} steps params={digest}", flush=True)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A Keras model trained on a TensorFlow gang that may lose a node, resuming from its last save.

``MultiWorkerMirroredStrategy`` reads the gang from ``TF_CONFIG`` (worker 0
is the chief), and the loop is TensorFlow's custom training loop for it:
``strategy.run`` of one step, the gradients all-reduced by the optimizer.
After each step the workers agree, in one all-reduce, whether any of them
got the notice (SIGTERM): if one did, every worker stops after that step,
every worker saves (``tf.train.Checkpoint``: the model and the optimizer,
whose ``iterations`` is the step), the chief into ``SPOTLINE_CHECKPOINT_DIR``
and the others into a folder of their own, as TensorFlow's multi-worker
guide has it, and every worker exits 143. Started again (a new attempt, or
the gang regrouped around a replaced node, with the new node list in
``TF_CONFIG``), every worker restores the chief's save (the agent restores
the job's checkpoint folder onto every node) and goes on from the step after
it, over the same batches as a run never stopped. The chief also saves at
every epoch's end.

Why not ``model.fit``, nor TensorFlow's ``PreemptionCheckpointHandler``:
Keras 3's ``fit`` fails under ``MultiWorkerMirroredStrategy`` (keras-team/keras
issue 20585, TensorFlow's own multi-worker Keras tutorial included), and the
handler does nothing on a Compute Engine VM without a GPU, and with one it
watches host maintenance events, not Spot preemptions.
"""

import hashlib
import os
import shutil
import sys
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

from spotline.notice import EXIT_STOPPED, NoticeFlag, step_time_s, stored_uri
from spotline.report import report_checkpoint, report_epoch, report_resumed

SAMPLES, GLOBAL_BATCH = 256, 32
STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH  # 8: the whole data set once, in order
epochs = int(os.environ.get("SPOTLINE_EPOCHS", "4"))
checkpoint_dir = os.environ.get("SPOTLINE_CHECKPOINT_DIR", "checkpoints")
saved_dir = os.path.join(checkpoint_dir, "tf-state")  # a folder: stored as one unit
pause_s = step_time_s()


def main() -> int:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    # After the strategy: creating it puts TensorFlow's own SIGTERM handler
    # in place, and a handler installed before never runs (the notice is lost).
    flag = NoticeFlag().install()
    task_id = strategy.cluster_resolver.task_id
    chief = task_id == 0
    rng = np.random.default_rng(0)  # the same data set on every worker, sharded below
    x = rng.normal(size=(SAMPLES, 8)).astype("float32")
    y = (x[:, :1] - 0.5 * x[:, 1:2] > 0).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    batches = strategy.experimental_distribute_dataset(data.with_options(options))

    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(16, "relu"), keras.layers.Dense(1)]
        )
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    # Every worker saves (a save may need them all); only the chief's is kept.
    write_dir = saved_dir if chief else os.path.join(tempfile.mkdtemp(), f"worker-{task_id}")
    manager = tf.train.CheckpointManager(checkpoint, write_dir, max_to_keep=1)

    def steps() -> int:  # the optimizer's iterations: the steps trained, restored ones too
        return int(optimizer.iterations.value.numpy())

    @tf.function
    def train_step(batch):
        def step(x, y):
            with tf.GradientTape() as tape:
                losses = loss_fn(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(losses, global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce("SUM", strategy.run(step, args=batch), axis=None)

    @tf.function
    def anyone_told(mine):
        return strategy.reduce("SUM", strategy.run(tf.identity, args=(mine,)), axis=None) > 0

    def save() -> None:
        manager.save(checkpoint_number=steps())
        if not chief:
            shutil.rmtree(write_dir, ignore_errors=True)

    latest = tf.train.latest_checkpoint(saved_dir)
    if latest is not None:
        checkpoint.restore(latest).assert_existing_objects_matched()
    done = steps()
    if done:
        print(f"worker {task_id} resumed at step {done}", flush=True)
        if chief:
            report_resumed(done, stored_uri(saved_dir))

    while done < epochs * STEPS_PER_EPOCH:
        epoch, skip = divmod(done, STEPS_PER_EPOCH)
        for index, batch in enumerate(batches):
            if index < skip:
                continue  # trained before the save
            loss = float(train_step(batch))
            done = steps()
            time.sleep(pause_s)
            if bool(anyone_told(tf.constant(float(flag.requested)))):
                save()
                print(f"worker {task_id} stopping after step {done}", flush=True)
                if chief:
                    report_checkpoint(done, saved_dir, "sigterm")
                return EXIT_STOPPED  # 143: the gang stopped, the chief's save complete
        save()
        if chief:
            report_epoch(epoch + 1, epochs, done, {"loss": loss}, stored_uri(saved_dir))

    weights = b"".join(np.asarray(w).tobytes() for w in model.get_weights())
    print(
        f"keras worker {task_id} trained {done} steps "
        f"weights={hashlib.sha256(weights).hexdigest()[:16]}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The seed's Keras network as your own script: on spotline, or with `python train.py`."""

import json
import os
import sys

import fsspec
import keras
from sklearn.datasets import load_digits

from spotline.keras import exit_code, spotline_callbacks

# The job spec's fields, with defaults for a run outside spotline.
epochs = int(os.environ.get("SPOTLINE_EPOCHS", "3"))
batch_size = int(os.environ.get("SPOTLINE_BATCH_SIZE", "32"))
seed = int(os.environ.get("SPOTLINE_SEED", "0"))
# Seeds the weights and the order of the batches: the same in every attempt.
keras.utils.set_random_seed(seed)

x, y = load_digits(return_X_y=True)  # 1797 8x8 digits bundled with scikit-learn
x = (x / 16.0).astype("float32")
model = keras.Sequential(
    [
        keras.Input(shape=(64,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ]
)
model.compile(
    optimizer="adam",
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)

# Epoch reports, backup and exact-step restore, a save on the preemption notice.
callbacks = spotline_callbacks()
history = model.fit(
    x, y, batch_size=batch_size, epochs=epochs, validation_split=0.2,
    callbacks=callbacks, verbose=2,
)  # fmt: skip

if exit_code(callbacks) == 0:
    # The results, beside TensorBoard's logs: the job's outputs folder on
    # spotline (gs:// or local), this folder outside it.
    outputs = os.environ.get("SPOTLINE_OUTPUT_URL", ".")
    with fsspec.open(f"{outputs}/history.json", "w") as out:
        json.dump({"epoch": history.epoch, "history": history.history}, out)
    with fsspec.open(f"{outputs}/weights.json", "w") as out:
        json.dump([w.tolist() for w in model.get_weights()], out)
    print(f"trained {len(history.epoch)} epochs, results in {outputs}", flush=True)
sys.exit(exit_code(callbacks))  # 143 after a save on the preemption notice: the job resumes

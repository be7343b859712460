"""The Keras trainer's distribution strategy: MirroredStrategy on a machine
with several GPUs, one device otherwise.

There is no GPU here: the choice is tested by the device count the trainer
would see, and a real MirroredStrategy over two logical CPUs stands in for two
GPUs. Needs the ``tensorflow`` extra.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tensorflow_required import require_tensorflow

require_tensorflow("KERAS STRATEGY TESTS")

import tensorflow as tf  # noqa: E402

from spotline.vm_image.trainers import keras_ffnn  # noqa: E402

pytestmark = pytest.mark.frameworks


@pytest.mark.parametrize(("gpus", "mirrored"), [(0, False), (1, False), (2, True), (8, True)])
def test_several_gpus_mirror_one_or_none_do_not(gpus: int, mirrored: bool) -> None:
    assert keras_ffnn.mirrors(gpus) is mirrored


def test_one_device_trains_with_the_default_strategy() -> None:
    strategy = keras_ffnn.distribution_strategy(tf, [])
    assert not isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 1


# In a process of its own: logical devices can only be made before TensorFlow
# starts its runtime, which an earlier test in this process may have done.
TWO_CPUS = """
import json, tensorflow as tf
from spotline.vm_image.trainers import keras_ffnn
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
devices = [device.name for device in tf.config.list_logical_devices("CPU")]
strategy = keras_ffnn.distribution_strategy(tf, devices)
with strategy.scope():
    model = keras_ffnn.build_model(tf.keras, 1e-3)
kernel = model.trainable_variables[0].value
print(json.dumps({
    "strategy": type(strategy).__name__,
    "replicas": strategy.num_replicas_in_sync,
    "variable": type(kernel).__name__,
    "copies": [copy.device.rsplit("/", 1)[-1] for copy in kernel.values],
}))
"""


def test_two_devices_train_with_mirrored_strategy() -> None:
    done = subprocess.run(
        [sys.executable, "-c", TWO_CPUS],
        cwd=Path(__file__).resolve().parents[2],  # `-c` imports vm_image from here
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "strategy": "MirroredStrategy",
        "replicas": 2,
        # The model's variables are mirrored: one copy on each device.
        "variable": "MirroredVariable",
        "copies": ["device:CPU:0", "device:CPU:1"],
    }


def test_a_batch_that_does_not_split_evenly_is_refused_on_the_vm() -> None:
    # Submission refuses it (spotline.shared.domain.admission); the trainer checks
    # again against the GPUs it finds, for a machine outside the catalog.
    assert keras_ffnn.uneven_batch(30, 4) == (
        "batch size 30 is not a multiple of the 4 GPUs MirroredStrategy splits it across"
    )
    assert keras_ffnn.uneven_batch(32, 4) is None and keras_ffnn.uneven_batch(30, 1) is None

"""``spotline.keras.fit`` as a notebook user calls it, on the whole local stack.

The user's code (a compiled Keras model, NumPy arrays, one call) runs as a
plain Python script and as the cells of a notebook in a real Jupyter kernel;
each job's first VM is preempted in the middle of training. The call returns
the job id, and a model and history equal to what ``model.fit`` gives in the
user's own process with the same seed, never stopped.

Local "VMs" run this interpreter: it needs the ``tensorflow`` extra (CI
installs it) and skips loudly without it; the notebook run needs nbclient and
ipykernel (the ``dev`` extra).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from tests.doc_examples import blocks, run_python
from tests.e2e.test_e2e_recovery import preempt_once

try:
    import tensorflow  # noqa: F401
except ImportError:
    print(
        "\n!!! KERAS FIT STACK TESTS SKIPPED: TensorFlow is not installed (make tensorflow) !!!",
        file=sys.stderr,
    )
    pytest.skip("TensorFlow is not installed (spotline[tensorflow])", allow_module_level=True)

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

EPOCHS = 4
BATCH = 8
SEED = 5

# The user's side, as a notebook's cells: build and compile a model, load
# arrays, one call. `step_time_s` (simulated compute per step) keeps each
# epoch a few seconds long, so the preemption lands inside training.
SETUP = f"""
import json
import keras
import numpy as np
from sklearn.datasets import load_digits

import spotline.keras

keras.utils.set_random_seed({SEED})
model = keras.Sequential([
    keras.Input(shape=(64,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(10),
])
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=0.01),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
digits = load_digits()
x = (digits.data / 16.0).astype("float32")
y = digits.target
"""
CALL = f"""
job_id, trained, history = spotline.keras.fit(
    model, x[:1000], y[:1000],
    machine_ids=["g2-standard-4"],
    epochs={EPOCHS},
    batch_size={BATCH},
    validation_data=(x[1000:1200], y[1000:1200]),
    description="keras fit from a notebook",
    user=USER,
    seed={SEED},
    spec={{"hyperparameters": {{"step_time_s": 0.03}}}},
)
"""
SAVE = """
np.savez(OUT + "/weights.npz", *trained.get_weights())
with open(OUT + "/result.json", "w") as out:
    json.dump({"job_id": job_id, "history": history.history, "epoch": history.epoch}, out)
"""


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """``model.fit`` in the user's own process, never stopped."""
    space: dict[str, Any] = {}
    exec(SETUP, space)  # the same cells, here
    keras = space["keras"]
    keras.utils.set_random_seed(SEED)
    model, x, y = space["model"], space["x"], space["y"]
    history = model.fit(
        x[:1000],
        y[:1000],
        epochs=EPOCHS,
        batch_size=BATCH,
        validation_data=(x[1000:1200], y[1000:1200]),
        verbose=0,
    )
    return {"weights": model.get_weights(), "history": history.history}


@pytest.fixture
def preempting(local_stack: LocalStack) -> Iterator[Any]:
    """Preempts the first VM of ``user``'s job once it has reported an epoch,
    from a thread, while the call under test blocks."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    store = FirestoreStore(local_stack.options.project)

    def start(user: str) -> None:
        preempt = preempt_once(local_stack)

        def run() -> None:
            while not stop.is_set():
                for job in store.recent_jobs(5, user=user):
                    preempt(job)
                time.sleep(0.2)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=10)


def check(out: Path, reference: dict[str, Any], stack: LocalStack) -> None:
    result = json.loads((out / "result.json").read_text())
    job = FirestoreStore(stack.options.project).get_job(result["job_id"])
    assert job is not None and job.status == "COMPLETED", job
    first, second = job.attempts
    assert first.outcome == "preempted" and first.checkpoint_step is not None
    assert second.resumed_from_step == first.checkpoint_step  # the step saved on the notice
    with np.load(out / "weights.npz") as stored:
        weights = [stored[f"arr_{index}"] for index in range(len(stored.files))]
    for got, expected in zip(weights, reference["weights"], strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert result["epoch"] == list(range(EPOCHS))
    assert result["history"].keys() == reference["history"].keys()
    for name, values in reference["history"].items():
        assert result["history"][name] == pytest.approx(values, rel=1e-4, abs=1e-6), name


def test_fit_from_a_script_survives_a_preemption(
    local_stack: LocalStack, preempting: Any, reference: dict[str, Any], tmp_path: Path
) -> None:
    user = "fit-script"
    script = tmp_path / "train.py"
    script.write_text(
        f"USER = {user!r}\nOUT = {str(tmp_path)!r}\n"
        + textwrap.dedent(SETUP)
        + textwrap.dedent(CALL)
        + textwrap.dedent(SAVE)
    )
    preempting(user)

    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=420,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check(tmp_path, reference, local_stack)


def test_fit_from_a_notebook_survives_a_preemption(
    local_stack: LocalStack, preempting: Any, reference: dict[str, Any], tmp_path: Path
) -> None:
    nbclient = pytest.importorskip("nbclient", reason="nbclient is missing (the dev extra)")
    nbformat = pytest.importorskip("nbformat", reason="nbformat is missing (the dev extra)")
    user = "fit-notebook"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(f"USER = {user!r}\nOUT = {str(tmp_path)!r}"),
        nbformat.v4.new_code_cell(textwrap.dedent(SETUP)),
        nbformat.v4.new_code_cell(textwrap.dedent(CALL)),
        nbformat.v4.new_code_cell(textwrap.dedent(SAVE)),
    ]
    preempting(user)

    # The kernel starts with this process's environment: the stack's variables.
    nbclient.NotebookClient(
        notebook,
        timeout=420,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()

    shown = "".join(
        output.get("text", "") for output in notebook.cells[2].outputs if output.get("name")
    )
    assert "COMPLETED" in shown  # the call showed the job's progress in the notebook
    check(tmp_path, reference, local_stack)


def test_ctrl_c_asks_and_cancels_the_job(
    local_stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    import _thread

    space: dict[str, Any] = {}
    exec(SETUP, space)
    asked: list[str] = []

    def answer_yes(prompt: str) -> str:
        asked.append(prompt)
        return "y"

    monkeypatch.setattr("builtins.input", answer_yes)
    store = FirestoreStore(local_stack.options.project)

    def interrupt_once_training() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            jobs = store.recent_jobs(5, user="fit-interrupted")
            if jobs and jobs[0].epoch >= 1:
                _thread.interrupt_main()  # Ctrl-C, in the thread the call runs in
                return
            time.sleep(0.2)

    threading.Thread(target=interrupt_once_training, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        space["spotline"].keras.fit(
            space["model"],
            space["x"][:1000],
            space["y"][:1000],
            machine_ids=["g2-standard-4"],
            epochs=50,
            batch_size=BATCH,
            user="fit-interrupted",
            spec={"hyperparameters": {"step_time_s": 0.03}},
        )

    [job] = store.recent_jobs(5, user="fit-interrupted")
    assert asked == [f"\ncancel job {job.job_id}? [y/N] "]
    deadline = time.monotonic() + 60
    while job.status != "CANCELED" and time.monotonic() < deadline:
        time.sleep(0.5)
        job = store.get_job(job.job_id) or job
    assert job.status == "CANCELED", job


def test_the_docs_example_runs(shared_stack: LocalStack, tmp_path: Path) -> None:
    page, heading = "docs/frameworks/keras.md", "## Keras in one call: `spotline.keras.fit`"
    [example] = blocks(page, heading, "python")

    done = run_python(shared_stack, example, tmp_path, timeout_s=420)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job_id, epochs, accuracy = done.stdout.strip().splitlines()[-1].split()
    assert epochs == "10" and float(accuracy) > 0.7  # it learnt (about 0.9)
    assert list((tmp_path / "runs" / job_id / "checkpoints").iterdir())
    assert list((tmp_path / "runs" / "logs" / job_id).rglob("*tfevents*"))

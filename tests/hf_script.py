"""A Hugging Face Trainer script written as the Trainer's documentation writes
one, pointed at ``SPOTLINE_CHECKPOINT_DIR``: a tiny BERT built from a config
(nothing downloads) classifying scikit-learn's digits, their 64 pixel values
(0-16) read as tokens. The tests run it as a subprocess and preempt it.

``SPOTLINE_INTEGRATION=1`` adds spotline's callback and resumes from the last
checkpoint; without it, the script resumes as the documentation says, from
``get_last_checkpoint``. The tests' own probe (not part of the idiom) records
every step done in ``STEPS_FILE`` and sleeps ``STEP_SLEEP_S`` after each, so
that a SIGTERM lands between two saves.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
from sklearn.datasets import load_digits
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

SAMPLES = 384  # 24 steps of 16 per epoch
SAVE_STEPS = 10


class Digits(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, count: int) -> None:
        pixels, labels = load_digits(return_X_y=True)
        self.ids = torch.tensor(pixels[:count], dtype=torch.long) + 1  # 0 is padding
        self.labels = torch.tensor(labels[:count], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.labels[index]}


class Probe(TrainerCallback):
    """The tests' instrument: which steps ran, slowed down."""

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        with open(os.environ["STEPS_FILE"], "a") as steps:
            steps.write(f"{state.global_step}\n")
        time.sleep(float(os.environ.get("STEP_SLEEP_S", "0")))


def main() -> None:
    set_seed(0)
    config = BertConfig(
        vocab_size=18,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    config.num_labels = 10
    model = BertForSequenceClassification(config)
    args = TrainingArguments(
        output_dir=os.environ["SPOTLINE_CHECKPOINT_DIR"],
        num_train_epochs=2,
        per_device_train_batch_size=16,
        learning_rate=1e-3,
        save_steps=SAVE_STEPS,
        logging_steps=5,
        seed=0,
        use_cpu=True,
        report_to="none",
    )
    callbacks: list[TrainerCallback] = [Probe()]
    integrated = os.environ.get("SPOTLINE_INTEGRATION") == "1"
    if integrated:
        from spotline.transformers import SpotlineCallback, last_checkpoint

        callbacks.append(SpotlineCallback())
        resume = last_checkpoint(args.output_dir)
    else:
        folder = os.environ["SPOTLINE_CHECKPOINT_DIR"]
        resume = get_last_checkpoint(folder) if os.path.isdir(folder) else None
    trainer = Trainer(model=model, args=args, train_dataset=Digits(SAMPLES), callbacks=callbacks)
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(os.environ["SPOTLINE_OUTPUT_DIR"])
    Path(os.environ["SPOTLINE_OUTPUT_DIR"], "done").write_text("ok")


if __name__ == "__main__":
    main()

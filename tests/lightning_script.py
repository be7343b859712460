"""A Lightning script written as Lightning's documentation writes one, pointed
at ``SPOTLINE_CHECKPOINT_DIR``: a small network on scikit-learn's digits, a
``ModelCheckpoint`` every 10 steps. The tests run it as a subprocess and
preempt it.

``SPOTLINE_INTEGRATION=1`` adds spotline's callback, a resumable loader and
resumes from ``last_checkpoint``; without it, the script resumes as the
documentation says, with ``ckpt_path="last"`` and ``save_last=True``. The
tests' own probe (not part of the idiom) records every step done in
``STEPS_FILE`` and sleeps ``STEP_SLEEP_S`` after each, so that a SIGTERM lands
between two saves.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

SAMPLES = 384  # 24 steps of 16 per epoch
SAVE_STEPS = 10


class DigitsClassifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class Probe(Callback):
    """The tests' instrument: which steps ran, slowed down."""

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        with open(os.environ["STEPS_FILE"], "a") as steps:
            steps.write(f"{trainer.global_step}\n")
        time.sleep(float(os.environ.get("STEP_SLEEP_S", "0")))


def main() -> None:
    L.seed_everything(0)
    pixels, labels = load_digits(return_X_y=True)
    dataset = TensorDataset(
        torch.tensor(pixels[:SAMPLES] / 16.0, dtype=torch.float32),
        torch.tensor(labels[:SAMPLES], dtype=torch.long),
    )
    dirpath = os.environ["SPOTLINE_CHECKPOINT_DIR"]
    checkpoint = ModelCheckpoint(
        dirpath=dirpath, every_n_train_steps=SAVE_STEPS, save_top_k=-1, save_last=True
    )
    callbacks: list[Callback] = [checkpoint, Probe()]
    integrated = os.environ.get("SPOTLINE_INTEGRATION") == "1"
    if integrated:
        from torchdata.stateful_dataloader import StatefulDataLoader

        from spotline.lightning import SpotlineCallback, last_checkpoint

        loader: DataLoader[Any] = StatefulDataLoader(dataset, batch_size=16, shuffle=True)
        callbacks.append(SpotlineCallback())
        ckpt_path = last_checkpoint(dirpath)
    else:
        loader = DataLoader(dataset, batch_size=16, shuffle=True)
        ckpt_path = "last"
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        deterministic=True,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
    )
    model = DigitsClassifier()
    trainer.fit(model, loader, ckpt_path=ckpt_path)
    outputs = Path(os.environ["SPOTLINE_OUTPUT_DIR"])
    outputs.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), outputs / "model.pt")


if __name__ == "__main__":
    main()

"""A Lightning module on spotline: a small network on scikit-learn's digits."""

import os

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from spotline.lightning import SpotlineCallback, last_checkpoint


class DigitsClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        self.log("train_accuracy", (self.net(x).argmax(1) == y).float().mean())
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


L.seed_everything(0)
pixels, labels = load_digits(return_X_y=True)  # 1797 8x8 digits bundled with scikit-learn
dataset = TensorDataset(
    torch.tensor(pixels / 16.0, dtype=torch.float32), torch.tensor(labels, dtype=torch.long)
)
# A DataLoader that Lightning can resume mid-epoch, at the next batch.
loader = StatefulDataLoader(dataset, batch_size=32, shuffle=True)

# On spotline a local folder the agent restores and mirrors to storage.
dirpath = os.environ.get("SPOTLINE_CHECKPOINT_DIR", "checkpoints")
trainer = L.Trainer(
    max_epochs=int(os.environ.get("SPOTLINE_EPOCHS", "3")),
    callbacks=[ModelCheckpoint(dirpath=dirpath, every_n_train_steps=50), SpotlineCallback()],
    accelerator="auto",
    logger=False,
    enable_progress_bar=False,
)
model = DigitsClassifier()
# None on the first attempt; the checkpoint with the most steps on the next ones.
trainer.fit(model, loader, ckpt_path=last_checkpoint(dirpath))
outputs = os.environ.get("SPOTLINE_OUTPUT_DIR", ".")
torch.save(model.state_dict(), os.path.join(outputs, "digits.pt"))

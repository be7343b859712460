"""A plain PyTorch loop on spotline: saves to the local checkpoint folder and
resumes at the exact step, on the notice too."""

import os
import sys

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F

from spotline.notice import EXIT_STOPPED, stored_uri
from spotline.report import report_checkpoint, report_epoch, report_resumed
from spotline.torch import PreemptionFlag, load_latest_checkpoint, save_checkpoint

checkpoint_dir = os.environ.get("SPOTLINE_CHECKPOINT_DIR", "checkpoints")  # local
epochs = int(os.environ.get("SPOTLINE_EPOCHS", "3"))
batch_size = int(os.environ.get("SPOTLINE_BATCH_SIZE", "32"))

torch.manual_seed(0)
pixels, labels = load_digits(return_X_y=True)  # 1797 8x8 digits bundled with scikit-learn
x = torch.tensor(pixels / 16.0, dtype=torch.float32)
y = torch.tensor(labels, dtype=torch.long)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
steps_per_epoch = len(y) // batch_size

epoch, done_in_epoch, step = 0, 0, 0
saved = load_latest_checkpoint(checkpoint_dir)  # None on the first attempt
if saved is not None:
    saved.restore(model, optimizer)  # and the RNG states
    epoch, done_in_epoch, step = saved.epoch, saved.step_in_epoch, saved.step
    report_resumed(step, stored_uri(saved.uri))

with PreemptionFlag() as flag:  # SIGTERM (the notice) only sets a flag
    while epoch < epochs:
        # The epoch's order depends on the epoch alone: a resumed epoch sees
        # the batches it had not trained yet, as a run never stopped would.
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch))
        for index in range(done_in_epoch, steps_per_epoch):
            batch = order[index * batch_size : (index + 1) * batch_size]
            loss = F.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if flag.exit_requested:  # save this very step, then stop
                uri = save_checkpoint(
                    checkpoint_dir, model=model, optimizer=optimizer,
                    epoch=epoch, step=step, step_in_epoch=index + 1,
                )  # fmt: skip
                report_checkpoint(step, uri, "sigterm")
                sys.exit(EXIT_STOPPED)  # 143: stopped on the notice, state saved
        epoch, done_in_epoch = epoch + 1, 0
        uri = save_checkpoint(
            checkpoint_dir, model=model, optimizer=optimizer, epoch=epoch, step=step,
            step_in_epoch=0,
        )  # fmt: skip
        report_epoch(epoch, epochs, step, {"loss": loss.item()}, stored_uri(uri))

outputs = os.environ.get("SPOTLINE_OUTPUT_DIR", ".")
torch.save(model.state_dict(), os.path.join(outputs, "digits.pt"))

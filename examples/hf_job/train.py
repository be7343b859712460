"""A Hugging Face Trainer on spotline: a tiny BERT built from a config (nothing
downloads) reads scikit-learn's digits, each image as 64 tokens."""

import os

import torch
from sklearn.datasets import load_digits
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
    set_seed,
)

from spotline.transformers import SpotlineCallback, last_checkpoint

set_seed(0)
pixels, labels = load_digits(return_X_y=True)  # 1797 8x8 digits bundled with scikit-learn
# Pixel values 0-16 as token ids 1-17 (0 is padding).
train = [
    {"input_ids": torch.tensor(image, dtype=torch.long) + 1, "labels": int(label)}
    for image, label in zip(pixels, labels, strict=True)
]
config = BertConfig(
    vocab_size=18, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64, max_position_embeddings=64,
)  # fmt: skip
config.num_labels = 10
model = BertForSequenceClassification(config)

args = TrainingArguments(
    # On spotline a local folder the agent restores and mirrors to storage.
    output_dir=os.environ.get("SPOTLINE_CHECKPOINT_DIR", "checkpoints"),
    num_train_epochs=int(os.environ.get("SPOTLINE_EPOCHS", "3")),
    per_device_train_batch_size=32,
    learning_rate=2e-3,
    save_steps=50,
    logging_steps=10,
    report_to="none",
)
trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[SpotlineCallback()])
# None on the first attempt; the newest checkpoint-<step> on the next ones.
trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))
trainer.save_model(os.environ.get("SPOTLINE_OUTPUT_DIR", "model"))

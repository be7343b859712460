"""Checkpoints through gcsfs against the local stack's Cloud Storage emulator.

Starts ``gcp-storage-emulator`` (as ``spotline up`` does), then, 3 runs each,
median and max:
- the emulator's start, until its bucket answers;
- ``save_checkpoint`` of a model whose checkpoint is about ``--size-mb`` (float32
  parameters, plain SGD: no optimizer buffers) into ``gs://`` and, for
  comparison, into a local folder (``file://``);
- ``load_checkpoint`` of it back from ``gs://``;
- a bare gcsfs upload (``pipe``) of as many random bytes.

The emulator is one local Python process (single-threaded HTTP, objects kept
on this disk): these numbers say what the tests and the demo pay, nothing about
Cloud Storage's throughput from a VM.

Prints numbers; asserts nothing (the machines are shared and noisy).
Run: .venv/bin/python benchmarks/bench_gcs_emulator.py [--runs 3] [--size-mb 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from spotline.infra.localstack.storage import StorageEmulator, reload_fsspec_config  # noqa: E402
from spotline.torch import load_checkpoint, save_checkpoint  # noqa: E402

MB = 10**6


def model_of(size_bytes: int, width: int = 1024) -> torch.nn.Sequential:
    layers = max(1, round(size_bytes / (4 * (width * width + width))))
    return torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))


def show(label: str, seconds: list[float]) -> None:
    print(
        f"  {label:<34} median {statistics.median(seconds):6.2f} s   max {max(seconds):6.2f} s"
        f"   ({', '.join(f'{s:.2f}' for s in seconds)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=100)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-gcs-") as scratch:
        folder = Path(scratch)
        starts: list[float] = []
        for run in range(args.runs):
            emulator = StorageEmulator(folder / f"start-{run}", folder / "start.log")
            starts.append(emulator.wait_ready())
            emulator.stop()

        emulator = StorageEmulator(folder / "data", folder / "emulator.log")
        emulator.wait_ready()
        os.environ.update(emulator.client_env())
        reload_fsspec_config()
        try:
            model = model_of(args.size_mb * MB)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            saves: dict[str, list[float]] = {"gs": [], "file": []}
            loads: list[float] = []
            gs_uri = ""
            for run in range(args.runs):
                for scheme, root in (
                    ("gs", f"{emulator.root}/bench/{run}"),
                    ("file", (folder / f"local-{run}").as_uri()),
                ):
                    started = time.perf_counter()
                    uri = save_checkpoint(
                        root, model=model, optimizer=optimizer, epoch=0, step=run,
                        step_in_epoch=run,
                    )  # fmt: skip
                    saves[scheme].append(time.perf_counter() - started)
                    gs_uri = uri if scheme == "gs" else gs_uri
                started = time.perf_counter()
                load_checkpoint(gs_uri)
                loads.append(time.perf_counter() - started)

            import fsspec

            fs = fsspec.filesystem("gs")
            size = fs.size(gs_uri.removeprefix("gs://"))
            payload = os.urandom(size)
            pipes = []
            for run in range(args.runs):
                started = time.perf_counter()
                fs.pipe(f"{emulator.bucket}/raw/{run}", payload)
                pipes.append(time.perf_counter() - started)
        finally:
            emulator.stop()

    print(f"checkpoint {size / MB:.1f} MB, {args.runs} runs; emulator on 127.0.0.1, one process")
    show("emulator start until bucket answers", starts)
    show("save_checkpoint -> gs:// (emulator)", saves["gs"])
    show("save_checkpoint -> file:// (disk)", saves["file"])
    show("load_checkpoint <- gs:// (emulator)", loads)
    show(f"gcsfs pipe of {size / MB:.0f} MB random bytes", pipes)
    return 0


if __name__ == "__main__":
    sys.exit(main())

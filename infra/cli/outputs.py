"""A job's files in storage, downloaded: ``tensorboard`` and ``checkpoints``
(``Job.tensorboard``, ``Job.checkpoints``, ``Job.outputs``)."""

from __future__ import annotations

import argparse
import sys

from spotline.infra.cli.exit_codes import Exit
from spotline.infra.client.connection import connect
from spotline.infra.client.errors import NothingStored
from spotline.infra.client.job import Job


def tensorboard(args: argparse.Namespace) -> int:
    """A job's TensorBoard logs into DIRECTORY/logs/JOB/."""
    job = Job(args.job, connection=connect(args.workdir))
    try:
        job.tensorboard(args.directory)
    except NothingStored as err:
        print(err, file=sys.stderr)
        return Exit.FAILED
    target = args.directory / "logs" / job.id
    print(f"TensorBoard logs of {job.id} in {target}: tensorboard --logdir {target}")
    return 0


def checkpoints(args: argparse.Namespace) -> int:
    """A job's saved state and final outputs into DIRECTORY/JOB/checkpoints
    and DIRECTORY/JOB/outputs."""
    job = Job(args.job, connection=connect(args.workdir))
    downloads = {"checkpoints": job.checkpoints, "outputs": job.outputs}
    copied = 0
    for kind, download in downloads.items():
        if kind in (args.skip or []):
            continue
        try:
            files = download(args.directory)
        except NothingStored as err:
            print(err, file=sys.stderr)
            continue
        size = sum(p.stat().st_size for p in files)
        copied += len(files)
        target = args.directory / job.id / kind
        print(f"{kind} of {job.id}: {len(files)} file(s), {size / 1e6:.1f} MB in {target}")
    return Exit.OK if copied else Exit.FAILED

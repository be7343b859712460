"""A job's outputs in storage: ``tensorboard``."""

from __future__ import annotations

import argparse
import sys

from infra.cli.connect import job_of


def tensorboard(args: argparse.Namespace) -> int:
    """The seed's get_tensorboard_logs: into DIRECTORY/logs/JOB/."""
    import fsspec

    settings, job = job_of(args)
    source = f"{settings.job_prefix(job.job_id)}/outputs/tensorboard"
    fs, path = fsspec.core.url_to_fs(source)
    # gcsfs caches listings per process; the agent may have uploaded since.
    fs.invalidate_cache(path)
    if not fs.exists(path):
        print(f"job {job.job_id} has no TensorBoard logs (yet) in {source}", file=sys.stderr)
        return 1
    target = args.directory / "logs" / job.job_id
    target.mkdir(parents=True, exist_ok=True)
    fs.get(f"{path}/", f"{target}/", recursive=True)
    print(f"TensorBoard logs of {job.job_id} in {target}: tensorboard --logdir {target}")
    return 0

"""A job's outputs in storage: ``tensorboard``."""

from __future__ import annotations

import argparse
import sys

from spotline.infra.cli.connect import job_of


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


def checkpoints(args: argparse.Namespace) -> int:
    """The seed's ``directory_to_save_ckpt``: a job's saved state and final
    outputs into DIRECTORY/JOB/checkpoints and DIRECTORY/JOB/outputs."""
    import fsspec

    settings, job = job_of(args)
    prefix = settings.job_prefix(job.job_id)
    kinds = [k for k in ("checkpoints", "outputs") if k not in (args.skip or [])]
    copied = 0
    for kind in kinds:
        fs, path = fsspec.core.url_to_fs(f"{prefix}/{kind}")
        fs.invalidate_cache(path)  # the agent may have uploaded since this process looked
        if not fs.exists(path):
            print(f"job {job.job_id} has no {kind} (yet) in {prefix}/{kind}", file=sys.stderr)
            continue
        target = args.directory / job.job_id / kind
        target.mkdir(parents=True, exist_ok=True)
        fs.get(f"{path}/", f"{target}/", recursive=True)
        files = [p for p in target.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        copied += len(files)
        print(f"{kind} of {job.job_id}: {len(files)} file(s), {size / 1e6:.1f} MB in {target}")
    return 0 if copied else 1

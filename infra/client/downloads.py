"""A job's files in storage, downloaded: its checkpoints, its outputs, its
TensorBoard logs (all through fsspec: ``gs://``, the storage emulator, or
``file://`` alike)."""

from __future__ import annotations

from pathlib import Path

from spotline.infra.client.errors import NothingStored

# What a job leaves under its storage (``jobs/JOB/...``), by name.
KINDS = {
    "checkpoints": "checkpoints",
    "outputs": "outputs",
    "tensorboard": "outputs/tensorboard",
}


def download(prefix: str, kind: str, target: Path) -> list[Path]:
    """Copy ``prefix/KINDS[kind]`` into ``target``; the files now there.

    Raises:
        NothingStored: the job has nothing of that kind (yet).
    """
    import fsspec

    source = f"{prefix}/{KINDS[kind]}"
    fs, path = fsspec.core.url_to_fs(source)
    # gcsfs caches listings per process; the agent may have uploaded since.
    fs.invalidate_cache(path)
    if not fs.exists(path):
        what = "TensorBoard logs" if kind == "tensorboard" else kind
        job_id = prefix.rstrip("/").rsplit("/", 1)[-1]
        raise NothingStored(f"job {job_id} has no {what} (yet) in {source}")
    target.mkdir(parents=True, exist_ok=True)
    fs.get(f"{path}/", f"{target}/", recursive=True)
    return sorted(p for p in target.rglob("*") if p.is_file())

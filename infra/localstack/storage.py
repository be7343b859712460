"""The Cloud Storage emulator of the local stack, and how clients reach it.

The emulator is ``gcp-storage-emulator`` (PyPI, the ``local`` extra): it
serves Cloud Storage's JSON API, the one gcsfs speaks, and gcsfs (like every
Google storage client) sends its requests there when ``STORAGE_EMULATOR_HOST``
names it. So the agent, the trainers, a command job and the CLI touch
``gs://`` paths exactly as on a real VM; only the host differs.

Two more variables keep gcsfs from leaving this machine (see :func:`client_env`),
and :func:`reload_fsspec_config` applies them to a process that imported
fsspec before it learnt of the emulator.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from spotline.infra.localstack.errors import StackError
from spotline.infra.localstack.processes import ManagedProcess, free_port

BUCKET = "spotline-local"


def storage_emulator_missing() -> str | None:
    """None when the emulator can start here, else why not."""
    if importlib.util.find_spec("gcp_storage_emulator") is None:
        return "gcp-storage-emulator is not installed (pip install -e '.[local]')"
    return None


class StorageEmulator:
    """One ``gcp-storage-emulator`` on a free loopback port, with ``bucket``
    created at start; objects are kept under ``data_dir`` (its own layout,
    with a ``.meta`` index: read them through gcsfs, not from the folder)."""

    def __init__(
        self, data_dir: Path, log_path: Path, bucket: str = BUCKET, port: int | None = None
    ) -> None:
        missing = storage_emulator_missing()
        if missing:
            raise StackError(f"the local stack needs its Cloud Storage emulator: {missing}")
        self.bucket = bucket
        self.port = port or free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        command = [
            sys.executable, "-m", "gcp_storage_emulator",
            "--data-dir", str(data_dir),
            "start", "--host", "127.0.0.1", "--port", str(self.port),
            "--default-bucket", bucket,
        ]  # fmt: skip
        self.process = ManagedProcess("storage-emulator", command, log_path)

    @property
    def root(self) -> str:
        """The bucket's URL, the stack's storage root."""
        return f"gs://{self.bucket}"

    def wait_ready(self, timeout_s: float = 60.0) -> float:
        """Wait until the bucket answers (the server is up and the bucket made)."""
        return self.process.wait_ready(self._bucket_exists, timeout_s)

    def stop(self) -> None:
        self.process.stop()

    def client_env(self) -> dict[str, str]:
        """What a process needs to use this emulator through gcsfs."""
        return client_env(self.url)

    def _bucket_exists(self) -> bool:
        url = f"{self.url}/storage/v1/b/{self.bucket}"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def client_env(url: str) -> dict[str, str]:
    """The variables that point gcsfs at the emulator at ``url``.

    - ``STORAGE_EMULATOR_HOST``: where every Google storage client sends its requests.
    - ``FSSPEC_GS_TOKEN=anon`` (fsspec's per-protocol default): the emulator takes
      no credentials, and without it gcsfs looks for some: an application-default
      login (then refreshed at Google) or a metadata server.
    - ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``: gcsfs otherwise asks the gRPC
      Storage Control API for each bucket's layout, which the emulator does not
      serve; every call would log a warning and ask again.
    """
    return {
        "STORAGE_EMULATOR_HOST": url,
        "FSSPEC_GS_TOKEN": "anon",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }


def reload_fsspec_config() -> None:
    """Re-read fsspec's configuration (files and ``FSSPEC_*`` variables).

    fsspec reads it once, when imported; a process that sets the stack's
    environment afterwards (the test session, the CLI) calls this so that its
    gs:// filesystems take the emulator's defaults, and again once the
    variables are gone.
    """
    import fsspec.config

    fsspec.config.conf.clear()
    fsspec.config.set_conf_files(fsspec.config.conf_dir, fsspec.config.conf)
    fsspec.config.set_conf_env(fsspec.config.conf, os.environ)
    # fsspec keeps each filesystem it made, with the endpoint it read then:
    # forget gcsfs's, so that the next one reads the variables anew.
    gcsfs = sys.modules.get("gcsfs")
    if gcsfs is not None:
        for cls in {gcsfs.GCSFileSystem, gcsfs.core.GCSFileSystem}:
            cls.clear_instance_cache()

"""The layer contracts in `.importlinter` hold, and they bite: the same check
run on a copy of the tree with one forbidden import added fails by name."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = ("shared", "functions", "infra", "vm_image")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-c",
        "from importlinter.cli import lint_imports_command; lint_imports_command()",
    ]
    return subprocess.run(
        [*command, "--no-cache", "--config", str(root / ".importlinter")],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_tree(repo_root: Path, target: Path) -> Path:
    """The four folders, and ``spotline/`` with its links to them, as in the repository."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(repo_root / "spotline", target / "spotline", symlinks=True, ignore=ignore)
    for package in PACKAGES:
        shutil.copytree(repo_root / package, target / package, ignore=ignore)
    shutil.copy(repo_root / ".importlinter", target / ".importlinter")
    return target


def test_the_tree_keeps_every_contract(repo_root: Path) -> None:
    result = lint_imports(repo_root)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        (
            "shared/domain/states.py",
            "import google.cloud.firestore",
            "The domain and the VM contract are pure",
        ),
        (
            "shared/domain/placement.py",
            "from spotline.shared.adapters import gce_compute",
            "The domain and the VM contract are pure",
        ),
        (
            "functions/ops/teardown.py",
            "from spotline.functions.handlers import envelope",
            "Handlers above operations",
        ),
        (
            "functions/ops/slots.py",
            "from spotline.functions.ops import placement",
            "Operations in layers",
        ),
        (
            "vm_image/agent/metadata.py",
            "from spotline.shared.adapters import firestore_store",
            "A VM only publishes events",
        ),
        (
            "infra/localcloud/metadata_server.py",
            "from spotline.infra.localstack import processes",
            "The local stack runs the local cloud",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    repo_root: Path, tmp_path: Path, module: str, line: str, contract: str
) -> None:
    root = copy_tree(repo_root, tmp_path)
    path = root / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")

    result = lint_imports(root)

    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts")[-1]
    assert contract in broken.replace("\n", " ")

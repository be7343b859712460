"""One import name: everything spotline installs lives under ``spotline``.

The repository keeps its folders at the top (functions/, shared/, infra/,
vm_image/); the wheel maps them under ``spotline``. A folder of the same name
in a user's own project (``shared/``, ``infra/``) must not shadow any of it.
"""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.wheels import build_wheel

FOLDERS = ("functions", "shared", "infra", "vm_image")
# A module named by its folder alone: the folder, a dot and a module in it.
OLD_NAME = re.compile(r"(?<![\w./\-])(functions|shared|infra|vm_image)\.([A-Za-z_]\w*)")
# Measurements recorded before the rename keep the names they were taken under.
RECORDED = ("benchmarks/results/",)


def modules_under(repo_root: Path) -> set[tuple[str, str]]:
    """(folder, first name below it) of every package and module in the folders."""
    found = set()
    for folder in FOLDERS:
        for path in (repo_root / folder).iterdir():
            if path.suffix == ".py" or (path / "__init__.py").exists():
                found.add((folder, path.stem))
    return found


def test_no_file_names_a_module_without_its_import_name(repo_root: Path) -> None:
    known = modules_under(repo_root)
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=repo_root, capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for name in tracked:
        path = repo_root / name
        if name.startswith(RECORDED) or path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in OLD_NAME.finditer(line):
                if (match.group(1), match.group(2)) in known:
                    found.append(f"{name}:{number}: {match.group(0)}")
    assert not found, "name these as spotline.<folder>...:\n" + "\n".join(found)


def test_the_links_show_the_folders_under_the_import_name(repo_root: Path) -> None:
    for folder in FOLDERS:
        link = repo_root / "spotline" / folder
        assert link.is_symlink() and link.resolve() == (repo_root / folder).resolve()


@pytest.fixture
def wheel(tmp_path: Path, repo_root: Path) -> Path:
    return build_wheel(repo_root, tmp_path)


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["spotline"]
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"spotline"}
    for package in ("functions", "shared", "infra", "vm_image"):
        assert f"spotline/{package}/__init__.py" in names
    # Package data travels under the same name.
    assert "spotline/py.typed" in names
    assert "spotline/shared/data/machines.json" in names
    assert "spotline/vm_image/systemd/spotline-agent.service" in names
    assert "spotline/infra/deploy/firestore.rules" in names
    # The trainer helpers live under their public names alone.
    for helper in ("spotline/report.py", "spotline/torch.py", "spotline/keras/callbacks.py"):
        assert helper in names
    for old in ("report.py", "torch_checkpoint.py", "keras_callbacks.py"):
        assert f"spotline/vm_image/trainers/{old}" not in names
    # What `spotline demo`, `up` and `deploy` read from the installed package.
    assert "spotline/functions/main.py" in names and "main.py" not in names
    assert "spotline/infra/cli/digits.json" in names
    assert "spotline/vm_image/spotline.pkr.hcl" in names

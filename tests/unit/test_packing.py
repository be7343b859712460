"""A folder packed for ``spotline submit --code-dir``: the ignore rules in and
out of a git work tree, the size limit's message, the content's address."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from spotline.infra.client.errors import InputsError
from spotline.infra.client.packing import pack
from spotline.infra.client.uploads import ship
from spotline.vm_image.agent.transfers import download_folder, restore_modes


def a_project(root: Path) -> Path:
    """A training folder as people keep one: code, a venv, caches, a checkpoint."""
    files = {
        "train.py": "print('train')\n",
        "requirements.txt": "numpy\n",
        "pkg/model.py": "X = 1\n",
        "pkg/__pycache__/model.cpython-312.pyc": "bytecode",
        ".venv/lib/site.py": "venv",
        "runs/ckpt-1.pt": "weights",
        "notes/keep.log": "kept by a negation",
        "notes/drop.log": "dropped",
        "data/big.bin": "x" * 2000,
        "data/.gitignore": "*.tmp\n",
        "data/part.tmp": "temporary",
        ".gitignore": ".venv/\n__pycache__/\n*.log\n!notes/keep.log\n",
        ".spotlineignore": "runs/\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "train.py").chmod(0o755)
    return root


KEPT = {
    ".gitignore",
    ".spotlineignore",
    "data/.gitignore",
    "data/big.bin",
    "notes/keep.log",
    "pkg/model.py",
    "requirements.txt",
    "train.py",
}


def names(folder: Path, **kwargs: float) -> set[str]:
    return {f.path for f in pack(folder, **kwargs).files}


def test_outside_git_the_gitignore_files_and_spotlineignore_are_honoured(tmp_path: Path) -> None:
    folder = a_project(tmp_path / "p")

    assert names(folder) == KEPT
    packed = pack(folder)
    assert {f.path: f.mode for f in packed.files}["train.py"] == "100755"
    assert packed.size == sum((folder / f.path).stat().st_size for f in packed.files)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_in_a_git_work_tree_git_decides_with_spotlineignore_on_top(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    folder = a_project(repo / "sub")
    (repo / ".gitignore").write_text("big.bin\n")  # a rule above the folder
    git = ["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    # Tracked although ignored now: git ships what it tracks.
    (folder / "pkg" / "__pycache__" / "forced.pyc").write_text("f")
    subprocess.run([*git, "add", "-f", "sub/pkg/__pycache__/forced.pyc"], check=True)
    (folder / "untracked.py").write_text("new\n")  # untracked and not ignored: shipped
    (folder / "pkg" / "model.py").unlink()  # tracked, deleted: not shipped

    assert names(folder) == (KEPT - {"data/big.bin", "pkg/model.py"}) | {
        "pkg/__pycache__/forced.pyc",
        "untracked.py",
    }
    # A folder git ignores whole: refused, saying git decided.
    (repo / ".gitignore").write_text("big.bin\nscratch/\n")
    (repo / "scratch").mkdir()
    (repo / "scratch" / "try.py").write_text("x\n")
    with pytest.raises(InputsError, match="git ignores every file in it"):
        pack(repo / "scratch")


def test_the_address_is_stable_and_one_byte_changes_it(tmp_path: Path) -> None:
    first = a_project(tmp_path / "a")
    second = a_project(tmp_path / "b")  # the same files, elsewhere, written in another order
    os.utime(second / "train.py", (1, 1))

    assert pack(first).digest == pack(second).digest == pack(first).digest
    (second / "pkg" / "model.py").write_text("X = 2\n")
    assert pack(second).digest != pack(first).digest
    (second / "pkg" / "model.py").write_text("X = 1\n")
    assert pack(second).digest == pack(first).digest
    (second / "train.py").chmod(0o644)  # the mode is part of the content
    assert pack(second).digest != pack(first).digest
    (second / "train.py").chmod(0o755)
    (second / "pkg" / "model.py").rename(second / "pkg" / "model2.py")
    assert pack(second).digest != pack(first).digest


def test_a_folder_over_the_limit_is_refused_naming_its_biggest_files(tmp_path: Path) -> None:
    folder = a_project(tmp_path / "p")
    (folder / "weights.pt").write_bytes(b"w" * 3_000_000)

    with pytest.raises(InputsError) as raised:
        pack(folder, limit_mb=2)

    message = str(raised.value)
    assert "over the 2 MB limit" in message
    assert "the biggest: weights.pt (3.0 MB), data/big.bin (2.0 kB)" in message
    assert ".spotlineignore" in message and "--upload-limit-mb" in message
    assert "weights.pt" in names(folder, limit_mb=4)


def test_a_missing_empty_or_unreadable_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputsError, match="no such folder"):
        pack(tmp_path / "missing")
    (tmp_path / "file.py").write_text("x")
    with pytest.raises(InputsError, match="not a folder"):
        pack(tmp_path / "file.py")
    ignored = tmp_path / "ignored"
    ignored.mkdir()
    (ignored / ".spotlineignore").write_text("*\n")
    with pytest.raises(InputsError, match="no file to upload"):
        pack(ignored)
    if os.geteuid() != 0:  # root reads any file
        secret = a_project(tmp_path / "p") / "train.py"
        secret.chmod(0)
        with pytest.raises(InputsError, match="cannot read"):
            pack(tmp_path / "p")


def test_an_uploaded_folder_comes_back_with_its_executable_files_executable(
    tmp_path: Path,
) -> None:
    folder = a_project(tmp_path / "p")
    packed = pack(folder)
    storage = (tmp_path / "bucket").as_uri()

    shipped = ship(storage, "code_uri", packed)
    local = tmp_path / "vm" / "code"
    download_folder(shipped.uri, local)
    assert not os.access(local / "train.py", os.X_OK)  # storage keeps no mode

    assert restore_modes(shipped.uri, local) == 1
    assert os.access(local / "train.py", os.X_OK)
    assert not os.access(local / "pkg" / "model.py", os.X_OK)
    assert ship(storage, "code_uri", packed).written == 0  # there already
    # A folder not uploaded by spotline: no manifest, nothing changed.
    assert restore_modes(f"{storage}/elsewhere", local) == 0


def test_a_link_to_a_file_outside_the_folder_is_refused(tmp_path: Path) -> None:
    folder = a_project(tmp_path / "p")
    (folder / "same.py").symlink_to(folder / "pkg" / "model.py")  # inside: shipped as a file
    assert "same.py" in names(folder)
    (tmp_path / "id_rsa").write_text("secret")
    (folder / "key").symlink_to(tmp_path / "id_rsa")

    with pytest.raises(InputsError, match=r"links to files outside it: key -> .*id_rsa"):
        pack(folder)
    (folder / ".spotlineignore").write_text("runs/\nkey\n")
    assert "key" not in names(folder)

"""A disk that fills in the middle of a download (issue 28): a real small filesystem (tmpfs)
under the models folder, the fake hub on 127.0.0.1. The download ends with a sentence, the part
is kept, and once space is freed the next download resumes from it and verifies the file."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from hub_server import TINY_REPO, FakeHub

from app import paths
from app.library import downloads
from app.library.downloads import FileRequest, download_files, local_path_for, part_path_for
from engine.errors import DownloadError


@pytest.fixture
def small_disk(tandem_home: Path) -> Iterator[Path]:
    """The models folder on a 256 kB filesystem of its own (needs root to mount; skipped without)."""
    folder = paths.models_dir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {r.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _grow(folder: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)


def _plenty_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """Free space as checked before the first byte: plenty (another program fills the disk after)."""
    monkeypatch.setattr(downloads.shutil, "disk_usage", lambda folder: SimpleNamespace(free=10**12))


def test_a_disk_that_fills_mid_download_keeps_the_part_and_the_next_start_resumes(
    hub: FakeHub, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = hub.repos[TINY_REPO].files["tiny-target.gguf"]
    assert len(f.data) > 512 * 1024  # more than the disk holds
    request = FileRequest(TINY_REPO, "tiny-target.gguf")
    with monkeypatch.context() as m, pytest.raises(DownloadError) as e:
        _plenty_free(m)
        download_files([request])
    message = str(e.value)
    assert message.startswith("the disk is full: tiny-target.gguf stopped at ")
    assert message.endswith(
        f"free some space in {local_path_for(TINY_REPO, 'tiny-target.gguf').parent} and download again to resume"
    )
    final = local_path_for(TINY_REPO, "tiny-target.gguf")
    part = part_path_for(final)
    kept = part.stat().st_size
    assert 0 < kept < len(f.data) and not final.exists()
    assert part.read_bytes() == f.data[:kept]  # what was written is right

    _grow(small_disk, "8m")  # space freed
    (path,) = download_files([request])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == f.sha256
    ranges = hub.range_headers(f)
    assert ranges[-1] == f"bytes={kept}-", ranges  # resumed, not started over
    assert not part.exists()


def test_a_disk_already_full_is_a_sentence_not_an_os_error(
    hub: FakeHub, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    filler = small_disk / "filler.bin"
    with pytest.raises(OSError), open(filler, "wb", buffering=0) as out:  # fill it
        while True:
            out.write(b"\0" * 4096)
    _plenty_free(monkeypatch)
    with pytest.raises(DownloadError, match=r"^the disk is full: tiny-target.gguf stopped at 0 B"):
        download_files([FileRequest(TINY_REPO, "tiny-target.gguf")])

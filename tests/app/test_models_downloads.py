"""Downloads against a real HTTP server on 127.0.0.1 that answers like the hub (tests/hub_server.py)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hub_server import FakeHub, HubFile, closed_port, go_online

from app.library import downloads
from app.library.downloads import (
    DownloadControl,
    DownloadProgress,
    DownloadStopped,
    FileRequest,
    download_files,
    local_path_for,
    part_path_for,
    sidecar_path_for,
)
from engine.errors import DownloadError
from tests.tiny import write_tiny_model
from tests.waiting import wait_until

REPO = "tandem-test/tiny-target-GGUF"
DRAFT_REPO = "tandem-test/tiny-draft-GGUF"
GATED_REPO = "tandem-test/gated-GGUF"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def download_file(request: FileRequest, **kwargs: Any) -> Path:
    """One file, through the real entry point."""
    return download_files([request], **kwargs)[0]


def retries(monkeypatch: pytest.MonkeyPatch, n: int = downloads.N_RETRIES, wait_s: float = 0.01) -> None:
    """A dropped connection is tried again n times, the first after wait_s (not a second)."""
    monkeypatch.setattr(downloads, "N_RETRIES", n)
    monkeypatch.setattr(downloads, "BACKOFF_S", wait_s)


def free_disk(monkeypatch: pytest.MonkeyPatch, n_bytes: int) -> None:
    """The models folder's disk says it has n_bytes free."""
    monkeypatch.setattr(downloads.shutil, "disk_usage", lambda folder: SimpleNamespace(free=n_bytes))


@pytest.fixture(scope="module")
def tiny_bytes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("hub-files")
    return {
        "target": write_tiny_model(folder / "t.gguf", seed=11, n_layers=4).read_bytes(),
        "draft": write_tiny_model(folder / "d.gguf", seed=12, n_layers=2).read_bytes(),
        "other": write_tiny_model(folder / "o.gguf", seed=13, n_layers=2).read_bytes(),
    }


@pytest.fixture
def hub(tiny_bytes: dict[str, bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    with FakeHub() as hub:
        hub.add_file(REPO, "tiny-target.gguf", tiny_bytes["target"])
        hub.add_file(REPO, "README.md", b"# tiny\n", is_lfs=False)
        hub.add_file(DRAFT_REPO, "tiny-draft.gguf", tiny_bytes["draft"])
        hub.add_file(GATED_REPO, "gated.gguf", tiny_bytes["other"])
        hub.set_gated(GATED_REPO, valid_token="hf_valid_test_token")
        go_online(monkeypatch, hub, tmp_path)
        yield hub


def target_file(hub: FakeHub) -> HubFile:
    return hub.repos[REPO].files["tiny-target.gguf"]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_download_reports_progress_and_lands_verified_under_final_name(hub: FakeHub) -> None:
    f = target_file(hub)
    hub.throttle_s = 0.01  # about half a second, so progress is reported along the way
    events: list[DownloadProgress] = []

    path = download_file(FileRequest(REPO, "tiny-target.gguf"), on_progress=events.append)

    assert path == local_path_for(REPO, "tiny-target.gguf")
    assert path.parent.name == "tandem-test--tiny-target-GGUF"
    assert sha256_of(path) == f.sha256
    assert not part_path_for(path).exists() and not sidecar_path_for(path).exists()
    states = [e.state for e in events]
    assert states[0] == "downloading" and states[-1] == "done" and "verifying" in states
    downloading = [e for e in events if e.state == "downloading"]
    assert len(downloading) >= 3
    done = [e.file_done_bytes for e in downloading]
    assert done == sorted(done) and 0 < done[-2] < len(f.data)
    assert any(e.bytes_per_s > 0 and e.eta_s is not None for e in downloading[1:])
    last = events[-1]
    assert last.file_done_bytes == last.file_total_bytes == len(f.data)
    assert last.total_done_bytes == last.total_bytes == len(f.data)
    # The metadata came from a HEAD on /resolve/, the bytes from the CDN, with no token sent there.
    assert [r.path for r in hub.recorded("hub", "HEAD")] == [f"/{REPO}/resolve/main/tiny-target.gguf"]
    cdn_gets = hub.recorded("cdn", "GET")
    assert len(cdn_gets) == 1 and "authorization" not in cdn_gets[0].headers
    assert cdn_gets[0].headers.get("range") is None


def test_small_git_file_is_checked_against_its_git_blob_id(hub: FakeHub) -> None:
    path = download_file(FileRequest(REPO, "README.md"))
    assert path.read_bytes() == b"# tiny\n"


def test_a_pair_reports_progress_over_both_files(hub: FakeHub, tiny_bytes: dict[str, bytes]) -> None:
    events: list[DownloadProgress] = []
    paths = download_files(
        [FileRequest(REPO, "tiny-target.gguf"), FileRequest(DRAFT_REPO, "tiny-draft.gguf")],
        on_progress=events.append,
    )
    assert [p.read_bytes() for p in paths] == [tiny_bytes["target"], tiny_bytes["draft"]]
    total = len(tiny_bytes["target"]) + len(tiny_bytes["draft"])
    assert {e.total_bytes for e in events} == {total}
    assert {e.n_files for e in events} == {2}
    assert [e.file_index for e in events if e.state == "done"] == [0, 1]
    first_done = next(e for e in events if e.state == "done")
    assert first_done.total_done_bytes == len(tiny_bytes["target"])
    assert events[-1].total_done_bytes == total


def test_download_killed_in_another_process_resumes_with_a_range_request(hub: FakeHub) -> None:
    f = target_file(hub)
    hub.throttle_s = 0.05  # 16 kB every 50 ms: about 2.5 s for the whole file
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.main", "models", "download", REPO, "tiny-target.gguf"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    final = local_path_for(REPO, "tiny-target.gguf")
    part = part_path_for(final)
    try:

        def started() -> bool:
            assert proc.poll() is None, proc.communicate()
            return part.exists() and part.stat().st_size >= 100_000

        wait_until(started, 60, "the download to start")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert not final.exists(), "a partial file must never appear under the final name"
    kept = part.stat().st_size
    assert 0 < kept < len(f.data)
    assert sidecar_path_for(final).exists()

    hub.throttle_s = 0.0
    path = download_file(FileRequest(REPO, "tiny-target.gguf"))

    assert sha256_of(path) == f.sha256
    assert hub.range_headers(f)[-1] == f"bytes={kept}-"
    resumed = hub.recorded("cdn", "GET")[-1]
    assert resumed.status == 206 and resumed.body_bytes_sent == len(f.data) - kept
    assert not part.exists()


def test_dropped_connection_is_retried_and_resumed(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    f = target_file(hub)
    hub.drop_connection(f, after_bytes=300_000, times=2)
    events: list[DownloadProgress] = []

    retries(monkeypatch)
    path = download_file(FileRequest(REPO, "tiny-target.gguf"), on_progress=events.append)

    assert sha256_of(path) == f.sha256
    ranges = hub.range_headers(f)
    assert ranges[0] is None and len(ranges) == 3
    offsets = [int(r.removeprefix("bytes=").rstrip("-")) for r in ranges[1:] if r]
    assert offsets[0] == 300_000 and offsets[1] == 600_000  # each retry continued where the last stopped
    assert sum(e.state == "retrying" for e in events) == 2


def test_connection_that_keeps_dropping_gives_up_and_keeps_the_part(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = target_file(hub)
    hub.drop_connection(f, after_bytes=0, times=10)
    retries(monkeypatch, 2)
    with pytest.raises(
        DownloadError, match=r"connection to the hub dropped 3 times.*download again to resume"
    ):
        download_file(FileRequest(REPO, "tiny-target.gguf"))
    final = local_path_for(REPO, "tiny-target.gguf")
    assert not final.exists()
    assert sidecar_path_for(final).exists()


def test_checksum_mismatch_deletes_the_file_and_says_so(hub: FakeHub) -> None:
    f = target_file(hub)
    hub.corrupt(f)
    with pytest.raises(
        DownloadError, match=r"tiny-target.gguf is corrupt: its sha256 checksum .*was deleted"
    ):
        download_file(FileRequest(REPO, "tiny-target.gguf"))
    final = local_path_for(REPO, "tiny-target.gguf")
    assert not final.exists() and not part_path_for(final).exists() and not sidecar_path_for(final).exists()


def test_catalog_checksum_is_checked_too(hub: FakeHub) -> None:
    with pytest.raises(DownloadError, match="is corrupt"):
        download_file(FileRequest(REPO, "tiny-target.gguf", sha256="0" * 64))


def test_missing_file_is_a_404_with_a_sentence(hub: FakeHub) -> None:
    with pytest.raises(DownloadError) as e:
        download_file(FileRequest(REPO, "no-such-file.gguf"))
    assert (
        str(e.value) == f"the file no-such-file.gguf was not found in the repository {REPO} (revision main)"
    )
    assert [r.status for r in hub.recorded("hub")] == [404]


def test_missing_repository(hub: FakeHub) -> None:
    with pytest.raises(DownloadError, match=r"the repository nobody/nothing-GGUF was not found on the hub"):
        download_file(FileRequest("nobody/nothing-GGUF", "x.gguf"))


def test_missing_revision(hub: FakeHub) -> None:
    with pytest.raises(DownloadError, match=r"has no revision 'v9'"):
        download_file(FileRequest(REPO, "tiny-target.gguf", revision="v9"))


def test_pinned_commit_revision_downloads(hub: FakeHub) -> None:
    commit = hub.repos[REPO].commit
    path = download_file(FileRequest(REPO, "tiny-target.gguf", revision=commit))
    assert sha256_of(path) == target_file(hub).sha256
    assert hub.recorded("hub", "HEAD")[0].path == f"/{REPO}/resolve/{commit}/tiny-target.gguf"


def test_gated_repository_without_token_says_how_to_set_one(hub: FakeHub) -> None:
    with pytest.raises(DownloadError) as e:
        download_file(FileRequest(GATED_REPO, "gated.gguf"))
    message = str(e.value)
    assert "gated" in message and "HF_TOKEN" in message and "auth login" in message
    assert hub.recorded("hub")[0].status == 401


def test_gated_repository_with_token_downloads_and_keeps_the_token_off_the_cdn(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_valid_test_token")
    path = download_file(FileRequest(GATED_REPO, "gated.gguf"))
    assert path.exists()
    assert hub.recorded("hub", "HEAD")[0].headers["authorization"] == "Bearer hf_valid_test_token"
    assert "authorization" not in hub.recorded("cdn", "GET")[0].headers


def test_gated_repository_with_a_token_lacking_access(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_other_token")
    with pytest.raises(DownloadError, match="your token has no access to it yet"):
        download_file(FileRequest(GATED_REPO, "gated.gguf"))


def test_unreachable_hub(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    with pytest.raises(DownloadError, match=rf"cannot reach the model hub at {dead}"):
        download_file(FileRequest(REPO, "tiny-target.gguf"))


def test_offline_mode_refuses_with_a_sentence(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="HF_HUB_OFFLINE"):
        download_file(FileRequest(REPO, "tiny-target.gguf"))
    assert hub.requests == []


def test_not_enough_disk_space_is_refused_before_any_byte_moves(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = [FileRequest(REPO, "tiny-target.gguf"), FileRequest(DRAFT_REPO, "tiny-draft.gguf")]
    free_disk(monkeypatch, 1_000_000)
    with pytest.raises(
        DownloadError, match=r"not enough free disk space .* needs 1\.\d MB more but only 1\.0 MB"
    ):
        download_files(requests)
    assert hub.recorded("cdn") == []
    assert not any(local_path_for(r.repo_id, r.filename).parent.exists() for r in requests)


def test_disk_check_counts_only_what_is_left_to_fetch(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    f = target_file(hub)
    hub.drop_connection(f, after_bytes=500_000)
    with monkeypatch.context() as m, pytest.raises(DownloadError):
        retries(m, 0)
        download_file(FileRequest(REPO, "tiny-target.gguf"))
    free_disk(monkeypatch, len(f.data) - 500_000)
    path = download_file(FileRequest(REPO, "tiny-target.gguf"))
    assert sha256_of(path) == f.sha256


def test_pause_keeps_the_part_and_the_next_start_resumes(hub: FakeHub) -> None:
    f = target_file(hub)
    hub.throttle_s = 0.01
    control = DownloadControl()
    seen: list[DownloadProgress] = []

    def pause_after_some_bytes(p: DownloadProgress) -> None:
        seen.append(p)
        if p.file_done_bytes >= 200_000:
            control.pause()

    with pytest.raises(DownloadStopped) as e:
        download_file(
            FileRequest(REPO, "tiny-target.gguf"), on_progress=pause_after_some_bytes, control=control
        )
    assert e.value.is_paused and "paused" in str(e.value)
    final = local_path_for(REPO, "tiny-target.gguf")
    kept = part_path_for(final).stat().st_size
    assert seen[-1].state == "paused" and kept == seen[-1].file_done_bytes and 200_000 <= kept < len(f.data)

    hub.throttle_s = 0.0
    path = download_file(FileRequest(REPO, "tiny-target.gguf"))
    assert sha256_of(path) == f.sha256
    assert hub.range_headers(f)[-1] == f"bytes={kept}-"


def test_cancel_deletes_the_part(hub: FakeHub) -> None:
    hub.throttle_s = 0.01
    control = DownloadControl()

    def cancel_after_some_bytes(p: DownloadProgress) -> None:
        if p.file_done_bytes >= 100_000:
            control.cancel()

    with pytest.raises(DownloadStopped, match="cancelled") as e:
        download_file(
            FileRequest(REPO, "tiny-target.gguf"), on_progress=cancel_after_some_bytes, control=control
        )
    assert not e.value.is_paused
    final = local_path_for(REPO, "tiny-target.gguf")
    assert not final.exists() and not part_path_for(final).exists() and not sidecar_path_for(final).exists()


def test_a_part_of_an_older_version_of_the_file_is_not_resumed(
    hub: FakeHub, tiny_bytes: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = target_file(hub)
    hub.drop_connection(f, after_bytes=400_000)
    with monkeypatch.context() as m, pytest.raises(DownloadError):
        retries(m, 0)
        download_file(FileRequest(REPO, "tiny-target.gguf"))
    new = hub.replace_file(f, tiny_bytes["other"])

    path = download_file(FileRequest(REPO, "tiny-target.gguf"))

    assert sha256_of(path) == new.sha256
    assert hub.range_headers(new) == [None]  # started over: the kept bytes belonged to the old file


def test_server_ignoring_range_restarts_cleanly(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    f = target_file(hub)
    hub.drop_connection(f, after_bytes=250_000)
    hub.ignore_range = True
    retries(monkeypatch)
    path = download_file(FileRequest(REPO, "tiny-target.gguf"))
    assert sha256_of(path) == f.sha256
    assert hub.range_headers(f) == [None, "bytes=250000-"]


def test_an_existing_complete_file_is_not_fetched_again(hub: FakeHub) -> None:
    first = download_file(FileRequest(REPO, "tiny-target.gguf"))
    events: list[DownloadProgress] = []
    again = download_file(FileRequest(REPO, "tiny-target.gguf"), on_progress=events.append)
    assert again == first
    assert len(hub.recorded("cdn", "GET")) == 1
    assert [e.state for e in events] == ["done"]


def test_a_second_download_of_the_same_file_at_the_same_time_is_refused(hub: FakeHub) -> None:
    from filelock import FileLock

    final = local_path_for(REPO, "tiny-target.gguf")
    final.parent.mkdir(parents=True)
    with (
        FileLock(str(final.with_name(final.name + ".part.lock"))),
        pytest.raises(DownloadError, match="already being downloaded by another Tandem"),
    ):
        download_file(FileRequest(REPO, "tiny-target.gguf"))
    assert not final.exists()


def test_a_wrong_file_of_the_right_size_is_not_already_downloaded(hub: FakeHub) -> None:
    """Issue 38: a file of the right size under the final name was taken as downloaded, unverified."""
    f = target_file(hub)
    final = local_path_for(REPO, "tiny-target.gguf")
    final.parent.mkdir(parents=True, exist_ok=True)
    final.write_bytes(bytes(len(f.data)))  # zeros of the right size
    path = download_file(FileRequest(REPO, "tiny-target.gguf"))
    assert sha256_of(path) == f.sha256  # downloaded again, verified
    n_gets = len(hub.recorded("cdn", "GET"))
    assert n_gets == 1
    # Now it is the right file: the next request finds it done without a byte fetched (the hash
    # is remembered beside it, not computed again).
    download_file(FileRequest(REPO, "tiny-target.gguf"))
    assert len(hub.recorded("cdn", "GET")) == n_gets


def test_a_206_from_the_wrong_offset_is_refused(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: a server answering a resume from byte 0 (with no checksum to catch it) had its
    wrong bytes installed. Content-Range is checked on every 206."""
    f = target_file(hub)
    hub.drop_connection(f, after_bytes=100_000)
    hub.range_from_zero = True
    retries(monkeypatch, 1)
    with pytest.raises(DownloadError, match="the server sent the wrong part of tiny-target.gguf"):
        download_file(FileRequest(REPO, "tiny-target.gguf"))
    final = local_path_for(REPO, "tiny-target.gguf")
    assert not final.exists() and part_path_for(final).stat().st_size == 100_000  # the good part is kept


def test_a_repo_id_cannot_climb_out_of_the_models_folder() -> None:
    with pytest.raises(DownloadError, match="is not a repository Tandem can store"):
        local_path_for("..", "x.gguf")

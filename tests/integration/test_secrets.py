"""API keys (issue 28, item 6): from a file or the environment as well as the command line (where
every user of the computer sees them in `ps`), settings.json readable by its owner only, and a
warning where a key would cross the network unencrypted. Real processes and real files."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app import paths
from app.host.remote_client import cleartext_warning
from app.settings import Settings, load_settings, save_settings
from tests.serve_process import ROOT, ServeProcess, tandem_env


def test_settings_are_written_readable_by_their_owner_only() -> None:
    path = paths.settings_path()
    path.write_text("{}")
    os.chmod(path, 0o644)  # as an older version left it
    save_settings(Settings(serve_api_key="k", remote_api_key="k2"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_settings().remote_api_key == "k2"
    save_settings(dataclasses.replace(load_settings(), serve_port=8123))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("how", ["file", "environment"])
def test_tandem_serve_takes_its_key_from_a_file_or_the_environment_out_of_sight(
    how: str, tmp_path: Path, tiny_target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "s3cret-key-not-in-ps"
    args = ["--model", str(tiny_target), "--threads", "1"]
    if how == "file":
        key_file = tmp_path / "key.txt"
        key_file.write_text(key + "\n")
        args += ["--api-key-file", str(key_file)]
    else:
        monkeypatch.setenv("TANDEM_API_KEY", key)
    server = ServeProcess(tmp_path, *args).started()
    try:
        cmdline = Path(f"/proc/{server.proc.pid}/cmdline").read_bytes()
        assert key.encode() not in cmdline
        assert httpx.get(f"{server.url}/models").status_code == 401
        ok = httpx.get(f"{server.url}/models", headers={"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--api-key-file", "/nonexistent/key"], "cannot read the API key file /nonexistent/key"),
        (["--api-key", "a", "--api-key-file", "/dev/null"], "give the API key one way"),
        (["--api-key-file", "/dev/null"], "the API key file /dev/null is empty"),
    ],
)
def test_a_key_that_cannot_be_read_is_one_line(
    tmp_path: Path, tiny_target: Path, args: list[str], says: str
) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "app.main", "serve", "--model", str(tiny_target), *args],
        cwd=ROOT, env=tandem_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and says in last


def test_a_key_over_plain_http_to_another_computer_is_warned_of() -> None:
    assert cleartext_warning("http://192.168.1.20:8080/v1", "k") == (
        "the API key for 192.168.1.20 is sent unencrypted (plain http://): anyone on the network "
        "between can read it; use https:// where the server offers it"
    )
    assert cleartext_warning("https://example.org/v1", "k") is None
    assert cleartext_warning("http://127.0.0.1:8080/v1", "k") is None
    assert cleartext_warning("http://localhost:8080/v1", "k") is None
    assert cleartext_warning("http://192.168.1.20:8080/v1", None) is None


def test_generate_remote_warns_before_sending_a_key_in_the_clear(tmp_path: Path) -> None:
    env = {**tandem_env(tmp_path), "TANDEM_REMOTE_API_KEY": "k"}
    r = subprocess.run(
        [sys.executable, "-m", "app.main", "generate", "--remote", "http://tandem-test.invalid:9/v1", "--prompt", "hello"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "warning: the API key for tandem-test.invalid is sent unencrypted (plain http://)" in r.stderr
    assert "Traceback" not in r.stderr


def test_serving_other_computers_with_a_key_warns_that_it_crosses_in_the_clear(
    tmp_path: Path, tiny_target: Path
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("k")
    server = ServeProcess(
        tmp_path,
        "--model",
        str(tiny_target),
        "--threads",
        "1",
        "--host",
        "0.0.0.0",
        "--api-key-file",
        str(key_file),
    )
    try:
        line = server.wait_for_line("warning: serving on 0.0.0.0 over plain http", 120)
        assert "unencrypted" in line
    finally:
        server.stop()

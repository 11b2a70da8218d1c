"""Review 5, F8: the link socket's name is predictable, so another user could take it first and
receive the user's tandem:// links. The client side now checks who answers (SO_PEERCRED) and
sends nothing to another user's process."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest


def test_a_second_start_sends_nothing_to_another_users_socket(tmp_path: Path) -> None:
    from app.gui import ask_running_window, instance_address

    if os.getuid() != 0:
        pytest.skip("becoming another user needs root: checked where tests run as root")
    address = instance_address(tmp_path)
    if not address.startswith("\0"):
        pytest.skip("the abstract socket is Linux's")
    ready_r, ready_w = os.pipe()
    got_r, got_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the squatter: uid 65534 takes the name first, then keeps what it is sent
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.bind(address)
                s.listen(1)
                os.write(ready_w, b"1")
                s.settimeout(30)
                conn, _ = s.accept()
                conn.settimeout(5)
                received = b""
                try:
                    while chunk := conn.recv(4096):
                        received += chunk
                except OSError:
                    pass
                os.write(got_w, received or b"-")
            code = 0
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(got_w)
    try:
        assert os.read(ready_r, 1) == b"1"
        link = "tandem://open_from_hf?model=me/private-repo&file=secret-model.gguf"
        assert ask_running_window(tmp_path, link) is False  # True before: "brought to the front"
        received = os.read(got_r, 65536)
        assert b"private-repo" not in received and received == b"-"
    finally:
        os.waitpid(pid, 0)
        os.close(ready_r)
        os.close(got_r)

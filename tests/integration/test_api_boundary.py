"""The API's boundary with web pages (issue 28, item 1), against a real `tandem serve` process and
the real window, with the headers a browser really sends: a page on another site, a page that
reached 127.0.0.1 through DNS rebinding, a form post, an allowed page's CORS preflight; and the
window that would relay an engine on another server with the user's key."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from app.api.engine_bridge import ApiEngine
from app.api.serve import ApiServer
from app.host.supervisor import EngineSupervisor
from tests.serve_process import ServeProcess, free_port

CHROME = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
)
BODY = '{"prompt": "the", "max_tokens": 2, "temperature": 0}'


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path, tiny_target: Path
) -> Iterator[ServeProcess]:
    home = tmp_path_factory.mktemp("boundary-home")
    s = ServeProcess(
        home, "--model", str(tiny_target), "--threads", "1", "--allow-origin", "http://localhost:3000"
    ).started()
    yield s
    s.stop()


def test_a_page_on_another_site_cannot_post_to_the_api(server: ServeProcess) -> None:
    """What `fetch("http://127.0.0.1:PORT/v1/completions", {method: "POST", mode: "no-cors",
    body})` on https://evil.example sends: a "simple" request, no preflight."""
    headers = {
        "Host": f"127.0.0.1:{server.port}",
        "Origin": "https://evil.example",
        "Content-Type": "text/plain;charset=UTF-8",
        "User-Agent": CHROME,
        "Accept": "*/*",
        "Sec-Fetch-Site": "cross-site",
        "Sec-Fetch-Mode": "no-cors",
        "Sec-Fetch-Dest": "empty",
        "Referer": "https://evil.example/",
    }
    r = httpx.post(f"{server.url}/completions", content=BODY, headers=headers)
    assert r.status_code == 403
    message = r.json()["error"]["message"]
    assert message.startswith("requests from web pages are refused: the page at https://evil.example")
    assert "access-control-allow-origin" not in r.headers
    assert "403: requests from web pages are refused" in server.wait_for_line("403:", 10)


def test_a_page_that_rebound_its_name_to_this_computer_is_refused(server: ServeProcess) -> None:
    """DNS rebinding: rebind.attacker.example now resolves to 127.0.0.1, so the page's requests
    are same-origin for the browser; only the Host header tells."""
    name = f"rebind.attacker.example:{server.port}"
    headers = {
        "Host": name,
        "Origin": f"http://{name}",
        "Content-Type": "application/json",
        "User-Agent": CHROME,
        "Sec-Fetch-Site": "same-origin",
        "Sec-Fetch-Mode": "cors",
    }
    r = httpx.post(f"{server.url}/completions", content=BODY, headers=headers)
    assert r.status_code == 403
    assert (
        "the Host 'rebind.attacker.example' is not an address this server listens on"
        in r.json()["error"]["message"]
    )
    models = httpx.get(f"{server.url}/models", headers={"Host": name, "User-Agent": CHROME})
    assert models.status_code == 403  # reading replies is what rebinding is for


def test_a_form_post_without_json_is_refused_unread(server: ServeProcess) -> None:
    r = httpx.post(f"{server.url}/completions", data={"prompt": "the"})  # application/x-www-form-urlencoded
    assert r.status_code == 415
    assert r.json()["error"]["message"] == (
        "the request body must be JSON: send 'Content-Type: application/json' "
        "(got application/x-www-form-urlencoded)"
    )


def test_an_allowed_page_gets_its_preflight_and_its_reply(server: ServeProcess) -> None:
    origin = "http://localhost:3000"
    preflight = httpx.options(
        f"{server.url}/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
            "User-Agent": CHROME,
            "Sec-Fetch-Mode": "cors",
            "Sec-Fetch-Site": "same-site",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == origin
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "content-type" in preflight.headers["access-control-allow-headers"].lower()
    r = httpx.post(
        f"{server.url}/completions",
        content=BODY,
        headers={"Origin": origin, "Content-Type": "application/json", "Sec-Fetch-Site": "same-site"},
        timeout=60,
    )
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
    other = httpx.options(
        f"{server.url}/chat/completions",
        headers={"Origin": "http://localhost:3001", "Access-Control-Request-Method": "POST"},
    )
    assert other.status_code == 403


def test_clients_that_are_not_browsers_work_as_before(server: ServeProcess) -> None:
    for base in (server.url, f"http://localhost:{server.port}/v1"):
        client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
        r = client.completions.create(model="target", prompt="the", max_tokens=2, temperature=0)
        assert r.usage.completion_tokens <= 2


def _host_allowed(bound: str, host_header: str, allowed_hosts: tuple[str, ...] = ()) -> bool:
    api = ApiServer(ApiEngine(EngineSupervisor()), allowed_hosts=allowed_hosts)
    api.address = (bound, 8080)
    return api.check_boundary({"host": host_header}) is None


def test_which_host_names_each_address_serves() -> None:
    import socket

    assert _host_allowed("127.0.0.1", "127.0.0.1:8080")
    assert _host_allowed("127.0.0.1", "localhost:8080")
    assert _host_allowed("127.0.0.1", "[::1]:8080")
    assert not _host_allowed("127.0.0.1", "192.168.1.7:8080")
    assert not _host_allowed("127.0.0.1", "rebind.attacker.example:8080")
    assert not _host_allowed("127.0.0.1", socket.gethostname())  # other computers may not connect
    # Every interface: any address, and this computer's own names; still no other name.
    assert _host_allowed("0.0.0.0", "192.168.1.7:8080")
    assert _host_allowed("0.0.0.0", f"{socket.gethostname()}:8080")
    assert not _host_allowed("0.0.0.0", "rebind.attacker.example:8080")
    assert _host_allowed("0.0.0.0", "tandem.example.org", allowed_hosts=("tandem.example.org",))
    assert _host_allowed("192.168.1.7", "192.168.1.7:8080")
    assert not _host_allowed("192.168.1.7", "10.0.0.1:8080")


# ---- the window serving an engine on another server


pytest.importorskip("pytestqt")


def test_the_window_does_not_relay_a_remote_engine_to_callers_without_its_own_key(
    qtbot, open_window, tiny_target: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    remote = ServeProcess(tmp_path, "--model", str(tiny_target), "--threads", "1", "--api-key", "K").started()
    try:
        window = open_window(
            Path("unused.gguf"),
            engine="remote",
            remote_url=remote.url,
            remote_api_key="K",
            serve_port=free_port(),
        )
        toggle = window.serve_toggle
        toggle.action.trigger()
        body = {"prompt": "hi", "max_tokens": 2}
        r = httpx.post(f"{toggle.url}/completions", json=body, timeout=60)
        assert r.status_code == 403, r.text  # used to be 200: an anonymous caller spent key K
        assert "engine on another server" in r.json()["error"]["message"]
        assert "refuses other programs until an API key is set" in toggle.label.text()
        assert httpx.get(f"{toggle.url}/models").status_code == 403
        # With a key of its own, its own callers may use it.
        window.presenter.settings = dataclasses.replace(window.presenter.settings, serve_api_key="window-key")
        toggle.apply_settings(window.presenter.settings)
        r = httpx.post(
            f"{toggle.url}/completions", json=body, headers={"Authorization": "Bearer window-key"}, timeout=60
        )
        assert r.status_code == 200, r.text
        toggle.action.trigger()
    finally:
        remote.stop()

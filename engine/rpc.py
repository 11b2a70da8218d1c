"""llama.cpp's RPC backend: a target model's layers on other machines running `ggml-rpc-server`.

llama-cpp-python 0.3.36 has no `rpc_servers`, so this does what llama.cpp's `--rpc` does
(`add_rpc_devices` in common/arg.cpp): add each endpoint through the "RPC" backend registry's
`ggml_backend_rpc_add_server` and register what it returns. The target then gets those devices
through `llama_model_params.devices`, and `n_gpu_layers` decides how many layers leave this
machine; every other model gets the local devices only.

ggml aborts the process on any RPC failure, so Tandem first connects and does the protocol's HELLO
handshake itself (a dead address or a version mismatch becomes a sentence), and installs ggml's
abort callback, which names the server that stopped answering before the process ends. The
protocol has no authentication: a server runs whatever graph a client sends it.

Why this file is long: ctypes declarations of llama.cpp's RPC backend and the endpoint checks:
bindings that must match one llama.cpp version, kept in one place."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import ipaddress
import logging
import os
import re
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from engine.errors import ErrorKind, TandemError

log = logging.getLogger(__name__)

# RPC_PROTO_*_VERSION in the vendored ggml/include/ggml-rpc.h (llama-cpp-python 0.3.36). A server
# answers the HELLO with its own version; the client accepts the same major and a minor <= its own.
PROTOCOL = (7, 0, 0)
MAX_SERVERS = 16  # GGML_RPC_MAX_SERVERS
DEFAULT_PORT = 50052
_CMD_HELLO = 14  # RPC_CMD_HELLO, fixed by a static_assert in ggml-rpc.cpp
_CONN_CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE (transport.h)
_HELLO_RSP_SIZE = 4 + _CONN_CAPS_SIZE  # major, minor, patch, padding, conn_caps
CONNECT_TIMEOUT_S = 3.0
ANSWER_TIMEOUT_S = 5.0

# enum ggml_backend_dev_type (ggml-backend.h)
_DEV_CPU, _DEV_GPU, _DEV_IGPU, _DEV_ACCEL, _DEV_META = range(5)

# What ends the process when ggml aborts (the CLI's exit code for an error a user can act on).
ABORT_EXIT_CODE = 2


class RpcError(TandemError):
    """An RPC server cannot be used: a bad address, nothing listening, another protocol version."""

    kind = ErrorKind.RPC


# -- addresses -----------------------------------------------------------------------------------


def parse_servers(spec: str | None) -> tuple[str, ...]:
    """`HOST:PORT[,HOST:PORT...]` as normalised endpoints; RpcError if bad."""
    if spec is None:
        return ()
    endpoints: list[str] = []
    for raw in spec.split(","):
        text = raw.strip()
        if not text:
            continue
        endpoint = _parse_endpoint(text)
        if endpoint in endpoints:
            raise RpcError(f"the RPC server {endpoint} is listed twice")
        endpoints.append(endpoint)
    if spec.strip() and not endpoints:
        raise RpcError(f"no RPC server in {spec!r}; expected HOST:PORT[,HOST:PORT...]")
    if len(endpoints) > MAX_SERVERS:
        raise RpcError(f"at most {MAX_SERVERS} RPC servers can be used (got {len(endpoints)})")
    return tuple(endpoints)


def _parse_endpoint(text: str) -> str:
    if text.startswith("[") or text.count(":") > 1:
        raise RpcError(
            f"{text!r}: llama.cpp's RPC client speaks IPv4 only; use an IPv4 address or a host name"
        )
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise RpcError(f"{text!r} is not an RPC server address; expected HOST:PORT (e.g. 192.168.1.20:50052)")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise RpcError(f"{text!r}: the port must be a number from 1 to 65535")
    if not re.fullmatch(r"[A-Za-z0-9.-]+", host):
        raise RpcError(f"{text!r}: {host!r} is not a host name or an IPv4 address")
    return f"{host.lower()}:{int(port_text)}"


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


# -- reachability and the protocol's handshake ----------------------------------------------------


def _connect(endpoint: str, timeout_s: float) -> socket.socket:
    """A TCP connection to an endpoint, resolved the way ggml does (IPv4); RpcError if none."""
    host, port = _split(endpoint)
    try:
        address = socket.gethostbyname(host)
    except OSError as e:
        raise RpcError(
            f"cannot find the RPC server {endpoint}: the host name {host!r} does not resolve"
        ) from e
    try:
        return socket.create_connection((address, port), timeout_s)
    except ConnectionRefusedError as e:
        raise RpcError(
            f"nothing is listening at {endpoint} (connection refused): start `tandem rpc-server "
            f"--host {host} --port {port}` on that machine, or check the address"
        ) from e
    except TimeoutError as e:
        raise RpcError(
            f"the RPC server {endpoint} did not accept a connection within {timeout_s:.0f} s "
            "(unreachable, or a firewall drops it)"
        ) from e
    except OSError as e:
        raise RpcError(f"cannot reach the RPC server {endpoint}: {e.strerror or e}") from e


def check_server(
    endpoint: str, connect_timeout_s: float = CONNECT_TIMEOUT_S, answer_timeout_s: float = ANSWER_TIMEOUT_S
) -> tuple[int, int, int]:
    """Connect and do the RPC HELLO handshake as ggml would; the server's protocol version. Raises
    RpcError with a sentence naming the address for everything ggml would abort on."""
    want = ".".join(map(str, PROTOCOL))
    sock = _connect(endpoint, connect_timeout_s)
    answer = sock.makefile("rb")  # read(n): n bytes, fewer only where the server closed
    try:
        sock.settimeout(answer_timeout_s)
        # | cmd (1 byte) | request size (8 bytes, little-endian) | request: conn_caps (zeros: TCP) |
        sock.sendall(struct.pack("<BQ", _CMD_HELLO, _CONN_CAPS_SIZE) + bytes(_CONN_CAPS_SIZE))
        try:
            header = answer.read(8)
        except ConnectionError:
            header = b""
        if len(header) < 8:
            raise RpcError(
                f"the RPC server {endpoint} closed the connection during the handshake: it is not a "
                f"llama.cpp RPC server, or it speaks another protocol version than this build ({want}); "
                "run the same Tandem (or llama.cpp) version on both machines"
            )
        (size,) = struct.unpack("<Q", header)
        if size != _HELLO_RSP_SIZE:
            raise RpcError(
                f"{endpoint} answered the RPC handshake with {size} bytes instead of {_HELLO_RSP_SIZE}: "
                f"not a llama.cpp RPC server of protocol {want}"
            )
        body = answer.read(size)
        if len(body) < size:
            raise RpcError(f"the RPC server {endpoint} closed the connection during the handshake")
    except TimeoutError as e:
        raise RpcError(
            f"the RPC server {endpoint} accepted the connection but did not answer the handshake "
            f"within {answer_timeout_s:.0f} s: it may be serving another client (an RPC server serves "
            "one at a time; after a silent network drop it waits for the lost one until restarted), "
            "or it is not a llama.cpp RPC server"
        ) from e
    except OSError as e:
        raise RpcError(f"the connection to the RPC server {endpoint} broke during the handshake: {e}") from e
    finally:
        answer.close()
        sock.close()
    major, minor, patch = body[0], body[1], body[2]
    if major != PROTOCOL[0] or minor > PROTOCOL[1]:
        raise RpcError(
            f"the RPC server {endpoint} speaks RPC protocol {major}.{minor}.{patch}; this build speaks "
            f"{want}: run the same Tandem (or llama.cpp) version on both machines"
        )
    return major, minor, patch


def answers(endpoint: str, timeout_s: float = 2.0) -> bool:
    """Does an RPC server answer the handshake at this endpoint now? (A server being killed may
    still accept a connection for a moment; it cannot answer.)"""
    try:
        check_server(endpoint, connect_timeout_s=timeout_s / 2, answer_timeout_s=timeout_s)
    except RpcError:
        return False
    return True


# -- ggml's backend registry ---------------------------------------------------------------------


# The few ggml functions this needs: their result and argument types.
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "ggml_backend_reg_by_name": (ctypes.c_void_p, [ctypes.c_char_p]),
    "ggml_backend_reg_get_proc_address": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]),
    "ggml_backend_register": (None, [ctypes.c_void_p]),
    "ggml_backend_reg_dev_count": (ctypes.c_size_t, [ctypes.c_void_p]),
    "ggml_backend_reg_dev_get": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]),
    "ggml_backend_reg_name": (ctypes.c_char_p, [ctypes.c_void_p]),
    "ggml_backend_dev_count": (ctypes.c_size_t, []),
    "ggml_backend_dev_get": (ctypes.c_void_p, [ctypes.c_size_t]),
    "ggml_backend_dev_type": (ctypes.c_int, [ctypes.c_void_p]),
    "ggml_backend_dev_backend_reg": (ctypes.c_void_p, [ctypes.c_void_p]),
    "ggml_set_abort_callback": (ctypes.c_void_p, [ctypes.c_void_p]),
    "ggml_backend_dev_memory": (
        None,
        [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
    ),
}


@functools.cache
def _ggml() -> SimpleNamespace:
    """The few ggml functions this needs (_SIGNATURES), resolved in the library llama_cpp itself
    loaded, as attributes."""
    import llama_cpp
    import llama_cpp.llama_cpp as bindings

    # dlsym on libllama's handle searches its dependencies too (Linux, macOS): the very
    # libggml that llama.cpp uses, never a second copy with a registry of its own.
    libs: list[Any] = [bindings._lib]
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    for name in ("ggml", "ggml-base"):  # Windows: GetProcAddress does not search dependencies
        with contextlib.suppress(Exception):
            from llama_cpp._ctypes_extensions import load_shared_library

            libs.append(load_shared_library(name, lib_dir))
    functions: dict[str, Any] = {}
    for name, (restype, argtypes) in _SIGNATURES.items():
        for lib in libs:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, argtypes
                functions[name] = fn
                break
        else:
            raise RpcError(f"this llama.cpp build lacks {name}; Tandem cannot use RPC servers with it")
    return SimpleNamespace(**functions)


def supported() -> bool:
    """Was llama.cpp built with its RPC backend (`-DGGML_RPC=ON`)?"""
    import llama_cpp

    return bool(llama_cpp.llama_supports_rpc())


_registered: dict[str, int] = {}  # endpoint -> its backend registry (ggml keeps it for the process)
_in_use: tuple[str, ...] = ()  # the servers the loaded target uses: named when ggml aborts


def _register(endpoint: str) -> int:
    reg = _registered.get(endpoint)
    if reg is not None:
        return reg
    g = _ggml()
    rpc_reg = g.ggml_backend_reg_by_name(b"RPC")  # not NULL: server_devices asked supported(), which is this
    address = g.ggml_backend_reg_get_proc_address(rpc_reg, b"ggml_backend_rpc_add_server")
    if not address:
        raise RpcError("this llama.cpp build's RPC backend has no ggml_backend_rpc_add_server")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
    reg = add_server(endpoint.encode())  # asks the server for its device count (one round trip)
    if not reg:
        raise RpcError(f"the RPC server {endpoint} offers no device")
    g.ggml_backend_register(reg)
    _registered[endpoint] = reg
    return int(reg)


def local_devices() -> list[int]:
    """This machine's offload devices as llama.cpp would choose them: GPUs, else integrated GPUs
    (empty in a CPU build, where llama_supports_gpu_offload() is true all the same with RPC)."""
    g = _ggml()
    gpus, igpus = [], []
    for i in range(g.ggml_backend_dev_count()):
        dev = g.ggml_backend_dev_get(i)
        kind = g.ggml_backend_dev_type(dev)
        backend = g.ggml_backend_reg_name(g.ggml_backend_dev_backend_reg(dev)) or b""  # RPC: a server's
        if kind == _DEV_GPU and not (backend == b"RPC" or backend.startswith(b"RPC[")):
            gpus.append(dev)
        elif kind == _DEV_IGPU:
            igpus.append(dev)
    return gpus or igpus


def server_devices(endpoints: Sequence[str]) -> list[int]:
    """Check each server (TCP connect and handshake), register it, and return its devices."""
    if endpoints and not supported():
        raise RpcError("this llama.cpp build has no RPC backend; `make setup` builds it with -DGGML_RPC=ON")
    global _in_use
    for endpoint in endpoints:
        check_server(endpoint)
    if not endpoints:
        return []
    install_abort_handler()
    _in_use = tuple(endpoints)
    g = _ggml()
    devices: list[int] = []
    for endpoint in endpoints:
        reg = _register(endpoint)
        devices += [g.ggml_backend_reg_dev_get(reg, i) for i in range(g.ggml_backend_reg_dev_count(reg))]
    return devices


def first_devices(endpoints: Sequence[str]) -> list[int]:
    """One registered device per server (a server's devices share one connection)."""
    g = _ggml()
    return [
        g.ggml_backend_reg_dev_get(_registered[e], 0)
        for e in endpoints
        if e in _registered and g.ggml_backend_reg_dev_count(_registered[e])
    ]


def wait_for(devices: Sequence[int]) -> None:
    """Return once each server has done everything sent to it so far: asking a device for its
    memory is a command with a reply, on the same connection as the graph sent without one
    (llama_synchronize only flushes the client's queue: it does not wait for a server)."""
    g = _ggml()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    for dev in devices:
        g.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))


def device_list(rpc_servers: Sequence[str], stays_here: bool = False) -> Any:
    """`llama_model_params.devices` for a model (keep it alive until the model is loaded): None,
    llama.cpp's own choice, while no RPC server is registered and the model need not stay here;
    else a NULL-terminated array, the servers' devices first (as llama.cpp orders them), then the
    local ones. stays_here: a draft loading beside a target that uses servers (llama.cpp's own
    choice would take a server the target registered first: a race)."""
    if not rpc_servers and not _registered and not stays_here:
        return None
    devices = server_devices(rpc_servers) + local_devices()
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)


# -- when ggml aborts -----------------------------------------------------------------------------

_reporter: Callable[[str], None] | None = None
_abort_callback: Any = None
_stderr_fd: int | None = None


def set_abort_reporter(reporter: Callable[[str], None] | None) -> None:
    """Who hears the sentence when ggml aborts the process (default: `error: ...` on stderr), on
    whatever thread ggml aborted on, just before the process exits with ABORT_EXIT_CODE."""
    global _reporter
    _reporter = reporter


def describe_abort(message: str, endpoints: Sequence[str]) -> str:
    """ggml's abort message as a sentence that names the RPC server at fault."""
    is_rpc = "ggml-rpc" in message or "RPC" in message
    text = re.sub(r"^\S*?:\d+: ", "", message.strip())
    if endpoints:
        dead = [e for e in endpoints if not answers(e)]
        if dead:
            which = ", ".join(dead)
            return f"lost the RPC server {which}: it stopped answering (it was stopped, crashed, or the network dropped)"
        if is_rpc:
            return (
                f"the connection to the RPC server {', '.join(endpoints)} broke "
                f"(llama.cpp: {text or 'aborted'})"
            )
    return f"llama.cpp aborted: {text or 'no reason given'}"


def _report_to_stderr(sentence: str) -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    data = f"\nerror: {sentence}\n".encode(errors="replace")
    # fd 2 may be pointed at /dev/null while llama-cpp-python loads a model: use the saved one.
    os.write(_stderr_fd if _stderr_fd is not None else 2, data)


def _end_process(sentence: str) -> None:
    """Say the sentence (to the reporter, else as `error: ...` on stderr) and end the process."""
    try:
        (_reporter or _report_to_stderr)(sentence)
    except BaseException:
        pass
    finally:
        os._exit(ABORT_EXIT_CODE)


def _on_abort(message: bytes | None) -> None:
    try:
        sentence = describe_abort((message or b"").decode(errors="replace"), _in_use)
    except BaseException:
        sentence = "llama.cpp aborted"
    _end_process(sentence)


def install_abort_handler() -> None:
    """Route ggml's aborts through _on_abort (once per process)."""
    global _abort_callback, _stderr_fd
    if _abort_callback is not None:
        return
    with contextlib.suppress(OSError):
        _stderr_fd = os.dup(2)
    _abort_callback = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(_on_abort)
    _ggml().ggml_set_abort_callback(ctypes.cast(_abort_callback, ctypes.c_void_p))


# -- a server that goes silent --------------------------------------------------------------------
#
# ggml's RPC client blocks in send/recv with no timeout: when a server's machine loses power or the
# network goes away without a reset, llama_decode never returns. A second connection cannot tell a
# busy server from a dead one (a server serves one client at a time), but TCP can, on the engine's
# own connection: a live machine's kernel acknowledges every segment and keepalive probe however
# busy the server is. So each connection gets keepalive probes, and while a llama call runs far
# longer than it should, a watchdog reads from the kernel (TCP_INFO) when the server last answered;
# silence past SILENCE_S ends the process as ggml's abort does, naming the address (the peer's
# answers decide, never the clock). The kernel's own limit at twice that is the backstop.

SILENCE_S = 20.0  # no answer at all (data, ACK, keepalive reply) for this long: the server is gone
STALL_FLOOR_S = 10.0  # a llama call is watched once it has run this long ...
STALL_FACTOR = 4.0  # ... and this many times the slowest call seen so far
SILENCE_ENV = "TANDEM_RPC_SILENCE_S"
STALL_ENV = "TANDEM_RPC_STALL_S"


def watchdog_settings() -> tuple[float, float]:
    """(silence_s, stall_floor_s): the defaults, or the environment's positive numbers (tests)."""

    def env(name: str, default: float, least: float) -> float:
        try:
            value = float(os.environ.get(name, ""))
        except ValueError:
            return default
        return max(value, least) if value > 0 else default

    return env(SILENCE_ENV, SILENCE_S, 1.0), env(STALL_ENV, STALL_FLOOR_S, 0.05)


def _resolve(endpoint: str) -> tuple[str, int] | None:
    host, port = _split(endpoint)
    try:
        return socket.gethostbyname(host), port
    except OSError:
        return None


def _open_fds() -> list[int]:
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return [int(name) for name in os.listdir(folder) if name.isdigit()]
    return []


def _tcp_socket(fd: int) -> socket.socket | None:
    """A socket object on a duplicate of fd if fd is an IPv4 TCP socket (closing it leaves fd open)."""
    try:
        sock = socket.socket(fileno=os.dup(fd))  # family and type read from the descriptor
    except OSError:
        return None
    if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
        sock.close()
        return None
    return sock


def engine_connections(peers: dict[str, tuple[str, int]]) -> dict[str, list[int]]:
    """The file descriptors of this process's TCP connections to each endpoint (ggml's own, one
    per server while the model is loaded). Empty on Windows (sockets are no file descriptors)."""
    import stat

    found: dict[str, list[int]] = {}
    if sys.platform == "win32":
        return found
    by_peer = {peer: endpoint for endpoint, peer in peers.items()}
    for fd in _open_fds():
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
        except OSError:
            continue
        sock = _tcp_socket(fd)
        if sock is None:
            continue
        with sock:
            try:
                peer = sock.getpeername()
            except OSError:
                continue
        endpoint = by_peer.get(peer) if isinstance(peer, tuple) else None
        if endpoint is not None:
            found.setdefault(endpoint, []).append(fd)
    return found


def arm_keepalive(fd: int, silence_s: float) -> bool:
    """TCP keepalive probes on an idle connection (first after silence_s/4, then every
    silence_s/10), and the kernel's own limit at 2 x silence_s (invisible to the RPC protocol)."""
    idle = max(1, int(silence_s / 4))
    interval = max(1, int(silence_s / 10))
    count = max(1, int((2 * silence_s - idle) / interval))
    sock = _tcp_socket(fd)
    if sock is None:
        return False
    try:
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            idle_option = getattr(socket, "TCP_KEEPIDLE", getattr(socket, "TCP_KEEPALIVE", None))
            for option, value in (
                (idle_option, idle),
                (getattr(socket, "TCP_KEEPINTVL", None), interval),
                (getattr(socket, "TCP_KEEPCNT", None), count),
                (getattr(socket, "TCP_USER_TIMEOUT", None), int(2 * silence_s * 1000)),
            ):
                if option is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, option, value)
    except OSError:
        return False
    return True


_TCP_ESTABLISHED = 1


def heard_ago(fd: int) -> float | None:
    """Seconds since the peer of a TCP connection last sent anything (data or an ACK, keepalive
    replies included), from the kernel's TCP_INFO; None where that cannot be read (not Linux)."""
    if not sys.platform.startswith("linux") or not hasattr(socket, "TCP_INFO"):
        return None
    sock = _tcp_socket(fd)
    if sock is None:
        return None
    try:
        with sock:
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except OSError:
        return None
    if len(info) < 8 + 13 * 4 or info[0] != _TCP_ESTABLISHED:
        return None  # closing or closed: ggml sees that itself
    # struct tcp_info: 8 bytes of u8 fields, then u32s; tcpi_last_data_recv is the 12th, then
    # tcpi_last_ack_recv (milliseconds ago).
    last_data_recv, last_ack_recv = struct.unpack_from("=2I", info, 8 + 11 * 4)
    return min(int(last_data_recv), int(last_ack_recv)) / 1000.0


class Watchdog:
    """Watches one model's llama calls for a server gone silent (see the section's comment): a
    daemon thread reading `runner.call_started` (perf_counter; 0.0: none) and `slowest_call_s`
    every second or so. The runner (engine.backend.LlamaRunner) is held weakly."""

    def __init__(self, endpoints: Sequence[str], runner: Any) -> None:
        self.endpoints = tuple(endpoints)
        self.silence_s, self.stall_floor_s = watchdog_settings()
        self._runner = weakref.ref(runner)
        self._peers = {e: p for e in self.endpoints if (p := _resolve(e)) is not None}
        self._armed: dict[int, float] = {}  # fd -> when its keepalive was set
        self._connections: dict[str, list[int]] = {}
        self._stop = threading.Event()
        self.arm()
        self._thread = threading.Thread(target=self._run, name="tandem-rpc-watchdog", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        """Find the engine's connections and set keepalive on the ones not yet armed."""
        self._connections = engine_connections(self._peers)
        now = time.monotonic()
        for fds in self._connections.values():
            for fd in fds:
                if fd not in self._armed and arm_keepalive(fd, self.silence_s):
                    self._armed[fd] = now

    def stop(self) -> None:
        self._stop.set()

    def silent_for(self, endpoint: str) -> float | None:
        """How long the server has said nothing on the engine's connection (at most since it was
        armed: before, nothing asked it to answer); None if unknown."""
        heard: list[float] = []
        now = time.monotonic()
        for fd in self._connections.get(endpoint, []):
            ago = heard_ago(fd)
            if ago is not None:
                heard.append(min(ago, now - self._armed.get(fd, now)))
        return min(heard) if heard else None

    def _run(self) -> None:
        tick = min(1.0, self.silence_s / 4)
        reported_at = 0.0  # how long the call had run when it was last logged
        while not self._stop.wait(tick):
            runner = self._runner()
            if runner is None:
                return  # its model failed to load, or was dropped without close()
            started, slowest = runner.call_started, runner.slowest_call_s
            del runner
            if not started:
                reported_at = 0.0
                continue
            running = time.perf_counter() - started
            if running < max(self.stall_floor_s, STALL_FACTOR * slowest):
                continue
            if any(not self._connections.get(e) for e in self._peers):
                self.arm()  # connections made after the last look (the model was loading)
            silent = {e: s for e in self._peers if (s := self.silent_for(e)) is not None}
            for endpoint, seconds in silent.items():
                if seconds >= self.silence_s:
                    if self._stop.is_set():
                        return  # the model was closed meanwhile
                    _end_process(
                        f"lost the RPC server {endpoint}: no answer for {int(seconds)} s "
                        "(its machine went off or the network dropped)"
                    )
            if running >= 2 * reported_at:  # logged with back-off: at 1x, 2x, 4x ... the first look
                reported_at = running
                heard = ", ".join(f"{e} {s:.1f} s ago" for e, s in silent.items()) or "unknown"
                log.info(
                    "a llama call has run %.1f s; the RPC servers still answer (last heard: %s)",
                    running,
                    heard,
                )


# -- the server ----------------------------------------------------------------------------------


def find_server_binary() -> str | None:
    """llama.cpp's `ggml-rpc-server`: in the bundle, beside the venv's python (`make setup`), on PATH."""
    import shutil

    folders = [
        getattr(sys, "_MEIPASS", ""),
        str(Path(sys.executable).parent),
        os.environ.get("PATH", os.defpath),
    ]
    return shutil.which("ggml-rpc-server", path=os.pathsep.join(f for f in folders if f))

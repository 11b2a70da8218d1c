"""The app's settings: one JSON file beside the database.

A settings file the app cannot read (hand-edited, half-written, from another version) must never
stop the app or touch the conversations: it is set aside as settings.json.corrupt and defaults
are used. Writes go through a temporary file and an atomic rename, so a crash mid-write leaves
the previous file whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from app import paths
from app.paths import user_path
from engine.chat import CHAT_SAMPLING
from engine.config import DEFAULT_CTX, DRAFT_MAX, NGRAM_LOOKUP, DraftChoice, EngineConfig, SamplingParams
from engine.errors import TandemError
from engine.events import Speculation

log = logging.getLogger(__name__)

# The file's format: 2 since the longest draft's default became DRAFT_MAX (see _coerce).
SETTINGS_FORMAT = 2
SERVE_PORT = 8080  # the API's port: `tandem serve`'s default and the window's Serve API's


RECENT_MODELS = 8  # files opened with "Open a GGUF file…" kept in the lists


def with_recent_model(recent: list[str], path: str) -> list[str]:
    """The recent files with `path` first (once), at most RECENT_MODELS."""
    return [path, *(p for p in recent if p != path)][:RECENT_MODELS]


class SpeedUp(StrEnum):
    """The speed-up as the window offers it (the header's choice, a preset's): Automatic, or one
    kind of Speculation. One value from the combo box to the engine's DraftChoice."""

    AUTO = "auto"  # the draft model chosen last where there is one (beside the text), else the text
    NONE = str(Speculation.NONE)
    NGRAM = str(Speculation.NGRAM)
    DRAFT = str(Speculation.DRAFT)


class Theme(StrEnum):
    """The window's colours: the desktop's light or dark scheme (SYSTEM), or one of them
    (ui/qt/theme.py applies it)."""

    SYSTEM = "system"
    LIGHT = "light"
    DARK = "dark"


class EngineKind(StrEnum):
    """Where the model runs: this computer, or a server (OpenAI-compatible: app/host/remote_worker.py)."""

    LOCAL = "local"
    REMOTE = "remote"


@dataclass(frozen=True)
class Settings:
    model_path: str | None = None  # None: the embedded default model
    # What the engine drafts with, in the file as its text: "ngram", "none", or a draft model.
    draft: DraftChoice = NGRAM_LOOKUP
    draft_model_path: str | None = None  # the last draft model chosen, offered by the toggle
    # The speed-up chosen (the header's, ui/presenters/words.py): Automatic, or the kind of `draft`
    # (Automatic: `draft` is what it chose). Changed with `draft`, by with_draft. Files before it
    # said Automatic as "speed_up_auto": true (read back as AUTO, _coerce).
    speed_up: SpeedUp = SpeedUp.NGRAM
    preset_name: str = ""  # the preset chosen last (its settings may have changed since)
    n_threads: int | None = None  # None: the machine's cores
    n_ctx: int = DEFAULT_CTX
    n_gpu_layers: int = 0
    # llama.cpp RPC servers that take the target's GPU layers, "HOST:PORT,HOST:PORT" (engine.rpc).
    rpc_servers: str = ""
    draft_max: int = DRAFT_MAX
    adaptive: bool = True
    # Chat sampling (engine.chat.CHAT_SAMPLING); temperature 0 is greedy: exact and repeatable.
    temperature: float = CHAT_SAMPLING.temperature
    top_k: int = CHAT_SAMPLING.top_k
    top_p: float = CHAT_SAMPLING.top_p
    min_p: float = CHAT_SAMPLING.min_p
    repeat_penalty: float = CHAT_SAMPLING.repeat_penalty
    repeat_last_n: int = CHAT_SAMPLING.repeat_last_n
    max_tokens: int = 512
    show_draft_tint: bool = True
    # Plain-decoding speed last measured per target model, the baseline of the speedup shown.
    plain_tokens_per_s: dict[str, float] = field(default_factory=dict)
    # The quickest one-token steps the engine timed per target and setup (ui/presenters/verdict.py:
    # the usual speed until a plain one is measured; a reply whose steps ran well below it was run
    # on a busy computer).
    quiet_steps_tokens_per_s: dict[str, float] = field(default_factory=dict)
    last_conversation_id: int | None = None
    # GGUF files opened with "Open a GGUF file…", newest first: the pickers and the draft list keep them.
    recent_models: list[str] = field(default_factory=list)
    # The window's size as the user left it (0: not yet; the first window fits the screen).
    window_width: int = 0
    window_height: int = 0
    has_seen_welcome: bool = False  # the welcome panel opens by itself on the first start only
    theme: Theme = Theme.SYSTEM
    # Where the model runs; a server's API key is kept in this file as the other settings are
    # (plain JSON, the user's own directory).
    engine: EngineKind = EngineKind.LOCAL
    remote_url: str = ""
    remote_api_key: str = ""
    remote_model: str = ""  # empty: the first model the server lists
    # The window's "Serve API" switch (ui/settings/serve_toggle.py): its port, an optional API key (kept
    # here as the server's key is), and whether other computers may connect (every network
    # interface, 0.0.0.0, instead of this computer only, 127.0.0.1).
    serve_port: int = SERVE_PORT
    serve_api_key: str = ""
    serve_public: bool = False
    # Web pages (scheme://host[:port], comma-separated) allowed to use the API from a browser;
    # requests from any other page are refused (app/api/serve.py).
    serve_allowed_origins: str = ""

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            repeat_penalty=self.repeat_penalty,
            repeat_last_n=self.repeat_last_n,
        )

    def engine_config(self, target_path: str) -> EngineConfig:
        return EngineConfig(
            target_path=target_path,
            draft=self.draft,
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            n_gpu_layers=self.n_gpu_layers,
            rpc_servers=_rpc_servers(self.rpc_servers),
            draft_max=self.draft_max,
            adaptive=self.adaptive,
            cost_cache_dir=str(paths.cost_cache_dir()),
        )

    @property
    def serve_host(self) -> str:
        return "0.0.0.0" if self.serve_public else "127.0.0.1"

    @property
    def is_remote(self) -> bool:
        return self.engine is EngineKind.REMOTE and bool(self.remote_url.strip())

    def with_draft(self, draft: DraftChoice, speed_up: SpeedUp | None = None) -> Settings:
        """The engine's draft changed, and the speed-up choice with it: `speed_up` is the choice
        that made it (None: Automatic stays where it was chosen, any other choice is the draft's
        kind); a draft model is kept as the last one chosen."""
        if speed_up is None:
            speed_up = self.speed_up if self.speed_up is SpeedUp.AUTO else SpeedUp(draft.kind)
        return dataclasses.replace(
            self,
            draft=draft,
            speed_up=speed_up,
            draft_model_path=draft.model or self.draft_model_path,
        )


def _rpc_servers(text: str) -> tuple[str, ...]:
    """The dialog only saves valid lists; a hand-edited one that is not is ignored, and said so."""
    from engine.rpc import RpcError, parse_servers

    try:
        return parse_servers(text)
    except RpcError as e:
        log.warning("RPC servers in the settings ignored: %s", e)
        return ()


_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


def _accepts(type_text: str, value: Any) -> bool:
    """Does a value fit a field annotated `type_text` (e.g. "int | None")?"""
    for name in (part.strip() for part in type_text.split("|")):
        if name == "None" and value is None:
            return True
        kinds = _TYPES.get(name)
        # bool is an int in Python; a JSON true must not become a thread count.
        if kinds and isinstance(value, kinds) and (name == "bool" or not isinstance(value, bool)):
            return True
    return False


def _read_fields(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    """The keys of raw that are fields of the dataclass cls and whose values have the field's type
    (a StrEnum field: a value this build knows); the rest dropped."""
    kept: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        value = raw[f.name]
        if isinstance(f.default, StrEnum):  # speed_up, theme, engine
            kind = type(f.default)
            if isinstance(value, str) and value in tuple(kind):
                kept[f.name] = kind(value)
        elif _accepts(str(f.type), value):
            kept[f.name] = float(value) if str(f.type) == "float" else value
    return kept


def _coerce(raw: dict[str, Any]) -> Settings:
    """Keep the known keys whose values have the field's type; drop the rest."""
    written_format = raw.get("format")
    old_format = not isinstance(written_format, int) or written_format < SETTINGS_FORMAT
    if old_format and raw.get("draft_max") == 16:
        # Written when the window's longest draft was 16 whoever chose it (every file said so):
        # copying drafts 40-63 tokens a step, ~15% cheaper a token than 16 on a CPU.
        raw = {k: v for k, v in raw.items() if k != "draft_max"}
    if "repeat_penalty" not in raw and raw.get("temperature") == 0.0:
        # Written before the chat sampling defaults, when every file said temperature 0 (greedy)
        # whether the user chose it or not: take the new defaults.
        raw = {k: v for k, v in raw.items() if k != "temperature"}
    kept = _read_fields(Settings, raw)
    for name in ("plain_tokens_per_s", "quiet_steps_tokens_per_s"):
        if isinstance(value := raw.get(name), dict):
            kept[name] = {
                str(k): float(v)
                for k, v in value.items()
                if isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            }
    if isinstance(value := raw.get("recent_models"), list):
        kept["recent_models"] = [v for v in value if isinstance(v, str) and v][:RECENT_MODELS]
    if isinstance(value := raw.get("draft"), str):
        kept["draft"] = DraftChoice.parse(value)
    if not 1 <= kept.get("serve_port", SERVE_PORT) <= 65535:
        del kept["serve_port"]  # hand-edited out of range: the default
    if "speed_up" not in kept:  # written before the choice was one value: Automatic was a flag
        draft = kept.get("draft", NGRAM_LOOKUP)
        kept["speed_up"] = SpeedUp.AUTO if raw.get("speed_up_auto") is True else SpeedUp(draft.kind)
    return Settings(**kept)


def load_settings(path: Path | None = None) -> Settings:
    path = path or paths.settings_path()
    if not path.exists():
        return Settings()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("the top level is not an object")
        return _coerce(raw)
    except (OSError, ValueError, TypeError) as e:
        backup = path.with_name(path.name + ".corrupt")
        log.warning("settings file %s is unreadable (%s); using defaults, kept it as %s", path, e, backup)
        with contextlib.suppress(OSError):
            os.replace(path, backup)
        return Settings()


def save_settings(settings: Settings, path: Path | None = None) -> None:
    path = path or paths.settings_path()
    data = {**dataclasses.asdict(settings), "draft": settings.draft.text, "format": SETTINGS_FORMAT}
    paths.write_private_text(path, json.dumps(data, indent=2, sort_keys=True))


# ---- API keys from the command line, a file or the environment

SERVE_KEY_ENV = "TANDEM_API_KEY"  # the key `tandem serve` requires
REMOTE_KEY_ENV = "TANDEM_REMOTE_API_KEY"  # the key sent to a server (`generate --remote`)


class ApiKeyError(TandemError, ValueError):
    """A key that cannot be read (the message is a sentence for the user, the command line's error
    line as it is)."""


def api_key_from(flag: str | None, key_file: str | None, env_var: str) -> str | None:
    """The API key given on the command line, in a file (its first line), or in an environment
    variable, in that order; None when none is. A key on the command line is visible to every user
    of the computer (`ps`): the file and the variable are not."""
    if flag is not None and key_file is not None:
        raise ApiKeyError("give the API key one way: --api-key or --api-key-file, not both")
    if flag is not None:
        if not flag.strip():
            raise ApiKeyError("--api-key is empty")
        return flag.strip()
    if key_file is not None:
        try:
            text = user_path(key_file).read_text(encoding="utf-8")
        except OSError as e:
            raise ApiKeyError(f"cannot read the API key file {key_file}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise ApiKeyError(f"the API key file {key_file} is not text") from None
        key = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not key:
            raise ApiKeyError(f"the API key file {key_file} is empty")
        return key
    value = os.environ.get(env_var, "").strip()
    return value or None


def api_key_warnings(flag: str | None, key_file: str | None) -> list[str]:
    """Sentences for a key given in a way others on this computer can read: on the command line
    (every user sees it in `ps`), or in a file that other users may read."""
    if flag is not None:
        return [
            "the key given with --api-key is visible to every user of this computer (in the process "
            "list); --api-key-file or the environment variable keeps it private"
        ]
    if key_file is not None and os.name == "posix":
        try:
            mode = user_path(key_file).stat().st_mode
        except OSError:
            return []
        if mode & 0o077:
            return [f"the API key file {key_file} can be read by other users: chmod 600 {key_file}"]
    return []


# ---- presets: a system prompt, sampling and the speed-up, named, for one model or for any


@dataclass(frozen=True)
class Preset:
    name: str
    model: str = ""  # the model it is for (a path or a built-in model's name); "" = any model
    system_prompt: str = ""
    temperature: float = CHAT_SAMPLING.temperature
    top_p: float = CHAT_SAMPLING.top_p
    repeat_penalty: float = CHAT_SAMPLING.repeat_penalty
    speed_up: SpeedUp = SpeedUp.NGRAM  # the header's choice (ui/presenters/words.py SPEED_UP_CHOICES)

    def is_for(self, model: str) -> bool:
        return not self.model or self.model == model


def presets_path() -> Path:
    return paths.home() / "presets.json"


def load_presets(path: Path | None = None) -> list[Preset]:
    """The user's presets; a file that cannot be read gives none (and is kept, as settings are)."""
    path = path or presets_path()
    if not path.exists():
        return []
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        items = raw.get("presets") if isinstance(raw, dict) else None
        if not isinstance(items, list):
            raise ValueError("no list of presets")
    except (OSError, ValueError) as e:
        log.warning("presets file %s is unreadable (%s); kept it as it is", path, e)
        return []
    return [
        Preset(**_read_fields(Preset, item))
        for item in items
        if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"].strip()
    ]


def save_presets(presets: list[Preset], path: Path | None = None) -> None:
    path = path or presets_path()
    data = {"format": 1, "presets": [dataclasses.asdict(p) for p in presets]}
    paths.write_private_text(path, json.dumps(data, indent=2))

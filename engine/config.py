"""Settings of the engine and of one request, as plain frozen dataclasses."""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine.events import Speculation


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


DRAFT_MAX = 63  # EngineConfig.draft_max's default (the window's and the CLI's too)


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 is greedy; the filters apply identically to target and draft."""

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int | None = None
    # Tokens the repetition penalty leaves alone: line breaks and the speaker names a transcript
    # repeats every turn (llama.cpp's old penalize_nl=false). Penalised, they keep a base model
    # from starting the next "User:" line, so its reply runs on. Engine.generate fills it in.
    penalty_exempt: frozenset[int] = frozenset()

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class DraftChoice:
    """The draft choice: plain decoding, n-gram lookup, or a draft model, read once from what a
    user typed (`parse`) and handed down as this value. A draft model's `model` is its GGUF file,
    or the name of one the app makes on first use (app.library.model_spec.resolve_draft)."""

    kind: Speculation = Speculation.NONE
    model: str = ""  # with kind DRAFT only

    def __post_init__(self) -> None:
        if (self.kind is Speculation.DRAFT) != bool(self.model):
            raise ValueError(f"a {self.kind} draft {'needs' if not self.model else 'has no'} model: {self!r}")

    @classmethod
    def parse(cls, text: str | None) -> DraftChoice:
        """`none` or empty (plain decoding), `ngram`, or a draft model's file or name."""
        name = (text or "").strip()
        if name in ("", Speculation.NONE):
            return PLAIN_DECODING
        if name == Speculation.NGRAM:
            return NGRAM_LOOKUP
        return cls(Speculation.DRAFT, name)

    @classmethod
    def of_model(cls, model: str) -> DraftChoice:
        return cls(Speculation.DRAFT, model)

    @property
    def text(self) -> str:
        """How a user writes it (`DraftChoice.parse` reads it back): `none`, `ngram`, or the model."""
        return self.model or str(self.kind)


PLAIN_DECODING = DraftChoice()
NGRAM_LOOKUP = DraftChoice(Speculation.NGRAM)


DEFAULT_CTX = 4096  # context in tokens a model is loaded with unless a setting or --ctx says otherwise


@dataclass(frozen=True)
class EngineConfig:
    target_path: str
    draft: DraftChoice = PLAIN_DECODING
    n_ctx: int = DEFAULT_CTX
    n_threads: int | None = None  # None: the machine's cores
    n_gpu_layers: int = 0
    # `HOST:PORT` of llama.cpp RPC servers (engine.rpc): the target's n_gpu_layers go there;
    # the draft model stays on this machine.
    rpc_servers: tuple[str, ...] = ()
    n_batch: int = 512
    # The longest draft the adaptive controller may choose: with the pending token, a 64-row verify
    # batch (llama.cpp's CPU kernels work in tiles: 65 rows cost 10% more than 64).
    draft_max: int = DRAFT_MAX
    adaptive: bool = True  # False: always draft draft_max tokens
    draft_sampling: bool = True  # at temperature > 0 a draft model samples (and keeps q)
    # Beside a draft model, also draft from n-gram matches in the text so far (free to draft;
    # each step the controller picks whichever it expects more tokens per second from).
    draft_lookup: bool = True
    # Where measured step costs are kept between processes (engine.costcache); None: not kept.
    cost_cache_dir: str | None = None

    @property
    def speculation(self) -> Speculation:
        return self.draft.kind

"""The messages between the app and the engine's worker process, as one closed set of types.

Requests go parent -> child (WorkerRequest); what the child sends back is a WorkerMessage, and a
listener of the supervisor (app.host.supervisor) also meets WorkerDied, which the parent makes
when the child is gone (HostMessage). Each is a small frozen dataclass, pickled across the pipe;
the unions let mypy check every `match` over them.

Stop is no message: a busy child reads no pipe. The parent writes the request id to cancel into
shared memory that the engine checks every step (app.host.worker.CancelBoard).

Who changes these: the supervisor's owner (app/host). Adding a message means adding it to its
union here and a case to each `match` over that union (mypy's exhaustiveness check finds them).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from engine.config import DraftChoice, EngineConfig, SamplingParams
from engine.errors import Failure
from engine.events import Event, Finished, Reading, Speculation

# ---------------------------------------------------------------------------------------------
# Messages, parent -> child


@dataclass(frozen=True)
class ChatTurn:
    role: str  # "user" | "assistant"
    content: str


@dataclass(frozen=True)
class LoadRequest:
    """Load (or reload) the engine. An empty target_path means the embedded default model."""

    config: EngineConfig
    # Earlier answers, (user message, reply), oldest first: drafted from where a reply says one
    # again (engine.text_index), also across restarts of the app or of a crashed engine.
    earlier: tuple[tuple[str, str], ...] = ()
    # Grow llama.cpp's logits buffer to a reply's longest verify batch before saying loaded
    # (`tandem serve`: its first reply must not pay the growth, +30-90 ms with a 262k
    # vocabulary; the window grows it while idle instead).
    grow_outputs: bool = False


@dataclass(frozen=True)
class SetDraftRequest:
    draft: DraftChoice


@dataclass(frozen=True)
class ReplyRequest:
    request_id: int
    turns: tuple[ChatTurn, ...]  # oldest first, ending with the user's message
    system_prompt: str = ""
    params: SamplingParams = SamplingParams()
    max_tokens: int = 512
    speculate: bool | None = None  # False: plain decoding for this reply (Compare)
    # False: neither draft from earlier replies nor keep this one (Compare's two runs).
    remember: bool = True
    history_key: str = ""  # one per conversation: keeps which old turns were left out stable
    prompt: str | None = None  # raw text, continued as is (no chat template): tandem serve's completions
    stop: tuple[str, ...] = ()  # more stop strings (tandem serve)
    # Texts of the documents attached in the conversation (inside turns already): drafts copied
    # from them are marked DraftSource.DOCUMENT; a conversation that does not fit is refused.
    documents: tuple[str, ...] = ()


@dataclass(frozen=True)
class TokenCountRequest:
    """Count the tokens of texts with the loaded target's tokenizer, each as a part of a prompt
    (no BOS added): an attached document's size as the model reads it. Answered beside a reply
    being generated, not after it (app.host.worker: tokenizing only reads the vocabulary)."""

    request_id: int
    texts: tuple[str, ...]


@dataclass(frozen=True)
class ShutdownRequest:
    pass


# ---------------------------------------------------------------------------------------------
# Messages, child -> parent


class SpeculationOff(StrEnum):
    """Why the engine does not speculate, as data (the window words it: ui/presenters)."""

    NONE = ""  # it speculates
    CHOSEN = "chosen"  # plain decoding was chosen
    CANNOT_ROLL_BACK = "cannot_roll_back"  # a recurrent or hybrid target cannot undo rejected drafts
    DRAFT_REFUSED = "draft_refused"  # the draft model does not pair with the target, or did not load
    SERVER = "server"  # a server is the engine, and it does not say that it drafts


@dataclass(frozen=True)
class EngineInfo:
    target_path: str
    target_name: str
    draft: DraftChoice  # as loaded (a draft model: its GGUF file)
    draft_name: str
    speculation: Speculation
    n_ctx: int
    has_chat_template: bool
    gpu_offload_supported: bool
    pair_note: str = ""  # the pair and its compatibility, a sentence for the command line (a server: "")
    # The draft asked for but refused when loading (the target loaded alone), as data.
    draft_refusal: Failure | None = None
    server: str = ""  # a server used as the engine: its API root (it decides its speculation)
    can_roll_back: bool = True  # False: a recurrent or hybrid target (no speculation for it)

    @property
    def speculation_off(self) -> SpeculationOff:
        if self.speculation is not Speculation.NONE:
            return SpeculationOff.NONE
        if self.server:
            return SpeculationOff.SERVER
        if not self.can_roll_back:
            return SpeculationOff.CANNOT_ROLL_BACK
        if self.draft_refusal is not None:
            return SpeculationOff.DRAFT_REFUSED
        return SpeculationOff.CHOSEN


@dataclass(frozen=True)
class LoadProgressed:
    stage: str
    fraction: float | None = None  # of the target model loaded, when llama.cpp says


@dataclass(frozen=True)
class EngineLoaded:
    info: EngineInfo


@dataclass(frozen=True)
class EngineFailed:
    failure: Failure  # (kind INCOMPATIBLE_PAIR: its pair holds the rule and both values)


@dataclass(frozen=True)
class DraftChanged:
    info: EngineInfo


@dataclass(frozen=True)
class DraftFailed:
    failure: Failure


@dataclass(frozen=True)
class ReplyStarted:
    request_id: int
    n_prompt_tokens: int
    n_dropped_turns: int  # oldest turns left out of the prompt to fit the context
    speculation: Speculation


@dataclass(frozen=True)
class ReplyReading:
    """How far the reply's prompt is read (engine.reading), before its first text: the first
    report at once, then at most every app.host.worker.READING_INTERVAL_S."""

    request_id: int
    reading: Reading


@dataclass(frozen=True)
class ReplyEvents:
    """Engine events of one reply, in the order generated: one message carries what the engine
    yielded since the last (see _Outbox), so a fast engine costs a few messages, not one a token.
    Every TextPiece is there; of the Stats snapshots, the newest of each batch."""

    request_id: int
    events: tuple[Event, ...]

    @property
    def finished(self) -> Finished | None:
        """The reply's Finished where this message ends it (Finished is always a batch's last)."""
        last = self.events[-1] if self.events else None
        return last if isinstance(last, Finished) else None


@dataclass(frozen=True)
class ReplyFailed:
    request_id: int
    failure: Failure  # (a prompt too long for the context: its context holds the numbers)


@dataclass(frozen=True)
class TokensCounted:
    request_id: int
    counts: tuple[int, ...]  # one a text, in the request's order


@dataclass(frozen=True)
class TokenCountFailed:
    """No count (no engine loaded, or a bug): the asker keeps its estimate."""

    request_id: int
    failure: Failure


@dataclass(frozen=True)
class LastWords:
    """Sent by the child just before it ends itself (llama.cpp aborted, e.g. an RPC server was
    lost mid-reply); the parent says this in its WorkerDied instead of the bare exit code."""

    sentence: str


@dataclass(frozen=True)
class WorkerDied:
    """Made by the parent when the child is gone without being asked to stop."""

    exitcode: int | None
    sentence: str


WorkerRequest = LoadRequest | SetDraftRequest | ReplyRequest | TokenCountRequest | ShutdownRequest
# The news of the engine itself (loads, drafts), for every listener.
EngineNews = LoadProgressed | EngineLoaded | EngineFailed | DraftChanged | DraftFailed
# The messages that belong to one reply (routed by request_id).
ReplyMessage = ReplyStarted | ReplyReading | ReplyEvents | ReplyFailed
# The answers to a TokenCountRequest (routed by request_id too).
CountMessage = TokensCounted | TokenCountFailed
WorkerMessage = EngineNews | ReplyMessage | CountMessage | LastWords
# What a listener of the worker's handle receives: the child's messages (LastWords excepted: the
# handle folds it into the WorkerDied that follows) and the death the parent saw.
HostMessage = EngineNews | ReplyMessage | CountMessage | WorkerDied

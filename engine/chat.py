"""Chat on any model: its own chat template, or a plain transcript for a base model.

A base model (no chat template in the GGUF, like the embedded Gemma 3 270M) only continues
text. Given nothing but "User: ... / Assistant:" it invents more speakers ("Student:", "User:")
and loops; given a one-line preamble and one example exchange it answers and then starts a new
speaker line by itself, where its reply ends (engine/speaker_stop.py).

The window's worker (app/host/worker.py) and the CLI's `generate --chat` both prompt through here.
`build_chat_prompt` makes a reply's prompt from a conversation, leaving out the oldest turns
that do not fit the context; it tokenizes the prompt once, and `generate_reply` decodes those
very tokens (a ChatPrompt), not its text again.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from engine.config import SamplingParams
from engine.events import Event
from engine.speaker_stop import StopEvent, stop_at_speaker_lines, transcript_marker

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from engine.text_index import TextIndex


class ChatEngine(Hashable, Protocol):
    """What chat needs of an engine (engine.session.Engine has it): its tokenizer, its chat
    template, its context, its reply memory, and generation; hashable (TokenCounts keys by it)."""

    n_ctx: int
    memory: TextIndex

    @property
    def has_chat_template(self) -> bool: ...
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...
    def format_chat(self, messages: list[dict[str, str]]) -> str: ...
    def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        cancel: threading.Event | None = None,
        speculate: bool | None = None,
        use_memory: bool = True,
        document_spans: tuple[tuple[int, int], ...] = (),
    ) -> Iterator[Event]: ...


# Sampling for chat in the window, as llama.cpp's defaults and chat apps do (the CLI keeps greedy):
# speculation stays exact under it (the same filters and penalty at every drafted position).
CHAT_SAMPLING = SamplingParams(
    temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, repeat_last_n=64
)

DEFAULT_PREAMBLE = (
    "A conversation between a user and a helpful assistant. The assistant answers each "
    "message in its own words, briefly and accurately, and then stops."
)
# One exchange shows the base model what an answer looks like: an answer in new words, not the
# request repeated back, and then the end of the turn.
EXAMPLE_EXCHANGE = (
    ("user", "Write one sentence about rain."),
    ("assistant", "Rain drummed softly on the roof and filled the street with the smell of wet earth."),
)
SPEAKER_NAMES = {"user": "User", "assistant": "Assistant", "system": "System"}


def _role_and_content(message: Any) -> tuple[str, str]:
    if isinstance(message, Mapping):
        return str(message["role"]), str(message["content"])
    return str(message.role), str(message.content)


def transcript(system_prompt: str, messages: Sequence[Any]) -> str:
    """A base model's prompt: preamble (the system prompt, or a default), one example exchange,
    the conversation as `User:` / `Assistant:` lines, and `Assistant:` where the reply starts.

    messages: dicts with "role" and "content", or objects with .role and .content, oldest first.
    """
    preamble = system_prompt.strip() or DEFAULT_PREAMBLE
    lines = [preamble, ""]
    turns = [*EXAMPLE_EXCHANGE, *(_role_and_content(m) for m in messages)]
    for role, content in turns:
        if role == "system":
            continue  # only as the preamble
        speaker = SPEAKER_NAMES.get(role, role.capitalize())
        lines.append(f"{speaker}: {content.strip()}")
    lines.append("Assistant:")
    return "\n".join(lines)


@dataclass(frozen=True)
class ChatPrompt:
    """A chat reply's prompt, tokenized once: its text (a base model's stop rule reads it), its
    tokens (what is decoded), and how many of the oldest turns were left out to fit the context."""

    text: str
    tokens: tuple[int, ...]
    n_dropped: int = 0
    # [start, end) token ranges holding attached documents (document_token_spans)
    document_spans: tuple[tuple[int, int], ...] = ()

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


def document_token_spans(
    engine: ChatEngine, text: str, documents: Sequence[str]
) -> tuple[tuple[int, int], ...]:
    """Where each document's text found in a prompt lies, as [start, end) token positions (a token
    straddling an edge may count to either side: this only says where drafts came from)."""
    spans: list[tuple[int, int]] = []
    for document in documents:
        at = text.rfind(document) if document else -1
        if at < 0:
            continue
        start = len(engine.tokenize(text[:at])) if at else 0
        end = len(engine.tokenize(text[: at + len(document)]))
        if end > start:
            spans.append((start, end))
    return tuple(sorted(spans))


class PromptCancelled(Exception):
    """The reply was stopped while its prompt was being fitted to the context (before decoding)."""


# A chat template's tokens around each message (role markers, separators), until a render of the
# conversation measures them; and around the whole prompt (the system prompt's, the reply's start).
TURN_OVERHEAD_TOKENS = 8
PROMPT_OVERHEAD_TOKENS = 16


class TokenCounts:
    """Token counts of message texts, kept between replies (one engine's tokenizer): a long
    conversation's old messages are counted once, not again at every turn. Bounded: the least
    recently used of 4,096 go first."""

    def __init__(self) -> None:
        self.count = functools.lru_cache(maxsize=4096)(_count_tokens)

    def clear(self) -> None:
        self.count.cache_clear()


def _count_tokens(engine: ChatEngine, text: str) -> int:
    return len(engine.tokenize(text, add_special=False, parse_special=False))


def build_chat_prompt(
    engine: ChatEngine,
    turns: Sequence[Any],
    system_prompt: str = "",
    max_tokens: int = 512,
    n_dropped_before: int = 0,
    documents: Sequence[str] = (),
    cancel: Any = None,
    token_counts: TokenCounts | None = None,
) -> ChatPrompt:
    """The prompt for the next reply to `turns` (oldest first, ending with the user's message).

    When the conversation outgrows the context the oldest turns are left out, whole user/assistant
    pairs at a time, never the system prompt or the new message; enough go to free a quarter of the
    context, and the caller passes the count back as n_dropped_before, so the following turns share
    the prompt's prefix and the KV cache still covers it. documents: texts attached in the
    conversation (their document_spans mark drafts copied from them). Linear in the conversation:
    each message is counted once (token_counts keeps them between replies), and only what is kept
    is rendered and tokenized, a few times at most. `cancel` (is_set) raises PromptCancelled.
    """
    n_ctx = int(engine.n_ctx)
    reserve = min(max_tokens, n_ctx // 2)  # room kept for the reply
    counts = token_counts or TokenCounts()

    def check() -> None:
        if cancel is not None and cancel.is_set():
            raise PromptCancelled

    def render(n_dropped: int) -> ChatPrompt:
        check()
        text, tokens = tokenize_chat(engine, turns[n_dropped:], system_prompt)
        return ChatPrompt(text, tuple(tokens), n_dropped)

    def is_cut(i: int) -> bool:
        return _role_and_content(turns[i])[0] == "user"

    n_dropped = min(max(0, n_dropped_before), len(turns) - 1)
    while n_dropped > 0 and not is_cut(n_dropped):
        n_dropped -= 1
    # kept[i]: tokens of turns[i:] by the counts (messages alone), for i from n_dropped on.
    kept = [0] * (len(turns) + 1)
    for i in range(len(turns) - 1, n_dropped - 1, -1):
        if (len(turns) - i) % 64 == 0:
            check()
        kept[i] = kept[i + 1] + counts.count(engine, _role_and_content(turns[i])[1])
    base, per_turn = _template_overhead(engine, turns, system_prompt, kept, render, n_dropped)

    def estimate(i: int) -> int:
        return base + kept[i] + per_turn * (len(turns) - i)

    prompt: ChatPrompt | None = None
    if estimate(n_dropped) + reserve <= n_ctx + n_ctx // 8:  # likely to fit: see
        prompt = render(n_dropped)
        if prompt.n_tokens + reserve <= n_ctx:
            return _with_documents(engine, prompt, documents)
        per_turn = _measured_overhead(prompt, base, kept[n_dropped], len(turns) - n_dropped, per_turn)
    goal = n_ctx - reserve - n_ctx // 4
    cuts = [i for i in range(n_dropped + 1, len(turns)) if is_cut(i)]
    at = 0  # the first cut whose estimate fits the goal (the counts fall as the cut moves on)
    while True:
        while at < len(cuts) and estimate(cuts[at]) > goal:
            at += 1
        if at >= len(cuts):  # only the newest turn is left: sent whole (the engine says if too long)
            last = cuts[-1] if cuts else n_dropped
            if prompt is None or prompt.n_dropped != last:
                prompt = render(last)
            break
        prompt = render(cuts[at])
        if prompt.n_tokens <= goal:
            break
        # More template tokens than estimated: measure them, and move on to where that fits.
        per_turn = _measured_overhead(prompt, base, kept[cuts[at]], len(turns) - cuts[at], per_turn)
        at += 1
    return _with_documents(engine, prompt, documents)


def _template_overhead(
    engine: ChatEngine, turns: Sequence[Any], system_prompt: str, kept: list[int], render: Any, n_dropped: int
) -> tuple[int, int]:
    """The template's own tokens, around the whole prompt (base) and per message: measured on the
    newest turns alone (two small renders) where there are enough of them, else a guess."""
    n = len(turns)
    if n - 3 >= n_dropped:
        try:
            one, three = render(n - 1).n_tokens, render(n - 3).n_tokens
        except PromptCancelled:
            raise
        except Exception:  # a template that wants the whole conversation: the guess below
            pass
        else:
            per_turn = max(1, -(-(three - one - (kept[n - 3] - kept[n - 1])) // 2))
            return max(0, one - kept[n - 1] - per_turn), per_turn
    base = PROMPT_OVERHEAD_TOKENS
    if system_prompt:
        base += len(engine.tokenize(system_prompt, add_special=False, parse_special=False))
    return base, TURN_OVERHEAD_TOKENS


def _measured_overhead(prompt: ChatPrompt, base: int, n_content: int, n_turns: int, was: int) -> int:
    """The template's tokens per message, as a render showed them (never less than was guessed)."""
    return max(was, -(-(prompt.n_tokens - base - n_content) // max(1, n_turns)))


def _with_documents(engine: ChatEngine, prompt: ChatPrompt, documents: Sequence[str]) -> ChatPrompt:
    if not documents:
        return prompt
    spans = document_token_spans(engine, prompt.text, documents)
    return ChatPrompt(prompt.text, prompt.tokens, prompt.n_dropped, spans)


def _chat(messages: Sequence[Any], system_prompt: str) -> list[dict[str, str]]:
    chat = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    chat += [{"role": r, "content": c} for r, c in map(_role_and_content, messages)]
    return chat


def chat_prompt(engine: ChatEngine, messages: Sequence[Any], system_prompt: str = "") -> str:
    """The prompt for the next assistant turn, in the model's template or as a transcript."""
    if engine.has_chat_template:
        return str(engine.format_chat(_chat(messages, system_prompt)))
    return transcript(system_prompt, messages)


# A message's place in a render of the template around placeholders (private-use characters no
# template writes), to tell the template's own text from what people and documents wrote.
_PLACE = re.compile("\ue000(\\d+)\ue001")


def tokenize_chat(
    engine: ChatEngine, messages: Sequence[Any], system_prompt: str = ""
) -> tuple[str, list[int]]:
    """The prompt for the next assistant turn and its tokens, in which only the chat template's own
    markers are control tokens: a document holding "<|im_end|>" cannot end the user's turn. The
    template is rendered around placeholders to find its own text; where it changes a message's
    text more than trimming it, the whole prompt is tokenized as written (logged)."""
    text = chat_prompt(engine, messages, system_prompt)
    if not engine.has_chat_template:
        return text, list(engine.tokenize(text, parse_special=False))
    chat = _chat(messages, system_prompt)
    skeleton = str(
        engine.format_chat([{"role": m["role"], "content": f"\ue000{i}\ue001"} for i, m in enumerate(chat)])
    )
    pieces = _PLACE.split(skeleton)  # template text, index, template text, index, ...
    template, places = pieces[0::2], [int(i) for i in pieces[1::2]]
    for shown in ([m["content"] for m in chat], [m["content"].strip() for m in chat]):
        if any(i >= len(shown) for i in places):
            break
        if template[0] + "".join(shown[i] + t for i, t in zip(places, template[1:], strict=True)) != text:
            continue
        tokens = list(engine.tokenize(template[0]))
        for i, after in zip(places, template[1:], strict=True):
            tokens += engine.tokenize(shown[i], add_special=False, parse_special=False)
            tokens += engine.tokenize(after, add_special=False)
        return text, tokens
    log.warning("the chat template changes messages' text; its prompt is tokenized whole")
    return text, list(engine.tokenize(text))


def remember_exchanges(engine: ChatEngine, exchanges: Sequence[tuple[str, str]]) -> int:
    """Give the engine's reply memory earlier (user message, reply) pairs, oldest first, each with
    its prompt's end, so the same question asked again drafts from its first token. How many."""
    kept = 0
    for question, answer in exchanges:
        if not answer.strip():
            continue
        _, tokens = tokenize_chat(engine, [{"role": "user", "content": question}])
        # A transcript's reply follows "Assistant:" after a space, which the stored text lost.
        lead = "" if engine.has_chat_template else " "
        reply = engine.tokenize(lead + answer, add_special=False, parse_special=False)
        if tokens and reply:
            engine.memory.add(tokens, reply)
            kept += 1
    return kept


def generate_reply(
    engine: ChatEngine,
    prompt: str | list[int] | ChatPrompt,
    params: SamplingParams | None = None,
    max_tokens: int = 512,
    stop: Sequence[str] = (),
    cancel: Any = None,
    speculate: bool | None = None,
    use_memory: bool = True,
) -> Iterator[Event]:
    """engine.generate for a chat reply: a base model's reply ends at a new speaker line.
    A ChatPrompt is decoded from its tokens (not tokenized again), drafts from its documents marked."""
    text = prompt.text if isinstance(prompt, ChatPrompt) else prompt
    document_spans: tuple[tuple[int, int], ...] = ()
    if isinstance(prompt, ChatPrompt):
        document_spans = prompt.document_spans
        prompt = list(prompt.tokens)
    flag = None if engine.has_chat_template else StopEvent(cancel)
    events = engine.generate(
        prompt,
        params,
        max_tokens=max_tokens,
        stop=stop,
        cancel=cancel if flag is None else flag,
        speculate=speculate,
        use_memory=use_memory,
        document_spans=document_spans,
    )
    if flag is None:
        return iter(events)
    marker = transcript_marker(text) if isinstance(text, str) else ""
    return stop_at_speaker_lines(iter(events), flag, marker)

"""Drafters propose the next tokens cheaply; the target verifies them in one batch.

NgramDrafter: no model. The longest suffix of the text so far that occurred before (in the
prompt, the output, an attached document or an earlier reply: one index, engine.text_index)
predicts that what followed it then follows again. Free to run, so it wins on copy and edit
work, where a reply repeats its prompt, and on Regenerate, where it repeats an earlier reply.

ModelDrafter: a small model of the same vocabulary. Its KV cache is kept across steps: each
step decodes only what it has not seen (the target's correction and, after a fully accepted
draft, the last drafted token), so no token is decoded twice. The model loads on a thread of its
own (engine.loading), started beside the target's load (engine.session) or on first use: where
the cost cache already knows it cannot pay on this machine, it is never loaded at all.
A greedy draft goes on while it is likely to be accepted whole: each drafted token is priced by
how often the target has accepted this draft model's tokens of the same confidence (its own top
probability, learned per pair as the reply goes: `Confidence`), and the draft stops where that
chance, over the whole draft so far, falls below what the controller's chosen length expects.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from engine.backend import ContextFullError, DecodeCancelled, LlamaRunner
from engine.config import SamplingParams
from engine.errors import TandemError
from engine.events import DraftSource, Speculation
from engine.kinds import DrafterKind
from engine.loading import BackgroundLoad
from engine.sampling import Dist, distribution, greedy, top_probability
from engine.text_index import TextIndex


@dataclass
class Draft:
    tokens: list[int]
    dists: list[Dist] | None = None  # the draft's own distributions (sampled drafts only)
    draft_s: float = 0.0  # seconds spent drafting this step's tokens
    # Of draft_s, the first decode (what the draft had not seen: after a draft accepted whole,
    # 2 rows, which cost ~2x one on a CPU) when it was not a catch-up; and the decodes after it.
    first_s: float = 0.0
    n_more: int = 0
    catch_up_s: float = 0.0  # seconds spent first decoding a long stretch the draft had not seen
    # Greedy model drafts: each drafted token's confidence bin (Confidence.bin), and where the
    # draft stopped for doubt, the token it would have drafted next and its bin.
    bins: list[int] | None = None
    stopped: tuple[int, int] | None = None


class Confidence:
    """How often the target accepts a draft model's greedy tokens, per bin of the draft's own top
    probability. A draft's confidence is a length signal only as far as it predicts agreement,
    and that is the pair's: a Q4 draft of the target's own weights is accepted ~99% even where
    it is unsure (its doubt is the target's too, decided alike), a smaller model of the family
    far less. So the rate is learned per bin from what the target did with drafted tokens, and
    for nothing from the token a draft stopped before (the target's next token says whether it
    would have been accepted). A bin not seen yet is priced at the draft's acceptance overall (the
    controller's): confidence shortens a draft only once it has been seen to predict rejections."""

    EDGES = (0.3, 0.6, 0.9)  # bins: p < 0.3, 0.3-0.6, 0.6-0.9, 0.9 or more
    PRIOR_WEIGHT = 2.0  # the overall acceptance counts as this many tokens of a bin...
    DECAY = 0.97  # ...and each token seen weighs this much less than the next (~30 remembered)

    def __init__(self) -> None:
        self._accepted = [0.0] * (len(self.EDGES) + 1)
        self._seen = [0.0] * (len(self.EDGES) + 1)

    @classmethod
    def bin(cls, p: float) -> int:
        return sum(p >= edge for edge in cls.EDGES)

    def rate(self, b: int, overall: float) -> float:
        return (self._accepted[b] + overall * self.PRIOR_WEIGHT) / (self._seen[b] + self.PRIOR_WEIGHT)

    def learn(self, b: int, accepted: bool) -> None:
        self._accepted[b] = self.DECAY * self._accepted[b] + accepted
        self._seen[b] = self.DECAY * self._seen[b] + 1.0


def _find(tokens: list[int], part: tuple[int, ...], start: int) -> int:
    for i in range(start, len(tokens) - len(part) + 1):
        if tokens[i] == part[0] and tuple(tokens[i : i + len(part)]) == part:
            return i
    return -1


class NgramDrafter:
    """Drafts what followed the longest earlier context that ends like the text so far, from one
    index over every source (engine.text_index): the conversation, its attached documents and
    the engine's earlier replies. The index is extended as tokens arrive; a lookup costs the
    same whatever the text's length."""

    kind: ClassVar[Speculation] = Speculation.NGRAM

    # A match is copying when 16 tokens or more of the context agree (text being copied), a
    # recurring phrase at 5-15: their acceptance is learned apart.
    COPY_MATCH = 16
    COPY_START = 4  # ...or this long, where it covers all of the reply so far
    MEMORY_MIN = 4  # an earlier segment's match shorter than this is a short match like any other
    # A copy's edit (a rename) is drafted again where its source tokens recur, learned where a
    # match of a phrase or longer resumes the copy just past it, of at most SUB_MAX tokens a side.
    EDIT_MATCH = 5
    SUB_MAX = 8
    EDIT_SPAN = 80  # ...within a last draft's tokens (63 at most) and the edit
    EDITS_MAX = 16  # the latest kept (each is looked for in every continuation: ~1.2 us a step each)

    @staticmethod
    def kind_of(match_len: int) -> DrafterKind:
        """Acceptance is learned per kind of match length: longer matches draft better.
        Copying (16 tokens or more matched) is nearly always right, where a recurring phrase of
        5-15 tokens often continues otherwise in fresh text."""
        if match_len <= 1:
            return DrafterKind.MATCH_1
        if match_len == 2:
            return DrafterKind.MATCH_2
        if match_len <= 4:
            return DrafterKind.MATCH_3_4
        return DrafterKind.PHRASE if match_len < NgramDrafter.COPY_MATCH else DrafterKind.COPY

    @staticmethod
    def memory_kind_of(match_len: int) -> DrafterKind:
        return DrafterKind.MEMORY_COPY if match_len >= NgramDrafter.COPY_MATCH else DrafterKind.MEMORY_PHRASE

    def __init__(self, index: TextIndex | None = None) -> None:
        # The engine's index, shared by its replies (earlier ones are drafted from); without
        # one, this drafter's own (earlier texts it was begun with are drafted from alike).
        self._shared = index
        self.index = index if index is not None else TextIndex()
        self._ctx: list[int] = []
        self._start = 0  # the stream position of ctx[0] in the index
        self._reply_start = 0  # where this generation's own text starts in ctx
        # [start, end) token ranges of ctx holding attached documents: a match there drafts from
        # the document (DraftSource.DOCUMENT), anywhere else in this text from the conversation
        # (TEXT), and in an earlier segment of the index from an earlier reply (MEMORY).
        self.document_spans: tuple[tuple[int, int], ...] = ()
        self.offer_source = DraftSource.NONE  # where the last offer came from
        self.match_len = 0  # the last lookup's match length (tokens of context that agreed)
        self._match_at = -1  # the stream position where the last match's continuation starts
        self.offer_at = -1  # ...the last offer's, as a position in ctx (< 0: an earlier segment)
        self._segment = 0  # the index's segment count when ctx was synced (another one since: resync)
        # A copy's edits: where the copy last ran (the stream position its continuation started
        # at, the text's length then) and the edits seen since (source tokens, the reply's).
        self._anchor: tuple[int, int] | None = None
        self.edits: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    @property
    def memory(self) -> TextIndex | None:
        return self._shared

    def begin(
        self, ctx: list[int], document_spans: tuple[tuple[int, int], ...] = (), use_memory: bool = True
    ) -> None:
        """Start a generation: the text so far is the index's current segment (kept where it
        extends the last one). use_memory=False: a private index holding this text only (a
        Compare run neither drafts from earlier replies nor leaves its own for later ones)."""
        self.document_spans = document_spans
        if not use_memory:
            self.index = TextIndex()
        elif self._shared is not None:
            self.index = self._shared
        self._ctx = ctx
        self._reply_start = len(ctx)
        self._start = self.index.sync(ctx)
        self._segment = len(self.index)
        self._anchor, self.edits = None, []

    def lookup(self, ctx: list[int], k_max: int) -> tuple[list[int], int]:
        """The continuation of the longest earlier match of ctx's end, and the match length."""
        if ctx is not self._ctx or len(self.index) != self._segment:
            self._ctx = ctx
            self._start = self.index.sync(ctx)
            self._segment = len(self.index)
        else:
            self.index.sync(ctx, check=False)
        n, at = self.index.match
        self._match_at = at
        if n <= 0:
            self.match_len = 0
            return [], 0
        end = self._start + len(ctx)
        tokens = self.index.following(at, min(k_max, end - at))
        period = end - at
        if len(tokens) == period < k_max and n >= period:
            # What followed runs up to the text's end: the text repeats itself every `period`
            # tokens (a loop, a line said again with a counter in it), and its match covers a
            # whole period at least. The repetition is drafted on past the end, as far as asked:
            # one more step's worth of the same, kept while the target keeps repeating.
            tokens = [tokens[j % period] for j in range(k_max)]
        matched = n
        if self.COPY_START <= n < self.COPY_MATCH and self._start + self._reply_start in range(end - n, end):
            # Everything this reply has said so far (one token or more: before its first, a match
            # of the prompt's end, such as a chat template's turn, says nothing) continues an
            # earlier stretch: a reply that starts by copying is copying, before it is 16 tokens long.
            n = self.COPY_MATCH
        if matched >= self.EDIT_MATCH:
            self._learn_edit(ctx, at, matched)
            tokens = self._edited(tokens, k_max)
        self.match_len = n
        return tokens, n

    def _learn_edit(self, ctx: list[int], at: int, n: int) -> None:
        """A copy that ran on after an edit: what it wrote in place of the source's tokens, kept to
        draft where those tokens come again (a rename). The anchor is where the copy last ran."""
        anchor, self._anchor = self._anchor, (at, len(ctx))
        if anchor is None:
            return
        a0, l0 = anchor
        n_src, n_out = at - n - a0, len(ctx) - n - l0  # what each wrote since (a draft, an edit)
        if not 0 < n_src <= self.EDIT_SPAN or not 0 <= n_out <= self.EDIT_SPAN:
            return
        # (From the token before the anchor, which both share where the copy ran up to it.)
        src, out = self.index.following(a0 - 1, n_src + 1), ctx[l0 - 1 : len(ctx) - n]
        if len(src) != n_src + 1:
            return
        i = 0
        while i < min(len(src), len(out)) and src[i] == out[i]:
            i += 1
        j = 0
        while j < min(len(src), len(out)) - i and src[-1 - j] == out[-1 - j]:
            j += 1
        # Not aligned (i 0), nothing of the source replaced (an insertion), or too long to be an edit.
        if i == 0 or len(src) - i - j < 1 or max(len(src), len(out)) - i - j > self.SUB_MAX:
            return
        edit = (tuple(src[i : len(src) - j]), tuple(out[i : len(out) - j]))
        if edit not in self.edits:
            self.edits = [*self.edits[1 - self.EDITS_MAX :], edit]

    def _edited(self, tokens: list[int], k_max: int) -> list[int]:
        """The continuation with the copy's edits made where their source tokens come again."""
        for src, out in self.edits:
            i = 0
            while (i := _find(tokens, src, i)) >= 0:
                tokens = [*tokens[:i], *out, *tokens[i + len(src) :]]
                i += len(out)
        return tokens[:k_max]

    def offer(self, ctx: list[int], k_max: int, use_memory: bool = True) -> tuple[list[int], DrafterKind]:
        """This step's candidates and their acceptance kind."""
        tokens, n = self.lookup(ctx, k_max)
        at = self._match_at - self._start  # where the continuation starts in ctx (< 0: earlier)
        self.offer_at = at
        if at < 0 and n >= self.MEMORY_MIN:
            self.offer_source = DraftSource.MEMORY
            return tokens, self.memory_kind_of(n)
        in_document = any(a <= at < b for a, b in self.document_spans)
        self.offer_source = DraftSource.DOCUMENT if in_document else DraftSource.TEXT
        return tokens, self.kind_of(n)


class ModelDrafter:
    kind: ClassVar[Speculation] = Speculation.DRAFT

    # A step's catch-up is 1-2 tokens; more is a prompt (or a stretch decoded plainly) seen for
    # the first time: a one-off prefill, not the per-token cost of drafting.
    CATCH_UP_TOKENS = 2

    def __init__(self, load: Callable[[threading.Event], LlamaRunner], sampled: bool = True) -> None:
        """load(cancel): the model, loaded on a thread of its own (BackgroundLoad's `cancel`)."""
        self._load = load
        self._runner: LlamaRunner | None = None
        self._loading: BackgroundLoad | None = None
        self.load_error: str | None = None  # why the model could not be loaded (then: no drafts)
        self.load_s: float | None = None  # seconds the load took (on its thread)
        self._load_noted = False  # load_s was handed on (take_load_s)
        self.sampled = sampled  # at temperature > 0: sample drafts and keep q (else greedy drafts)
        self.last_read: tuple[int, float] = (0, 0.0)  # the last prefill: tokens read, seconds
        self.confidence = Confidence()
        # The last greedy draft, to be judged once the target has spoken: (the text it was
        # drafted for, its length then, the draft).
        self._pending: tuple[list[int], int, Draft] | None = None

    def review(self, ctx: list[int]) -> None:
        """Learn from the last greedy draft what the target made of each drafted token, up to its
        first rejection, and of the token the draft stopped before where the whole draft was
        kept (ctx: the same text, grown by what the target emitted since)."""
        pending = self._pending
        if pending is None or pending[0] is not ctx:
            return
        _, at, draft = pending
        assert draft.bins is not None
        emitted = ctx[at:]
        if not emitted:
            return  # the target has not spoken yet
        self._pending = None
        for token, b, said in zip(draft.tokens, draft.bins, emitted, strict=False):
            self.confidence.learn(b, token == said)
            if token != said:
                return
        if draft.stopped is not None and len(emitted) > len(draft.tokens):
            token, b = draft.stopped
            self.confidence.learn(b, token == emitted[len(draft.tokens)])

    def load_in_background(self) -> None:
        """Start loading the model now, on a thread of its own (nothing if loaded or loading)."""
        if self._runner is None and self._loading is None and self.load_error is None:
            self._loading = BackgroundLoad(self._load, name="tandem-draft-load")

    @property
    def loaded(self) -> bool:
        self._take_load(wait=False)
        return self._runner is not None

    def load_left_s(self, load_s: float) -> float:
        """What a reply would wait for the model, a load taking load_s: all of it unless
        begun, what is left of a load in progress (on its thread, beside other work), or none."""
        if self.loaded:
            return 0.0
        if self._loading is None:
            return load_s
        return max(0.0, load_s - (time.perf_counter() - self._loading.started))

    def wait_loaded(self, timeout: float | None = None) -> bool:
        """Wait (at most timeout seconds) for a load in progress; True once none is."""
        if self._loading is not None and not self._loading.wait(timeout):
            return False
        self._take_load(wait=False)
        return True

    def take_load_s(self) -> float | None:
        """The load's seconds, once, when it has ended with the model loaded (else None)."""
        if self._load_noted or not self.loaded or self.load_s is None:
            return None
        self._load_noted = True
        return self.load_s

    def _take_load(self, wait: bool) -> None:
        """Adopt a background load that has ended (waiting for it where wait). A model that
        cannot be loaded (memory, a damaged file, a bug) turns drafting off with the reason kept,
        rather than failing the reply it was meant to speed up."""
        loading = self._loading
        if loading is None or not (wait or loading.done):
            return
        self._loading = None
        try:
            self._runner = loading.result()
        except TandemError as e:
            self.load_error = str(e)
        except Exception as e:
            self.load_error = f"{type(e).__name__}: {e}"
        self.load_s = loading.load_s

    def _ensure_loaded(self) -> bool:
        """Load on first use, or wait for the load begun in the background."""
        self.load_in_background()
        self._take_load(wait=True)
        return self._runner is not None

    @property
    def runner(self) -> LlamaRunner:
        if self._runner is None:
            raise RuntimeError("the draft model is not loaded")
        return self._runner

    @property
    def llama_s(self) -> float:
        return self._runner.llama_s if self._runner is not None else 0.0

    def close(self) -> None:
        """Free the model; a load in progress is stopped first (its thread ends before this returns)."""
        loading, self._loading = self._loading, None
        if loading is not None:
            loading.cancel()
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def unseen(self, ctx: list[int]) -> int:
        """How many tokens of ctx the model would read before drafting (all, when not loaded)."""
        if self._runner is None:
            return len(ctx)
        return len(ctx) - self._runner.common_prefix(ctx)

    def prefill(self, tokens: list[int], cancel: Callable[[], bool] | None = None) -> float:
        """Read a prompt ahead of drafting (loading the model on first use); seconds spent.
        What the read alone took is kept in last_read: (tokens read, seconds; none where `cancel`
        stopped it, LlamaRunner.decode: what was read whole stays cached)."""
        t0 = time.perf_counter()
        self.last_read = (0, 0.0)
        if not self._ensure_loaded():
            return time.perf_counter() - t0
        runner = self.runner
        t_read = time.perf_counter()
        n_keep = runner.common_prefix(tokens)
        runner.truncate(n_keep)
        try:
            runner.decode(tokens[n_keep:], n_logits=0, cancel=cancel)
        except ContextFullError:
            runner.clear()
        except DecodeCancelled:
            pass
        else:
            self.last_read = (len(tokens) - n_keep, time.perf_counter() - t_read)
        return time.perf_counter() - t0

    def propose(
        self,
        ctx: list[int],
        k: int,
        params: SamplingParams,
        rng: np.random.Generator,
        acceptance: float | None = None,
    ) -> Draft:
        """At most k tokens. A greedy draft chosen at an acceptance a (the controller's estimate
        of this draft model's) is expected to be accepted whole with chance a ** k; it stops
        before a token where that chance, each token priced at its confidence bin's learned rate,
        falls below a ** k (None: it never stops for that reason)."""
        self.review(ctx)
        if k <= 0:
            return Draft([])
        t0 = time.perf_counter()
        first_use = self._runner is None
        if not self._ensure_loaded():
            return Draft([])
        runner = self.runner
        # Loading is a one-off, like a prompt's catch-up: neither is the cost of drafting a token.
        load_s = time.perf_counter() - t0 if first_use else 0.0
        t0 = time.perf_counter()
        n_keep = runner.common_prefix(ctx)
        if n_keep == len(ctx):  # need logits for the last token: decode it again
            n_keep -= 1
        runner.truncate(n_keep)
        k = min(k, runner.n_ctx - len(ctx))
        if k <= 0:
            return Draft([], catch_up_s=load_s)
        try:
            logits = runner.decode(ctx[n_keep:], n_logits=1)[0]
        except ContextFullError:
            return Draft([], catch_up_s=load_s)
        sampled = self.sampled and not params.is_greedy
        draft = Draft([], [] if sampled else None, catch_up_s=load_s, bins=None if sampled else [])
        # (a ** k a hair under: a product of k rates equal to a must not stop at the k-th token)
        survival, stop_below = 1.0, (0.0 if acceptance is None else acceptance**k * (1 - 1e-9))
        if len(ctx) - n_keep > self.CATCH_UP_TOKENS:
            draft.catch_up_s += time.perf_counter() - t0
            t0 = time.perf_counter()
        else:
            draft.first_s = time.perf_counter() - t0
        history = list(ctx)
        for i in range(k):
            if sampled:
                dist = distribution(logits, history, params)
                token = dist.sample(rng)
                assert draft.dists is not None
                draft.dists.append(dist)
            else:
                token = greedy(logits, history, params)
                # How sure the draft is, of its own top token (the one drafted, unless a
                # repetition penalty moved the choice).
                top = token if params.repeat_penalty == 1.0 else int(np.argmax(logits))
                b = Confidence.bin(top_probability(logits, top))
                survival *= self.confidence.rate(b, acceptance or 0.0)
                if survival < stop_below:
                    draft.stopped = (token, b)
                    break
                assert draft.bins is not None
                draft.bins.append(b)
            draft.tokens.append(token)
            history.append(token)
            if i == k - 1:
                break
            logits = runner.decode([token], n_logits=1)[0]
            draft.n_more += 1
        draft.draft_s = time.perf_counter() - t0
        if draft.bins is not None:
            self._pending = (ctx, len(ctx), draft)
        return draft

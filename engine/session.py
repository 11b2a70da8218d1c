"""Engine: a loaded target (and optional draft), kept warm across requests.

The entry point for everything that generates: the CLI, the app's worker process, the
benchmarks, the tests. Files are checked (engine.gguf_info) and pairs matched
(engine.pairing) before llama.cpp sees them. The target's KV cache survives between
`generate` calls, so a follow-up in a conversation prefills only what is new.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

from engine.adaptive import CALIBRATION_SIZES, DraftLengthController
from engine.backend import LlamaRunner
from engine.config import PLAIN_DECODING, DraftChoice, EngineConfig, SamplingParams, default_threads
from engine.costcache import CostCache, cost_key, file_identity, pair_key
from engine.drafters import ModelDrafter, NgramDrafter
from engine.errors import PromptTooLongError, TandemError
from engine.events import Event, Finished, Speculation
from engine.gguf_info import GGUFInfo, read_gguf_info, with_vocabulary
from engine.pairing import check_pair
from engine.policy import DraftPolicy
from engine.speculative import SpeculativeDecoder
from engine.text_index import TextIndex
from engine.user_path import user_path

_CALIBRATION_CONTEXT = 256  # timed after this much text: a batch's attention grows with it
_CALIBRATION_REPEATS = 2  # the lowest of this many timings (a busy machine only slows one down)
_FILLER = "The quick brown fox jumps over the lazy dog while the band plays on. "


def read_model_info(path: str, with_tokens: bool, cost_cache_dir: str | None) -> GGUFInfo:
    """A model file's header; without the vocabulary's texts, jumping over its arrays of strings
    where the cost cache knows where they lie in this very file."""
    cache = CostCache(cost_cache_dir) if cost_cache_dir else None
    identity = None
    if cache is not None and not with_tokens:
        with contextlib.suppress(OSError):
            identity = file_identity(str(user_path(path)))
    spans = cache.string_spans(identity) if cache is not None and identity else ()
    info = read_gguf_info(path, with_tokens=with_tokens, string_spans=spans)
    if cache is not None and identity and info.string_spans and info.string_spans != spans:
        cache.remember_string_spans(identity, info.string_spans)
    return info


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        on_progress: Callable[[float], None] | None = None,
        first_reply_tokens: int | None = None,
        keep_target_if_draft_refused: bool = False,
    ) -> None:
        """Check and load the target; on_progress gets its load fraction. A draft model is checked
        and loaded on threads of their own beside it (engine.loading), unless first_reply_tokens
        (`tandem generate`) says the first reply could not repay it (`pays_back`).
        keep_target_if_draft_refused: a draft that cannot be used (a refused pair, a target that
        cannot roll back) leaves the loaded target plain, the reason in `draft_refused`."""
        self.config = config
        self.draft_refused: TandemError | None = None
        self.n_threads = config.n_threads or default_threads()
        self.info_target: GGUFInfo = read_model_info(config.target_path, False, config.cost_cache_dir)
        # Never more context than the model was trained for (quality falls apart past it).
        n_ctx_train = self.info_target.context_length
        self.n_ctx = min(config.n_ctx, n_ctx_train) if n_ctx_train else config.n_ctx
        self.info_draft: GGUFInfo | None = None
        self._text: NgramDrafter | None = None  # n-gram drafts (alone, or beside a draft model)
        self._model: ModelDrafter | None = None  # a draft model
        self._controller: DraftLengthController | None = None
        # This model's earlier replies, drafted from where a reply says one again (n-gram drafts).
        self.memory = TextIndex()
        self._chat_formatter: Any = None  # llama_cpp's Jinja2ChatFormatter, made on first use
        self._calibration_off = False  # this process cannot time batches (its context, or it failed)
        self._draft_file = ""  # the draft model's file, as the cost cache knows it
        check: Future[GGUFInfo] | None = None
        if config.draft.kind is Speculation.DRAFT:
            # Its header is read and checked beside the target's load too (0.1-0.2 s of Python
            # with a 262k vocabulary), and waited for once the target is in.
            check = Future()
            try:
                self._use_draft_model(config.draft.model, check, first_reply_tokens)
            finally:
                # (Begun once this thread's own Python is done, llama_cpp's import among it: the
                # two would take turns at the GIL, the check then on the critical path.)
                run = functools.partial(_settle, check, self._read_draft_info, config.draft.model)
                threading.Thread(target=run, name="tandem-draft-check").start()
        try:
            self.target = LlamaRunner(
                str(self.info_target.path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                n_gpu_layers=config.n_gpu_layers,
                n_batch=config.n_batch,
                on_progress=on_progress,
                rpc_servers=config.rpc_servers,
            )
        except BaseException:
            self._close_draft()
            if check is not None:
                check.exception()  # waited for, its error (if any) not raised here
            raise
        self.n_ctx = self.target.n_ctx
        try:
            try:  # (n-gram drafts too are refused where the target cannot roll back)
                if check is not None:
                    self.info_draft = check.result()
                    self._check_can_roll_back()
                elif config.draft.kind is not Speculation.DRAFT:
                    self.set_draft(config.draft)
            except TandemError as e:
                if not keep_target_if_draft_refused:
                    raise
                self.draft_refused = e
                self.config = dataclasses.replace(config, draft=PLAIN_DECODING)
                self.set_draft(PLAIN_DECODING)
        except BaseException:
            self.close()
            raise

    # -- speculation --------------------------------------------------------------------------

    @property
    def speculation(self) -> Speculation:
        return self._policy().speculation

    def _policy(self) -> DraftPolicy:
        return DraftPolicy(self._controller, self._text, self._model)

    def set_draft(self, draft: DraftChoice) -> None:
        """Switch speculation: none, n-gram lookup, or a draft model (loading at once, on a thread
        of its own). Nothing is timed here: the controller starts from the cost cache or priors."""
        if draft.kind is Speculation.NONE:
            self._save_costs()
            self._close_draft()
            self._text, self._model, self._controller, self.info_draft = None, None, None, None
            return
        self._check_can_roll_back()
        k_max = self.config.draft_max
        if draft.kind is Speculation.NGRAM:
            self._save_costs()
            self._close_draft()
            self._text, self._model, self.info_draft = NgramDrafter(self.memory), None, None
            self._controller = DraftLengthController(k_max, self.config.adaptive)
            self._seed_costs()
            return
        info = self._read_draft_info(draft.model)
        if self.info_draft is not None and self.info_draft.path == info.path:
            return
        self._use_draft_model(draft.model, info)

    def _check_can_roll_back(self) -> None:
        if not self.target.can_roll_back:
            raise TandemError(
                f"{self.info_target.name} is a recurrent or hybrid model: it cannot undo rejected "
                "drafts, so speculation is off for it"
            )

    def _use_draft_model(
        self, draft: str, info: GGUFInfo | Future[GGUFInfo], first_reply_tokens: int | None = None
    ) -> None:
        """Draft with this model (its header checked, or being checked), its load begun at once
        unless the cost cache knows it cannot pay here or the first reply could not repay it."""
        self._save_costs()
        self._close_draft()
        config = self.config
        load = functools.partial(self._load_draft, info, self.n_ctx)  # (the context as it is now)
        self._model = ModelDrafter(load, sampled=config.draft_sampling)
        self._text = NgramDrafter(self.memory) if config.draft_lookup else None
        self.info_draft = info if isinstance(info, GGUFInfo) else None
        self._draft_file = os.path.expanduser(draft)
        controller = self._controller = DraftLengthController(
            config.draft_max, config.adaptive, draft_costs_time=True
        )
        self._seed_costs()
        # (Reading one token is the least a reply's start costs the model, once loaded.)
        reading_s = controller.draft.one_off_s(
            controller.draft.target_read_s(1, controller.costs.cost(1)), loaded=True
        )
        if controller.will_draft and (
            first_reply_tokens is None or controller.pays_back(first_reply_tokens, reading_s)
        ):
            self._model.load_in_background()

    def _load_draft(
        self, info: GGUFInfo | Future[GGUFInfo], n_ctx: int, cancel: threading.Event
    ) -> LlamaRunner:
        """The draft model's load (ModelDrafter's, on its thread), after its header's check."""
        checked = info if isinstance(info, GGUFInfo) else info.result()
        return LlamaRunner(
            str(checked.path),
            n_ctx=n_ctx,
            n_threads=self.n_threads,
            n_gpu_layers=self.config.n_gpu_layers,
            n_batch=self.config.n_batch,
            cancel=cancel,
            # The draft stays on this machine, however its load and the target's interleave.
            stays_here=bool(self.config.rpc_servers),
        )

    def _read_draft_info(self, draft: str) -> GGUFInfo:
        """The draft model's header, checked against the target's pairing rules (a pair found
        compatible before, both files unchanged, is not: its vocabulary's texts are not read)."""
        cache = CostCache(self.config.cost_cache_dir) if self.config.cost_cache_dir else None
        pair = None
        if cache is not None:
            # (A missing draft has no identity: read_gguf_info then says so in a sentence.)
            with contextlib.suppress(OSError):
                pair = pair_key(str(self.info_target.path), os.path.expanduser(draft))
        known = cache is not None and pair is not None and cache.knows_compatible(pair)
        info = read_model_info(draft, not known, self.config.cost_cache_dir)
        if not known:
            check_pair(with_vocabulary(self.info_target), info)
            if cache is not None and pair is not None:
                cache.remember_compatible(pair)
        return info

    # -- measured costs that outlive the process -------------------------------------------------

    def _cost_key(self) -> str | None:
        if self.config.cost_cache_dir is None or self._controller is None:
            return None
        draft = Speculation.NGRAM if self._model is None else self._draft_file
        try:
            return cost_key(
                str(self.info_target.path),
                draft,
                self.n_threads,
                self.config.n_batch,
                self.config.n_gpu_layers,
                ",".join(self.config.rpc_servers),
            )
        except OSError:  # a model file moved away under us: nothing to cache against
            return None

    def _seed_costs(self) -> None:
        key = self._cost_key()
        if key is None or self._controller is None or self.config.cost_cache_dir is None:
            return
        data = CostCache(self.config.cost_cache_dir).load(key)
        if data is not None:
            self._controller.seed(data)

    def _save_costs(self) -> None:
        key = self._cost_key()
        if key is None or self._controller is None or self.config.cost_cache_dir is None:
            return
        CostCache(self.config.cost_cache_dir).save(key, self._controller.export())

    # -- timing this machine's verify batches ----------------------------------------------------

    def _untimed_sizes(self) -> list[int]:
        c = self._controller
        if c is None or not c.adaptive or self._calibration_off:
            return []
        return c.costs.untimed(n for n in CALIBRATION_SIZES if n <= min(c.k_max + 1, self.target.n_batch))

    @property
    def calibration_due(self) -> bool:
        """Are there verify batch sizes the controller has never timed on this machine?"""
        return bool(self._untimed_sizes())

    @property
    def outputs_due(self) -> bool:
        """Would a reply's longest verify batch still grow llama.cpp's logits buffer (no decode of
        this process asked for that many rows yet)? Then idle time grows it first (grow_outputs)."""
        c = self._controller
        return (
            c is not None
            and c.adaptive
            and self.target.can_roll_back
            and not self.target.outputs_reserved(c.k_max + 1)
        )

    def grow_outputs(self) -> bool:
        """Grow the logits buffer to a reply's longest verify batch (engine.backend.reserve_outputs);
        False where the context has no room for it now."""
        c = self._controller
        return c is None or self.target.reserve_outputs(c.k_max + 1)

    def calibrate(self, stop: Callable[[], bool] = lambda: False) -> bool:
        """Time the verify batches of CALIBRATION_SIZES not yet timed on this machine, build and
        model, as a step reads them, after the cached text filled up to _CALIBRATION_CONTEXT
        tokens (rolled back after). `stop` is asked between batches (the worker calibrates while
        idle); what was timed is kept either way. True once every size is timed."""
        sizes = self._untimed_sizes()
        controller = self._controller
        if not sizes or controller is None:
            return True
        # Batches timed beside a draft model's load run slow, and would be kept as this machine's.
        while self._model is not None and not self._model.wait_loaded(0.05):
            if stop():
                return False
        target = self.target
        n0 = len(target.tokens)
        filler = self.tokenize(_FILLER, add_special=False) or [0]
        filler = filler * (1 + (_CALIBRATION_CONTEXT + max(sizes)) // len(filler))
        room = max(sizes) + 2  # the largest batch, the token time_batches reads first, one more
        if room > self.n_ctx:
            self._calibration_off = True  # a context this small never holds the largest batch
            return False
        n_context = max(_CALIBRATION_CONTEXT - n0, 0)
        if n0 + n_context + room > self.n_ctx:
            n_context = 0
            if n0 + room > self.n_ctx:
                return False  # the conversation fills the context: later, after another one
        try:
            for start in range(0, n_context, 64):  # in pieces: a request waits one piece at most
                if stop():
                    return False
                target.decode(filler[start : min(start + 64, n_context)], n_logits=0)
            costs = target.time_batches(sizes, filler[:1], _CALIBRATION_REPEATS, stop, read_rows=True)
            controller.note_timings(costs)
            if len(costs) < len(sizes):
                return False
        except Exception:
            self._calibration_off = True  # never again in this process; replies measure as they go
            raise
        finally:
            target.truncate(n0)
            self._save_costs()
        return True

    def _close_draft(self) -> None:
        if self._model is not None:
            self._model.close()  # (a load in progress stops, its thread ended)

    # -- text ---------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.target.tokenize(text, add_special, parse_special)

    @property
    def has_chat_template(self) -> bool:
        return self.info_target.chat_template is not None

    def _token_text(self, key: str) -> str:
        """The text of a special token named in the metadata (BOS, EOS), or "" (from the loaded
        model: the header is read without its vocabulary's texts)."""
        i = self.info_target.metadata.get(key)
        return self.target.token_text(i) if isinstance(i, int) and 0 <= i < self.info_target.n_vocab else ""

    def format_chat(self, messages: list[dict[str, str]]) -> str:
        """The conversation in the model's own chat template, ending where the reply starts."""
        if self._chat_formatter is None:
            template = self.info_target.chat_template
            if template is None:
                raise TandemError(f"{self.info_target.name} has no chat template; use it as a base model")
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            self._chat_formatter = Jinja2ChatFormatter(
                template,
                eos_token=self._token_text("tokenizer.ggml.eos_token_id"),
                bos_token=self._token_text("tokenizer.ggml.bos_token_id"),
            )
        prompt: str = self._chat_formatter(messages=messages).prompt
        # The template writes BOS itself; where tokenize() adds BOS too, keep one. (Not otherwise:
        # SmolLM2's BOS is its <|im_start|>, which its template writes and its tokenizer does not add.)
        bos = self._token_text("tokenizer.ggml.bos_token_id")
        if bos and prompt.startswith(bos) and self.adds_bos:
            prompt = prompt[len(bos) :]
        return prompt

    @functools.cached_property
    def adds_bos(self) -> bool:
        """Does tokenize() put a BOS token before the text (the vocabulary's add-BOS flag)?"""
        return len(self.tokenize("a")) > len(self.tokenize("a", add_special=False))

    # -- generation ---------------------------------------------------------------------------

    @property
    def gpu_offload_supported(self) -> bool:
        """A local GPU, or RPC servers to offload to (llama_supports_gpu_offload() alone is true
        in every build with the RPC backend, GPU or not)."""
        from engine import rpc

        return bool(self.config.rpc_servers) or bool(rpc.local_devices())

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
    ) -> Iterator[Event]:
        """Stream a reply: TextPiece and Stats events, then one Finished; PromptTooLongError before
        the first event where the prompt leaves no room. speculate=False: plain decoding for this
        call. use_memory=False: the reply neither drafts from earlier replies nor is kept (Compare's
        speculative run must not draft from its plain twin's). document_spans: token ranges of the
        prompt holding attached documents (engine.chat.document_token_spans: TextPiece.source)."""
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        if not tokens:
            raise TandemError("the prompt is empty")
        if len(tokens) >= self.n_ctx:
            raise PromptTooLongError(len(tokens), self.n_ctx)
        params = params or SamplingParams()
        if params.repeat_penalty != 1.0 and not params.penalty_exempt:
            params = dataclasses.replace(params, penalty_exempt=self.penalty_exempt_tokens)
        decoder = SpeculativeDecoder(self.target, self._policy())
        events = decoder.run(
            tokens,
            params,
            max_tokens,
            stop=stop,
            cancel=cancel,
            speculate=speculate is not False,
            use_memory=use_memory,
            document_spans=document_spans,
        )
        return self._ending_with(events, tokens if use_memory else None)

    @functools.cached_property
    def penalty_exempt_tokens(self) -> frozenset[int]:
        """Tokens the repetition penalty spares (SamplingParams.penalty_exempt): line breaks and
        a transcript's speaker names, as this model's tokenizer writes them."""
        from engine.chat import SPEAKER_NAMES

        texts = ["\n", "\n\n", "\n\n\n", ":", " :"]
        for name in SPEAKER_NAMES.values():
            texts += [f"\n{name}:", f"{name}:", f" {name}:"]
        ids: set[int] = set()
        for text in texts:
            ids.update(self.tokenize(text, add_special=False))
        return frozenset(ids)

    def _ending_with(self, events: Iterator[Event], prompt: list[int] | None) -> Iterator[Event]:
        """Pass the events on; at the reply's end, keep it for drafting later ones (prompt None:
        not kept) and write the measured step costs however it ends (a reply dropped early closes
        the step's generator first, as `yield from` would)."""
        try:
            for event in events:
                if prompt is not None and isinstance(event, Finished):
                    self.memory.add(prompt, event.token_ids)
                yield event
        finally:
            if isinstance(events, Generator):
                events.close()
            self._save_costs()

    def reset_cache(self, keep_memory: bool = False) -> None:
        """Start over as a new process would (benchmarks start each run so), the controller seeded
        from the cost cache as it is now. keep_memory: keep the earlier replies."""
        self.target.clear()
        if not keep_memory:
            self.memory.clear()
        if self._model is not None and self._model.loaded:
            self._model.runner.clear()
        if self._text is not None:
            self._text = NgramDrafter(self.memory)
        if self._controller is not None:
            c = self._controller
            self._controller = DraftLengthController(c.k_max, c.adaptive, c.draft_costs_time)
            self._seed_costs()

    def close(self) -> None:
        self._save_costs()
        if self._model is None:
            self.target.close()
            return
        # Both models are freed at once (llama.cpp lets go of the GIL): unmapping a model's
        # weights is most of what a process's end costs (0.1 s for this machine's 1.3 GB target).
        closing = threading.Thread(target=self._close_draft, name="tandem-draft-close")
        closing.start()
        try:
            self.target.close()
        finally:
            closing.join()


def _settle(future: Future[GGUFInfo], work: Callable[[str], GGUFInfo], draft: str) -> None:
    """The draft's header check, on a thread of its own: its error is raised by future.result()."""
    try:
        future.set_result(work(draft))
    except BaseException as e:
        future.set_exception(e)

"""Engine: a loaded target (and optional draft), kept warm across requests.

The entry point for everything that generates: the CLI, the app's worker process, the
benchmarks, the tests. Files are checked (engine.gguf_info) and pairs matched
(engine.pairing) before llama.cpp sees them. The target's KV cache survives between
`generate` calls, so a follow-up in a conversation prefills only what is new.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from engine.adaptive import DraftLengthController
from engine.backend import LlamaRunner
from engine.config import EngineConfig, SamplingParams, default_threads
from engine.drafters import ModelDrafter, NgramDrafter
from engine.errors import PromptTooLongError, TandemError
from engine.events import Event, SpeculationKind
from engine.gguf_info import GGUFInfo, read_gguf_info
from engine.pairing import check_pair
from engine.speculative import SpeculativeDecoder


class Engine:
    def __init__(self, config: EngineConfig, on_progress: Callable[[float], None] | None = None) -> None:
        """Check and load the target (and draft); on_progress gets the target's load fraction."""
        self.config = config
        self.n_threads = config.n_threads or default_threads()
        self.info_target: GGUFInfo = read_gguf_info(config.target_path)
        # Never more context than the model was trained for (quality falls apart past it).
        n_ctx_train = self.info_target.context_length
        n_ctx = min(config.n_ctx, n_ctx_train) if n_ctx_train else config.n_ctx
        self.target = LlamaRunner(
            str(self.info_target.path),
            n_ctx=n_ctx,
            n_threads=self.n_threads,
            n_gpu_layers=config.n_gpu_layers,
            n_batch=config.n_batch,
            on_progress=on_progress,
        )
        self.n_ctx = self.target.n_ctx
        self.info_draft: GGUFInfo | None = None
        self._drafter: NgramDrafter | ModelDrafter | None = None
        self._controller: DraftLengthController | None = None
        self._chat_formatter: Any = None  # llama_cpp's Jinja2ChatFormatter, made on first use
        self._verify_costs: dict[int, float] | None = None
        try:
            self.set_draft(config.draft)
        except TandemError:
            self.close()
            raise

    # -- speculation --------------------------------------------------------------------------

    @property
    def speculation(self) -> SpeculationKind:
        if self._drafter is None:
            return "none"
        return "ngram" if isinstance(self._drafter, NgramDrafter) else "draft"

    def set_draft(self, draft: str | None) -> None:
        """Switch speculation: "ngram", a GGUF path for a draft model, or None / "none"."""
        if draft in (None, "", "none"):
            self._close_draft()
            self._drafter, self._controller, self.info_draft = None, None, None
            return
        if not self.target.can_roll_back:
            raise TandemError(
                f"{self.info_target.name} is a recurrent or hybrid model: it cannot undo rejected "
                "drafts, so speculation is off for it"
            )
        k_max = self.config.draft_max
        if draft == "ngram":
            self._close_draft()
            self._drafter, self.info_draft = NgramDrafter(), None
            self._controller = DraftLengthController(k_max, self.config.adaptive)
            self._controller.calibrate(self._measure_verify_costs(), None)
            return
        assert draft is not None
        info = read_gguf_info(draft)
        check_pair(self.info_target, info)
        if self.info_draft is not None and self.info_draft.path == info.path:
            return
        runner = LlamaRunner(
            str(info.path),
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            n_gpu_layers=self.config.n_gpu_layers,
            n_batch=self.config.n_batch,
        )
        self._close_draft()
        self._drafter, self.info_draft = (
            ModelDrafter(runner, self.config.draft_p_min, self.config.draft_sampling),
            info,
        )
        self._controller = DraftLengthController(k_max, self.config.adaptive, draft_costs_time=True)
        # Draft and target timed back to back, so their ratio reflects one state of the machine.
        draft_costs = runner.time_batches([1], self._calibration_tokens(), repeats=6)
        target_costs = self.target.time_batches([1], self._calibration_tokens(), repeats=6)
        verify_costs = {**self._measure_verify_costs(), **target_costs}
        self._controller.calibrate(verify_costs, draft_costs.get(1))

    def _calibration_tokens(self) -> list[int]:
        return self.tokenize("The quick brown fox jumps over the lazy dog, and then it runs away.")

    def _measure_verify_costs(self) -> dict[int, float]:
        """The target's verify-batch costs, measured once per engine (about 0.5 s on a CPU).

        Knowing them up front lets the draft-length controller pick a good length from the
        first step, and skip a draft model that cannot pay on this machine before it costs
        anything. Later switches of the draft reuse them.
        """
        if self._verify_costs is None:
            self._verify_costs = self.target.time_batches([1, 2, 4, 8, 16], self._calibration_tokens())
        return self._verify_costs

    def _close_draft(self) -> None:
        if isinstance(self._drafter, ModelDrafter):
            self._drafter.runner.close()

    # -- text ---------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return self.target.tokenize(text, add_special)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    @property
    def has_chat_template(self) -> bool:
        return self.info_target.chat_template is not None

    def format_chat(self, messages: list[dict[str, str]]) -> str:
        """The conversation in the model's own chat template, ending where the reply starts."""
        if self._chat_formatter is None:
            template = self.info_target.chat_template
            if template is None:
                raise TandemError(f"{self.info_target.name} has no chat template; use it as a base model")
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            self._chat_formatter = Jinja2ChatFormatter(
                template,
                eos_token=_token_text(self.info_target, "tokenizer.ggml.eos_token_id"),
                bos_token=_token_text(self.info_target, "tokenizer.ggml.bos_token_id"),
            )
        prompt = self._chat_formatter(messages=messages).prompt
        # The template writes BOS itself; tokenize() adds BOS too: keep one.
        bos = _token_text(self.info_target, "tokenizer.ggml.bos_token_id")
        if bos and prompt.startswith(bos):
            prompt = prompt[len(bos) :]
        return prompt

    # -- generation ---------------------------------------------------------------------------

    @property
    def gpu_offload_supported(self) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_supports_gpu_offload())

    def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        cancel: threading.Event | None = None,
        speculate: bool | None = None,
    ) -> Iterator[Event]:
        """Stream a reply: TextPiece and Stats events, then one Finished.

        Raises PromptTooLongError (before the first event) when the prompt leaves no room.
        speculate=False forces plain decoding for this call; None uses the current draft.
        """
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        if not tokens:
            raise TandemError("the prompt is empty")
        if len(tokens) >= self.n_ctx:
            raise PromptTooLongError(len(tokens), self.n_ctx)
        decoder = SpeculativeDecoder(self.target, self._drafter, self._controller)
        return decoder.run(
            tokens,
            params or SamplingParams(),
            max_tokens,
            stop=stop,
            cancel=cancel,
            speculate=speculate is not False,
        )

    def reset_cache(self) -> None:
        """Forget every cached token and learned estimate (benchmarks start each run fresh)."""
        self.target.clear()
        if isinstance(self._drafter, ModelDrafter):
            self._drafter.runner.clear()
        elif isinstance(self._drafter, NgramDrafter):
            self._drafter = NgramDrafter()
        if self._controller is not None:
            self._controller = self._controller.fresh()

    def close(self) -> None:
        self._close_draft()
        self.target.close()


def _token_text(info: GGUFInfo, key: str) -> str:
    """The text of a special token named in the metadata (BOS, EOS), or ""."""
    i = info.metadata.get(key)
    return info.tokens[i] if isinstance(i, int) and 0 <= i < len(info.tokens) else ""

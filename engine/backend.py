"""One llama.cpp model and its context, driven through llama-cpp-python's low-level API.

`LlamaRunner.tokens` is always exactly what the KV cache holds (positions 0..n-1), so callers
reuse a cached prefix by comparing token lists and roll back by truncating. Only rows that
need logits ask for them: a prompt prefill asks for none.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.errors import DecodeError, ModelLoadError, OutOfMemoryError

_log_callback = None  # kept alive: llama.cpp holds a pointer to it
_log_lock = threading.Lock()  # two models may load at once (a draft model beside its target)


def _quiet_llama_logs() -> None:
    """Drop llama.cpp's log lines: the CLI's stderr carries Tandem's own messages only."""
    global _log_callback
    import llama_cpp

    with _log_lock:
        if _log_callback is None:
            as_callback: Any = llama_cpp.llama_log_callback  # a ctypes CFUNCTYPE, unannotated
            _log_callback = as_callback(lambda level, text, user_data: None)
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


# A prompt is read (a decode without logits) in chunks of at most this many parameter-rows of
# compute, so that its progress is reported, and a Stop seen, between chunks (engine.reading):
# 256 rows of a 270M model, ~0.5 s on two cores. Fixed per model, never timed: where a prompt's
# batches split changes its logits a little, and a seeded reply must not depend on how busy the
# machine was. Never under READ_CHUNK_MIN rows: 32-row chunks read 10-25% slower than 128-row ones
# (tools/lab/read_chunks.py), which read within 4% of 512-row ones.
READ_CHUNK_WORK = 7e10
READ_CHUNK_MIN = 128
READ_CHUNK_MAX = 256


def read_chunk_size(n_params: int, n_batch: int, is_offloaded: bool) -> int:
    """READ_CHUNK_WORK's worth of rows of this model on a CPU (a power of two, READ_CHUNK_MIN to
    READ_CHUNK_MAX); n_batch where a GPU or an RPC server does the work."""
    if is_offloaded:
        return n_batch
    rows = READ_CHUNK_MAX
    while rows > READ_CHUNK_MIN and rows * max(n_params, 1) > READ_CHUNK_WORK:
        rows //= 2
    return min(n_batch, rows)


class ContextFullError(Exception):
    """llama_decode found no KV slot: the context is full."""


class DecodeCancelled(Exception):
    """A long batch was stopped between two of its n_batch chunks (LlamaRunner.decode's `cancel`)."""


class LoadCancelled(Exception):
    """A model's load was stopped (LlamaRunner's `cancel`): nothing of it is left."""


class LlamaRunner:
    def __init__(
        self,
        path: str,
        n_ctx: int,
        n_threads: int,
        n_gpu_layers: int = 0,
        n_batch: int = 512,
        on_progress: Callable[[float], None] | None = None,
        rpc_servers: Sequence[str] = (),
        cancel: threading.Event | None = None,
        stays_here: bool = False,
    ) -> None:
        """rpc_servers: `HOST:PORT` of `ggml-rpc-server`s that take the n_gpu_layers offloaded
        (engine.rpc); stays_here: those go to this machine's GPUs only. cancel: once set, the load
        stops at llama.cpp's next progress report or before the context is made (LoadCancelled)."""
        import llama_cpp
        from llama_cpp._internals import LlamaContext, LlamaModel

        _quiet_llama_logs()
        self._llama = llama_cpp
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = n_gpu_layers
        from engine import rpc

        # Kept on self: llama.cpp reads the array while the model loads. None: its own choice.
        self._devices = rpc.device_list(rpc_servers, stays_here)
        # For the watchdog of a server gone silent (engine.rpc.Watchdog): when the llama call in
        # progress began (0.0: none) and the longest one so far. Loading counts as one call.
        self.call_started = time.perf_counter()
        self.slowest_call_s = 0.0
        self._watchdog = rpc.Watchdog(rpc_servers, self) if rpc_servers else None
        if self._devices is not None:
            model_params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if on_progress is not None or cancel is not None:

            def report(progress: float, user_data: ctypes.c_void_p) -> bool:
                if on_progress is not None:
                    on_progress(float(progress))
                return cancel is None or not cancel.is_set()  # False: llama.cpp stops loading

            # Kept on self: llama.cpp calls it while the model loads.
            self._progress_callback = llama_cpp.llama_progress_callback(report)
            model_params.progress_callback = self._progress_callback
        try:
            # verbose=True: the log goes nowhere already, and the wrapper's quiet mode redirects the
            # process's stdout and stderr, which two loads at once restore wrongly.
            self.model = LlamaModel(path_model=path, params=model_params, verbose=True)
        except ValueError as e:
            if cancel is not None and cancel.is_set():
                raise LoadCancelled(path) from e
            raise ModelLoadError(
                f"llama.cpp could not load {path}; the file may be damaged or need a newer llama.cpp"
            ) from e
        if cancel is not None and cancel.is_set():
            self.model.close()  # type: ignore[no-untyped-call]
            raise LoadCancelled(path)
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = n_ctx
        ctx_params.n_batch = n_batch
        ctx_params.n_ubatch = n_batch
        ctx_params.n_seq_max = 1
        ctx_params.n_threads = n_threads
        ctx_params.n_threads_batch = n_threads
        ctx_params.no_perf = True
        try:
            self.context = LlamaContext(model=self.model, params=ctx_params, verbose=False)
        except ValueError as e:
            raise OutOfMemoryError(
                f"not enough memory for a {n_ctx}-token context with {path}; lower the context size"
            ) from e
        self.ctx = self.context.ctx
        self.memory = self.context.memory
        self.vocab = self.model.vocab
        # llama.cpp may round the context up (to 256); the limit is what was asked for.
        self.n_ctx = min(n_ctx, llama_cpp.llama_n_ctx(self.ctx))
        self.n_batch = n_batch
        self.read_chunk = read_chunk_size(
            int(llama_cpp.llama_model_n_params(self.model.model)),
            n_batch,
            n_gpu_layers > 0 or bool(rpc_servers),
        )
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        # The batch's arrays as numpy views, filled in a few vectorised writes per decode (a Python
        # loop cost ~30 us for a 64-row verify). Every row is sequence 0's, set once.
        batch = self._batch
        self._batch_token = np.ctypeslib.as_array(batch.token, shape=(n_batch,))
        self._batch_pos = np.ctypeslib.as_array(batch.pos, shape=(n_batch,))
        self._batch_logits = np.ctypeslib.as_array(batch.logits, shape=(n_batch,))
        np.ctypeslib.as_array(batch.n_seq_id, shape=(n_batch,))[:] = 1
        for i in range(n_batch):
            batch.seq_id[i][0] = 0
        self.tokens: list[int] = []
        # Recurrent and hybrid models keep a state, not per-position entries: they cannot
        # drop the tail of a sequence, which rolling back a rejected draft needs.
        self.can_roll_back = not (
            llama_cpp.llama_model_is_recurrent(self.model.model)
            or llama_cpp.llama_model_is_hybrid(self.model.model)
        )
        self.llama_s = 0.0  # seconds spent inside llama_decode since construction
        # Set while a prompt's reading is shown (engine.reading): called after each chunk of a
        # decode without logits (read_chunk rows) with (tokens of it decoded, its tokens).
        self.on_read: Callable[[int, int], None] | None = None
        # llama.cpp grows its logits buffer to the most rows a decode has asked for (1 MB a row with
        # 262k tokens): such a decode costs more than the next of its size (docs/findings.md).
        self._most_outputs = 0
        self.outputs_grew = False  # the last decode was such a one
        # A numpy view of llama.cpp's logits buffer, kept while the buffer stays where it is.
        self._rows = np.empty((0, self.n_vocab), dtype=np.float32)
        self._rows_address: int | None = None
        self._eog_cache: dict[int, bool] = {}
        self._piece_cache: dict[int, bytes] = {}
        # One device per RPC server: asked a question after a prefill, to wait for the server.
        self._server_devices = rpc.first_devices(rpc_servers) if rpc_servers else []
        self._warm_up()
        if self._watchdog is not None:
            self._watchdog.arm()  # the model's connections exist now

    def _warm_up(self) -> None:
        """One throw-away decode, as llama.cpp's tools do: a context's first decode allocates its
        buffers, and the controller must not take that for the cost of a plain step."""
        bos = self._llama.llama_vocab_bos(self.vocab)
        self.decode([bos if bos >= 0 else 0], n_logits=1)
        self.clear()
        self.llama_s = 0.0

    # -- tokens -------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """parse_special: text like "<|im_end|>" becomes that control token (a template's own
        markers); off for what a person or a document wrote (engine.chat.tokenize_chat)."""
        return list(self.model.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special))

    def token_text(self, token: int) -> str:
        """A token's text as the model file stores it ("<bos>", "<|im_end|>"): what a chat template
        writes for it."""
        return bytes(self._llama.llama_vocab_get_text(self.vocab, token)).decode("utf-8", errors="replace")

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for (control tokens: none). Cached: the hot loop asks often."""
        cached = self._piece_cache.get(token)
        if cached is None:
            # The wrapper's LlamaModel.token_to_piece returns its whole 32-byte buffer; use the length.
            buf = ctypes.create_string_buffer(64)
            n = self._llama.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = self._llama.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            cached = self._piece_cache[token] = buf.raw[: max(n, 0)]
        return cached

    def is_eog(self, token: int) -> bool:
        cached = self._eog_cache.get(token)
        if cached is None:
            cached = self._eog_cache[token] = bool(self._llama.llama_vocab_is_eog(self.vocab, token))
        return cached

    # -- KV cache -----------------------------------------------------------------------------

    def truncate(self, n_keep: int) -> None:
        """Drop every cached position from n_keep on."""
        if n_keep >= len(self.tokens):
            return
        if not self._llama.llama_memory_seq_rm(self.memory, 0, n_keep, -1):
            # Recurrent/hybrid models cannot drop part of a sequence: start over.
            self._llama.llama_memory_clear(self.memory, True)
            del self.tokens[:]
            return
        del self.tokens[n_keep:]

    def outputs_reserved(self, n_rows: int) -> bool:
        """Has llama.cpp's logits buffer grown to n_rows (a decode asked for that many)?"""
        return self._most_outputs >= min(n_rows, self.n_batch)

    def reserve_outputs(self, n_rows: int) -> bool:
        """Grow llama.cpp's logits buffer to n_rows now, off a reply's path (idle time): a decode of
        n_rows logit rows after the cached text, rolled back, so no reply pays the growth (+30-45
        ms at 26-64 rows with 262k tokens). False where the context has no room (later)."""
        n_rows = min(n_rows, self.n_batch)
        if self.outputs_reserved(n_rows):
            return True
        n0 = len(self.tokens)
        if n0 + n_rows >= self.n_ctx or not self.can_roll_back:
            return False
        filler = self.tokens[-1] if self.tokens else max(self._llama.llama_vocab_bos(self.vocab), 0)
        try:
            self.decode([filler] * n_rows, n_logits=n_rows)
        finally:
            self.truncate(n0)
        return True

    def clear(self) -> None:
        self.call_started = time.perf_counter()  # clearing a server's KV buffer is a round trip
        self._llama.llama_memory_clear(self.memory, True)
        self.call_started = 0.0
        self.tokens.clear()

    def common_prefix(self, tokens: Sequence[int]) -> int:
        n = min(len(tokens), len(self.tokens))
        cached = self.tokens
        if cached[:n] == list(tokens[:n]):  # the usual case, compared at C speed (every step)
            return n
        i = 0
        while i < n and cached[i] == tokens[i]:
            i += 1
        return i

    # -- decoding -----------------------------------------------------------------------------

    def decode(
        self, tokens: Sequence[int], n_logits: int, cancel: Callable[[], bool] | None = None
    ) -> np.ndarray:
        """Append tokens to the cache; return logits of the last n_logits of them, (n, n_vocab): a
        view into llama.cpp's buffer, valid until the next decode. Batches are split in n_batch
        rows (a prompt's reading, without logits, in read_chunk rows); logits come from the final
        chunk only (n_logits <= n_batch). `cancel` is asked before each chunk after the first and,
        reading a prompt, by llama.cpp inside the chunk (its abort callback, milliseconds from a
        Stop): DecodeCancelled, the cache keeping the chunks decoded whole so far."""
        if not tokens:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        if len(self.tokens) + len(tokens) > self.n_ctx:
            raise ContextFullError
        start = 0
        out = None
        watch = None if n_logits else self.on_read
        step = self.read_chunk if not n_logits else self.n_batch
        # The abort callback is asked before each node of a graph (~4 us each through ctypes), so
        # it is set only while a prompt is read with a `cancel`: a verify batch pays nothing. Held
        # in this frame while llama.cpp holds a pointer to it.
        stop_inside = None
        if cancel is not None and not n_logits:
            stop_inside = self._llama.ggml_abort_callback(lambda data: cancel())
            self._llama.llama_set_abort_callback(self.ctx, stop_inside, None)
        try:
            while start < len(tokens):
                if start and cancel is not None and cancel():
                    raise DecodeCancelled
                chunk = tokens[start : start + step]
                is_last = start + len(chunk) == len(tokens)
                n_out = min(n_logits, len(chunk)) if is_last else 0
                out = self._decode_chunk(chunk, n_out)
                start += len(chunk)
                if watch is not None:
                    watch(start, len(tokens))
        finally:
            if stop_inside is not None:  # none (a NULL pointer)
                self._llama.llama_set_abort_callback(self.ctx, self._llama.ggml_abort_callback(), None)
        assert out is not None
        return out

    def _forget_aborted(self, n_keep: int) -> None:
        """After a chunk stopped midway, the cache holds what it held before it (llama.cpp removed
        the stopped ubatch's positions; removed again whatever the version). A recurrent or hybrid
        model's state may be half-written: it starts over."""
        if not self.can_roll_back or not self._llama.llama_memory_seq_rm(self.memory, 0, n_keep, -1):
            self.clear()
            return
        del self.tokens[n_keep:]

    def _decode_chunk(self, chunk: Sequence[int], n_logits: int) -> np.ndarray:
        batch = self._batch
        n = len(chunk)
        pos0 = len(self.tokens)
        first_logit = n - n_logits
        if n == 1:  # a drafted token, a plain step: plain item writes (the numpy calls cost ~15 us)
            batch.token[0] = chunk[0]
            batch.pos[0] = pos0
            batch.logits[0] = 1 if n_logits else 0
        else:
            self._batch_token[:n] = chunk
            self._batch_pos[:n] = np.arange(pos0, pos0 + n)
            self._batch_logits[:first_logit] = 0
            self._batch_logits[first_logit:n] = 1
        batch.n_tokens = n
        self.outputs_grew = n_logits > self._most_outputs
        self._most_outputs = max(self._most_outputs, n_logits)
        t0 = self.call_started = time.perf_counter()
        rc = self._llama.llama_decode(self.ctx, batch)
        if rc == 0 and n_logits:
            ptr = self._llama.llama_get_logits_ith(self.ctx, first_logit)  # waits for the result
        elif rc == 0:
            # A batch without outputs (a prefill) may still be computing on a GPU or RPC server:
            # wait, so its time is counted here and not in the next step's.
            self._llama.llama_synchronize(self.ctx)
            if self._server_devices:
                from engine import rpc

                rpc.wait_for(self._server_devices)
        self.call_started = 0.0
        dt = time.perf_counter() - t0
        self.llama_s += dt
        if dt > self.slowest_call_s:
            self.slowest_call_s = dt
        if rc == 1:
            raise ContextFullError
        if rc == 2:  # stopped by the abort callback (decode's `cancel`)
            self._forget_aborted(pos0)
            raise DecodeCancelled
        if rc != 0:
            raise DecodeError(f"llama.cpp failed to decode a batch (code {rc})")
        self.tokens.extend(chunk)
        if not n_logits:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        # Rows with logits are stored contiguously, in batch order (llama.h).
        address = ctypes.cast(ptr, ctypes.c_void_p).value
        if not address:
            raise DecodeError("llama.cpp returned no logits for a decoded batch")
        view = self._rows
        if address != self._rows_address or len(view) < n_logits:
            # A new view only where the buffer moved or grew (making one costs ~25 us).
            size = n_logits * self.n_vocab
            view = np.frombuffer((ctypes.c_float * size).from_address(address), dtype=np.float32)
            self._rows = view = view.reshape(n_logits, self.n_vocab)
            self._rows_address = address
        return view[:n_logits]

    def time_batches(
        self,
        sizes: Sequence[int],
        context_tokens: Sequence[int],
        repeats: int = 3,
        stop: Callable[[], bool] | None = None,
        read_rows: bool = False,
        on_timed: Callable[[int, float], None] | None = None,
    ) -> dict[int, float]:
        """Seconds for one decode of each batch size, every row with logits (a verify batch),
        after `context_tokens` appended to the cache (rolled back after). `stop` is asked before
        each decode (the sizes timed so far are returned). read_rows: each timing includes reading
        every row once, as a step reads a draft accepted whole. on_timed(n, seconds): progress."""
        n0 = len(self.tokens)
        room = self.n_ctx - n0 - len(context_tokens) - 1
        sizes = [n for n in sizes if n <= min(self.n_batch, room)]
        costs: dict[int, float] = {}
        if not sizes:
            return costs
        largest = max(sizes)
        filler = list(context_tokens) * (1 + largest // max(len(context_tokens), 1))
        try:
            self.decode(context_tokens, n_logits=0)
            n1 = len(self.tokens)
            self.decode(filler[:1], n_logits=1)  # warm-up: first decodes allocate buffers
            self.truncate(n1)
            # Largest first: only its first timing includes the logits buffer's growth. The rest
            # in the order given: a size given again (Measure's plain step after each size, on a
            # machine whose speed swings) is timed again, and its fastest kept.
            for n in sorted(sizes, key=lambda n: n != largest):
                best = float("inf")
                for _ in range(repeats):  # the fastest: a busy machine only ever slows one down
                    if stop is not None and stop():
                        return costs
                    t0 = time.perf_counter()
                    rows = self.decode(filler[:n], n_logits=n)
                    if read_rows:
                        rows.max(axis=1)
                    best = min(best, time.perf_counter() - t0)
                    self.truncate(n1)
                costs[n] = min(best, costs.get(n, best))
                if on_timed is not None:
                    on_timed(n, best)
        finally:
            self.truncate(n0)
        return costs

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.stop()
        if self._batch is not None:
            self._llama.llama_batch_free(self._batch)
            self._batch = None
        self._rows, self._rows_address = self._rows[:0].copy(), None  # no view of freed memory
        self.context.close()  # type: ignore[no-untyped-call]  # llama_cpp's close() is unannotated
        self.model.close()  # type: ignore[no-untyped-call]

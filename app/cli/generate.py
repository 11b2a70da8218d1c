"""`tandem generate`: one prompt through the engine, the text to stdout and the numbers to stderr
(or one JSON object with --json); with --remote, through an OpenAI-compatible server.
`--attach FILE` (repeatable) puts documents before the prompt (app/library/documents.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from app.cli.options import UserError, engine_config, read_prompt, validate_engine_args
from engine.config import SamplingParams

if TYPE_CHECKING:
    from app.document import Document
    from engine.session import Engine


def check_documents_fit(engine: Engine, documents: list[Document], n_reply: int) -> list[int]:
    """Each document's tokens (as the model reads it: under its name, fenced). A document larger
    than the whole context is refused by name, with the context it needs."""
    from app.library.documents import (
        DocumentError,
        DocumentProblem,
        context_remedy,
        document_block,
        model_fit,
    )

    counts = []
    for document in documents:
        n_tokens = len(engine.tokenize(document_block(document), add_special=False))
        counts.append(n_tokens)
        if n_tokens >= engine.n_ctx:
            raise DocumentError(
                DocumentProblem.TOO_MANY_TOKENS,
                document.name,
                f"it is {n_tokens:,} tokens, more than the whole context ({engine.n_ctx:,}): "
                + context_remedy(model_fit(engine.info_target, engine.n_ctx, n_tokens, n_reply)),
            )
    return counts


def cmd_generate(args: argparse.Namespace) -> int:
    from engine.chat import ChatPrompt, document_token_spans, generate_reply, tokenize_chat
    from engine.events import Event, Finished, TextPiece
    from engine.reading import watch_reading
    from engine.session import Engine

    if args.temperature < 0:
        raise UserError(f"--temperature must be 0 or more (got {args.temperature})")
    if not 0.0 < args.top_p <= 1.0:
        raise UserError(f"--top-p must be in (0, 1] (got {args.top_p})")
    if args.remote:
        from app.cli.remote import cmd_generate_remote

        return cmd_generate_remote(args)
    if not args.model:
        raise UserError("the following arguments are required: --model (or --remote URL)")
    validate_engine_args(args)
    if not 0.0 <= args.min_p <= 1.0:
        raise UserError(f"--min-p must be in [0, 1] (got {args.min_p})")
    prompt = read_prompt(args)
    from app.library.documents import read_document

    # Read before the model loads: a file that cannot be attached ends the command at once.
    documents = [read_document(path) for path in args.attach]
    params = SamplingParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
    )
    t_load = time.perf_counter()
    # (A reply too short to repay a draft model does not load it beside the target.)
    engine = Engine(engine_config(args), first_reply_tokens=args.max_tokens)
    load_s = time.perf_counter() - t_load
    document_tokens: list[int] = []
    try:
        if documents:
            from app.library.documents import with_documents

            document_tokens = check_documents_fit(engine, documents, args.max_tokens)
            prompt = with_documents(prompt, documents)
        if args.chat:
            # The model's chat template, or for a base model the window's transcript, whose reply
            # ends at the next speaker line; what the user and the documents wrote is tokenized as
            # text (engine.chat.tokenize_chat).
            prompt, chat_tokens = tokenize_chat(
                engine, [{"role": "user", "content": prompt}], args.system or ""
            )
            tokens = tuple(chat_tokens)
        else:
            tokens = tuple(engine.tokenize(prompt))
        spans: tuple[tuple[int, int], ...] = ()
        if documents:
            from app.library.documents import check_fits

            check_fits(engine.info_target, engine.n_ctx, len(tokens), args.max_tokens)
            spans = document_token_spans(engine, prompt, [d.text for d in documents])
        events: Iterator[Event]
        if args.chat:
            chat = ChatPrompt(prompt, tokens, 0, spans)
            events = generate_reply(engine, chat, params, max_tokens=args.max_tokens, stop=args.stop)
        else:
            events = engine.generate(
                list(tokens), params, max_tokens=args.max_tokens, stop=args.stop, document_spans=spans
            )
        # The reply's time to first token and what it read new (Stats' first_token_s, reread),
        # as the window's and the server's replies carry them.
        events = watch_reading(engine.target, list(tokens), events)
        finished: Finished | None = None
        drafted: list[list[object]] = []  # [start, end, source] of the text drafted
        n_chars = 0
        for event in events:
            if isinstance(event, TextPiece):
                if event.is_draft and event.text:
                    drafted.append([n_chars, n_chars + len(event.text), str(event.source)])
                n_chars += len(event.text)
                if not args.json:
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
            elif isinstance(event, Finished):
                finished = event
        assert finished is not None
        s = finished.stats
        if args.json:
            result = {
                "text": finished.text,
                "token_ids": list(finished.token_ids),
                **s.as_dict(),
                "load_s": round(load_s, 4),
                "stop_reason": finished.stop_reason,
                "model": engine.info_target.name,
                "draft": engine.info_draft.name if engine.info_draft else None,
                "documents": [
                    {"name": d.name, "kind": str(d.kind), "n_bytes": d.n_bytes, "n_tokens": n}
                    for d, n in zip(documents, document_tokens)
                ],
                "drafted": drafted,
            }
            print(json.dumps(result, ensure_ascii=False))
        else:
            sys.stdout.write("\n")
            print(
                f"[{s.speculation}] {s.n_generated} tokens, {s.decode_tokens_per_s:.1f} tok/s decode, "
                f"{s.prefill_tokens_per_s:.1f} tok/s prefill ({s.n_prompt_tokens} prompt tokens), "
                f"drafted {s.n_drafted}, accepted {s.n_accepted} ({s.acceptance_rate:.0%})"
                + (f", {s.n_accepted_text} of them from the text" if s.n_accepted_text else "")
                + (f", {s.n_accepted_document} from the documents" if s.n_accepted_document else "")
                + f", stop: {finished.stop_reason}",
                file=sys.stderr,
            )
    finally:
        engine.close()
    return 0

"""Does a verify batch compute the rows plain decoding computes? Answers why greedy text with
speculation may differ from plain decoding on a quantized target, and whether re-deciding a
near-tie row with a one-row decode brings plain's token back (issue 35: it does not).

    python -m tools.lab.batch_invariance shapes PROMPT_NAME [--tokens 96] [--sizes 1,2,4,8,16,64]
    python -m tools.lab.batch_invariance ties PROMPT_NAME [--tokens 256] [--chunk 32]

Both decode plain's greedy reply one row at a time first (the reference), with the default model.
`shapes`: the same tokens decoded again in chunks of each size; per size, how far its rows lie
from the first size's (max |logit difference| per row) and how many are bit-identical. `ties`:
the reply decoded again in chunks (a speculative run's history); for every position whose plain
top-2 margin is under 1.5 logits, that pair's margin in the batch row and in a one-row decode of
the same position after the batched history, and whether either flips the choice.

--no-repack (llama_model_params.use_extra_bufts = false) and --flash-attn N (flash_attn_type)
change the settings. With both, GGML_CPU_TILED_MM_FORCE=1 in the environment, and a libggml-cpu
built with -DGGML_LLAMAFILE=OFF (LLAMA_CPP_LIB_PATH pointing at a copy of llama_cpp/lib holding
it), every size computes bit-identical rows (docs/findings.md, "Verifying drafts").
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np


def _runner(args: argparse.Namespace) -> Any:
    import llama_cpp

    model_defaults, context_defaults = (
        llama_cpp.llama_model_default_params,
        llama_cpp.llama_context_default_params,
    )

    def model_params() -> Any:
        p = model_defaults()
        p.use_extra_bufts = not args.no_repack
        return p

    def context_params() -> Any:
        p = context_defaults()
        if args.flash_attn is not None:
            p.flash_attn_type = args.flash_attn
        return p

    llama_cpp.llama_model_default_params = model_params
    llama_cpp.llama_context_default_params = context_params
    from app.library.model_spec import parse_model
    from engine.backend import LlamaRunner

    return LlamaRunner(parse_model(args.model).resolve(), n_ctx=4096, n_threads=2)


def _plain(runner: Any, prompt_name: str, n: int) -> tuple[int, list[int], list[np.ndarray]]:
    """The prompt read, then n tokens decoded one row at a time: (cache length before the reply,
    the reply's inputs (the prompt's last token, then the reply), each position's row)."""
    from app.cli.bench import load_prompts

    prompt = runner.tokenize(next(p.prompt for p in load_prompts(None, None) if p.name == prompt_name))
    runner.decode(prompt[:-1], n_logits=0)
    inputs, rows = [prompt[-1]], []
    for _ in range(n):
        row = runner.decode([inputs[-1]], n_logits=1)[0].copy()
        rows.append(row)
        inputs.append(int(row.argmax()))
    return len(prompt) - 1, inputs[:n], rows


def _decode_in_chunks(
    runner: Any, start: int, inputs: list[int], chunk: int, n_logits: bool
) -> list[np.ndarray]:
    runner.truncate(start)
    rows: list[np.ndarray] = []
    for i in range(0, len(inputs), chunk):
        part = inputs[i : i + chunk]
        out = runner.decode(part, n_logits=len(part) if n_logits else 0)
        rows.extend(r.copy() for r in out)
    return rows


def shapes(args: argparse.Namespace) -> None:
    runner = _runner(args)
    start, inputs, _ = _plain(runner, args.prompt, args.tokens)
    sizes = [int(s) for s in args.sizes.split(",")]
    reference = np.stack(_decode_in_chunks(runner, start, inputs, sizes[0], True))
    for size in sizes[1:]:
        rows = np.stack(_decode_in_chunks(runner, start, inputs, size, True))
        diff = np.abs(rows - reference).max(axis=1)
        print(
            f"chunks of {sizes[0]} vs {size}: max |logit difference| per row median {np.median(diff):.4f}, "
            f"max {diff.max():.4f}; bit-identical rows {int((diff == 0).sum())}/{len(diff)}"
        )


def ties(args: argparse.Namespace) -> None:
    runner = _runner(args)
    start, inputs, plain = _plain(runner, args.prompt, args.tokens)
    runner.truncate(start)
    n_close = n_batch_flips = n_alone_flips = 0
    print("position  plain margin  batch row  one-row after the batch")
    for chunk_start in range(0, len(inputs), args.chunk):
        part = inputs[chunk_start : chunk_start + args.chunk]
        batch = runner.decode(part, n_logits=len(part)).copy()  # a verify batch, history and all
        for j in range(len(part)):
            row, i = plain[chunk_start + j], chunk_start + j
            second, first = (int(t) for t in np.argsort(row)[-2:])
            margin = float(row[first] - row[second])
            if margin >= 1.5:
                continue
            runner.truncate(start + i)  # the batched history before position i, then i alone
            alone = runner.decode([inputs[i]], n_logits=1)[0].copy()
            runner.truncate(start + chunk_start)
            runner.decode(part, n_logits=0)
            n_close += 1
            n_batch_flips += int(batch[j].argmax()) != first
            n_alone_flips += int(alone.argmax()) != first
            print(
                f"{i:8d}  {margin:12.3f}  {batch[j][first] - batch[j][second]:9.3f}  {alone[first] - alone[second]:9.3f}"
            )
    print(
        f"{n_close} positions under 1.5; flips against plain: batch rows {n_batch_flips}, one-row {n_alone_flips}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, tokens in (("shapes", 96), ("ties", 256)):
        p = sub.add_parser(name)
        p.add_argument("prompt", help="a bench prompt's name (resources/bench_prompts.jsonl)")
        p.add_argument("--tokens", type=int, default=tokens)
        p.add_argument("--model", default="default")
        p.add_argument("--no-repack", action="store_true")
        p.add_argument("--flash-attn", type=int, default=None, help="-1 auto, 0 off, 1 on")
    sub.choices["shapes"].add_argument("--sizes", default="1,2,4,8,16,64")
    sub.choices["ties"].add_argument("--chunk", type=int, default=32)
    args = parser.parse_args()
    shapes(args) if args.command == "shapes" else ties(args)


if __name__ == "__main__":
    main()

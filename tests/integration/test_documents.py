"""Attached documents: the reader (app/library/documents.py) on real files, and
`tandem generate --chat --attach FILE`, whose every bad input ends with exit code 2 and one sentence."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest
from documents_files import write_docx, write_pdf

from app.document import DocumentKind
from app.library.documents import (
    MAX_TEXT_BYTES,
    DocumentError,
    DocumentProblem,
    document_from_text,
    fit_context,
    kv_bytes_per_token,
    read_document,
    with_documents,
)
from tests.cli_process import tandem

ROOT = Path(__file__).resolve().parents[2]

LICENCE = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy\n"
    'of this software and associated documentation files (the "Software"), to deal\n'
    "in the Software without restriction, including without limitation the rights\n"
)


def problem(path: Path) -> DocumentProblem:
    with pytest.raises(DocumentError) as e:
        read_document(path)
    return e.value.problem


# -- text and its encodings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "bom", "expected"),
    [
        ("utf-8", b"", "utf-8"),
        ("utf-8", b"\xef\xbb\xbf", "utf-8"),
        ("utf-16-le", b"\xff\xfe", "utf-16"),
        ("utf-16-be", b"\xfe\xff", "utf-16"),
        ("cp1252", b"", "cp1252"),
    ],
)
def test_text_in_each_encoding_reads_the_same(
    tmp_path: Path, encoding: str, bom: bytes, expected: str
) -> None:
    text = "Café “déjà vu” — naïve résumé\r\nsecond line\n"
    path = tmp_path / "notes.md"
    path.write_bytes(bom + text.encode(encoding))
    document = read_document(path)
    assert document.text == "Café “déjà vu” — naïve résumé\nsecond line\n"
    assert document.encoding == expected and document.kind is DocumentKind.TEXT


def test_latin1_bytes_cp1252_leaves_undefined_read_as_latin1(tmp_path: Path) -> None:
    path = tmp_path / "old.txt"
    path.write_bytes("caf\xe9 \x81 ok".encode("latin-1"))  # 0x81 is undefined in Windows-1252
    document = read_document(path)
    assert document.encoding == "latin-1" and document.text.startswith("café")


def test_source_code_keeps_its_language(tmp_path: Path) -> None:
    path = tmp_path / "fib.py"
    path.write_text("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n")
    document = read_document(path)
    assert document.kind is DocumentKind.CODE and document.language == "python"
    message = with_documents("Add type hints.", [document])
    assert message == f"fib.py:\n```python\n{document.text}\n```\n\nAdd type hints."


def test_a_fence_is_longer_than_any_in_the_document() -> None:
    document = document_from_text("Use ```python blocks``` and ````four````.", "pasted text")
    assert with_documents("", [document]).splitlines()[1] == "`````"


# -- PDF and .docx --------------------------------------------------------------------------------


def test_a_pdf_gives_its_text_page_by_page(tmp_path: Path) -> None:
    path = write_pdf(tmp_path / "report.pdf", [["Quarterly report (draft)", "Sales rose 4%."], ["Page two."]])
    document = read_document(path)
    assert document.kind is DocumentKind.PDF
    assert document.text.split() == ["Quarterly", "report", "(draft)", "Sales", "rose", "4%.", "Page", "two."]


def test_a_pdf_with_an_empty_user_password_opens(tmp_path: Path) -> None:
    path = write_pdf(tmp_path / "locked-editing.pdf", [["Only editing is locked."]], password="")
    assert "editing is locked" in read_document(path).text


def test_a_docx_gives_its_paragraphs_and_tables(tmp_path: Path) -> None:
    path = write_docx(tmp_path / "letter.docx", ["Dear Sam,", "Thanks for the draft."], [["a", "b"]])
    document = read_document(path)
    assert document.kind is DocumentKind.DOCX
    assert document.text == "Dear Sam,\nThanks for the draft.\na | b"


# -- bad input: one sentence each ------------------------------------------------------------------


@pytest.fixture
def bad_files(tmp_path: Path) -> dict[str, tuple[Path, DocumentProblem, str]]:
    """Every bad input the issue names, as real files: (path, problem, the CLI's sentence)."""
    unreadable = tmp_path / "secret.txt"
    unreadable.write_text("no")
    unreadable.chmod(0)
    binary = tmp_path / "photo.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    huge = tmp_path / "huge.log"
    with open(huge, "wb") as f:
        f.truncate(1 << 30)  # 1 GB, sparse: no disk, no time
    damaged = tmp_path / "cut.pdf"
    damaged.write_bytes(write_pdf(tmp_path / "whole.pdf", [["text"]]).read_bytes()[:200])
    return {
        "missing": (
            tmp_path / "nothing.txt",
            DocumentProblem.MISSING,
            f"error: cannot attach {tmp_path / 'nothing.txt'}: there is no such file",
        ),
        "folder": (
            tmp_path,
            DocumentProblem.NOT_A_FILE,
            f"error: cannot attach {tmp_path.name}: it is a folder, not a file",
        ),
        "unreadable": (
            unreadable,
            DocumentProblem.UNREADABLE,
            "error: cannot attach secret.txt: permission denied",
        ),
        "binary": (
            binary,
            DocumentProblem.BINARY,
            "error: cannot attach photo.txt: it is a binary file, not text "
            "(Tandem reads text, Markdown, source code, PDF and .docx)",
        ),
        "scanned": (
            write_pdf(tmp_path / "scan.pdf", [[]], image_only=True),
            DocumentProblem.SCANNED_PDF,
            "error: cannot attach scan.pdf: the PDF has no text layer (a scan or pictures only); "
            "run it through text recognition (OCR) first",
        ),
        "encrypted": (
            write_pdf(tmp_path / "locked.pdf", [["secret plans"]], password="hunter2"),
            DocumentProblem.ENCRYPTED_PDF,
            "error: cannot attach locked.pdf: the PDF is encrypted with a password; save an unlocked copy first",
        ),
        "damaged": (
            damaged,
            DocumentProblem.DAMAGED,
            "error: cannot attach cut.pdf: it is not a PDF that can be read (damaged or cut short)",
        ),
        "huge": (
            huge,
            DocumentProblem.TOO_LARGE,
            "error: cannot attach huge.log: it is 1.0 GB and Tandem reads documents up to 4.0 MB "
            "(about a million tokens, more than any context)",
        ),
    }


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_as_a_user(bad_files) -> None:  # type: ignore[no-untyped-def]
    path, expected, _ = bad_files["unreadable"]
    assert problem(path) is expected


def test_a_file_whose_read_fails_is_unreadable(tiny_target: Path) -> None:
    # A regular file whose read fails with an I/O error, even for root: /proc/self/mem at offset 0.
    assert problem(Path("/proc/self/mem")) is DocumentProblem.UNREADABLE
    r = tandem(
        "generate", "--model", str(tiny_target), "--chat", "--prompt", "Hi", "--attach", "/proc/self/mem"
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: cannot attach mem: it cannot be read (Input/output error)"
    ]


@pytest.mark.parametrize("case", ["missing", "folder", "binary", "scanned", "encrypted", "damaged", "huge"])
def test_each_bad_file_has_its_problem(bad_files, case: str) -> None:  # type: ignore[no-untyped-def]
    path, expected, _ = bad_files[case]
    assert problem(path) is expected


def test_a_1_gb_file_is_refused_at_once_without_reading_it(bad_files) -> None:  # type: ignore[no-untyped-def]
    path, _, _ = bad_files["huge"]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.process_time()
    assert problem(path) is DocumentProblem.TOO_LARGE
    assert time.process_time() - t0 < 1.0  # (not a timing claim: reading 1 GB takes many seconds)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 50_000  # KB: no 1 GB buffer


def test_a_device_is_not_read(tmp_path: Path) -> None:
    assert problem(Path("/dev/zero")) is DocumentProblem.NOT_A_FILE


def test_a_text_file_just_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"a" * (MAX_TEXT_BYTES + 1))
    assert problem(path) is DocumentProblem.TOO_LARGE


# -- the context ----------------------------------------------------------------------------------


def test_a_larger_context_is_offered_within_the_model_and_memory() -> None:
    fit = fit_context(5000, 256, 4096, n_ctx_train=32768, kv_per_token=18432, free_bytes=8 << 30)
    assert not fit.fits and fit.n_needed == 5256
    assert fit.n_ctx_offer == 6144 and fit.offer_bytes == 6144 * 18432
    # Not within what the model was trained for: no offer, and the limit said.
    fit = fit_context(40000, 256, 4096, n_ctx_train=32768, kv_per_token=18432, free_bytes=8 << 30)
    assert fit.n_ctx_offer == 0 and fit.n_ctx_limit == 32768
    # Not within half the free memory.
    fit = fit_context(5000, 256, 4096, n_ctx_train=32768, kv_per_token=1 << 20, free_bytes=8 << 30)
    assert fit.n_ctx_offer == 0 and fit.n_ctx_limit == 4096
    assert fit_context(100, 256, 4096, 32768, 18432, 8 << 30).fits


def test_kv_cache_size_per_token_from_a_header() -> None:
    gemma = {
        "gemma3.block_count": 18,
        "gemma3.attention.head_count": 4,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.embedding_length": 640,
        "gemma3.attention.key_length": 256,
        "gemma3.attention.value_length": 256,
    }
    assert kv_bytes_per_token(gemma, "gemma3") == 2 * 18 * 1 * 512
    assert kv_bytes_per_token({}, "llama") == 0


# -- the command line -----------------------------------------------------------------------------


def test_each_bad_file_ends_the_command_with_one_sentence(bad_files, tiny_target: Path) -> None:  # type: ignore[no-untyped-def]
    cases = [c for c in bad_files if c != "unreadable" or os.geteuid() != 0]
    for case in cases:
        path, _, sentence = bad_files[case]
        r = tandem(
            "generate",
            "--model",
            str(tiny_target),
            "--chat",
            "--prompt",
            "Summarise it.",
            "--attach",
            str(path),
        )
        assert r.returncode == 2, (case, r.stderr)
        assert "Traceback" not in r.stderr
        assert r.stderr.strip().splitlines() == [sentence], case


def test_a_document_larger_than_the_context_says_its_size_and_the_context(
    tmp_path: Path, tiny_target: Path
) -> None:
    path = tmp_path / "long.txt"
    path.write_text(LICENCE * 40)
    r = tandem(
        "generate",
        "--model",
        str(tiny_target),
        "--ctx",
        "256",
        "--chat",
        "--prompt",
        "Copy it.",
        "--attach",
        str(path),
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: cannot attach long.txt: it is ")
    assert "tokens, more than the whole context (256): " in line
    assert "run again with --ctx " in line or "at most" in line


def test_a_message_and_documents_that_do_not_fit_are_not_sent(tmp_path: Path, tiny_target: Path) -> None:
    path = tmp_path / "licence.txt"
    path.write_text("The harbour committee met on Tuesday.")  # fits alone; with a 200-token reply, not
    r = tandem(
        "generate", "--model", str(tiny_target), "--ctx", "256", "--max-tokens", "200",
        "--chat", "--prompt", "Copy it.", "--attach", str(path),
    )  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: the message and its documents need ")
    assert "200 for the reply) and the context holds 256: " in line
    assert r.stdout == ""  # nothing generated


def test_attached_documents_reach_the_model(tmp_path: Path, tiny_target: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\nThe harbour committee met on Tuesday.\n")
    pdf = write_pdf(tmp_path / "report.pdf", [["Sales rose four percent."]])
    r = tandem(
        "generate", "--model", str(tiny_target), "--chat", "--prompt", "Summarise both.",
        "--attach", str(notes), "--attach", str(pdf), "--max-tokens", "4", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    import json

    result = json.loads(r.stdout)
    assert [d["name"] for d in result["documents"]] == ["notes.md", "report.pdf"]
    assert all(d["n_tokens"] > 5 for d in result["documents"])
    assert result["n_prompt_tokens"] > sum(d["n_tokens"] for d in result["documents"])


# -- the bench's documents set --------------------------------------------------------------------


def test_the_documents_set_is_real_files_made_into_chat_prompts(tiny_target: Path) -> None:
    from app.cli.bench import load_prompts, render_prompt
    from engine.config import EngineConfig
    from engine.session import Engine

    prompts = load_prompts(None, "documents")
    names = {p.name for p in prompts}
    assert {"doc-copy-permission", "doc-edit-port", "doc-question-port", "doc-summary"} <= names
    engine = Engine(EngineConfig(str(tiny_target), n_ctx=4096, n_threads=1))
    try:
        for p in prompts:
            text = render_prompt(engine, p).prompt
            assert p.request in text and any(
                s in text
                for s in ("Permission is hereby granted", "class ReplyMemory", '"port": 8080', "<title>")
            )
    finally:
        engine.close()
    # Whether a reply copied, looped or neither: the lab bench's (tests/integration/test_lab_bench.py).


def test_the_chat_penalty_spares_the_documents_tokens(tiny_target: Path) -> None:
    from engine.chat import build_chat_prompt
    from engine.config import EngineConfig
    from engine.session import Engine
    from tools.lab.documents_sampling import document_penalty_exempt

    engine = Engine(EngineConfig(str(tiny_target), n_ctx=1024, n_threads=1))
    try:
        document = "zebra quagga okapi"
        message = with_documents("Copy it.", [document_from_text(document, "animals.txt")])
        prompt = build_chat_prompt(engine, [{"role": "user", "content": message}], documents=[document])
        exempt = document_penalty_exempt(engine, prompt)
        assert set(engine.tokenize(document, add_special=False)) <= exempt
        assert engine.penalty_exempt_tokens <= exempt
        assert not set(engine.tokenize("Copy it.", add_special=False)) <= exempt
    finally:
        engine.close()


def test_a_model_whose_layers_differ_is_priced_by_its_largest_layer(tmp_path: Path) -> None:
    """OpenELM writes its head counts one a layer (arrays): read from the real header, the KV
    cache is priced by the largest layer's heads, not 0 (arrays were skipped: a context that
    does not fit looked free)."""
    import gguf
    import numpy as np

    from engine.gguf_info import read_gguf_info

    path = tmp_path / "openelm.gguf"
    w = gguf.GGUFWriter(str(path), "openelm")
    w.add_block_count(3)
    w.add_embedding_length(256)
    w.add_array("openelm.attention.head_count", [4, 6, 8])
    w.add_array("openelm.attention.head_count_kv", [1, 2, 2])
    w.add_key_length(64)
    w.add_value_length(64)
    w.add_tensor("token_embd.weight", np.zeros((4, 256), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    info = read_gguf_info(path, with_tokens=False)
    assert info.metadata["openelm.attention.head_count_kv"] == [1, 2, 2]
    assert kv_bytes_per_token(info.metadata, "openelm") == 2 * 3 * 2 * (64 + 64)

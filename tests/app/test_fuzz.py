"""Fuzzing the parsers of what Tandem reads from outside (issue 38): conversation files, attached
documents, tandem:// links and model references, searches, GGUF headers. Whatever the input, each
gives its value or its own error with a sentence: never another exception. Hypothesis, about a
hundred and fifty cases each (no deadline: the machine is shared)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from app.library.documents import DocumentError, read_document
from app.library.pair_doctor import parse_model_ref, parse_open_url
from app.store import ConversationFileError, Store, read_conversation_file
from engine.errors import ModelFileError, TandemError
from engine.events import StatsRecord
from engine.gguf_info import read_gguf_header

# Hypothesis keeps caches (its constants, Unicode tables) in ./.hypothesis even without a database:
# in a temporary folder instead, so a run leaves nothing in the checkout.
set_hypothesis_home_dir(tempfile.mkdtemp(prefix="tandem-hypothesis-"))

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,  # no .hypothesis/ folder in the checkout (a failure prints its example to rerun)
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Text with lone surrogates (Hypothesis leaves category Cs out unless asked), and very long text.
any_text = st.text(st.characters(exclude_categories=()), max_size=20)
long_text = st.integers(min_value=0, max_value=120_000).map(lambda n: "x" * n)
odd_numbers = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1.0, 2**63])
# Any JSON value, NaN and Infinity and lone surrogates included (json.dumps writes them).
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | odd_numbers
    | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
stats_keys = st.sampled_from(["n_generated", "decode_s", "speculation", "note", "speed_points", "x"])
stats = st.dictionaries(stats_keys, odd_numbers | json_values, max_size=5)
stretch = st.fixed_dictionaries(
    {"text": any_text, "from": st.sampled_from(["model", "draft", "draft", "other"])},
    optional={"source": st.sampled_from(["document", "text", "telepathy"]) | json_values},
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "assistant", "tool"]),
        "stretches": st.lists(stretch, max_size=4),
    },
    optional={"status": json_values, "stats": stats | stats | json_values},
)
conversation = st.fixed_dictionaries(
    {
        "format": st.just("tandem-conversation"),
        "version": st.sampled_from([1, 1, 1, 0, 2, "1", None]),
        "title": any_text | any_text | json_values,
        "messages": st.lists(message, max_size=4) | json_values,
    },
    optional={"system_prompt": any_text | json_values},
)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(data=conversation | json_values)
def test_conversation_files_import_or_are_refused(fuzz_dir: Path, data: Any) -> None:
    path = fuzz_dir / "c.json"
    # A lone surrogate is written as JSON's escape ("\\ud800"), as a file from elsewhere holds it.
    path.write_text(json.dumps(data), encoding="utf-8")
    try:
        checked = read_conversation_file(path)
    except ConversationFileError as e:
        assert "\n" not in str(e)
        return
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "t.db")
        imported = store.import_conversation(checked)
        for m in store.messages(imported.id):
            assert all(0 <= s.start < s.end <= len(m.content) for s in m.spans)
            if m.stats is not None:
                record = StatsRecord.from_dict(m.stats)
                assert all(math.isfinite(v) for v in vars(record).values() if isinstance(v, float))
        store.close()


@FUZZ
@given(
    record=st.dictionaries(
        st.sampled_from(["n_generated", "n_drafted", "decode_s", "acceptance_rate", "speed_points", "note"]),
        odd_numbers | json_values,
        max_size=6,
    ),
    spans=st.lists(st.lists(json_values | st.integers(-5, 50), max_size=3), max_size=4),
    sources=json_values,
)
def test_stored_replies_read_back_showable(fuzz_dir: Path, record: Any, spans: Any, sources: Any) -> None:
    """A reply's stats, ranges and sources as a file or another program may have left them."""
    data = {
        "format": "tandem-conversation",
        "version": 1,
        "title": "t",
        "messages": [
            {"role": "assistant", "stretches": [{"text": "a reply", "from": "model"}], "stats": record}
        ],
    }
    path = fuzz_dir / "s.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "t.db")
        conversation = store.import_conversation(read_conversation_file(path))
        store._db.execute(
            "UPDATE messages SET draft_spans_json = ?, draft_sources_json = ?, stats_json = ?",
            (json.dumps(spans), json.dumps(sources), json.dumps(record)),
        )
        for m in store.messages(conversation.id):
            assert all(0 <= s.start < s.end <= len(m.content) for s in m.spans)
            assert m.stats is None or StatsRecord.from_dict(m.stats) is not None
        store.close()


@FUZZ
@given(raw=st.binary(max_size=2000))
def test_conversation_files_of_any_bytes(fuzz_dir: Path, raw: bytes) -> None:
    path = fuzz_dir / "raw.json"
    path.write_bytes(raw)
    with contextlib.suppress(ConversationFileError):
        read_conversation_file(path)


@FUZZ
@given(raw=st.binary(max_size=4000), suffix=st.sampled_from([".txt", ".pdf", ".docx", ".md", ".py", ""]))
def test_attachments_of_any_bytes(fuzz_dir: Path, raw: bytes, suffix: str) -> None:
    if suffix == ".pdf":
        raw = b"%PDF-1.4\n" + raw
    elif suffix == ".docx":
        raw = b"PK\x03\x04" + raw
    path = fuzz_dir / f"doc{suffix}"
    path.write_bytes(raw)
    try:
        document = read_document(path)
    except DocumentError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(document.text, str)


@FUZZ
@given(
    text=any_text
    | long_text
    | st.builds(lambda q: "tandem://open_from_hf?model=a/b&file=" + q, any_text | long_text)
    | st.builds(lambda q: "tandem://open_from_hf?" + q, st.text(max_size=200))
    | st.builds(
        lambda a, b: f"https://huggingface.co/{a}/blob/main/{b}", st.text(max_size=40), st.text(max_size=40)
    )
)
def test_links_and_model_references(text: str) -> None:
    for parse in (parse_model_ref, parse_open_url):
        try:
            ref = parse(text)
        except TandemError:
            continue
        if parse is parse_open_url:
            assert not ref.is_local and ".." not in ref.filename.split("/")


@pytest.fixture(scope="module")
def search_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = Store(tmp_path_factory.mktemp("search") / "t.db")
    c = store.create_conversation("glass recycling")
    store.add_message(c.id, "user", "the harbour committee met on tuesday")
    return store


@FUZZ
@given(search=any_text | long_text | st.text(alphabet='"*^(){}:-+ ANDORNEAR%_\\', max_size=60))
def test_searches_never_raise(search_store: Store, search: str) -> None:
    search_store.conversations(search)


def _gguf_prefix() -> bytes:
    import gguf

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "h.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_name("fuzz")
        w.add_context_length(128)
        w.add_token_list(["a", "b", "c"])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.close()
        return path.read_bytes()


GGUF = _gguf_prefix()


@FUZZ
@given(
    raw=st.binary(max_size=600)
    | st.builds(
        lambda at, junk: GGUF[:at] + junk + GGUF[at + len(junk) :],
        st.integers(min_value=0, max_value=len(GGUF)),
        st.binary(min_size=1, max_size=16),
    ),
)
def test_gguf_headers_of_any_bytes(raw: bytes) -> None:
    if not raw:
        return
    for source in (raw, io.BytesIO(raw)):
        try:
            read_gguf_header(source, len(raw), "fuzz.gguf", check_architecture=False)
        except ModelFileError as e:
            assert "fuzz.gguf" in str(e)

"""The pair doctor (`tandem models search|check`) against the local hub stand-in.

The stand-in answers huggingface_hub's JSON API (search, model info with file sizes) and Range
requests, and counts the bytes it sends: a check reads headers only. Pairing is judged on real
tokenizer metadata (tests/tiny.py), and one "7B" file is a real GGUF header padded with zeros
to 4.4 GB, so only a header-only reader can check it.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import FakeHub, HubFile, closed_port, go_online

from app import paths
from app.cli.cli import main as tandem_main
from app.library import hub_search, remote_gguf
from app.library import pair_doctor as doctor
from app.library.catalog import MachineInfo
from app.library.remote_gguf import MAX_HEADER_BYTES, HeaderReadError, HeaderTooLargeError, read_remote_header
from app.store import shard_names
from engine.errors import NotGGUFError
from tests.tiny import write_tiny_model

FAMILY = "tandem-test/tinyfam"
TARGET_REPO, DRAFT_REPO, BAD_REPO, BIG_REPO = (
    f"{FAMILY}-1B-GGUF",
    f"{FAMILY}-0.1B-GGUF",
    f"{FAMILY}-0.2B-GGUF",
    "tandem-test/bigfam-7B-GGUF",
)
TARGET = f"{TARGET_REPO}/tinyfam-1B-F32.gguf"
DRAFT = f"{DRAFT_REPO}/tinyfam-0.1B-Q8_0.gguf"
BAD_DRAFT = f"{BAD_REPO}/tinyfam-0.2B-Q8_0.gguf"
BIG = f"{BIG_REPO}/bigfam-7B-Q4_K_M.gguf"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def big_header(path: Path) -> tuple[bytes, int]:
    """A 7B-shaped model's real GGUF header (32 layers, 4096 wide, 8 KV heads) and the size its
    tensor table says the file has: the header is a few kB, the file about 4.4 GB."""
    import gguf
    import numpy as np

    from tests.tiny import tiny_vocab

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("bigfam 7B")
    w.add_context_length(32768)
    w.add_embedding_length(4096)
    w.add_block_count(32)
    w.add_feed_forward_length(14336)
    w.add_head_count(32)
    w.add_head_count_kv(8)
    w.add_file_type(15)  # MOSTLY_Q4_K_M
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tiny_vocab())
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(True)
    q4k = gguf.GGMLQuantizationType.Q4_K
    total = 0
    for layer in range(32):  # attention q, k, v, o (4096 x 4096) and the MLP (14336 x 4096 x 3)
        for j, rows in enumerate((4096, 4096, 4096, 4096, 14336, 14336, 14336)):
            n_bytes = rows * 4096 * 144 // 256
            w.add_tensor_info(
                f"blk.{layer}.t{j}.weight", [rows, 4096 // 256 * 144], np.dtype(np.uint8), n_bytes, q4k
            )
            total += n_bytes
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    data = path.read_bytes()
    aligned = (len(data) + 31) // 32 * 32
    return data, aligned + total


def hostile_string_header(length: int = 2**60) -> bytes:
    """A valid start, then a metadata key claiming to be `length` bytes long."""
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", length) + b"general.name"


@pytest.fixture(scope="module")
def hub_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes | tuple[bytes, int]]:
    folder = tmp_path_factory.mktemp("doctor-files")
    tiny = write_tiny_model(folder / "t.gguf", seed=21, n_layers=4).read_bytes()
    return {
        "target": tiny,
        "draft": write_tiny_model(folder / "d.gguf", seed=22, n_layers=2).read_bytes(),
        "bad": write_tiny_model(folder / "b.gguf", seed=23, n_layers=2, rename_token=40).read_bytes(),
        "big": big_header(folder / "big.gguf"),
        "truncated": tiny[:3000],
    }


@pytest.fixture
def hub(hub_files: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    with FakeHub() as fake:
        fake.add_file(TARGET_REPO, "tinyfam-1B-F32.gguf", hub_files["target"])
        fake.add_file(TARGET_REPO, "tinyfam-1B-Q8_0.gguf", hub_files["target"])
        fake.add_file(TARGET_REPO, "README.md", b"# tinyfam\n", is_lfs=False)
        fake.add_file(DRAFT_REPO, "tinyfam-0.1B-Q8_0.gguf", hub_files["draft"])
        fake.add_file(BAD_REPO, "tinyfam-0.2B-Q8_0.gguf", hub_files["bad"])
        header, size = hub_files["big"]
        fake.add_file(BIG_REPO, "bigfam-7B-Q4_K_M.gguf", header, padded_size=size)
        fake.add_file("tandem-test/odd-GGUF", "notes.gguf", b"these are notes, not a model\n" * 100)
        fake.add_file("tandem-test/odd-GGUF", "truncated.gguf", hub_files["truncated"])
        fake.add_file("tandem-test/odd-GGUF", "hostile.gguf", hostile_string_header(), padded_size=3 * 2**30)
        fake.add_file(
            "tandem-test/odd-GGUF",
            "long-value.gguf",
            b"GGUF"
            + struct.pack("<IQQ", 3, 0, 1)
            + struct.pack("<Q", 12)
            + b"general.name"
            + struct.pack("<IQ", 8, 16 * 2**20 - 1),  # a 16 MB string value: allowed, but long
            padded_size=3 * 2**30,
        )
        fake.set_downloads(TARGET_REPO, 500)
        fake.set_downloads(DRAFT_REPO, 100)
        go_online(monkeypatch, fake, tmp_path)
        yield fake


def file_of(hub: FakeHub, ref: str) -> HubFile:
    owner, name, filename = ref.split("/", 2)
    return hub.repos[f"{owner}/{name}"].files[filename]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = tandem_main(["models", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def assert_one_error_line(code: int, err: list[str], *fragments: str) -> None:
    assert code == 2, err
    assert err and err[-1].startswith("error: ")
    assert not any("Traceback" in line for line in err)
    for fragment in fragments:
        assert fragment in err[-1], err[-1]


def nothing_downloaded() -> bool:
    folder = paths.models_dir()
    return not folder.exists() or not any(p.is_file() for p in folder.rglob("*"))


# --- search ------------------------------------------------------------------------------------------


def test_search_lists_repositories_with_files_by_quantisation_sizes_and_fit(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "search", "tinyfam")
    assert code == 0
    text = "\n".join(out)
    # Most downloaded first, each with its GGUF files (not the README) grouped by quantisation.
    assert out[0].startswith(TARGET_REPO) and "500 downloads" in out[0]
    assert text.index(TARGET_REPO) < text.index(DRAFT_REPO)
    assert "README" not in text
    rows = [line.split() for line in out if "tinyfam-1B" in line and ".gguf" in line]
    assert {r[0] for r in rows} == {"F32", "Q8_0"}
    assert all(r[3] == "fits" for r in rows)  # 800 kB files
    assert "bigfam" not in text
    # Searching read listings only: not one byte of a model.
    assert hub.recorded("cdn") == []


def test_search_marks_a_model_too_large_for_this_machine(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = MachineInfo(free_ram_bytes=2 * 2**30, total_ram_bytes=3 * 2**30)
    [repo] = hub_search.search("bigfam")
    [f] = repo.files
    assert f.quantization == "Q4_K_M" and f.size_bytes > 4 * 10**9
    assert doctor.file_fit(f.size_bytes, machine).kind == doctor.FitKind.TOO_LARGE


def test_search_with_no_match_says_so(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "search", "no-such-family")
    assert code == 0 and out == ["no GGUF repositories on the hub match 'no-such-family'"]


# --- check --------------------------------------------------------------------------------------------


def test_check_reads_headers_only_and_judges_the_pair(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "check", TARGET, "--draft", DRAFT, "--ctx", "2048")
    assert code == 0
    text = "\n".join(out)
    assert f"target: {TARGET}" in text and f"draft: {DRAFT}" in text
    assert "architecture llama" in text and "context 2,048" in text and "has a chat template" in text
    assert "pairing: pairs" in text
    assert (
        "memory at 2,048 tokens of context: target " in text and text.count("+ KV cache") == 2
    )  # and the draft's
    assert "fit: fits" in text
    assert "Estimate:" in text
    for ref in (TARGET, DRAFT):
        f = file_of(hub, ref)
        assert 0 < hub.bytes_sent(f) < len(f.data) / 3
        assert all(h is not None and h.startswith("bytes=") for h in hub.range_headers(f))
    assert nothing_downloaded()


def test_check_measure_times_stand_ins_of_the_hub_files_before_any_download(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "check", TARGET, DRAFT, "--measure")
    assert code == 0, err
    text = "\n".join(out)
    assert "pairing: pairs" in text and "On this computer (models of the same shape" in text
    assert "plain replies at about " in text and "Copy and edit work with n-gram lookup: about " in text
    assert "The draft model: about " in text and "llama.cpp issue #5877" in text
    assert "Estimate:" not in text  # measured here, on stand-ins: the guess goes
    assert any("timing the stand-in of the draft (tinyfam-0.1B-Q8_0.gguf)" in line for line in err)
    for ref in (TARGET, DRAFT):  # the headers, as for any check: no weights came
        f = file_of(hub, ref)
        assert 0 < hub.bytes_sent(f) < len(f.data) / 3
    assert nothing_downloaded()
    standins = paths.home() / "standins"
    assert not standins.exists() or not any(p.is_file() for p in standins.rglob("*"))


def test_check_names_llamas_rule_and_both_values(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", TARGET, "--draft", BAD_DRAFT)
    assert code == 0
    [line] = [line for line in out if line.startswith("pairing:")]
    assert "does not pair" in line and "text of token 40" in line
    assert "target: '%'" in line and "draft: '%_x'" in line
    assert not any(line.startswith("download:") for line in out)


def test_check_of_a_7b_reads_a_few_kb_and_counts_both_kv_caches(hub: FakeHub) -> None:
    f = file_of(hub, BIG)
    report = doctor.check(
        doctor.parse_model_ref(BIG),
        doctor.parse_model_ref(BIG),
        n_ctx=8192,
        machine=MachineInfo(free_ram_bytes=8 * 2**30, total_ram_bytes=16 * 2**30),
    )
    assert report.target.info.n_params > 6e9 and report.target.info.quantization == "Q4_K_M"
    # 32 layers x 8 KV heads x (128 + 128) x 2 bytes x 8192 tokens = 1 GiB per model.
    assert report.memory.kv_target_bytes == report.memory.kv_draft_bytes == 2**30
    assert report.memory.weights_target_bytes == f.size
    assert report.fit.kind == doctor.FitKind.TIGHT  # 11 GB: more than is free, less than the total
    assert hub.bytes_sent(f) < 1_000_000 < f.size // 1000


def test_check_works_on_local_files_too(
    hub: FakeHub, capsys: pytest.CaptureFixture[str], tiny_target: Path, tiny_draft: Path
) -> None:
    code, out, _ = run(capsys, "check", str(tiny_target), "--draft", str(tiny_draft))
    assert code == 0 and "pairing: pairs" in "\n".join(out)
    assert hub.recorded() == []


def test_check_without_a_draft_offers_ranked_drafts_and_ngram(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "check", TARGET)
    assert code == 0
    drafts = out[out.index("drafts:") + 1 :]
    assert drafts[0].strip().startswith("ngram")
    assert DRAFT in drafts[1] and "pairs" in drafts[1]
    assert BAD_DRAFT in drafts[2] and "does not pair" in drafts[2] and "text of token 40" in drafts[2]
    for ref in (DRAFT, BAD_DRAFT):
        f = file_of(hub, ref)
        assert hub.bytes_sent(f) < len(f.data) / 3
    assert nothing_downloaded()


# --- bad input: one sentence each, exit 2, nothing downloaded ---------------------------------------------


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["check", "tandem-test/no-such-GGUF/x.gguf"], ["tandem-test/no-such-GGUF was not found"]),
        (["check", f"{TARGET_REPO}/missing.gguf"], ["missing.gguf was not found in the repository"]),
        (["check", TARGET_REPO], ["names no file", "owner/repo/FILE.gguf"]),
        (["check", "tandem-test/odd-GGUF/notes.gguf"], ["notes.gguf is not a GGUF model file"]),
        (["check", "tandem-test/odd-GGUF/truncated.gguf"], ["truncated.gguf is truncated"]),
        (["check", "tandem-test/odd-GGUF/hostile.gguf"], ["hostile.gguf"]),
        (["check", "/no/such/file.gguf"], ["model file not found"]),
        (["check", TARGET, "--ctx", "0"], ["context must be a positive number"]),
        (["search", ""], ["give something to search for"]),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(
    hub: FakeHub, capsys: pytest.CaptureFixture[str], argv: list[str], fragments: list[str]
) -> None:
    code, _, err = run(capsys, *argv, "--no-drafts") if argv[0] == "check" else run(capsys, *argv)
    assert_one_error_line(code, err, *fragments)
    assert nothing_downloaded()
    for repo in hub.repos.values():
        for f in repo.files.values():
            assert hub.bytes_sent(f) <= MAX_HEADER_BYTES  # bounded: never the padded GBs


def test_a_hostile_header_costs_a_bounded_read(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    # An impossible length is refused before it is read: one block of a 3 GB file.
    f = file_of(hub, "tandem-test/odd-GGUF/hostile.gguf")
    with pytest.raises(NotGGUFError, match="claims 1,152,921,504,606,846,976 bytes"):
        read_remote_header("tandem-test/odd-GGUF", "hostile.gguf")
    assert hub.bytes_sent(f) <= 64 * 1024
    # A possible but long one stops at the reader's budget.
    monkeypatch.setattr(remote_gguf, "MAX_HEADER_BYTES", 2**20)
    f = file_of(hub, "tandem-test/odd-GGUF/long-value.gguf")
    with pytest.raises(HeaderTooLargeError, match="damaged or hostile"):
        read_remote_header("tandem-test/odd-GGUF", "long-value.gguf")
    assert hub.bytes_sent(f) <= 2**20


def test_a_header_sent_too_slowly_stops_at_the_whole_reads_deadline(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk comes well within the per-read timeout, yet the header would take seconds in
    all (review reliability-2, item 9: a server dripping bytes was bounded by nothing else)."""
    hub.throttle_s = 0.05  # 16 kB every 50 ms: its claimed value would take seconds
    monkeypatch.setattr(remote_gguf, "HEADER_DEADLINE_S", 0.5)
    f = file_of(hub, "tandem-test/odd-GGUF/long-value.gguf")
    with pytest.raises(HeaderReadError, match="too slowly .more than 0.5 s in all.; try again later"):
        read_remote_header("tandem-test/odd-GGUF", "long-value.gguf")
    assert hub.bytes_sent(f) < 4 * 2**20


def test_a_server_that_ignores_range_downloads_nothing(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.ignore_range = True
    code, _, err = run(capsys, "check", BIG, "--no-drafts")
    assert_one_error_line(code, err, "ignores byte ranges", "nothing was downloaded")
    assert nothing_downloaded()
    assert hub.bytes_sent(file_of(hub, BIG)) < 64 * 2**20  # the 4.4 GB answer was cut off at once


def test_a_hub_that_is_down_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for argv in (["search", "qwen"], ["check", TARGET, "--no-drafts"]):
        code, _, err = run(capsys, *argv)
        assert_one_error_line(code, err, "cannot reach the model hub")


def test_a_slow_hub_times_out_with_a_sentence(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    hub.delay_s = 3.0
    for argv in (["search", "tinyfam"], ["check", TARGET, "--no-drafts"]):
        code, _, err = run(capsys, *argv, "--timeout", "0.5")
        assert_one_error_line(code, err, "0.5 s")


def test_offline_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "search", "qwen")  # conftest sets HF_HUB_OFFLINE=1
    assert_one_error_line(code, err, "HF_HUB_OFFLINE")


# --- references ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "repo", "filename", "revision"),
    [
        ("owner/repo/file.gguf", "owner/repo", "file.gguf", "main"),
        ("owner/repo/sub/file.gguf", "owner/repo", "sub/file.gguf", "main"),
        ("https://huggingface.co/owner/repo/blob/main/file.gguf", "owner/repo", "file.gguf", "main"),
        ("https://huggingface.co/owner/repo/resolve/abc123/f%20g.gguf", "owner/repo", "f g.gguf", "abc123"),
        ("tandem://open_from_hf?model=owner/repo&file=file.gguf", "owner/repo", "file.gguf", "main"),
    ],
)
def test_model_references(text: str, repo: str, filename: str, revision: str) -> None:
    ref = doctor.parse_model_ref(text)
    assert (ref.repo_id, ref.filename, ref.revision, ref.path) == (repo, filename, revision, None)


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("tandem://open_from_hf?file=x.gguf", "names no repository"),
        ("tandem://open_from_hf?model=../../etc&file=x", "names no repository"),
        ("tandem://delete_everything?model=a/b", "does not know the link"),
        ("tandem://[", "not an address Tandem can read"),  # urlsplit's ValueError (the fuzz found it)
    ],
)
def test_bad_open_links_are_refused(url: str, fragment: str) -> None:
    with pytest.raises(doctor.TandemError, match=fragment):
        doctor.parse_open_url(url)


def test_quantisation_and_sizes_from_names() -> None:
    assert hub_search.quantization_of("Qwen2.5-7B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert hub_search.quantization_of("model-IQ2_XS-00001-of-00003.gguf") == "IQ2_XS"
    assert hub_search.quantization_of("gemma-3-270m-it-bf16.gguf") == "BF16"
    assert doctor.params_in_name("SmolLM2-135M-Instruct-GGUF") == pytest.approx(0.135)
    assert doctor.family_of("bartowski/Qwen2.5-7B-Instruct-GGUF") == "Qwen2.5"


def test_a_split_model_counts_every_part(hub: FakeHub, hub_files: dict) -> None:
    # The first part holds the header (and here its tensors); the others only weights.
    header, size = hub_files["big"]
    sizes = {1: size, 2: 2 * 10**9, 3: 10**9}
    for i, n in sizes.items():
        data = header if i == 1 else b""
        hub.add_file("tandem-test/split-GGUF", f"split-Q4_K_M-0000{i}-of-00003.gguf", data, padded_size=n)
    [repo] = hub_search.search("split")
    [f] = repo.files
    total = sum(sizes.values())
    assert (f.filename, f.n_shards, f.size_bytes) == ("split-Q4_K_M-00001-of-00003.gguf", 3, total)
    report = doctor.check(doctor.ModelRef("tandem-test/split-GGUF", f.filename), n_ctx=512)
    assert report.memory.weights_target_bytes == total
    assert shard_names(f.filename)[2] == "split-Q4_K_M-00003-of-00003.gguf"


def test_the_estimate_is_an_estimate_and_grows_with_a_smaller_draft(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "memory_bandwidth_bytes_per_s", lambda: 20e9)
    small = doctor.estimate_speedup(4_000_000_000, 400_000_000)
    large = doctor.estimate_speedup(4_000_000_000, 2_000_000_000)
    assert small.high > large.high and small.low <= small.high
    assert small.describe().startswith("Estimate:") and "measured figure" in small.describe()
    assert small.plain_tokens_per_s == pytest.approx(5.0)


def test_the_estimate_uses_the_plain_speed_measured_here(tiny_target: Path, tiny_draft: Path) -> None:
    from app.settings import Settings, save_settings

    report = doctor.check(doctor.ModelRef(path=tiny_target), doctor.ModelRef(path=tiny_draft))
    assert report.estimate is not None and not report.estimate.is_plain_measured
    save_settings(Settings(plain_tokens_per_s={str(tiny_target): 40.0}))
    report = doctor.check(doctor.ModelRef(path=tiny_target), doctor.ModelRef(path=tiny_draft))
    assert report.estimate is not None and report.estimate.is_plain_measured
    assert "tokens/s instead of the 40 measured here" in report.estimate.describe()


def test_check_through_a_real_process(hub: FakeHub) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "app.main", "models", "check", TARGET, "--draft", DRAFT, "--json"],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    import json

    data = json.loads(out.stdout)
    assert data["pairs"] is True and data["estimate"]["is_estimate"] is True
    assert data["target"]["fetched_bytes"] < data["target"]["size_bytes"] / 3

"""What the window says, in plain words, from the typed values the engine hands over: the
speed-up's choices, the pair doctor's figures, the highlight's sources, Compare, the built-in
models and the tasks Tandem suggests. The verdict under a reply is ui/presenters/verdict.py's. No
engine sentence (Stats.note) and no file path is ever shown from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING

from app.library.measure import times_words
from app.settings import Preset, SpeedUp
from engine.events import DraftSource, DraftSpan
from ui.presenters.verdict import FASTER_AT, STATE_REASONS, ReplyNumbers, seconds

if TYPE_CHECKING:
    from app.library.measure import DraftVerdict, PairFigures

# Compare: the sped-up run's own plain steps against the plain run, either way beyond this ratio,
# and the computer ran at another speed between the two runs: not a fair comparison.
FAIR_RATIO = 1.35


def runs_on_words(gpu_build: bool | None, n_gpu_layers: int, server: str = "") -> str:
    """What the model runs on, for About: the GPU where this build of llama.cpp has a GPU
    backend and Settings offload layers to it, else the CPU, and why (`make setup` builds for
    the GPU it finds: tools/detect_gpu.sh)."""
    if server:
        return "Runs on: a server (it decides what runs the model)."
    if gpu_build is None:
        return "Runs on: not known until a model has loaded."
    if not gpu_build:
        return "Runs on: the CPU. This build of llama.cpp has no GPU backend (no GPU was found when it was set up)."
    if n_gpu_layers <= 0:
        return "Runs on: the CPU. This build can use the GPU: set the GPU layers in Settings."
    layers = "every layer" if n_gpu_layers >= 99 else f"{n_gpu_layers} layers"
    return f"Runs on: the GPU ({layers}), the CPU for the rest."


# ---- the speed-up choices, as the chat header offers them


@dataclass(frozen=True)
class SpeedUpChoice:
    key: SpeedUp
    name: str
    why: str  # one line: when to pick it


SPEED_UP_CHOICES = (
    SpeedUpChoice(
        SpeedUp.AUTO,
        "Automatic",
        "Reuses text from the conversation, and the paired draft model where it pays.",
    ),
    SpeedUpChoice(
        SpeedUp.NGRAM,
        "From the text (n-gram)",
        "Guesses from what is already written: fast when a reply repeats or edits text. Works with any model.",
    ),
    SpeedUpChoice(
        SpeedUp.DRAFT,
        "Draft model",
        "A small model guesses ahead for the big one; needs a model with the same vocabulary.",
    ),
    SpeedUpChoice(SpeedUp.NONE, "Off", "The model writes every word itself: the usual speed."),
)


def choice_name(key: SpeedUp) -> str:
    """A speed-up choice's name as the window says it ("From the text (n-gram)", "Draft model")."""
    return next((c.name for c in SPEED_UP_CHOICES if c.key == key), key)


# ---- the pair doctor: what a pair will pay here (its sentences are app.library's, the terminal's too)


def here_first_line(fig: PairFigures) -> str:
    """The measurement's answer in one line: "On this computer: drafting from the text about 1.3×
    faster on edits; this draft model about 3.4× slower" (the figures behind it: measure.describe_lines)."""
    parts = []
    if fig.copy_speedup:
        parts.append(f"drafting from the text {times_words(fig.copy_speedup)} on edits")
    if fig.verdict is not None:
        parts.append(f"this draft model {times_words(fig.verdict.speedup)}")
    if not parts:
        parts.append(f"plain replies at about {fig.target.plain_tokens_per_s:.1f} tokens/s")
    return "On this computer: " + "; ".join(parts)


def auto_measured_words(v: DraftVerdict) -> str:
    """What "Automatic" chose from the costs measured here, and why."""
    if v.pays:
        return (
            f"Automatic: the draft model and the text (measured on this computer: the draft model "
            f"about {v.speedup:.1f}× faster)"
        )
    return (
        f"Automatic: from the text only: the draft model does not pay on this computer "
        f"(measured: about {v.speedup:.1f}×)"
    )


def card_here_words(fig: PairFigures, has_draft_model: bool) -> str:
    """ "On this computer: copy work about 2.3×; a draft model does not pay here"."""
    parts = [f"plain about {fig.target.plain_tokens_per_s:.1f} tokens/s"]
    if fig.copy_speedup:
        parts.append(f"copy work about {fig.copy_speedup:.1f}×")
    if has_draft_model and fig.verdict is not None:
        v = fig.verdict
        parts.append(
            f"the draft model about {v.speedup:.1f}×" if v.pays else "a draft model does not pay here"
        )
    return "On this computer: " + "; ".join(parts)


# ---- the highlight: the model's own, confirmed text, tinted by where the guess came from

# Each source (engine.events.DraftSource): its name in the legend, where it says "from …", and
# how it looks (ui.qt.theme.LIGHT and DARK draw these hues and underlines, in both themes).
# DraftSource.NONE: a reply saved before sources were kept.
_SOURCES = {
    DraftSource.DOCUMENT: ("Document", "an attached document", "amber, solid underline"),
    DraftSource.TEXT: ("This chat", "this conversation", "green, dotted underline"),
    DraftSource.MEMORY: ("Earlier reply", "an earlier reply", "teal, dashed underline"),
    DraftSource.MODEL: ("Draft model", "the draft model", "violet, wavy underline"),
    DraftSource.NONE: (
        "Older reply",
        "a reply saved before Tandem kept where guesses came from",
        "grey, dotted underline",
    ),
}
SOURCE_NAMES = {source: said[0] for source, said in _SOURCES.items()}
SOURCE_WHERE = {source: said[1] for source, said in _SOURCES.items()}
SOURCE_LOOKS = {source: said[2] for source, said in _SOURCES.items()}
LEGEND_ORDER = tuple(SOURCE_NAMES)
LEGEND_SHORT = "= the model's own words, confirmed; not a change"
LEGEND = (
    "Highlighted text is the model's own: it was guessed ahead and the model confirmed every word "
    "(it arrives sooner only where a reply's headline says faster). "
    "The words are the same either way: the highlight does not mark a change "
    "or a difference. Its colour and underline say where the guess came from: "
    + "; ".join(f"{SOURCE_LOOKS[s]}: {SOURCE_WHERE[s]}" for s in LEGEND_ORDER[:4])
    + "."
)


def source_tip(source: DraftSource) -> str:
    """The tooltip over a tinted stretch: where it was guessed from, and what the tint means."""
    where = SOURCE_WHERE.get(source)
    said = (
        f"Guessed from {where}"
        if where and source
        else "Guessed ahead (an older reply: its source was not kept)"
    )
    return f"{said}; the model confirmed every word. The tint does not mark a change."


def highlight_said(share: float, is_faster: bool) -> str:
    """The hover over a reply's text: how much is highlighted and what that means; "sooner" only
    where the reply was faster (a slower reply's guessed words did not arrive sooner)."""
    sooner = ", so they arrived sooner" if is_faster else ""
    return (
        f"{share:.0%} of this reply is highlighted: the model's own words, guessed ahead and "
        f"confirmed by it{sooner}."
    )


def legend_said(sources: Iterable[DraftSource]) -> str:
    """The legend in words, naming the sources shown (screen readers)."""
    shown = [s for s in LEGEND_ORDER if s in set(sources)]
    if not shown:
        return LEGEND
    named = "; ".join(f"{SOURCE_NAMES[s]} ({SOURCE_LOOKS[s]}): from {SOURCE_WHERE[s]}" for s in shown)
    return f"Highlighted here: {named}. " + LEGEND


def sources_said(text: str, spans: Sequence[DraftSpan]) -> str:
    """Where a reply's highlighted words were guessed from, with each source's share of the reply:
    "Guessed from an attached document (40%) and this conversation (10%)." ("" where none)."""
    counts: dict[DraftSource, int] = {}
    for span in spans:
        key = span.source if span.source in SOURCE_WHERE else DraftSource.NONE
        counts[key] = counts.get(key, 0) + max(0, min(span.end, len(text)) - max(span.start, 0))
    parts = [
        f"{SOURCE_WHERE[s]} ({counts[s] / len(text):.0%})" for s in LEGEND_ORDER if counts.get(s) and text
    ]
    if not parts:
        return ""
    joined = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Guessed from {joined}."


# ---- Compare: the same request the usual way, then with the speed-up


def ratio_words(ratio: float) -> str:
    """ "2.4× faster", "about as fast as usual", "3.1× slower" (FASTER_AT either way)."""
    if ratio >= FASTER_AT:
        return f"{ratio:.1f}× faster"
    if ratio > 1 / FASTER_AT:
        return "about as fast as usual"
    return f"{1 / ratio:.1f}× slower"


def compare_seconds(plain: ReplyNumbers, sped_up: ReplyNumbers) -> tuple[float, float]:
    """(the usual way's whole request, the sped-up one's), in seconds, both counted with the first
    run's reading of the prompt (the second finds it read already): the headline and both panes
    say these two figures, so no figure on the Compare page contradicts another."""
    reading_s = max(plain.prefill_s, sped_up.prefill_s)
    return reading_s + plain.decode_s, reading_s + sped_up.decode_s


def compare_headline(plain: ReplyNumbers, sped_up: ReplyNumbers, is_measure: bool = True) -> str:
    """ "71 s instead of 168 s: 2.4× faster" (whole requests, timed one after the other, on the
    clock of compare_seconds). is_measure False (compare_problem said why): never "N× faster" or
    "slower", only the two times."""
    plain_s, sped_s = compare_seconds(plain, sped_up)
    if plain_s <= 0 or sped_s <= 0:
        return ""
    ratio = plain_s / sped_s
    how = ratio_words(ratio)
    if not is_measure and not 1 / FASTER_AT < ratio < FASTER_AT:
        how = "not a measure of the speed-up"
    return f"{seconds(sped_s)} instead of {seconds(plain_s)}: {how}"


def compare_was_fair(plain: ReplyNumbers, sped_up: ReplyNumbers) -> bool:
    """Whether the computer ran at one speed through both runs: the sped-up run's own one-token
    steps against the plain run's (the same measure), else its speed. Where another program took
    the cores during one run only, the ratio measures that program, not the speed-up."""
    during = sped_up.plain_tokens_per_s_est
    plain_rate = plain.plain_tokens_per_s_est or (
        plain.n_generated / plain.decode_s if plain.decode_s > 0 else 0.0
    )
    if not during or plain_rate <= 0:
        return True  # nothing to tell it by
    return 1 / FAIR_RATIO <= during / plain_rate <= FAIR_RATIO


UNFAIR_COMPARE = (
    "The computer was too busy for a fair run: its own speed changed between the two runs "
    "(something else was using it), so this ratio does not measure the speed-up."
)

COMPARE_STOPPED = "Stopped before both runs ended: nothing to compare"
COMPARE_NO_PROMPT = "Nothing to compare yet: write a request above, or choose a task."

STALL_MIN_S = 1.0  # a pause in a run's writing this long...
STALL_FACTOR = 10.0  # ...and this many times its usual pause between snapshots: it stalled


def longest_stall(points: Sequence[tuple[float, int]]) -> float:
    """The longest pause in a run's writing ((seconds, tokens) snapshots), where it was a stall
    (another program took the computer), else 0."""
    gaps = sorted(b[0] - a[0] for a, b in zip(points, points[1:], strict=False))
    if len(gaps) < 3:
        return 0.0
    usual, longest = gaps[len(gaps) // 2], gaps[-1]
    return longest if longest >= max(STALL_MIN_S, STALL_FACTOR * usual) else 0.0


NOTHING_DRAFTED = (
    "The run with the speed-up guessed nothing on this text: it wrote the way the usual one does, "
    "so the difference between the two times is the computer's, not the speed-up's."
)
NOTHING_DRAFTED_SO = (
    "So the run with the speed-up wrote the way the usual one does: the difference between the two "
    "times is the computer's, not the speed-up's."
)


def compare_problem(sped_up: ReplyNumbers, is_fair: bool, stalls: Mapping[str, float] | None = None) -> str:
    """Why a Compare does not measure the speed-up ("" where it does): the sped-up run drafted
    nothing, a run stalled, or the computer's speed changed between the runs (is_fair False)."""
    if sped_up.n_drafted == 0:
        why = STATE_REASONS.get(sped_up.note_kind)  # a paused speed-up, a draft model too slow here
        return f"{why} {NOTHING_DRAFTED_SO}" if why else NOTHING_DRAFTED
    for name, which in (("speculative", "with the speed-up"), ("plain", "the usual way")):
        stall = (stalls or {}).get(name, 0.0)
        if stall:
            return (
                f"The run {which} stalled for {seconds(stall)} (something else was using the computer), "
                "so this ratio does not measure the speed-up."
            )
    return "" if is_fair else UNFAIR_COMPARE


def same_text_words(plain_text: str, sped_text: str, is_greedy: bool) -> tuple[bool, str]:
    """(the texts are the same, one line on it). Greedy: a check. Sampled: a note that they may
    differ by design (with n-gram drafts and one seed they still match)."""
    if plain_text == sped_text:
        how = "" if is_greedy else " (sampled, with one seed for both)"
        return True, f"✓ The same text, word for word{how}."
    if not is_greedy:
        return False, (
            "The texts differ by design: sampling is on (temperature above 0), so each run draws its "
            "own words. Only the speed is compared; set the temperature to 0 to compare the text too."
        )
    at = next((i for i, (a, b) in enumerate(zip(plain_text, sped_text, strict=False)) if a != b), None)
    at = min(len(plain_text), len(sped_text)) if at is None else at
    return False, (
        f"⚠ The texts part at character {at + 1}: on a quantized model two nearly equal choices can "
        "tip either way when it checks several words at once, as between two builds of llama.cpp "
        "(on F16 and BF16 models the text is the same word for word)."
    )


# ---- the models Tandem carries (app.library.model_spec.Embedded), by what people call them

BUILT_IN_MODELS = (
    ("smollm2", "SmolLM2 135M Instruct"),
    ("default", "Gemma 3 270M (base)"),
)


def model_name(path: Path, header_name: str) -> str:
    """A local model's name as people call it: a built-in model's, a catalog model's by its file
    ("Qwen2.5 1.5B Instruct"), any other's from its header (else its file's name)."""
    from app.library.default_model import DEFAULT_MODEL_NAME, SMOLLM2_FILE

    key = {SMOLLM2_FILE: "smollm2", DEFAULT_MODEL_NAME: "default"}.get(path.name)
    if key:
        return dict(BUILT_IN_MODELS)[key]
    return _catalog_names().get(path.name.lower()) or header_name or path.stem


@cache
def _catalog_names() -> dict[str, str]:
    """Catalog models by file name (lower case): their names."""
    try:
        from app.library.catalog import load_catalog

        return {m.filename.lower(): m.name for m in load_catalog().models}
    except Exception:  # an unreadable catalog: header names then
        return {}


def built_in_key(model: str) -> str | None:
    """The built-in model ("default", "smollm2") whose own file `model` is, a path; None for any
    other file. The Models page chooses the built-in pair by its file's path, and the models
    folder holds the built-in Gemma's file: the header lists each model once, by its name."""
    if model in dict(BUILT_IN_MODELS):
        return model
    from ui.presenters.task_ability import model_file

    files = {key: model_file(key) for key, _ in BUILT_IN_MODELS}
    return next((k for k, f in files.items() if f is not None and f.resolve() == Path(model).resolve()), None)


# ---- presets Tandem offers (the user's own are app.settings.load_presets)


def built_in_presets() -> list[Preset]:
    return [
        # No instructions (asked to "only change what is asked", the tiny built-in model rewrote
        # the note); exact; no repetition penalty: a copy repeats the document, and the penalty
        # lowers exactly its tokens (with 1.1 SmolLM2-135M garbled the paragraph).
        Preset(EDIT_PRESET, temperature=0.0, repeat_penalty=1.0, speed_up=SpeedUp.AUTO),
        Preset("Everyday chat", speed_up=SpeedUp.AUTO),
        Preset("Creative writing", temperature=1.0, top_p=0.95, speed_up=SpeedUp.NGRAM),
    ]


# ---- tasks where the speed-up shows (the welcome's demo, Compare's "Try a task")

DEMO_NOTE = """Dear neighbours,

The harbour comittee will meet on Tuesday evening at seven in the town hall. We will discuss the
new parking rules for the sea front, the repairs to the old pier and the summer market. The
market will open on the first Saturday of June and run every weekend untill the end of August.
Stalls cost twenty pounds a day, and half of that goes to the lifeboat station.

Everyone is welcome, and there will be tea and biscuits after the meeting. If you can not come,
please send your questions to the secretary before Monday, and we will answer them at the
meeting and in the next newsleter.

Thank you,
The harbour comittee"""

EDIT_PRESET = "Edit or copy text"


@dataclass(frozen=True)
class QuickAction:
    """An attachment's quick action: a request for the message box, {name} the document's name;
    keeps_text: the reply gives the document back with small changes (edit work: task_preset)."""

    title: str
    prompt: str
    keeps_text: bool


QUICK_ACTIONS = (
    QuickAction(
        "Rewrite", "Rewrite {name} in clearer words, keeping its meaning. Return the whole text.", False
    ),
    QuickAction(
        "Fix spelling and grammar",
        "Fix the spelling and grammar in {name}. Return the whole text, changing nothing else.",
        True,
    ),
    QuickAction("Translate", "Translate {name} into French. Return the whole translation.", False),
    QuickAction(
        "Refactor code",
        "Refactor the code in {name} to make it clearer, without changing what it does. Return the whole file.",
        True,
    ),
)


def quick_actions_for(document: object) -> list[QuickAction]:
    """The quick actions a document offers: refactoring for source code only."""
    from app.document import DocumentKind

    is_code = getattr(document, "kind", None) is DocumentKind.CODE
    return [q for q in QUICK_ACTIONS if q.title != "Refactor code" or is_code]


def quick_action_of(request: str) -> QuickAction | None:
    """The quick action whose request this is, as it put it in the box (any document's name)."""
    for quick in QUICK_ACTIONS:
        before, _, after = quick.prompt.partition("{name}")
        text = request.strip()
        if text.startswith(before) and text.endswith(after) and len(text) > len(before) + len(after):
            return quick
    return None


def task_preset(prompt: str) -> Preset | None:
    """The preset a task of Tandem's own runs with: the demo tasks and the quick actions that keep
    a document's text are edit work, run as the "Edit or copy text" preset runs it whatever the
    chat's own sampling (with the chat's, the demo showed the speed-up losing); else None."""
    quick = quick_action_of(prompt)
    if prompt.strip() in {task.strip() for _, task in DEMO_TASKS} or (quick is not None and quick.keeps_text):
        return next(p for p in built_in_presets() if p.name == EDIT_PRESET)
    return None


def task_preset_words(preset: Preset) -> str:
    how = "exact" if preset.temperature <= 0 else f"temperature {preset.temperature:g}"
    penalty = (
        "no repetition penalty"
        if preset.repeat_penalty == 1.0
        else f"a repetition penalty of {preset.repeat_penalty:g}"
    )
    return f"Run as the “{preset.name}” preset runs it: {how}, with {penalty}."


def task_switch_words(before: Preset, after: Preset) -> str:
    """What a suggested task changed in the header, said (never silently): "For this task: the
    preset “Edit or copy text” (exact, ...) instead of “None”, and Speed-up “Automatic” instead
    of “Off”. Both go back after the reply." ("" where nothing changed)."""
    changes = []
    sampling = attrgetter("temperature", "top_p", "repeat_penalty")
    if sampling(before) != sampling(after) or before.name != after.name:
        how = task_preset_words(after).removeprefix(f"Run as the “{after.name}” preset runs it: ").rstrip(".")
        changes.append(f"the preset “{after.name}” ({how}) instead of “{before.name or 'None'}”")
    if before.speed_up != after.speed_up:
        changes.append(
            f"Speed-up “{choice_name(after.speed_up)}” instead of “{choice_name(before.speed_up)}”"
        )
    if not changes:
        return ""
    both = "Both go" if len(changes) == 2 else "It goes"
    return f"For this task: {' and '.join(changes)}. {both} back after the reply."


def task_kept_words(before: Preset) -> str:
    """After the task's reply: the user's own choices are back."""
    return (
        f"Back to your preset “{before.name or 'None'}” and Speed-up “{choice_name(before.speed_up)}” "
        "after the suggested task."
    )


SMALL_INSTRUCT_PAIR = "qwen2.5-1.5b-ngram"  # the catalog's smallest instruct model that does them


EMPTY_CHAT = (
    "Ask anything. Tandem is fastest when the reply reuses text: attach a document (or paste it) "
    "and ask for an edit, or start from one of these:"
)

# The first is the welcome's demo and the README's pictures: the one the offline SmolLM2-135M does
# right; the other two show what a larger model does.
DEMO_TASKS = (
    (
        "Repeat a paragraph exactly",
        "Here is a short text. Repeat it exactly, word for word.\n\n"
        + DEMO_NOTE.split("\n\n")[1].replace("\n", " "),
    ),
    (
        "Fix the spelling in a note",
        "Fix the spelling mistakes in this note and give back the whole note:\n\n" + DEMO_NOTE,
    ),
    (
        "Rename a function in code",
        "Rename the function area to rectangle_area and give back the whole code:\n\n"
        '```python\ndef area(width, height):\n    """The area of a rectangle."""\n'
        '    if width < 0 or height < 0:\n        raise ValueError("sizes must not be negative")\n'
        "    return width * height\n\n\ndef total(rectangles):\n"
        "    return sum(area(w, h) for w, h in rectangles)\n```",
    ),
)

"""Which part of a reply is the edited copy of a document: the part most like the document by
alignment (difflib's ratio over the words), among its fenced blocks, its runs of paragraphs and
the whole reply; none where no part is close (a translation, a remark, an answer about it).

A reply to "Fix the spelling in note.txt" often wraps the text: a line before it ("Here is the
corrected note:"), a remark after it, sometimes in a fence of its own (taking "the one fenced
block" would take a one-line remark for the edit). No Qt here.
"""

from __future__ import annotations

import difflib
import re

# A part this like the document (difflib ratio over lower-cased words, 0-1) is its edited copy:
# a note with eight misspellings fixed scores about 0.85, a clear rewrite 0.4-0.6, a one-line
# remark about it under 0.2, a translation about 0.1.
CLOSE_ENOUGH = 0.35
# Runs of paragraphs are tried up to this many paragraphs (a reply longer than that: its fenced
# blocks, its whole text, and runs that start or end at its edges).
MAX_PARAGRAPHS = 24

_FENCED = re.compile(r"^(`{3,}|~{3,})[^\n]*\n(.*?)\n\1[ \t]*$", re.S | re.M)
_WORDS = re.compile(r"\w+|[^\w\s]")


def fenced_blocks(reply: str) -> list[str]:
    """The inside of each fenced block (``` or ~~~), in order."""
    return [m[2] for m in _FENCED.finditer(reply)]


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def candidates(reply: str) -> list[str]:
    """The parts of a reply that could be the document given back: each fenced block, the whole
    reply, the reply outside its fences, and each run of consecutive paragraphs of that."""
    found = [*fenced_blocks(reply), reply.strip()]
    outside = _FENCED.sub("", reply).strip()
    found.append(outside)
    paragraphs = _paragraphs(outside)
    n = len(paragraphs)
    for i in range(n):
        for j in range(i + 1, n + 1):
            if n <= MAX_PARAGRAPHS or i == 0 or j == n:
                found.append("\n\n".join(paragraphs[i:j]))
    return list(dict.fromkeys(c for c in found if c))  # each once, in order


def _words(text: str) -> list[str]:
    return _WORDS.findall(text.lower())


def edited_copy(reply: str, original: str) -> str | None:
    """The part of the reply most like the original (fences taken off), None where no part is
    close enough to be an edited copy of it. The original is indexed once; a part whose upper
    bounds (lengths, then shared words) cannot beat the best so far is not aligned."""
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    target = _words(original)
    matcher.set_seq2(target)
    best, best_score = None, CLOSE_ENOUGH
    # Parts about the document's length first: the likely best is aligned early, and the length
    # bound (real_quick_ratio) then skips most of the rest without aligning them.
    parts = [(part, _words(part)) for part in candidates(reply)]
    parts.sort(key=lambda p: abs(len(p[1]) - len(target)))
    for part, words in parts:
        if not words:
            continue
        matcher.set_seq1(words)
        if matcher.real_quick_ratio() < best_score or matcher.quick_ratio() < best_score:
            continue
        score = matcher.ratio()
        if score > best_score or (best is None and score >= best_score):
            best, best_score = part, score
    return best


def reply_body(reply: str) -> str:
    """What a reply gives back as a document, its original aside: the inside of its one fenced
    block where it has exactly one, else the whole reply."""
    blocks = fenced_blocks(reply)
    return blocks[0] if len(blocks) == 1 else reply.strip()

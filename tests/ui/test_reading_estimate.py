"""The reading line between the engine's reports (issue 51: progress updated at least twice a
second even where a chunk takes seconds): moved on at the measured speed, never past the chunk in
flight, the engine's count replacing it at each report (ui/presenters/reading_words.reading_after)."""

from __future__ import annotations

from engine.events import Reading
from ui.presenters.reading_words import reading_after, reading_line

# 2,001 tokens to read, 128 read, the chunk in flight ends at 256; 10 s left for 1,872 tokens.
AFTER_ONE_CHUNK = Reading(2001, 0, 128, 1.0, 10.0, n_next=256)


def test_between_reports_the_count_moves_on_at_the_measured_speed() -> None:
    later = reading_after(AFTER_ONE_CHUNK, 0.5)
    per_token = 10.0 / (2000 - 128)
    assert later.n_processed == 128 + int(0.5 / per_token)  # 93 more tokens
    assert later.elapsed_s == 1.5
    assert later.seconds_left is not None and abs(later.seconds_left - 9.5) < 0.01
    assert reading_line(later) != reading_line(AFTER_ONE_CHUNK)  # the line the window shows moves
    assert reading_line(later) == "Reading 2,001 tokens – 11%, about 9.5 s left"


def test_the_count_stops_short_of_the_chunk_in_flight_and_the_time_left_with_it() -> None:
    """A chunk slower than the speed so far: the line waits for the engine's count, it never says
    more was read than the engine has read or is reading; the time left is what comes after the
    chunk, at the slower speed the chunk shows (it took at least this long)."""
    stuck = [reading_after(AFTER_ONE_CHUNK, s) for s in (2.0, 5.0, 60.0)]
    assert {r.n_processed for r in stuck} == {255}
    assert [r.elapsed_s for r in stuck] == [3.0, 6.0, 61.0]
    per_token = 10.0 / (2000 - 128)
    after = 2000 - 256
    assert stuck[0].seconds_left == after * max(per_token, 2.0 / 128)
    assert stuck[2].seconds_left == after * 60.0 / 128  # late: slower than measured, said so
    # In the last chunk nothing comes after it: no time left is said, the time so far is.
    last = Reading(2001, 0, 1900, 9.0, 1.0, n_next=2000)
    assert reading_after(last, 0.5).n_processed == 1900 + int(0.5 / (1.0 / 100))
    late = reading_after(last, 3.0)
    assert late.n_processed == 1999 and late.seconds_left is None
    assert reading_line(late) == "Reading 2,001 tokens – 100%, 12 s so far"


def test_without_a_speed_or_a_chunk_end_only_the_time_so_far_moves() -> None:
    first = Reading(2001, 0, 0, 0.2)  # at once, before any chunk of a model's first reading
    assert reading_line(first) == "Reading 2,001 tokens – 0%"
    later = reading_after(first, 2.3)
    assert later.n_processed == 0 and later.seconds_left is None
    assert reading_line(later) == "Reading 2,001 tokens – 0%, 2.5 s so far"
    server = Reading(2001, 0, 512, 3.0, 8.0)  # a server's report: no chunk end to stop short of
    assert reading_after(server, 1.0).n_processed == 512
    assert reading_after(AFTER_ONE_CHUNK, -1.0) == AFTER_ONE_CHUNK  # a clock never runs back


def test_the_end_of_a_reading_says_no_time_left_of_nothing() -> None:
    # Found walking the real window: the last line before a reply's first words, the prompt read
    # but for its last token (read with the first step), said "Reading 3,763 tokens – 100%, about
    # 0.0 s left" until the text came.
    read = Reading(3859, 96, 3858, 37.0, 0.01, n_next=3858)
    assert reading_line(read) == "Reading 3,763 tokens – 100%"
    assert (
        reading_line(Reading(3859, 96, 3800, 36.0, 0.2)) == "Reading 3,763 tokens – 98%, under a second left"
    )
    assert reading_line(Reading(3859, 96, 3700, 35.0, 1.4)) == "Reading 3,763 tokens – 96%, about 1.4 s left"

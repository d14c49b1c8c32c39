"""``canonqnn.progress``: steps reach the reporter installed, in order, nested; without one they
cost nothing; a note without a reporter is printed as the command line prints notes."""

from __future__ import annotations

import pytest

from canonqnn import progress


class Recorder:
    def __init__(self):
        self.events = []

    def begin(self, what, total):
        self.events.append(("begin", what, total))

    def advance(self, units=1):
        self.events.append(("advance", units))

    def end(self):
        self.events.append(("end",))

    def note(self, message):
        self.events.append(("note", message))


def test_steps_nest_count_and_end_even_when_left_by_an_exception():
    recorder = Recorder()
    with progress.reporting(recorder), progress.step("outer"):
        with pytest.raises(ValueError), progress.step("inner", 2) as done:
            done()
            raise ValueError
        progress.note("why it waits")
    assert recorder.events == [("begin", "outer", None), ("begin", "inner", 2), ("advance", 1),
                               ("end",), ("note", "why it waits"), ("end",)]


def test_without_a_reporter_steps_do_nothing_and_notes_go_to_stderr(capsys):
    with progress.step("quiet", 3) as done:
        done()
    progress.note("a note")
    assert capsys.readouterr().err == "canonqnn: note: a note\n"

"""A seeded corpus of malformed and adversarial inputs for every CLI command.

Each case writes its files from a few valid artifacts (``artifacts.Bases``: an ONNX QDQ conv,
TFLite int8/uint8 convs, the canonical module and the library of the ONNX one), edits them and
names the commands to run, with what a user must get: ``refused`` (exit 2, ``canonqnn:
error:``), ``accepted`` (exit 0, or 1 when ``parity`` finds a difference) or ``either`` (a
random edit that may leave a valid input). Any signal, timeout, traceback or internal error
fails a case.

``python tests/cli/hostile_corpus.py [--all] [-k NAME]`` runs it and prints the table by family
and outcome (the default subset unless ``--all``).
"""

from __future__ import annotations

from .artifacts import Bases, damaged_cases, garbage_cases, model_commands, module_commands
from .case import ACCEPTED, EITHER, FAILURES, REFUSED, SEED, Case, judged, outcome
from .files import library_cases, module_cases
from .memory_bombs import memory_bomb_cases
from .models import onnx_cases, tflite_cases
from .module_bombs import module_bomb_cases
from .pt2 import pt2_cases
from .runs import argument_cases, input_cases
from .verdicts import verdict_cases


def corpus() -> list[Case]:
    cases = onnx_cases() + tflite_cases() + module_cases() + library_cases() + input_cases() \
        + argument_cases()
    cases += memory_bomb_cases()
    cases += pt2_cases()
    cases += verdict_cases()
    cases += module_bomb_cases()
    model = lambda p, d, b=None: model_commands(p, d, build=False, parity=False)  # noqa: E731
    cases += damaged_cases("onnx-bytes", "onnx", ".onnx",
                           {"truncated": 12, "bitflip": 40, "bytes_overwritten": 12}, 2, model)
    cases += garbage_cases("onnx-bytes", ".onnx", model)
    cases += damaged_cases("tflite-bytes", "tflite", ".tflite",
                           {"truncated": 12, "bitflip": 50, "bytes_overwritten": 12}, 3,
                           lambda p, d, b: model_commands(p, d, build=False))
    cases += garbage_cases("tflite-bytes", ".tflite", model)
    cases += damaged_cases("module-json", "module", ".canonqnn.json",
                           {"truncated": 6, "bytes_overwritten": 10}, 1,
                           lambda p, d, b: module_commands(p, d, b)[:1])
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case names repeat"
    return cases


__all__ = ["ACCEPTED", "EITHER", "FAILURES", "REFUSED", "SEED", "Bases", "Case", "corpus",
           "judged", "outcome"]

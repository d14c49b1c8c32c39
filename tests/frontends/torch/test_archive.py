"""Reading .pt2 archives never runs what they hold: every payload of the hostile corpus
(``tests/cli/hostile/pt2.py``) runs code under ``torch.export.load`` — checked here, so the
payloads are live — and none runs under canonqnn's reader, which refuses the member or, where
the payload sits in what it never reads, loads the genuine program."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest
import torch

from canonqnn import _tvm, budget
from canonqnn.errors import InvalidModelError, ResourceError
from canonqnn.frontends.torch import archive, load
from hostile import ACCEPTED, REFUSED
from hostile import pt2 as payloads


@functools.cache
def base() -> bytes:
    return payloads.program_bytes()


def _write(folder, name: str, data: bytes) -> str:
    path = folder / name
    path.write_bytes(data)
    return str(path)


def test_a_valid_archive_reads_as_torch_export_load_reads_it(tmp_path):
    path = _write(tmp_path, "m.pt2", base())
    ours, theirs = archive.read_program(path, path), torch.export.load(path)
    assert _tvm.save_json(load(ours)) == _tvm.save_json(load(theirs))
    x = torch.randn(payloads.SHAPE)
    assert torch.equal(ours.module()(x), theirs.module()(x))


@pytest.mark.parametrize("name", list(payloads.EDITS))
def test_no_payload_runs_and_each_is_refused_or_left_unread(name, tmp_path, monkeypatch):
    expect = payloads.EDITS[name][0]
    path = _write(tmp_path, "m.pt2", payloads.crafted(base(), name))
    monkeypatch.chdir(tmp_path)  # where a payload would touch its marker
    if expect == REFUSED:
        with pytest.raises(InvalidModelError, match=r"^.*m\.pt2: ") as refused:
            archive.read_program(path, path)
        assert "\n" not in str(refused.value)
    else:
        assert expect == ACCEPTED
        program = archive.read_program(path, path)
        program.module()(torch.randn(payloads.SHAPE))  # guards, if kept, would run here
    assert not (tmp_path / payloads.MARKER).exists()


def test_torch_export_load_runs_the_payloads_canonqnn_refuses(tmp_path):
    """The payloads are real: torch's own loader runs each one marked "load"."""
    live = [name for name, (_, _, runs) in payloads.EDITS.items() if runs == "load"]
    assert len(live) >= 6
    for name in live:
        (tmp_path / name).mkdir()
        _write(tmp_path / name, "m.pt2", payloads.crafted(base(), name))
    script = ("import os, sys, torch, torch.ao.quantization.fx._decomposed\n"
              "for d in sys.argv[1:]:\n"
              "    os.chdir(d)\n"
              "    try:\n"
              "        torch.export.load('m.pt2')\n"
              "    except Exception:\n"
              "        pass\n")
    subprocess.run([sys.executable, "-c", script, *(str(tmp_path / n) for n in live)],
                   capture_output=True, timeout=300, check=True)
    ran = [name for name in live if (tmp_path / name / payloads.MARKER).exists()]
    assert ran == live


def test_a_member_larger_than_the_budget_is_refused_before_it_is_read(tmp_path):
    path = _write(tmp_path, "m.pt2", base())
    with budget.limit(1000), pytest.raises(ResourceError, match="models/model.json"):
        archive.read_program(path, path)


def test_a_view_reaching_past_its_storage_is_refused(tmp_path):
    def edit(members):
        config = json.loads(members[payloads.WEIGHTS])
        meta = next(iter(config["config"].values()))["tensor_meta"]
        meta["storage_offset"] = {"as_int": 10**6}
        members[payloads.WEIGHTS] = json.dumps(config).encode()

    root, members = payloads._members(base())
    edit(members)
    path = _write(tmp_path, "m.pt2", payloads._archive(root, members))
    with pytest.raises(InvalidModelError, match="reach element"):
        archive.read_program(path, path)


@pytest.mark.parametrize("data, why", [(b"", "zip archive"), (b"PK\x03\x04garbage", "zip"),
                                       (None, "truncated")])
def test_damaged_archives_are_refused_in_one_line(data, why, tmp_path):
    data = base()[:len(base()) // 2] if data is None else data
    path = _write(tmp_path, "m.pt2", data)
    with pytest.raises(InvalidModelError, match=why) as refused:
        archive.read_program(path, path)
    assert "\n" not in str(refused.value)

"""Quantization parameters no canonical op can take, found while a rule folds a chain, are
refused once the walk is over (TVM's block builder closed), naming the source tensor the
chain computes."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

from canonqnn._tvm.mutator import _CallMutator
from canonqnn.api import canonical_module
from canonqnn.errors import InvalidQuantizationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from hostile.artifacts import onnx_conv  # noqa: E402
from hostile.models import _consistent_scales  # noqa: E402


@pytest.mark.parametrize("scales, words", [
    (dict(y_s=np.float32(1e-38)), "requantization multiplier 9.2148e+34"),
    (dict(w_s=1e38), "requantization multiplier 5e+37"),
])
def test_a_saturating_requantization_is_refused_naming_the_tensor(capfd, scales, words):
    model = onnx_conv()
    _consistent_scales(**scales)(model)
    with pytest.raises(InvalidQuantizationError) as info:
        canonical_module(model)
    message = str(info.value)
    assert message.startswith("the conv2d computing tensor 'yq': " + words), message
    assert "above 254.5: every nonzero accumulator saturates the int8 output" in message
    assert "BlockBuilder" not in capfd.readouterr().err  # (raised inside the walk, TVM logs)
    gc.collect()  # the error holds no frame of the walk: its mutator is gone
    assert not [o for o in gc.get_objects() if type(o) is _CallMutator._cls]

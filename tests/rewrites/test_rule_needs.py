"""A rule's ``needs`` (the ops its pattern cannot do without) only skips walks where the rule
would have found nothing: conversions are the same with every rule tried everywhere."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import tvm
from hypothesis import HealthCheck, given, settings

import _real_models as real
import canonqnn
from canonqnn.rewrites import DEFAULT_PHASES, Phase, rules
from canonqnn.testing import onnx_models as models

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "property"))
from _graphs import active_menu, graphs  # noqa: E402

EVERYWHERE = tuple(Phase(p.name, tuple(dataclasses.replace(r, needs=()) for r in p.rules))
                   for p in DEFAULT_PHASES)


def _same_conversion(model) -> None:
    mod = canonqnn.load(model)
    skipping, skipping_report = canonqnn.canonicalize(mod)
    trying, trying_report = canonqnn.canonicalize(mod, EVERYWHERE)
    tvm.ir.assert_structural_equal(skipping, trying)
    assert skipping_report.to_json() == trying_report.to_json()


def test_the_product_rules_and_the_unary_steps_say_what_they_need():
    needs = {rule.name: rule.needs for rule in rules()}
    assert needs["conv2d"] == ("relax.nn.conv2d",)
    assert needs["matmul"] == ("relax.matmul",)
    assert needs["max_pool2d"] == ("relax.nn.max_pool2d",)
    assert needs["requantize"] == ()


NETWORKS = {
    "resnet qdq u8": lambda: models.quantize(models.resnet_like(), fmt="qdq", activation="u8",
                                             per_channel=True),
    "mobilenet-v3 qoperator": lambda: models.quantize(
        models.mobilenet_v3_like(), fmt="qoperator", activation="u8", per_channel=False),
    "transformer qdq": lambda: models.quantize(real.torch_transformer_like(), fmt="qdq",
                                               activation="u8", per_channel=True),
    "mlp dynamic": lambda: real.quantize_dynamic(real.mlp_like()),
    "transformer int16": lambda: real.quantize_16bit(models.transformer_encoder_like(), "u16"),
}


@pytest.mark.parametrize("name", NETWORKS)
def test_networks_convert_the_same_with_every_rule_tried(name):
    _same_conversion(NETWORKS[name]())


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(graphs({"int8": active_menu("int8"), "uint8": active_menu("uint8")}))
def test_random_graphs_convert_the_same_with_every_rule_tried(spec):
    _same_conversion(spec.model)

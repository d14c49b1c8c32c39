"""The per-op epilogue properties are the one source of the lists that read them."""

from __future__ import annotations

from canonqnn.ops import REGISTRY, absorbing
from canonqnn.patterns import table
from canonqnn.rewrites import epilogue


def test_ops_with_an_output_clamp_are_the_ones_the_epilogue_rule_narrows():
    assert absorbing("absorbs_clamp") == epilogue.PRODUCERS
    for name in epilogue.PRODUCERS:  # the rule narrows these attributes
        assert {"act_min", "act_max"} <= set(REGISTRY[name].attrs)


def test_ops_that_absorb_a_table_are_the_lut_groups_and_the_fused_kernels_checked():
    assert absorbing("absorbs_table") == table.LUT_PRODUCERS
    assert set(absorbing("absorbs_table")) <= set(absorbing("absorbs_clamp"))

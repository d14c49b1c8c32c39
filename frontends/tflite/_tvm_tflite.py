"""TVM's own TFLite converters (``tvm.relax.frontend.tflite``), as the TFLite frontend reuses them
for float ops."""

from __future__ import annotations

from typing import Any

import numpy as np

from canonqnn._tvm import normalize_outputs


class TfliteConverters:
    """TVM's own TFLite operator converters (``tvm.relax.frontend.tflite``) for one model, fed
    canonqnn's Relax values: ``kind(i)`` is TVM's name for operator ``i`` of the first subgraph
    (None when TVM has no converter), ``convert(i, exprs, constants)`` its result as bound
    tensors. ``exprs`` maps tensor indices to Relax expressions of their real values (float,
    or integer index data); ``constants`` maps tensor indices to numpy values computed at
    import (TVM reads constants from the model's buffers, which hold no folded results). TVM's
    converters dequantize quantized inputs themselves: here inputs are given as real values
    already (float32, quantized constants too), so their quantization and stored type are
    hidden from them."""

    def __init__(self, model: Any, bb: Any) -> None:
        import tflite
        from tvm.relax.frontend.tflite import tflite_frontend as tf

        class Float32(tflite.Tensor):
            """A quantized tensor seen as the float32 tensor of its real values."""

            def __init__(self, tensor: Any) -> None:
                super().__init__()
                self.Init(tensor._tab.Bytes, tensor._tab.Pos)

            def Type(self) -> int:  # noqa: N802  (the schema's method name)
                return tflite.TensorType.FLOAT32

            def Quantization(self) -> None:  # noqa: N802
                return None

        class RealValued(tf.OperatorConverter):
            constants: dict[int, Any] = {}

            def get_input_tensors(self, op):
                tensors = super().get_input_tensors(op)
                for t in tensors:
                    if t.qnn_params is not None:
                        t.qnn_params, t.tensor = None, Float32(t.tensor)
                return tensors

            def get_tensor_value(self, tensor_wrapper, is_sparse=False):
                if tensor_wrapper.tensor_idx in self.constants:
                    return self.constants[tensor_wrapper.tensor_idx]
                return super().get_tensor_value(tensor_wrapper, is_sparse)

        class WithCustomOptions(tflite.Operator):
            """An operator read with other custom options (``convert``)."""

            def __init__(self, op: Any, blob: bytes) -> None:
                super().__init__()
                self.Init(op._tab.Bytes, op._tab.Pos)
                self._blob = np.frombuffer(blob, np.uint8)

            def CustomOptionsAsNumpy(self) -> Any:  # noqa: N802
                return self._blob

        self._with_options = WithCustomOptions
        self._tf = tf
        self._subgraph = model.Subgraphs(0)
        self._converter = RealValued(model, self._subgraph, tf.ExprTable(), bb)
        self._bb = bb

    def kind(self, index: int) -> str | None:
        try:
            kind = self._converter.get_op_code_str(self._subgraph.Operators(index))
        except (NotImplementedError, KeyError):
            return None
        return kind if kind in self._converter.convert_map else None

    def convert(self, index: int, exprs: dict[int, Any], constants: dict[int, Any],
                custom_options: bytes | None = None) -> list[Any]:
        """``custom_options``: FlexBuffer options read instead of the operator's own."""
        converter = self._converter
        converter.constants = constants
        for tensor, expr in exprs.items():
            converter.exp_tab.set_expr(self._tf.get_tensor_name(self._subgraph, tensor), expr,
                                       force_override=True)
        op = self._subgraph.Operators(index)
        if custom_options is not None:
            op = self._with_options(op, custom_options)
        return normalize_outputs(self._bb, converter.convert_map[self.kind(index)](op=op))

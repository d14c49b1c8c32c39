"""What canonqnn reads and writes of the TFLite schema: dtypes and builtin options tables."""

from __future__ import annotations

import tflite

DTYPES = {tflite.TensorType.FLOAT32: "float32", tflite.TensorType.INT32: "int32",
          tflite.TensorType.UINT8: "uint8", tflite.TensorType.INT64: "int64",
          tflite.TensorType.INT16: "int16", tflite.TensorType.INT8: "int8",
          tflite.TensorType.BOOL: "bool", tflite.TensorType.FLOAT16: "float16"}
TENSOR_TYPES = {name: code for code, name in DTYPES.items()}

# Builtin operator -> its options table (None: the operator takes no options).
OPTIONS = {
    "ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions",
    "CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions", "TRANSPOSE_CONV": "TransposeConvOptions",
    "AVERAGE_POOL_2D": "Pool2DOptions", "MAX_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions", "CONCATENATION": "ConcatenationOptions",
    "RESHAPE": "ReshapeOptions", "SQUEEZE": "SqueezeOptions", "TRANSPOSE": "TransposeOptions",
    "PAD": "PadOptions", "PADV2": "PadV2Options",
    "RESIZE_BILINEAR": "ResizeBilinearOptions",
    "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "SOFTMAX": "SoftmaxOptions", "LEAKY_RELU": "LeakyReluOptions", "GELU": "GeluOptions",
    "HARD_SWISH": "HardSwishOptions", "QUANTIZE": "QuantizeOptions",
    "DEQUANTIZE": "DequantizeOptions", "BATCH_MATMUL": "BatchMatMulOptions",
    "STRIDED_SLICE": "StridedSliceOptions", "GATHER": "GatherOptions", "SPLIT": "SplitOptions",
    "SHAPE": "ShapeOptions", "PACK": "PackOptions", "UNPACK": "UnpackOptions",
    "REDUCE_PROD": "ReducerOptions", "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions", "SUM": "ReducerOptions", "CAST": "CastOptions",
    "EXPAND_DIMS": "ExpandDimsOptions", "RANGE": "RangeOptions", "FILL": "FillOptions",
    "FLOOR_DIV": "FloorDivOptions", "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions", "ARG_MAX": "ArgMaxOptions", "TILE": "TileOptions",
    "GATHER_ND": "GatherNdOptions",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions", "SVDF": "SVDFOptions",
    "LOGISTIC": None, "TANH": None, "RELU": None, "RELU6": None, "RELU_N1_TO_1": None,
}

BUILTIN_NAMES = {code: name for name, code in vars(tflite.BuiltinOperator).items()
                 if not name.startswith("_") and isinstance(code, int)}
ACTIVATIONS = {code: name for name, code in vars(tflite.ActivationFunctionType).items()
               if not name.startswith("_") and isinstance(code, int)}
PADDINGS = {code: name for name, code in vars(tflite.Padding).items()
            if not name.startswith("_") and isinstance(code, int)}

"""Models built in code for tests, examples, benchmarks and ``canonqnn demo``.

    from canonqnn.testing import onnx_models, tflite_models
    from canonqnn.testing.tflite_writer import GraphWriter

``onnx_models``: small real-architecture float ONNX networks and onnxruntime's static quantizer
around them; ``tflite_models``: quantized TFLite networks, calibrated with the interpreter;
``tflite_writer``: TFLite flatbuffers written from Python, without TensorFlow;
``tflite_from_canonical``: a canonical module written as TFLite; ``torch_from_onnx``: a float ONNX
network as a PyTorch module, PT2E-quantized and lowered to ExecuTorch (the benchmarks' peers).

Fixtures, not part of the conversion: nothing in the core, the frontends or the rewrites imports
this package, so converting a model never needs its dependencies (onnxruntime's quantizer,
flatbuffers, the TFLite interpreter). Importing the package imports none of its modules.
"""

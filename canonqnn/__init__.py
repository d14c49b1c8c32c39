"""canonqnn: quantized models to one canonical int8 form for Apache TVM Relax."""

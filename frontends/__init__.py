"""Model frontends: each turns a source format into the fake-quant (FQ) Relax form.

Frontends use only the canonqnn core; they never emit canonical ops (only rewrites do).
"""

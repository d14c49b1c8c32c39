"""The oracle: a build checked against the runtime its model's numbers come from.

- ``parity``: the parity driver (``canonqnn.parity``): converts, builds and compares with the
  format's source runtimes, reports where the first layer diverges.
- ``source``: a source runtime as the driver holds it (``SourceRuntime``), made by each
  format's oracle (``canonqnn.frontends.<format>.oracle``) through ``canonqnn.formats``.
- ``isolated``: child processes running those runtimes, so that a crash there is an error here.
- ``divergence``: the first diverging layer.

Nothing is imported here: a child process imports ``isolated`` without TVM.
"""

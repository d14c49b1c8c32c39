"""The ONNX format's oracle, on parity's side: the model as onnxruntime gets it, onnxruntime in a
child process (``runtime``), and its values of inner tensors for the first diverging layer."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx

from canonqnn.errors import InvalidModelError, ParityError, first_line
from canonqnn.oracle import isolated
from canonqnn.oracle import source as sources
from canonqnn.oracle.source import SourceRuntime, isolated_runtime

from . import runtime
from .importer import read_model, stored_tensors


def ort_session(model: Any, threads: int | None = None) -> tuple[Any, str]:
    """An onnxruntime CPU session of ``model`` in this process, as parity runs it
    (``runtime.session``), and its description."""
    return runtime.session(oracle_model(model).SerializeToString(), threads)


def oracle_model(model: Any) -> onnx.ModelProto:
    """A copy of ``model`` as onnxruntime gets it: IR 10 at most (the newest it runs), and with
    the data of its tensors stored in external files read into it from the model's folder
    (``_external_data``): given bytes, onnxruntime would read them from the working
    directory, where a file of the same name may hold other values."""
    proto, folder = read_model(model)
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    copy.ir_version = min(copy.ir_version, 10)
    _external_data(copy, folder)
    return copy


def _external_data(proto: onnx.ModelProto, folder: str) -> None:
    """Read the data of ``proto``'s tensors stored in external files into it. Their files must
    be regular files inside ``folder`` (the model's): a relative path that stays there after
    ``..`` and symbolic links are resolved. Refusals name the tensor (``InvalidModelError``)."""
    from onnx.external_data_helper import (
        ExternalDataInfo,
        load_external_data_for_tensor,
        uses_external_data,
    )

    for tensor in stored_tensors(proto):  # (read_model refused any of a model in memory)
        if not uses_external_data(tensor):
            continue
        where = f"tensor {tensor.name!r}: its data file"
        location = ExternalDataInfo(tensor).location
        root = os.path.realpath(folder)
        resolved = os.path.realpath(os.path.join(root, location.replace("\0", "")))
        if not location or "\0" in location or os.path.isabs(location) or \
                os.path.commonpath([root, resolved]) != root:
            raise InvalidModelError(f"{where} {location!r} is not inside the model's folder "
                                    f"{folder!r}")
        if not os.path.isfile(resolved):
            raise InvalidModelError(f"{where} {location!r} is not a file in {folder!r}")
        try:
            load_external_data_for_tensor(tensor, root)
        except Exception as exc:  # noqa: BLE001  (onnx's own checks: ValidationError, ...)
            raise InvalidModelError(f"{where} {location!r} cannot be read: "
                                    f"{first_line(exc)}") from None


def expose_tensors(model: Any, names: list[str]) -> tuple[onnx.ModelProto, list[str]]:
    """The model (IR 10) with the tensors ``names`` as graph outputs, and those of them it has:
    onnxruntime returns graph outputs only."""
    proto = oracle_model(model)
    inferred = onnx.shape_inference.infer_shapes(proto)
    typed = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output,
                                 *inferred.graph.input)}
    outputs = {o.name for o in proto.graph.output}
    wanted = [n for n in dict.fromkeys(names) if n in typed]
    proto.graph.output.extend(typed[n] for n in wanted if n not in outputs)
    return proto, wanted


def ort_runtime(proto: onnx.ModelProto, names: list[str],
                threads: int | None = None) -> SourceRuntime:
    """onnxruntime (``runtime.session``) on ``proto`` (IR <= 10, with ``names`` among its graph
    outputs and its external data read in: ``expose_tensors``) in a child process."""
    from onnx.external_data_helper import uses_external_data

    for tensor in stored_tensors(proto):
        if uses_external_data(tensor):  # onnxruntime would look for it in the working directory
            raise ParityError(f"tensor {tensor.name!r} of the model given to onnxruntime keeps "
                              "its data in an external file: read it in first "
                              "(expose_tensors)")
    child = isolated.Child("onnxruntime", runtime.onnxruntime_runner,
                           proto.SerializeToString(), names, threads)
    try:
        return isolated_runtime(child.ready(), child)
    except ParityError:
        child.close()
        raise


def runtimes(model: Any, io: Any, profile: Any) -> list[SourceRuntime]:
    """onnxruntime on ``model``, returning the outputs of ``io`` (``ModelIO``), with the thread
    count of ``profile`` (the module's numerics), on which its float ReduceMean order depends."""
    names = [o.name for o in io.outputs]
    model, found = expose_tensors(model, names)  # a cut module's outputs are inner tensors
    if found != names:
        raise ParityError(f"onnxruntime cannot return {sorted(set(names) - set(found))}")
    return [ort_runtime(model, names, profile.threads)]


def runtime_tensors(model: Any, profile: Any):
    """A ``runtime_tensors`` function of the first diverging layer
    (``canonqnn.oracle.divergence``): onnxruntime (as parity runs it, in a child process, on the
    thread count of ``profile``) with the named tensors exposed as extra graph outputs."""

    def run(names: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        proto, wanted = expose_tensors(model, names)
        if not wanted:
            return {}
        source = ort_runtime(proto, wanted, profile.threads)
        try:
            return dict(zip(wanted, source.run(feed)))
        finally:
            source.close()

    return run


# ---------------------------------------------------------------- onnxruntime on a device
def device_profile(device: Any) -> Any:
    """The numerics profile of onnxruntime on ``device`` (``canonqnn.build.remote.Device``), found
    as ``runtime.profile`` finds this host's: by its machine, and on x86 by the probe run there."""
    version = sources.device_runtime(device, "onnxruntime",
                                     f"onnxruntime=={runtime.ORT_VERSION}.*")

    def pair_sum() -> int:
        return int(run_on_device(device, runtime.probe_model(), runtime.PROBE_FEED, ["Y"],
                                 (runtime.ORT_CONFIG,), 0)[0].reshape(()))

    return runtime.profile_of(version, device.machine, pair_sum)


def device_runtimes(model: Any, io: Any, profile: Any, device: Any) -> list[SourceRuntime]:
    """onnxruntime on ``device``, run by its device server (``canonqnn.build.device_server``) on
    ``model`` as parity runs it here (``runtimes``: the same session settings and threads)."""
    names = [o.name for o in io.outputs]
    proto, found = expose_tensors(model, names)
    if found != names:
        raise ParityError(f"onnxruntime cannot return {sorted(set(names) - set(found))}")
    data = proto.SerializeToString()
    source = SourceRuntime(f"onnxruntime on the device at {device.address}", None)

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        outputs = run_on_device(device, data, feed, names, runtime.ORT_CONFIGS, profile.threads)
        source.description = f"{outputs.pop()} (the device at {device.address})"
        return outputs

    source.run = run
    return [source]


def device_runtime_tensors(model: Any, profile: Any, device: Any):
    """``runtime_tensors`` with onnxruntime on ``device``: the named tensors exposed as extra
    graph outputs, the model run there as ``device_runtimes`` runs it."""

    def run(names: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        proto, wanted = expose_tensors(model, names)
        if not wanted:
            return {}
        outputs = run_on_device(device, proto.SerializeToString(), feed, wanted,
                                runtime.ORT_CONFIGS, profile.threads)
        return dict(zip(wanted, outputs[:-1]))

    return run


def run_on_device(device: Any, model: bytes, feed: dict[str, np.ndarray], names: list[str],
                  configs: Any, threads: int | None) -> list[Any]:
    """The outputs ``names`` of onnxruntime on ``device`` (a serialized ``model``, its session
    made with the first of ``configs`` it loads with), then the session's description."""
    import json

    from canonqnn.build.device_server import DESCRIPTION

    outputs, rest = sources.run_on_device(device, "onnxruntime", "onnxruntime", model, feed,
                                          names, json.dumps(list(configs)), int(threads or 0))
    return [*outputs, str(rest[DESCRIPTION])]

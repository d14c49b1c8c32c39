"""The one place that calls TVM's IR API, split by concern; ``_tvm.x`` names every helper.

Written against apache-tvm 0.27 (Relax only): see ``compat``. Everything else in canonqnn
that reads or writes Relax goes through these helpers, so a TVM upgrade edits this package
(and the build, ``canonqnn.build``, which drives TVM's pipeline, schedules and tuning).

- ``compat``: imports, private FFI handles, error and op registration, the thread pool's size
- ``caches``: the scope of one conversion (``converting``) and what lives as long as it
- ``types``, ``constants``, ``calls``: types and shapes, constants, calls and their attributes
- ``relax_ops``: the Relax ops canonqnn's writers emit
- ``modules``: functions, bindings and modules
- ``mutator``: the one walk that rewrites calls (the rule engine, the layout pass)
- ``serialize``: TVMScript and the checked JSON graph
- ``dpl``: patterns and partitioning
- ``loops``: kernels written as loops, for legalizations
"""

from __future__ import annotations

from tvm import relax, te, tirx, topi

from .caches import conversion_memo, converting, identity, remembered
from .calls import (
                    attr,
                    attrs_dict,
                    call_of_op,
                    make_attrs,
                    make_call,
                    note_of,
                    op_name,
                    scalar_arg,
                    to_python,
                    with_note,
)
from .compat import (
                    BlockBuilder,
                    Call,
                    Expr,
                    Var,
                    host_cores,
                    install_script_namespace,
                    op_by_name,
                    register_op,
)
from .constants import SHARED_CONST_MAX, const, const_value
from .dpl import (
                    dpl_call,
                    dpl_call_on,
                    fuse_ops_by_pattern,
                    fusion_pattern,
                    leaks_intermediates,
                    merge_composite_functions,
                    register_fusion_patterns,
                    registered_patterns,
                    run_codegen,
)
from .loops import te_tile
from .modules import (
                    call_bindings,
                    callee_function,
                    calls_module,
                    copy_module,
                    function_attr,
                    function_bindings,
                    function_params,
                    function_result,
                    map_nodes,
                    module_functions,
                    normalize_outputs,
                    relax_functions,
                    single_call_module,
                    string_function,
                    tuple_fields,
                    tuple_item,
                    var_name,
                    well_formed_problem,
                    with_function,
)
from .mutator import CallWalk, remove_dead_bindings
from .relax_ops import (
                    add,
                    astype,
                    clip,
                    clip_float,
                    conv2d,
                    dequantize,
                    permute_dims,
                    quantize,
                    subtract,
)
from .serialize import (
                    JSON_EXPANSION_FLOOR,
                    JSON_EXPANSION_PER_NODE,
                    JSON_LITERALS,
                    JSON_MAX_DEPTH,
                    JSON_NAMED,
                    check_json_graph,
                    load_json,
                    save_json,
                    script,
)
from .types import (
                    dtype_of,
                    inferred_type,
                    is_const,
                    is_function,
                    is_tensor,
                    is_var,
                    items,
                    ndim_of,
                    same_type,
                    shape_of,
                    tensor_dtypes,
                    tensor_type,
                    tensor_types,
                    tensor_var,
                    ty,
)

__all__ = [
    # TVM's own modules, for op legalizations
    "relax", "te", "tirx", "topi",
    # compat
    "BlockBuilder", "Call", "Expr", "Var", "host_cores", "install_script_namespace",
    "op_by_name", "register_op",
    # caches
    "conversion_memo", "converting", "identity", "remembered",
    # types, constants, calls
    "dtype_of", "inferred_type", "is_const", "is_function", "is_tensor", "is_var", "items",
    "ndim_of", "same_type", "shape_of", "tensor_dtypes", "tensor_type", "tensor_types",
    "tensor_var", "ty",
    "SHARED_CONST_MAX", "const", "const_value",
    "attr", "attrs_dict", "call_of_op", "make_attrs", "make_call", "note_of", "op_name",
    "scalar_arg", "to_python", "with_note",
    # relax ops
    "add", "astype", "clip", "clip_float", "conv2d", "dequantize", "permute_dims", "quantize",
    "subtract",
    # functions and modules
    "call_bindings", "callee_function", "calls_module", "copy_module", "function_attr",
    "function_bindings", "function_params", "function_result", "map_nodes", "module_functions",
    "normalize_outputs", "relax_functions", "single_call_module", "string_function",
    "tuple_fields", "tuple_item", "var_name", "well_formed_problem", "with_function",
    # the mutator
    "CallWalk", "remove_dead_bindings",
    # serialization
    "JSON_EXPANSION_FLOOR", "JSON_EXPANSION_PER_NODE", "JSON_LITERALS", "JSON_MAX_DEPTH",
    "JSON_NAMED", "check_json_graph", "load_json", "save_json", "script",
    # patterns and partitioning
    "dpl_call", "dpl_call_on", "fuse_ops_by_pattern", "fusion_pattern", "leaks_intermediates",
    "merge_composite_functions", "register_fusion_patterns", "registered_patterns",
    "run_codegen",
    # kernels written as loops, for legalizations
    "te_tile",
]

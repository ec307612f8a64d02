"""``from_onnx``: an ONNX model as a kiln model.

The file is read with the ``onnx`` package (an optional dependency: ``pip
install onnx``) and checked whole before anything runs or compiles: its
opset, every op type (all the unsupported ones are listed at once, with
their counts and first nodes), the dtypes of its inputs and weights. Each
node then becomes a ``Step`` calling its converter (``onnx_math``,
``onnx_nn``, ``onnx_shape``); float initializers become ``Parameter`` s
under their ONNX names (a BatchNormalization's statistics become buffers),
integer ones static constants that fold.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path


from ..errors import FrontendError
from . import onnx_contrib, onnx_math, onnx_nn, onnx_qoperator, onnx_quant, onnx_shape  # noqa: F401 - converters
from .onnx_qdq import fuse_qdq, scale_inputs
from .onnx_qoperator import fuse_qoperator, op_name, through_floats
from .onnx_quant import FUSED
from .onnx_table import CONVERTERS, Node
from .program import ImportedModel, InputSpec, Step, parameter
from .values import as_value, tensor_or_static, to_kiln_dtype

#: the ai.onnx opsets kiln reads (the converters know each op's changes across them)
OPSET_MIN = 7


def supported_onnx_ops() -> list[str]:
    """The ONNX op types kiln imports.

    Returns
    -------
    list of str
        The op types, sorted (``kiln ops --onnx``); those of another domain
        than ONNX's own prefixed with it (``com.microsoft.QGemm``).
    """
    return sorted(CONVERTERS)


def opset_max() -> int:
    from onnx import defs
    return defs.onnx_opset_version()


def _onnx():
    try:
        import onnx
    except ImportError:
        raise FrontendError("reading ONNX models needs the onnx package: pip install onnx",
                            where="kiln.frontend.from_onnx") from None
    return onnx


def load_model(source):
    """The ``ModelProto`` of a path or a ``ModelProto``, its external data loaded."""
    onnx = _onnx()
    where = "kiln.frontend.from_onnx"
    if isinstance(source, onnx.ModelProto):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise FrontendError(f"got {type(source).__name__}, expected a path to an .onnx file or an "
                            "onnx.ModelProto", where=where, arg="model")
    path = Path(source)
    if not path.is_file():
        raise FrontendError(f"{path}: no such file", where=where, arg="model")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # DecodeError and friends: not a protobuf of a model
        raise FrontendError(f"{path} is not an ONNX model ({type(e).__name__}: {str(e)[:200]})", where=where,
                            arg="model") from None
    if not model.graph.node and not model.graph.output:
        raise FrontendError(f"{path} is not an ONNX model (no graph)", where=where, arg="model")
    from onnx import external_data_helper
    missing = []
    for tensor in external_data_helper._get_all_tensors(model):
        if external_data_helper.uses_external_data(tensor):
            info = {e.key: e.value for e in tensor.external_data}
            file = path.parent / info.get("location", "")
            if not file.is_file():
                missing.append(f"{tensor.name} -> {file}")
    if missing:
        raise FrontendError(f"missing external-data file(s): {'; '.join(missing[:5])}"
                            f"{f' and {len(missing) - 5} more' if len(missing) > 5 else ''}", where=where,
                            arg="model")
    try:
        external_data_helper.load_external_data_for_model(model, str(path.parent))
    except Exception as e:
        raise FrontendError(f"{path}: its external data could not be read ({e})", where=where, arg="model") from None
    return model


def _opset(model) -> int:
    versions = {imp.domain or "ai.onnx": imp.version for imp in model.opset_import}
    version = versions.get("ai.onnx")
    if version is None:
        raise FrontendError("the model imports no ai.onnx opset", where="kiln.frontend.from_onnx", arg="model")
    if not OPSET_MIN <= version <= opset_max():
        raise FrontendError(f"opset {version} is outside the supported range {OPSET_MIN}..{opset_max()}",
                            where="kiln.frontend.from_onnx", arg="model")
    return version


def check_ops(nodes) -> None:
    """Refuse every op type kiln has no converter for, all at once."""
    unknown: dict = {}
    for k, node in enumerate(nodes):
        op = op_name(node)
        if op not in CONVERTERS:
            unknown.setdefault(op, []).append(node.name or f"#{k}")
    if unknown:
        parts = [f"{op} x{len(names)} (first: {names[0]!r})" for op, names in sorted(unknown.items())]
        raise FrontendError(f"{len(unknown)} unsupported op type(s): {'; '.join(parts)}. `kiln ops --onnx` lists "
                            "the supported ones", where="kiln.frontend.from_onnx", arg="model")


def _attrs(node) -> dict:
    from onnx import helper
    out = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode() for v in value]
        out[attr.name] = value
    return out


def _value_dtype(value_info, what: str) -> str:
    from onnx import helper
    elem = value_info.type.tensor_type.elem_type
    if not value_info.type.HasField("tensor_type"):
        raise FrontendError(f"{what} {value_info.name!r} is not a tensor (sequences and maps are not supported)",
                            where="kiln.frontend.from_onnx", arg="model")
    return to_kiln_dtype(helper.tensor_dtype_to_np_dtype(elem), f"{what} {value_info.name!r}")


def _input_specs(graph, initializers, input_shapes) -> list:
    specs = []
    for value_info in graph.input:
        if value_info.name in initializers:
            continue
        dims = []
        for d in value_info.type.tensor_type.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None)
        spec = InputSpec(_identifier(value_info.name), _value_dtype(value_info, "input"), dims, value_info.name)
        specs.append(spec)
    given = dict(input_shapes or {})
    names = {s.source for s in specs} | {s.name for s in specs}
    unknown = [k for k in given if k not in names]
    if unknown:
        raise FrontendError(f"no input named {unknown[0]!r}; the model's inputs: "
                            f"{', '.join(s.source for s in specs)}", where="kiln.frontend.from_onnx",
                            arg="input_shapes")
    for spec in specs:
        shape = given.get(spec.source, given.get(spec.name))
        if shape is None:
            continue
        shape = tuple(None if d is None else int(d) for d in shape)
        if len(shape) != len(spec.shape) and spec.shape:
            raise FrontendError(f"input {spec.source!r} has rank {len(spec.shape)}, got shape {shape}",
                                where="kiln.frontend.from_onnx", arg="input_shapes")
        if any(a is not None and b is not None and a != b for a, b in zip(shape, spec.shape)):
            raise FrontendError(f"input {spec.source!r} is declared {list(spec.shape)}, got shape {shape}",
                                where="kiln.frontend.from_onnx", arg="input_shapes")
        if spec.shape and spec.shape[0] is None:  # the file's symbolic batch stays one: fixed are the others
            shape = (None, *shape[1:])
        spec.shape = shape
    return specs


def _convert(converter, node, *values):
    """A converter's result, bare numbers made static arrays (``as_value``);
    a quantized model's codes moved by a value-moving op as floats."""
    return as_value(through_floats(converter, node, *values))


def _identifier(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() and out != "out" else f"in_{out}"


def from_onnx(model, input_shapes=None, target=None) -> ImportedModel:
    """An ONNX model as a ``kiln.nn.Module``.

    Parameters
    ----------
    model : str, path or onnx.ModelProto
        The ``.onnx`` file (its external data is read from beside it) or a
        loaded model.
    input_shapes : dict, optional
        ``{input name: shape}`` for inputs whose dims the file leaves
        symbolic (``dim_param``) and that an export needs fixed; ``None``
        keeps a dim symbolic. A first dim the file leaves symbolic stays
        the model's dynamic batch whatever is given for it.
    target : optional
        The CPU the model will run on (default this one). A quantized (QDQ)
        model's convolutions and products run kiln's int8 kernels where it
        has an 8-bit dot product (AVX-512 VNNI); elsewhere they stay on the
        dequantized float path, which computes the same and runs faster there
        (``model.qdq`` says which and why).

    Returns
    -------
    ImportedModel
        Call it with the inputs (positionally or by name); its parameters are
        the float initializers by ONNX name.

    Raises
    ------
    FrontendError
        A file that is not an ONNX model, a missing external-data file, an
        opset outside ``OPSET_MIN``..the installed onnx's, every unsupported
        op type at once, an unsupported dtype.
    """
    proto = load_model(model)
    opset = _opset(proto)
    graph = proto.graph
    check_ops(graph.node)
    from onnx import numpy_helper
    initializers = {t.name: t for t in graph.initializer}
    stats = {n.input[i] for n in graph.node if n.op_type == "BatchNormalization" for i in (3, 4) if len(n.input) > i}
    scales = scale_inputs(graph.node)  # quantization scales: constants, not weights
    params, buffers, constants, arrays = {}, {}, {}, {}
    for name, tensor in initializers.items():
        array = arrays[name] = numpy_helper.to_array(tensor)
        to_kiln_dtype(array.dtype, f"initializer {name!r}")
        if name in scales:
            constants[name] = array
        elif array.dtype.kind == "f" and array.ndim > 0 and name in stats:
            buffers[name] = parameter(array, trained=False)
        elif array.dtype.kind == "f" and array.ndim > 0:
            params[name] = parameter(array)
        else:
            constants[name] = tensor_or_static(array)
    inputs = _input_specs(graph, initializers, input_shapes)
    for out in graph.output:
        _value_dtype(out, "output")
    from ..runtime.device import as_target
    dot = "avx512vnni" in as_target(target).isa
    nodes, fused, qdq = fuse_qdq(list(graph.node), arrays, [o.name for o in graph.output], dot)
    nodes, qoperator = fuse_qoperator(nodes, arrays, dot)
    qdq += qoperator
    constants.update(fused)
    steps = []
    for k, node in enumerate(nodes):
        info = Node(node.op_type, node.name or f"{node.op_type}_{k}", _attrs(node), opset, len(node.output))
        fn = FUSED[node.op_type] if node.domain == "kiln" else CONVERTERS[op_name(node)]
        steps.append(Step(functools.partial(_convert, fn, info), node.input, node.output, info.name, node.op_type))
    model = ImportedModel(steps, inputs, [o.name for o in graph.output], params, buffers, constants, "onnx")
    model.qdq = qdq
    return model

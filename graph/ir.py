"""The op graph: values, the op applications between them, and edits.

A ``Graph`` is what a model's forward (``graph.trace``, for export) or a
whole training step (``nn.record``, compiled by ``graph.step``) becomes:
``Node``s applying registered ops to ``Value``s, in the order they ran (a
topological order). A value is a graph input, a constant (its numpy data is
known at export: a weight, a folded expression) or a node's output. A
frontend builds one directly with the checked ``input``, ``const``,
``apply`` and ``output``; passes rewrite it in place with the few edits
below, each keeping the order topological.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm.sym.analyzer import Analyzer

from ..errors import DTypeError, ExportError, ShapeError
from ..te.registry import get_op
from ..te.quantize import QUANTIZED
from ..te.shapes import DTYPES

#: the name of a traced symbolic sequence length (``graph.trace``'s ``dynamic_seq``)
SEQ = "seq"


@dataclass(eq=False)
class Value:
    """One tensor of the graph: ``shape`` (ints, or a symbolic batch dim) and
    ``dtype``; ``data`` for a constant, ``node`` for an op's output."""

    shape: tuple
    dtype: str
    node: "Node | None" = None
    data: np.ndarray | None = None
    name: str = ""

    @property
    def is_const(self) -> bool:
        return self.data is not None

    def __repr__(self) -> str:
        kind = "const" if self.is_const else self.node.op.name if self.node else "input"
        return f"<{kind} {self.name} {tuple(map(str, self.shape))}:{self.dtype}>"


@dataclass(eq=False)
class Node:
    """An op applied to values. ``epilogue`` lists the elementwise ops fused
    into its write-back (``graph.fuse``): ``(op, attrs, other operands)``, each
    taking the running result as its first input; a reduction (a global pool)
    can end the list. A ``prologue`` node (``graph.fuse.fuse_prologues``)
    computes the node's first input inside its kernel: that input is no
    operand, the prologue's operands are. An ``inplace`` node wrote
    its outputs over its inputs when it was recorded; its outputs are still
    new values here, and ``Graph.writes_inputs`` says when lowering may keep
    it in place."""

    op: object
    attrs: dict
    inputs: list
    outputs: list = field(default_factory=list)
    epilogue: list = field(default_factory=list)
    inplace: bool = False  # each output overwrites the input ``op.inplace`` names (a recorded ``apply_``)
    prologue: "Node | None" = None

    @property
    def name(self) -> str:
        own = "_".join([self.op.name] + [e[0].name for e in self.epilogue])
        return f"{self.prologue.name}_{own}" if self.prologue else own

    def operands(self) -> list:
        """Every value the node reads: its inputs (the prologue's operands in
        place of the first, when it has one), then its epilogue's other operands."""
        inputs = self.prologue.operands() + self.inputs[1:] if self.prologue else list(self.inputs)
        return inputs + [v for _, _, others in self.epilogue for v in others]

    def __repr__(self) -> str:
        return f"<node {self.name} {self.attrs}>"


class Graph:
    """Inputs, outputs and the nodes between them, in a topological order.

    ``output_names`` has one entry per output added with ``output`` (None for
    an unnamed one); the passes keep outputs in place, so names stay in step.
    """

    def __init__(self):
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.output_names: list[str | None] = []
        self.nodes: list[Node] = []
        self._consts = 0

    def input(self, name: str, shape, dtype: str) -> Value:
        """A new graph input ``name`` (an identifier, unique among the inputs)
        of ``shape`` (ints >= 0, or symbolic dims such as a batch
        ``tirx.Var``) and ``dtype`` (one of ``kiln.te.DTYPES``)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ShapeError(f"got {name!r}, expected an identifier", where="Graph.input", arg="name")
        if any(v.name == name for v in self.inputs):
            raise ShapeError(f"got {name!r}, which names an input already", where="Graph.input", arg="name")
        try:
            dims = tuple(shape)
        except TypeError:
            dims = None
        if dims is None or not all(isinstance(d, tvm.ir.expr.Expr) or (
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0) for d in dims):
            raise ShapeError(f"got {shape!r} for input {name!r}, expected a sequence of ints >= 0 or symbolic "
                             "dims", where="Graph.input", arg="shape")
        if str(dtype) not in DTYPES:
            raise DTypeError(f"got {dtype!r} for input {name!r}, expected one of {', '.join(DTYPES)}",
                             where="Graph.input", arg="dtype")
        value = Value(tuple(d if isinstance(d, tvm.ir.expr.Expr) else int(d) for d in dims), str(dtype), name=name)
        self.inputs.append(value)
        return value

    def const(self, array, name: str = "") -> Value:
        """A constant holding ``array`` (a contiguous copy where it is not one),
        named ``name`` or ``c<k>``; it joins the graph when a node reads it."""
        data = np.ascontiguousarray(array)
        if str(data.dtype) not in DTYPES + QUANTIZED:  # a quantized layer's weights are int8
            raise DTypeError(f"got an array of {data.dtype}, expected one of {', '.join(DTYPES + QUANTIZED)}",
                             where="Graph.const", arg="array")
        self._consts += 1
        return Value(data.shape, str(data.dtype), data=data, name=name or f"c{self._consts - 1}")

    def apply(self, op, inputs: list, attrs: dict | None = None) -> list[Value]:
        """Append ``op`` (an ``Op`` or its name) applied to ``inputs`` (values
        of this graph) with ``attrs``, checked as ``Op.check`` checks a call
        (a bad shape, dtype or attribute raises the kiln error naming the op);
        return its outputs. An op whose output length depends on the data is
        an ``ExportError``: a compiled graph sizes every value ahead of time."""
        op = get_op(op)
        if op.data_dependent:
            raise ExportError("its output's length depends on the data, and a compiled graph sizes every value "
                              "ahead of time", op=op.name, arg="inputs")
        inputs = list(inputs)
        for i, v in enumerate(inputs):
            if not isinstance(v, Value) or (v.node is None and not v.is_const
                                            and not any(v is x for x in self.inputs)):
                raise ShapeError(f"input {i} is {v!r}, expected a value of this graph (Graph.input, Graph.const "
                                 "or an apply's output)", op=op.name, arg="inputs")
        workload = op.check([v.shape for v in inputs], [v.dtype for v in inputs], attrs)
        return self.add(op, workload.attrs, inputs, list(zip(workload.out_shapes, workload.out_dtypes))).outputs

    def output(self, value: Value, name: str | None = None) -> None:
        """Make ``value`` the graph's next output, named ``name`` (None: unnamed)."""
        if not isinstance(value, Value):
            raise ShapeError(f"got {value!r}, expected a value of this graph", where="Graph.output", arg="value")
        if name is not None and (not isinstance(name, str) or not name or name in self.output_names):
            raise ShapeError(f"got {name!r}, expected a non-empty name no other output has", where="Graph.output",
                             arg="name")
        self.outputs.append(value)
        self.output_names.append(name)

    def add(self, op, attrs: dict, inputs: list, out_specs: list) -> Node:
        """Append ``op(inputs)`` with outputs of ``out_specs`` ``[(shape, dtype)]``,
        unchecked: for a caller holding the call's ``Workload`` already (a
        recorded training step); ``apply`` checks."""
        node = Node(op, dict(attrs), list(inputs))
        node.outputs = [Value(tuple(s), str(d), node=node, name=f"{op.name}{len(self.nodes)}.{i}")
                        for i, (s, d) in enumerate(out_specs)]
        self.nodes.append(node)
        return node

    def insert(self, before: Node, op, attrs: dict, value: Value, name: str) -> Value:
        """``op(value)`` as a node of its own placed right before ``before``
        (one input, one output, named ``name``); its output."""
        attrs = op.parse_attrs(attrs)
        check = op.check([value.shape], [value.dtype], attrs)
        node = Node(op, attrs, [value])
        node.outputs = [Value(tuple(check.out_shapes[0]), check.out_dtypes[0], node=node, name=name)]
        self.nodes.insert(self.nodes.index(before), node)
        return node.outputs[0]

    def users(self, value: Value) -> list[Node]:
        """The nodes that read ``value`` (a node reading it twice is listed twice)."""
        return [n for n in self.nodes for v in n.operands() if v is value]

    def is_output(self, value: Value) -> bool:
        return any(v is value for v in self.outputs)

    def sole_user(self, value: Value) -> Node | None:
        """The one node reading ``value`` once, if nothing else (an output included) reads it."""
        users = self.users(value)
        return users[0] if len(users) == 1 and not self.is_output(value) else None

    def replace_uses(self, old: Value, new: Value) -> None:
        """Make every reader of ``old`` (and the outputs) read ``new``."""
        for node in self.nodes:
            node.inputs = [new if v is old else v for v in node.inputs]
            node.epilogue = [(op, attrs, [new if v is old else v for v in others])
                             for op, attrs, others in node.epilogue]
        self.outputs = [new if v is old else v for v in self.outputs]

    def remove(self, node: Node) -> None:
        """Drop a node whose outputs nobody reads any more."""
        assert not any(self.users(v) or self.is_output(v) for v in node.outputs), node
        self.nodes.remove(node)

    def writes_inputs(self, node: Node) -> bool:
        """Whether ``node`` can write its outputs over graph inputs in the
        compiled module (an optimizer's update of a parameter and its state):
        it was in place, and every input it overwrites is a graph input. Every
        read of those inputs' old values comes before it in the recorded order,
        so the module may reuse their memory."""
        return node.inplace and not node.epilogue and all(
            any(node.inputs[node.op.inplace[k]] is v for v in self.inputs) for k in range(len(node.outputs)))

    def prune(self) -> int:
        """Drop the nodes no output depends on (work a traced run did and
        threw away); return how many."""
        live = {id(v) for v in self.outputs}
        kept = []
        for node in reversed(self.nodes):
            if any(id(v) in live for v in node.outputs):
                kept.append(node)
                live.update(id(v) for v in node.operands())
        dropped = len(self.nodes) - len(kept)
        self.nodes = kept[::-1]
        return dropped

    def specialized(self, batch: int) -> "Graph":
        """A copy with every symbolic dim (and attribute) that names the
        batch set to ``batch``: the same nodes at one concrete batch (a
        symbolic sequence length stays), its constants shared with this
        graph."""
        out, env = Graph(), {}

        def copy(v: Value) -> Value:
            if v.is_const:
                return v
            if id(v) not in env:
                env[id(v)] = Value(concrete(v.shape, batch), v.dtype, name=v.name)
            return env[id(v)]

        def copy_node(node: Node) -> Node:
            new = Node(node.op, concrete(node.attrs, batch), [copy(v) for v in node.inputs],
                       epilogue=[(op, concrete(attrs, batch), [copy(v) for v in others])
                                 for op, attrs, others in node.epilogue], inplace=node.inplace,
                       prologue=node.prologue and copy_node(node.prologue))
            for v in node.outputs:
                copied = copy(v)
                copied.node = new
                new.outputs.append(copied)
            return new

        out.inputs = [copy(v) for v in self.inputs]
        out.nodes = [copy_node(node) for node in self.nodes]
        out.outputs = [copy(v) for v in self.outputs]
        out.output_names = list(self.output_names)
        return out

    def constants(self) -> list[Value]:
        """The distinct constants the nodes read."""
        seen: dict[int, Value] = {}
        for node in self.nodes:
            for v in node.operands():
                if v.is_const:
                    seen.setdefault(id(v), v)
        return list(seen.values())

    def __repr__(self) -> str:
        lines = [f"graph({', '.join(map(repr, self.inputs))})"]
        for n in self.nodes:
            lines.append(f"  {', '.join(v.name for v in n.outputs)} = {n.name}"
                         f"({', '.join(v.name or repr(v) for v in n.operands())}) {n.attrs}")
        lines.append(f"  return {', '.join(v.name for v in self.outputs)}")
        return "\n".join(lines)


def concrete(item, batch: int, seq: int | None = None):
    """``item`` (a shape, an attribute dict, a tuple of dims...) with its
    symbolic expressions evaluated at ``batch`` for every variable but the
    sequence length (``SEQ``, a trace's ``dynamic_seq``), which ``seq`` sets
    where given and is kept symbolic otherwise."""
    if isinstance(item, dict):
        return {k: concrete(v, batch, seq) for k, v in item.items()}
    if isinstance(item, (tuple, list)):
        return type(item)(concrete(v, batch, seq) for v in item)
    if isinstance(item, tvm.ir.expr.Expr) and not isinstance(item, tvm.tirx.IntImm):
        analyzer = Analyzer()
        for var in tvm.tirx.analysis.undefined_vars(item):
            if var.name != SEQ:
                analyzer.bind(var, batch)
            elif seq is not None:
                analyzer.bind(var, seq)
        value = analyzer.simplify(item)
        return int(value) if isinstance(value, tvm.tirx.IntImm) else value
    return item

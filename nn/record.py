"""Record an eager run into a ``graph.Graph`` (tracing by running).

While a ``Recorder`` is active, every op an eager ``Tensor`` applies is also
appended to its graph: the run computes real values (the call being traced
gets its results) and leaves behind the graph of what it did, backward and
in-place updates included, in the order the ops were pushed (a topological
order). Arrays are followed by identity: an op's outputs are new values; an
in-place op (``apply_``) gives the array it writes a new value.

An array the run reads before any op made it is one of:

* an *argument* (``arg``) or a *feed* (``feed``: a value the caller supplies
  at every call, such as an optimizer's hyperparameters, or a *random feed*,
  ``random_feed``: host random numbers, such as dropout's mask, that each
  call draws afresh);
* a *constant*: made from host data during the run by a Tensor that did not
  outlive it (``Tensor(np.ones(...))`` for a seed gradient) — its value at
  first read is baked into the graph;
* *state*: anything else (parameters, optimizer buffers, running statistics).
  Its *owners* are the Tensors seen holding it that outlive the run; a
  compiled call reads the state from them and gives them the new value an
  in-place update or a ``.data =`` assignment produced during the run.

A Tensor made by an op during the run that outlives it (other than a returned
one), or an op whose output length depends on its data, makes the run
*untraceable*: ``Recorded.problem`` says why, and the caller runs eagerly.
What a traceable run left is compiled and replayed by ``RecordedCall``
(``nn/recorded.py``).
"""
from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..errors import BuildError
from ..graph.ir import Graph, Value

_active: "Recorder | None" = None


def active() -> "Recorder | None":
    return _active


@dataclass
class State:
    """A graph input read from ``owners`` (or ``array`` when none outlived the
    run) at every call, and the output index of its new value (None: unchanged)."""

    value: Value
    array: object
    owners: list
    out: int | None = None
    inplace: bool = False  # the module writes the new value over the old one (``RecordedCall``)


@dataclass
class Recorded:
    """What a recorded run left: the graph (inputs: the arguments, the feeds,
    then the states; outputs: the results, then the states' new values)."""

    graph: Graph
    args: int = 0
    feeds: list = field(default_factory=list)  # the key of each feed, in input order
    draws: dict = field(default_factory=dict)  # random feed key -> draw(): a fresh array like the traced one
    states: list = field(default_factory=list)
    results: int = 0
    problem: str | None = None


class Recorder:
    def __init__(self):
        self.graph = Graph()
        self._values: dict[int, Value] = {}  # id(array) -> the value it holds now
        self._keep: list = []  # every array seen, so the ids above stay unique
        self._first: list[tuple[object, Value]] = []  # (array, placeholder) read before anything made it
        self._created: dict[int, object] = {}  # id(array) -> weakref of the Tensor that made it from host data
        self._snapshots: dict[int, np.ndarray] = {}
        self._holders: dict[int, tuple] = {}  # id(tensor) -> (weakref, array it held when first seen)
        self._made: list = []  # weakrefs of the Tensors ops made, with the op's name
        self._feeding = None
        self._feeds: dict[int, object] = {}  # id(array) -> feed key
        self._draws: dict = {}  # random feed key -> its draw function
        self._drawing = False  # inside random_feed: host random numbers are a feed, not a problem
        self._args: list[Value] = []
        self._thread = threading.get_ident()  # other threads (a DataLoader's workers) are not recorded
        self.problem: str | None = None

    # -- hooks (nn/tensor.py) ------------------------------------------------------------
    def created(self, tensor) -> None:
        """``tensor`` was made from host data."""
        if threading.get_ident() != self._thread:
            return
        self._keep.append(tensor._array)
        if self._feeding is not None:
            self._feeds[id(tensor._array)] = self._feeding
        else:
            self._created[id(tensor._array)] = weakref.ref(tensor)

    def apply(self, op, attrs: dict, tensors: list, arrays: list, specs: list, made: list | None) -> None:
        """``op(tensors)`` wrote ``arrays`` (new ones, or inputs for an in-place op);
        ``made`` are the Tensors returned for new outputs."""
        if self.problem is not None or threading.get_ident() != self._thread:
            return
        if op.data_dependent:
            self.problem = f"op '{op.name}' has a data-dependent output length"
            return
        inputs = [self._value(t) for t in tensors]
        node = self.graph.add(op, attrs, inputs, specs)
        node.inplace = made is None
        for array, value in zip(arrays, node.outputs):
            self._keep.append(array)
            self._values[id(array)] = value
        for t in made or ():
            self._made.append((weakref.ref(t), op.name))

    def host_random(self) -> None:
        """The run drew numbers from the host's generator outside ``random_feed``."""
        if threading.get_ident() == self._thread and self.problem is None and not self._drawing:
            self.problem = ("it draws random numbers on the host (dropout's mask), which a compiled call "
                            "would repeat")

    # -- the caller's side -----------------------------------------------------------------
    def arg(self, tensor) -> None:
        """``tensor`` is the next argument: a graph input."""
        value = Value(tensor.shape, tensor.dtype, name=f"arg{len(self._args)}")
        self._args.append(value)
        self._keep.append(tensor._array)
        self._values[id(tensor._array)] = value

    @contextlib.contextmanager
    def feeding(self, key):
        """Within the block, Tensors made from host data are feeds named ``key``."""
        self._feeding = key
        try:
            yield
        finally:
            self._feeding = None

    @contextlib.contextmanager
    def random_feed(self, draw):
        """Within the block, host random numbers may be drawn, and the Tensor
        made from them is a feed that each compiled call fills with ``draw()``
        (an array of the same shape and dtype, drawn afresh)."""
        key = ("random", len(self._draws))
        self._draws[key] = draw
        self._feeding, self._drawing = key, True
        try:
            yield
        finally:
            self._feeding, self._drawing = None, False

    def on_thread(self) -> bool:
        """Whether the calling thread is the one being recorded."""
        return threading.get_ident() == self._thread

    def _value(self, tensor) -> Value:
        array = tensor._array
        if id(tensor) not in self._holders:
            self._holders[id(tensor)] = (weakref.ref(tensor), array)
        value = self._values.get(id(array))
        if value is None:  # read before any op made it: an argument, a feed, a constant or state
            value = Value(tensor.shape, tensor.dtype, name=f"in{len(self._first)}")
            self._values[id(array)] = value
            self._keep.append(array)
            self._first.append((array, value))
            if id(array) in self._created:  # its value now, before any in-place op writes it
                self._snapshots[id(array)] = array.numpy()
        return value

    def finish(self, results: list) -> Recorded:
        """Classify what the run read and wrote; ``results`` are the returned Tensors."""
        graph = self.graph
        out = Recorded(graph, args=len(self._args), problem=self.problem)
        if out.problem is not None:
            return out
        returned = {id(t) for t in results}
        gc.collect()  # the run's temporaries (the autograd graph's views, cycles) are gone now
        for ref, name in self._made:
            t = ref()
            if t is not None and id(t) not in returned:
                out.problem = (f"a tensor made by op '{name}' outlives the function (kept in an attribute, a "
                               "list or a global); a compiled call would not update it")
                return out
        alive = [(t, first) for ref, first in self._holders.values() if (t := ref()) is not None
                 and id(t) not in returned]
        graph.inputs = list(self._args)
        feeds, states = [], []
        for array, value in self._first:
            if id(array) in self._feeds:
                feeds.append((self._feeds[id(array)], value))
                continue
            owners = [t for t, first in alive if first is array]
            maker = self._created.get(id(array))
            if maker is not None and maker() is not None and all(maker() is not t for t in owners):
                owners.append(maker())  # made here and kept (an optimizer's new buffer)
            if maker is not None and not owners:
                value.data = self._snapshots[id(array)]
                value.name = f"c{len(graph.constants())}"
            else:
                states.append(State(value, array, owners))
        for key, value in feeds:
            value.name = f"feed{len(out.feeds)}"
            out.feeds.append(key)
            if key in self._draws:
                out.draws[key] = self._draws[key]
            graph.inputs.append(value)
        for state in states:
            state.value.name = f"state{len(out.states)}"
            out.states.append(state)
            graph.inputs.append(state.value)
        if any(id(t._array) not in self._values for t in results):
            out.problem = "the function returned a tensor that no op of it made or read"
            return out
        graph.outputs = [self._values[id(t._array)] for t in results]
        out.results = len(results)
        for state in states:  # the value each owner holds now
            held = [v for t in state.owners if (v := self._values.get(id(t._array))) is not None]
            if len({id(v) for v in held}) > 1:
                out.problem = "tensors that shared one array before the function hold different values after it"
                return out
            if held and held[0] is not state.value:
                state.out = len(graph.outputs)
                graph.outputs.append(held[0])
        return out


@contextlib.contextmanager
def recording(args):
    """A new recorder, active within the block, whose arguments are the
    Tensors ``args``; ``finish`` it after the block."""
    global _active
    if _active is not None:
        raise BuildError("a compiled function is already being traced in this process: kiln.compile calls do "
                         "not nest", where="kiln.compile", arg="fn")
    recorder = _active = Recorder()
    try:
        for t in args:
            recorder.arg(t)
        yield recorder
    finally:
        _active = None

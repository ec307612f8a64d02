"""A recorded run compiled into one module and replayed: ``RecordedCall``.

``nn/record.py`` turns one eager run into a graph (``Recorded``): its
arguments, feeds and states told apart by array identity. ``RecordedCall``
compiles that graph (``graph.step.compile_graph``) and runs it in place of
the eager run: the arguments' arrays and this call's feeds in, each state
read from the Tensors that own it, the results out and each state's new
value handed to its owners. It deals in arrays only; ``kiln.compile``
(``nn/compiled.py``) wraps its results as Tensors.

The feeds of a recorded optimizer step are its hyperparameters
(``record_updates`` records each update with them as feeds, ``Feeds``
fills them at every call from the optimizer's plan) and dropout's masks
(drawn afresh at every call).
"""
from __future__ import annotations

import numpy as np
import tvm

from ..graph.step import compile_graph
from ..runtime import engine as _engine
from ..runtime.device import host_tensor
from .record import Recorded, Recorder


class Feeds:
    """The feeds of a recorded call: an optimizer step's hyperparameters —
    which feed each parameter's update read (``feed_of``) and the update it
    was (``updates``: index -> (op, attrs)) — and random feeds (``draws``:
    position -> a function drawing a fresh array). ``arrays(optimizer,
    planned)`` gives this call's feeds, hyperparameters planned as an eager
    step plans them, or None when the plan no longer matches the recorded
    one (another op or attribute, or parameters that shared a feed now
    differing)."""

    def __init__(self, feed_of: dict, updates: dict, count: int, draws: dict | None = None):
        self.feed_of, self.updates, self.count = feed_of, updates, count
        self.draws = draws or {}
        self._arrays: dict = {}  # (values, dtype) -> TVM tensor: one per distinct setting

    def arrays(self, optimizer, planned) -> list | None:
        if len(planned) != len(self.updates):
            return None
        values = [None] * self.count
        for i, update in planned:
            if self.updates.get(i) != (update.op, update.attrs):
                return None
            k = self.feed_of[i]
            if values[k] is None:
                values[k] = (update.values, optimizer.params[i].dtype)
            elif values[k][0] != update.values:
                return None
        out = []
        for k, key in enumerate(values):
            if k in self.draws:  # drawn afresh at every call (dropout's mask)
                out.append(self.draws[k]())
                continue
            array = self._arrays.get(key)
            if array is None:
                if len(self._arrays) > 64:
                    self._arrays.clear()
                array = self._arrays[key] = host_tensor(np.asarray(key[0], key[1]), tvm.cpu(0))
            out.append(array)
        return out

    @classmethod
    def of(cls, recorded: Recorded, feed_of: dict, updates: dict) -> "Feeds":
        """The feeds of ``recorded``, from the value each update read its hyperparameters from."""
        feeds = recorded.graph.inputs[recorded.args:recorded.args + len(recorded.feeds)]
        positions = {i: next(k for k, f in enumerate(feeds) if f is v) for i, v in feed_of.items()}
        draws = {k: recorded.draws[key] for k, key in enumerate(recorded.feeds) if key in recorded.draws}
        return cls(positions, updates, len(feeds), draws)


def record_updates(recorder: Recorder, optimizer, planned) -> tuple[dict, dict]:
    """Apply the ``planned`` updates eagerly under ``recorder``, each one's
    hyperparameters a feed: ``(feed_of, updates)`` for ``Feeds.of``."""
    feed_of, updates = {}, {}
    for i, update in planned:
        with recorder.feeding(i):
            optimizer.apply(i, update, optimizer.params[i].grad.detach())
        if recorder.problem is None:  # the value the update read its hyperparameters from
            feed_of[i] = recorder.graph.nodes[-1].inputs[-1]
        updates[i] = (update.op, update.attrs)
    return feed_of, updates


class RecordedCall:
    """One recorded signature as one compiled module call.

    Compiling rewrites ``recorded.graph`` (``graph.step``: pruned, fused,
    memory planned); a state whose new value the module then writes over its
    own input keeps its memory, and its owners are left as they are. Holds
    the module's function and what keeps its code alive, the states, the
    results' ``specs`` (``(shape, dtype)`` each) and the ``feeds``.
    Raises ``kiln.errors.BuildError`` (or another ``KilnError``) when the
    graph cannot be compiled."""

    def __init__(self, recorded: Recorded, feeds: Feeds, target=None, winograd: bool | None = None):
        self.func, self._keep = compile_graph(recorded.graph, target, winograd)
        _mark_in_place(recorded)
        self.states = recorded.states
        self.specs = [(tuple(int(d) for d in v.shape), v.dtype) for v in recorded.graph.outputs[:recorded.results]]
        self.feeds = feeds

    def feed_arrays(self, optimizer) -> list | None:
        """This call's feeds, planned on ``optimizer`` (None: no optimizer);
        None when the optimizer's plan no longer matches the recorded one."""
        planned = optimizer.plan_step(list(self.feeds.updates)) if optimizer is not None else []
        return self.feeds.arrays(optimizer, planned)

    def __call__(self, arrays: list) -> list:
        """Run the module on ``arrays`` (the arguments and this call's feeds,
        ready) and each state's current array (waited for); give the owners
        of each state not written in place its new array. Returns the
        results' arrays: only those are taken from the module's result tuple
        (each item taken costs a call through the FFI)."""
        engine, ins = _engine.default(), list(arrays)
        for state in self.states:
            if state.owners:
                owner = state.owners[0]
                engine.wait_for_var(owner._var)
                ins.append(owner._array)
            else:
                ins.append(state.array)
        result = self.func(*ins)
        single = isinstance(result, tvm.runtime.Tensor)
        for state in self.states:
            if state.out is not None and not state.inplace:
                state.array = result if single else result[state.out]
                for owner in state.owners:
                    owner._array = state.array
        return [result if single else result[k] for k in range(len(self.specs))]


def _mark_in_place(recorded: Recorded) -> None:
    """After the graph's passes: mark each state whose new value the module
    writes over its own input (``Graph.writes_inputs``), which keeps its
    memory, so its owners need not take the output."""
    graph = recorded.graph
    for state in recorded.states:
        if state.out is None:
            continue
        value = graph.outputs[state.out]
        node = value.node
        state.inplace = bool(node is not None and graph.writes_inputs(node)
                             and node.inputs[node.op.inplace[node.outputs.index(value)]] is state.value)

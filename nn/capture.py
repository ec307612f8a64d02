"""Eager backward passes and optimizer steps replayed as one compiled module call each.

A training loop written eagerly runs the same backward pass every step: the
same ops on the same shapes, wired the same way. ``backward`` describes the
autograd graph it is about to walk (``structure``: each node's op, attribute
set, shapes, which values it saved, its parents, the leaves, and which saved
slots share an array). The ``REPEATS``-th time a structure is seen, the
sweep runs eagerly under the recorder (``nn/record.py``) with the seed
gradient and every saved array as arguments and the leaves' gradients as
results, and ``graph.step`` compiles it; from then on that structure's
backward is one module call whose outputs become the leaves' ``.grad``.

Only the plain case is captured: no ``create_graph``, every leaf's ``.grad``
None (the ``zero_grad`` pattern), no compiled function being traced. A
structure the recorder cannot capture, or that does not compile, stays eager.

An optimizer's step is captured the same way (``step``): its updates'
ops and the identity of the parameter, gradient and state arrays they touch
make the key; the gradients are the arguments, the hyperparameters feeds
planned at every step (``compiled.Feeds``), and the updates write the
parameters and their state in place, as the eager kernels do.
``KILN_CAPTURE=0`` turns capturing off.
"""
from __future__ import annotations

from collections import OrderedDict

from .. import config
from ..errors import KilnError
from ..runtime import engine as _engine
from . import record

#: the sighting of a structure that records and compiles it (earlier ones run
#: eagerly: a graph seen once or twice, as in most tests, never pays a compile)
REPEATS = 3
#: structures remembered; the least recently used is forgotten
MAX_STRUCTURES = 32

_seen: "OrderedDict[tuple, object]" = OrderedDict()  # structure -> sightings, _Replay, or _EAGER
_EAGER = "eager"
_RECORD = "record"  # this sighting records the structure


class _Same:
    """A node's attribute dict in a structure: equal when it is the same
    object (a kernel's attrs are shared by every call of its signature) or
    has the same items; holding it keeps its id from being reused."""

    __slots__ = ("attrs",)

    def __init__(self, attrs):
        self.attrs = attrs

    def __hash__(self):
        return hash(len(self.attrs))

    def __eq__(self, other):
        return self.attrs is other.attrs or self.attrs == other.attrs


def structure(order, root, index, out_grad):
    """``(key, saved arrays, their engine vars, leaf nodes)`` of the sweep
    from ``root`` over ``order`` (inputs first); None when it is not the
    plain case."""
    where = {id(n): k for k, n in enumerate(order)}
    parts, arrays, variables, leaves, first = [], [], [], [], {}
    shared = []
    for node in order:
        if node.op is None:
            leaf = node.leaf()
            if leaf is not None and leaf.requires_grad:
                if leaf.grad is not None:
                    return None
                leaves.append(leaf)
                parts.append(("leaf", str(leaf.dtype), leaf.shape))
            else:
                leaves.append(None)
                parts.append(("gone",))
            continue
        slots = []
        for array, var, shape, dtype in node.inputs + node.outputs:
            saved = array is not None
            if saved:
                shared.append(first.setdefault(id(array), len(arrays)))
                arrays.append(array)
                variables.append(var)
            slots.append((shape, dtype, saved))
        parents = tuple(None if p is None else (where[id(p[0])], p[1]) for p in node.parents)
        parts.append((node.op, _Same(node.attrs), tuple(slots), parents))
    key = (tuple(parts), tuple(shared), where[id(root)], index, out_grad.shape, out_grad.dtype)
    return key, arrays, variables, leaves


class _Replay:
    def __init__(self, func, keep, recorded, leaves_out):
        self.func, self._keep = func, keep
        self.states = recorded.states
        self.leaves_out = leaves_out  # per leaf position: its output index, or None (no gradient reached it)
        self.specs = [(tuple(int(d) for d in v.shape), v.dtype) for v in recorded.graph.outputs]

    def __call__(self, out_grad, arrays, variables, leaves) -> None:
        engine = _engine.default()
        engine.wait_for_var(out_grad._var)
        for var in variables:
            if var is not None:
                engine.wait_for_var(var)
        outs = record.call(self.func, [out_grad._array, *arrays], self.states,
                           [k for leaf, k in zip(leaves, self.leaves_out) if leaf is not None and k is not None])
        from .tensor import Tensor

        for leaf, k in zip(leaves, self.leaves_out):
            if leaf is not None and k is not None:
                shape, dtype = self.specs[k]
                leaf.grad = Tensor._wrap(outs[k], engine.new_var(), shape=(shape, dtype, "backward"))
                leaf._grad_owned = False


def backward(order, root, index, out_grad, sweep) -> None:
    """Run the sweep from ``(root, index)`` with ``out_grad``: as one module
    call when its structure is captured, else ``sweep()`` (eagerly, recording
    it the ``REPEATS``-th time)."""
    found = None
    if record._active is None and config.capture_enabled():
        found = structure(order, root, index, out_grad)
    if found is None:
        sweep()
        return
    key, arrays, variables, leaves = found
    entry = _sighting(key)
    if isinstance(entry, _Replay):
        entry(out_grad, arrays, variables, leaves)
    elif entry == _RECORD:
        _seen[key] = _capture(out_grad, arrays, leaves, sweep)
    else:
        sweep()


def _sighting(key):
    """One more sighting of structure ``key``: its replay, ``_EAGER``,
    ``_RECORD`` (the caller records it and stores what that gives), or the
    sightings so far (run eagerly). The least recently seen beyond
    ``MAX_STRUCTURES`` are forgotten."""
    entry = _seen.pop(key, 0)
    if isinstance(entry, int):
        entry = entry + 1 if entry + 1 < REPEATS else _RECORD
    _seen[key] = entry
    while len(_seen) > MAX_STRUCTURES:
        _seen.popitem(last=False)
    return entry


def _capture(out_grad, arrays, leaves, sweep):
    """Run ``sweep`` eagerly under the recorder and compile what it did (or
    return ``_EAGER`` when it cannot be captured)."""
    from .tensor import Tensor

    recorder = record.start()
    try:
        recorder.arg(out_grad)
        for k, array in enumerate(arrays):
            recorder.arg(Tensor._wrap(array, None, shape=(tuple(int(d) for d in array.shape), str(array.dtype),
                                                          f"saved{k}")))
        sweep()
    finally:
        record.stop()
    grads = [leaf.grad if leaf is not None else None for leaf in leaves]
    results = [g for g in grads if g is not None]
    leaves_out, k = [], 0
    for g in grads:
        leaves_out.append(None if g is None else k)
        k += g is not None
    recorded = recorder.finish(results)
    if recorded.problem is not None or not results or recorded.feeds:
        return _EAGER
    if any(s.out is not None for s in recorded.states):  # the sweep wrote state: keep it eager
        return _EAGER
    try:
        return _Replay(*record.compile_recorded(recorded), recorded, leaves_out)
    except KilnError:
        return _EAGER


def step(optimizer, planned, apply) -> None:
    """Apply an optimizer's ``planned`` updates (``[(index, Update)]``;
    ``apply(index, update)`` runs one eagerly): as one module call when the
    same updates on the same arrays were captured, else one kernel each
    (recording them the ``REPEATS``-th time)."""
    found = None
    if planned and record._active is None and config.capture_enabled():
        found = _step_structure(optimizer, planned)
    if found is None:
        for i, update in planned:
            apply(i, update)
        return
    key, grads = found
    entry = _sighting(key)
    if isinstance(entry, _StepReplay):
        hypers = entry.feeds.arrays(optimizer, planned)
        if hypers is not None:
            entry(grads, hypers)
            return
        _seen[key] = _EAGER  # the plan changed under the same arrays: stay eager
    elif entry == _RECORD:
        _seen[key] = _capture_step(optimizer, planned, grads)
        return
    for i, update in planned:
        apply(i, update)


def _step_structure(optimizer, planned):
    """``(key, gradients)`` of a step: each update's op and attributes, and
    the identity, shape and dtype of the parameter, gradient and state
    arrays it touches (a parameter re-bound to new memory is a new step)."""
    parts, grads = [optimizer], []
    for i, update in planned:
        p = optimizer.params[i]
        g = p.grad
        if g is None or g._array is None:
            return None
        grads.append(g)
        parts.append((i, update.op, _Same(update.attrs), p.shape, p.dtype, id(p._array), g.shape, g.dtype,
                      tuple((id(s._array), s.shape) for s in update.states)))
    return tuple(parts), grads


class _StepReplay:
    def __init__(self, func, keep, recorded, feeds):
        self.func, self._keep, self.states, self.feeds = func, keep, recorded.states, feeds

    def __call__(self, grads, hypers) -> None:
        engine = _engine.default()
        for g in grads:
            engine.wait_for_var(g._var)
        record.call(self.func, [g._array for g in grads] + hypers, self.states)


def _capture_step(optimizer, planned, grads):
    from .compiled import Feeds, record_updates

    recorder = record.start()
    try:
        for g in grads:
            recorder.arg(g)
        feed_of, updates = record_updates(recorder, optimizer, planned)
    finally:
        record.stop()
    recorded = recorder.finish([])
    if recorded.problem is not None or not recorded.graph.outputs:
        return _EAGER
    try:
        return _StepReplay(*record.compile_recorded(recorded), recorded, Feeds.of(recorded, feed_of, updates))
    except KilnError:
        return _EAGER


def forget() -> None:
    """Drop every captured structure (tests; a changed configuration)."""
    _seen.clear()

"""``kiln.compile``: a function of Tensors — a whole training step — as one
compiled module call.

    step = kiln.compile(lambda x, y: loss_fn(model(x), y), optimizer)
    loss = step(x, y)        # forward, backward and update: one module call

The first call with a new signature (the arguments' shapes and dtypes) runs
eagerly while ``nn/record.py`` records it — the function, then with an
optimizer the loss's backward and the optimizer's fused updates — into one
graph, which ``graph.step`` compiles (pruned, fused, memory planned
statically) into a ``RecordedCall`` (``nn/recorded.py``). Later calls of that signature run the module: the arguments,
the optimizer's hyperparameters for this step and the state (parameters,
optimizer buffers, running statistics) in; the results and the state's new
values out. Updates recorded in place (the optimizer's) write the state's
own memory (``graph.lower``: ``call_tir_inplace``); other new state (running
statistics re-bound with ``.data =``) is handed to its Tensors without a copy.

As with ``jax.jit``, Python decisions the function makes are fixed when it
is traced: a module's ``training`` flag, shapes, attributes read as numbers.
Each call plans the optimizer's step in Python (``Optimizer.plan_step``), so
learning-rate changes and Adam's step count apply. Gradients stay inside the
module (parameters' ``.grad`` are left None). Dropout's masks are feeds of
the module, drawn afresh on the host at every call from the seeded family
(the same draws, in the same order, as eager calls). A function the recorder
cannot record (a data-dependent op, other host random numbers, a tensor it
keeps beyond the call) runs eagerly, with one warning saying why.
"""
from __future__ import annotations

import warnings

from ..errors import AttrError, BuildError, KilnError, ShapeError
from ..graph.step import optimize_step
from ..runtime import engine as _engine
from . import record
from .recorded import Feeds, RecordedCall, record_updates
from .tensor import Tensor, no_grad

#: signatures compiled per function; another one compiles again, the oldest is dropped
MAX_SIGNATURES = 8


class CompileWarning(UserWarning):
    """A compiled function runs eagerly (the reason is the message)."""


class _Eager:
    """A signature that runs eagerly, and why."""

    def __init__(self, reason: str):
        self.reason = reason


class Compiled:
    """``fn`` compiled per signature; see the module's docstring and ``kiln.compile``."""

    def __init__(self, fn, optimizer=None, target=None, winograd: bool | None = None):
        if not callable(fn):
            raise AttrError(f"got {type(fn).__name__}, expected a callable", where="kiln.compile", arg="fn")
        if optimizer is not None and not hasattr(optimizer, "plan_step"):
            raise AttrError(f"got {type(optimizer).__name__}, expected a kiln.optim optimizer", where="kiln.compile",
                            arg="optimizer")
        self.fn, self.optimizer, self.target, self.winograd = fn, optimizer, target, winograd
        self._steps: dict = {}
        self._warned: set = set()

    def __call__(self, *args):
        tensors = [a if isinstance(a, Tensor) else Tensor(a) for a in args]
        key = tuple((t.shape, t.dtype) for t in tensors)
        step = self._steps.get(key)
        if isinstance(step, RecordedCall):
            feeds = step.feed_arrays(self.optimizer)
            if feeds is not None:
                return self._unpack(self._replay(step, tensors, feeds))
            step = None  # the optimizer's plan changed (another op or attribute): trace it again
        if step is None:
            return self._trace(key, tensors)
        return self._unpack(self._eager(tensors)[0])

    @property
    def signatures(self) -> int:
        """How many signatures are compiled (not counting those that run eagerly)."""
        return sum(isinstance(s, RecordedCall) for s in self._steps.values())

    @staticmethod
    def _replay(step: RecordedCall, tensors, feeds) -> list:
        """The compiled call on ``tensors`` (waited for) and ``feeds``, its results as Tensors."""
        engine = _engine.default()
        for t in tensors:
            engine.wait_for_var(t._var)
        outs = step([t._array for t in tensors] + feeds)
        return [Tensor._wrap(a, engine.new_var(), shape=(s, d, "compiled")) for a, (s, d) in zip(outs, step.specs)]

    def _unpack(self, results):
        return results[0] if self._single else tuple(results)

    def _results(self, out) -> list:
        self._single = isinstance(out, Tensor)
        results = [out] if self._single else list(out) if isinstance(out, (tuple, list)) else None
        if not results or not all(isinstance(r, Tensor) for r in results):
            raise AttrError(f"the function returned {type(out).__name__}, expected a Tensor or a tuple of Tensors",
                            where="kiln.compile", arg="fn")
        if self.optimizer is not None and results[0].shape != ():
            raise ShapeError(f"the function's first result has shape {results[0].shape}, expected the 0-d loss "
                             "the optimizer steps on", where="kiln.compile", arg="fn")
        return results

    def _eager(self, tensors, recorder=None) -> tuple[list, dict, dict]:
        """One eager call: the fallback, and the traced run itself, whose
        optimizer updates ``recorder`` records (``record_updates``):
        ``(detached results, feed_of, updates)``."""
        opt, feed_of, updates = self.optimizer, {}, {}
        if opt is None:
            with no_grad():
                return [r.detach() for r in self._results(self.fn(*tensors))], feed_of, updates
        opt.zero_grad()
        results = self._results(self.fn(*tensors))
        results[0].backward()
        if recorder is None:
            opt.step()
        else:
            with no_grad():
                feed_of, updates = record_updates(recorder, opt, opt.plan_step())
        opt.zero_grad()
        return [r.detach() for r in results], feed_of, updates

    def graph(self, *args):
        """The optimized graph (``kiln.graph.Graph``) one call on ``args``
        compiles to, without compiling it: what ``kiln.autotune.extract``
        reads. The call runs once, eagerly (a training step's update is
        applied). Raises ``BuildError`` when the call cannot be compiled."""
        tensors = [a if isinstance(a, Tensor) else Tensor(a) for a in args]
        recorded = self._record(tensors)[0]
        if recorded.problem is not None:
            raise BuildError(f"{getattr(self.fn, '__name__', 'the function')} cannot be compiled: "
                               f"{recorded.problem}", where="kiln.compile", arg="fn")
        return optimize_step(recorded.graph, self.target, self.winograd)

    def _record(self, tensors):
        """One eager call under a recorder: ``(recorded, results, feed_of, updates)``."""
        with record.recording(tensors) as recorder:
            results, feed_of, updates = self._eager(tensors, recorder)
        return recorder.finish(results), results, feed_of, updates

    def _trace(self, key, tensors):
        recorded, results, feed_of, updates = self._record(tensors)
        if recorded.problem is None:
            try:
                step = RecordedCall(recorded, Feeds.of(recorded, feed_of, updates), self.target, self.winograd)
            except KilnError as exc:
                recorded.problem = f"it could not be compiled: {exc}"
        if recorded.problem is not None:
            step = _Eager(recorded.problem)
            if recorded.problem not in self._warned:
                self._warned.add(recorded.problem)
                warnings.warn(f"kiln.compile: running {getattr(self.fn, '__name__', 'the function')} eagerly: "
                              f"{recorded.problem}", CompileWarning, stacklevel=3)
        if len(self._steps) >= MAX_SIGNATURES:
            self._steps.pop(next(iter(self._steps)))
        self._steps[key] = step
        return self._unpack(results)


def compile(fn=None, optimizer=None, *, target=None, winograd: bool | None = None):  # noqa: A001 - torch.compile's name
    """Compile ``fn`` (Tensors in, a Tensor or a tuple of Tensors out) into one
    module call per signature.

    With ``optimizer``, ``fn`` returns the loss first (a 0-d Tensor) and each
    call is a whole training step: the loss's gradients with respect to the
    optimizer's parameters, then the optimizer's update, in place. Returns
    ``fn``'s results, detached. Usable as a decorator: ``@kiln.compile``.
    3x3 stride-1 convolutions and their data gradients run as Winograd
    convolutions (``kiln.strategy.conv2d``: rounding of about 1e-6 to 1e-5 of the
    output, where the direct kernel's is 1e-6), as eager ops run them;
    ``winograd=False`` keeps them direct (default: ``KILN_WINOGRAD``, on).
    """
    if fn is None:
        return lambda f: Compiled(f, optimizer, target, winograd)
    return Compiled(fn, optimizer, target, winograd)

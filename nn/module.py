"""The ``Module`` base class (needle's and PyTorch's): parameters, buffers and
submodules are found by walking attributes, and every forward is made of
registered ops, so it runs as compiled kernels. The layers are in
``modules.py`` and ``conv_modules.py``; state dicts in ``state.py``."""
from __future__ import annotations

import numpy as np

from ..runtime import pool as _pool
from ..runtime.pool import KernelPool
from . import state as S
from .tensor import Tensor


class Parameter(Tensor):
    """A tensor that a Module owns and an optimizer updates.

    Parameters
    ----------
    data : array_like or Tensor
        The initial values.
    dtype : str, optional
        The dtype (``data``'s by default).
    requires_grad : bool, default True
        Whether backward computes its gradient.
    """

    def __init__(self, data, *, dtype=None, requires_grad: bool = True):
        super().__init__(data, dtype=dtype, requires_grad=requires_grad)


def _walk(value, prefix: str = "", path: tuple = ()):
    """``(dotted name, item)`` for every Module (``value`` itself included) and
    every Tensor reachable from ``value`` through Module attributes, lists,
    tuples and dicts, in definition order: the one walk that parameters, state
    and ``train``/``eval`` share, so they always see the same tree. A module
    met again inside itself (a cycle) is not entered twice."""
    if isinstance(value, Tensor):
        yield prefix, value
    elif isinstance(value, Module) and id(value) not in path:
        yield prefix, value
        for key, v in vars(value).items():
            yield from _walk(v, prefix if key in value._unprefixed else _join(prefix, key), path + (id(value),))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk(v, _join(prefix, str(i)), path)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, _join(prefix, str(k)), path)


def _named_tensors(value):
    """``(dotted name, tensor)`` for every Tensor reachable from ``value``."""
    return ((name, t) for name, t in _walk(value) if isinstance(t, Tensor))


def _modules(value):
    """Every Module reachable from ``value``, ``value`` first."""
    return (m for _, m in _walk(value) if isinstance(m, Module))


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


class Module:
    """A layer or a model: its Parameters and submodules are its attributes.

    State is named by attribute path, as in PyTorch: ``Linear`` holds
    ``weight`` and ``bias``; ``Sequential(a, b)`` names its layers ``0``,
    ``1`` (``"0.weight"``); a list, tuple or dict attribute ``layers`` of
    modules gives ``"layers.1.bias"``. Parameters are trained and saved; any
    other Tensor attribute (BatchNorm's ``running_mean``/``running_var``) is a
    *buffer*: saved and loaded with the state, never trained.

    Calling a model runs its ops on its ``kernel_pool`` with each layer as its
    own site (so each layer has its own shape budget for concrete kernels);
    the pool is not state and is neither saved nor copied with the weights.
    """

    training = True
    #: attributes whose items are named without the attribute's own name
    #: (``Sequential`` stores its layers in ``modules`` but names them "0", "1")
    _unprefixed: tuple = ()

    def named_parameters(self) -> list[tuple[str, Parameter]]:
        """``(name, Parameter)`` pairs, each parameter once (under its first name)."""
        seen, out = set(), []
        for name, t in _named_tensors(self):
            if isinstance(t, Parameter) and id(t) not in seen:
                seen.add(id(t))
                out.append((name, t))
        return out

    def parameters(self) -> list[Parameter]:
        """The Parameters, each once, in definition order (what an optimizer takes)."""
        return [p for _, p in self.named_parameters()]

    def named_buffers(self) -> list[tuple[str, Tensor]]:
        """``(name, Tensor)`` of the saved state that is not trained (e.g. running statistics)."""
        seen, out = set(), []
        for name, t in _named_tensors(self):
            if not isinstance(t, Parameter) and id(t) not in seen:
                seen.add(id(t))
                out.append((name, t))
        return out

    def torch_layout(self) -> dict:
        """How this module's own state differs from its PyTorch counterpart's.

        ``state_dict`` and ``load_state_dict`` with ``layout="torch"`` ask
        every module for this; a module whose tensors are PyTorch's as they
        are (``Conv``'s OIHW weight, the default) returns an empty dict.

        Returns
        -------
        dict
            Attribute name -> ``kiln.nn.state.TRANSPOSED`` for a 2-D tensor
            that PyTorch stores transposed (``Linear.weight``), or a
            ``kiln.nn.state.TorchOnly`` for an entry PyTorch saves that kiln
            keeps as a plain attribute, outside its own state
            (``num_batches_tracked`` of the batch norms).
        """
        return {}

    def state_dict(self, layout: str = "kiln") -> dict[str, np.ndarray]:
        """Every parameter and buffer by name, as numpy copies (later training
        does not change them); ``np.savez(path, **model.state_dict())`` saves it.

        Parameters
        ----------
        layout : {"kiln", "torch"}
            ``"torch"``: as the PyTorch model of the same architecture names
            and shapes its state (see ``torch_layout``): ``Linear`` weights
            (out, in), BatchNorm's ``num_batches_tracked``. PyTorch's
            ``load_state_dict`` takes tensors:
            ``{k: torch.from_numpy(v) for k, v in state.items()}``.

        Returns
        -------
        dict of str to numpy.ndarray
        """
        return S.state_dict(list(_walk(self)), layout, where=f"{type(self).__name__}.state_dict")

    def load_state_dict(self, state, strict: bool = True, layout: str = "kiln") -> S.LoadResult:
        """Copy ``state`` (name -> array or Tensor, e.g. from ``state_dict``) into
        this module's parameters and buffers, each cast to its dtype.

        Nothing is changed unless every entry fits: with ``strict`` (the
        default) the names must match exactly; shapes must always match.

        Parameters
        ----------
        state : mapping of str to array_like
            numpy arrays, kiln Tensors or (with ``layout="torch"``) PyTorch
            tensors.
        strict : bool, default True
            Refuse missing and unexpected names; otherwise return them.
        layout : {"kiln", "torch"}
            ``"torch"``: ``state`` is a PyTorch ``state_dict`` of the same
            architecture: ``Linear`` weights (out, in) are transposed, and
            BatchNorm's ``num_batches_tracked`` is kept (see ``torch_layout``).
            A square ``Linear`` weight fits either way, so the layout must be
            the right one: it cannot be told from the shapes.

        Returns
        -------
        LoadResult
            ``(missing_keys, unexpected_keys)``: empty lists when strict.

        Raises
        ------
        AttrError
            Missing or unexpected names (strict), or a value that is not
            numeric, or an unknown ``layout``; the message lists every problem
            (and says so when ``state`` fits the other layout).
        ShapeError
            Only shapes disagree; the message lists each name with both
            shapes, in ``layout``'s terms.
        """
        return S.load_state_dict(list(_walk(self)), state, strict, layout,
                                 where=f"{type(self).__name__}.load_state_dict")

    def train(self, mode: bool = True) -> "Module":
        """Put this module and every submodule in training mode (``mode``) or eval mode.

        Returns
        -------
        Module
            ``self``.
        """
        for m in _modules(self):
            m.training = mode
        return self

    def eval(self) -> "Module":
        """``train(False)``: running statistics in BatchNorm, no dropout."""
        return self.train(False)

    @property
    def kernel_pool(self) -> KernelPool:
        """The pool that picks this model's kernels (``runtime/pool.py``),
        made on first use: owned by the model, not part of its state."""
        pool = self.__dict__.get("_kernel_pool")
        if pool is None:
            pool = self.__dict__.setdefault("_kernel_pool", KernelPool())
        return pool

    def __call__(self, *args, **kwargs):
        """``forward`` with this layer as the kernel site: on the active pool
        (the enclosing model's, or a run's), else on this model's own."""
        outer = _pool.active_site()
        pool = self.kernel_pool if outer is None else outer.pool
        with _pool.activate(pool.site(self)):
            return self.forward(*args, **kwargs)

    def forward(self, *args):
        """The layer's computation; subclasses define it."""
        raise NotImplementedError

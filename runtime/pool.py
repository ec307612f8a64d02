"""Kernel pools: which compiled kernel serves an op at the shapes a model meets.

A ``KernelPool`` belongs to whoever runs the ops (a model, a training run);
only ops run outside any of them share the process's default pool. Inside a
pool, every *site* (an opaque hashable key the caller chooses; nn uses the
layer, held weakly) keeps its own memo and its own shape budget: an op at a
site is compiled for concrete shapes (the fastest code) until that site has
met it at ``specialize_limit`` shapes; from the next new
shape on, the dims in which the shape differs from its nearest seen shape
become symbolic, so one kernel serves every later size there (no compile per
batch size or per data-dependent length). Two layers of one op therefore
each keep concrete kernels for their own first sizes, and a layer's kernels
do not depend on what ran before it. A signature runs as the implementation
the strategy layer chooses for it (``kiln.strategy.choose``; ``staged.py``:
a 3x3 convolution at concrete shapes may run as a Winograd convolution), so
an eager op's kernel follows from the op, its shapes and this pool's policy.
The compiled kernels themselves come from ``build`` (the kernel cache), so
sites and pools share them.

Which site is in effect is a context variable: ``pool.activate(key)`` (a
``with`` block) makes ``pool.site(key)`` the ``active_site()`` of the current
thread or task. Ops run where no site was activated use the default pool's
site ``None`` (``default_pool()``), shared by the whole process.

>>> from kiln.te import get_op
>>> pool = KernelPool()
>>> with pool.activate("layer1"):
...     kernel = active_site().dispatch(get_op("relu"), ((8, 4),), ("float32",), {}).kernel
"""
from __future__ import annotations

import contextvars
import threading
import weakref

import tvm_ffi

from ..errors import AttrError, KilnError
from ..te import sym
from .build import build
from .device import alloc, as_target
from .staged import eager_kernel

SPECIALIZE_LIMIT = 4


class KernelPool:
    """The kernels one model or run uses, chosen per site.

    Parameters
    ----------
    specialize_limit : int
        How many shapes of an op (with its dtypes, attrs and ranks) a site
        compiles concretely before it compiles a kernel with symbolic dims.

    Notes
    -----
    A copy of a pool (``copy.deepcopy`` of a model that owns one) is a new,
    empty pool with the same limit: kernels are not model state.
    """

    def __init__(self, specialize_limit: int = SPECIALIZE_LIMIT):
        if isinstance(specialize_limit, bool) or not isinstance(specialize_limit, int) or specialize_limit < 0:
            raise AttrError(f"got {specialize_limit!r}, expected an int >= 0", where="KernelPool",
                            arg="specialize_limit")
        self.specialize_limit = specialize_limit
        # a site key that can be weakly referenced (a layer) takes its memo with it when it goes
        self._weak_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._sites: dict = {}
        self._lock = threading.Lock()

    def site(self, key=None) -> "Site":
        """The site ``key`` of this pool, made on first use."""
        try:
            table = self._weak_sites
            found = table.get(key)
        except TypeError:  # not weakly referenceable (None, a str, a tuple): kept as long as the pool
            table = self._sites
            found = table.get(key)
        if found is None:
            with self._lock:
                found = table.setdefault(key, Site(self))
        return found

    def activate(self, key=None) -> "_Activation":
        """``with pool.activate(key):`` runs ops on this pool's site ``key``."""
        return _Activation(self.site(key))

    def kernels(self, op: str | None = None) -> list:
        """The distinct kernels this pool's sites have chosen (of ``op`` only,
        if given), in the order they were first chosen at each site."""
        with self._lock:
            sites = list(self._weak_sites.values()) + list(self._sites.values())
        found = {}
        for site in sites:
            for key, entry in list(site._memo.items()):
                if op is None or key[0] == op:
                    found.setdefault(id(entry.kernel), entry.kernel)
        return list(found.values())

    def __deepcopy__(self, memo) -> "KernelPool":
        return KernelPool(self.specialize_limit)

    def __reduce__(self):
        return KernelPool, (self.specialize_limit,)

    def __repr__(self) -> str:
        return f"KernelPool(specialize_limit={self.specialize_limit}, sites={len(self._weak_sites) + len(self._sites)})"


class Dispatch:
    """What a site knows of one signature, so that a second call does no
    lookup, shape inference or conversion: the ``kernel``, the output
    ``specs`` (``(shape, dtype)`` each), and the outputs' shape and dtype as
    TVM objects for ``outputs()`` (making them from tuples costs several
    microseconds)."""

    __slots__ = ("kernel", "specs", "empty", "_alloc", "_device")

    def __init__(self, kernel, shapes):
        self.kernel = kernel
        self.specs = kernel.output_specs(shapes)
        self.empty = any(0 in s for s, _ in self.specs)  # nothing to compute: the kernel is never called
        self._alloc = [(tvm_ffi.Shape(s), tvm_ffi.dtype(d)) for s, d in self.specs]
        self._device = kernel.target.device()

    def outputs(self) -> list:
        """Fresh, uninitialized output tensors."""
        if len(self._alloc) == 1:  # most ops: no comprehension (a frame of its own)
            (shape, dtype), = self._alloc
            return [alloc(shape, dtype, self._device, None)]
        return [alloc(shape, dtype, self._device, None) for shape, dtype in self._alloc]

    def launch(self, inputs, outputs) -> None:
        """Run the kernel on device tensors of this signature."""
        if not self.empty:
            self.kernel.launch(inputs, outputs, True)  # checked: no output is empty


class Site:
    """One site of a pool: its memo (signature -> ``Dispatch``) and the
    shapes each op family was first compiled for. Made by ``KernelPool.site``."""

    __slots__ = ("pool", "_memo", "_seen")

    def __init__(self, pool: KernelPool):
        self.pool = pool
        self._memo: dict = {}
        self._seen: dict = {}  # (op, dtypes, attrs, ranks) -> the shapes compiled concretely here

    def dispatch(self, op, shapes: tuple, dtypes: tuple, attrs: dict) -> Dispatch:
        """The ``Dispatch`` of ``op`` on inputs of ``shapes`` (tuples of ints)
        and ``dtypes``: a dict lookup once this signature has been met here (a
        training step calls the same few thousands of times), else the policy
        above and ``build``."""
        try:
            key = (op.name, shapes, dtypes, tuple(attrs.items()))
            entry = self._memo.get(key)
        except TypeError:  # an unhashable attribute value (a list): its repr stands for it
            key = (op.name, shapes, dtypes, repr(sorted(attrs.items())))
            entry = self._memo.get(key)
        if entry is None:
            entry = self._choose(key, op, shapes, dtypes, attrs)
        return entry

    def _choose(self, key, op, shapes, dtypes, attrs) -> Dispatch:
        family = (key[0], key[2], repr(sorted(attrs.items())), tuple(len(s) for s in shapes))
        with self.pool._lock:  # two threads on one site must not both take the last concrete slot
            seen = self._seen.setdefault(family, [])
            nearest = None if shapes in seen or len(seen) < self.pool.specialize_limit else _nearest(seen, shapes)
            if nearest is None and shapes not in seen:
                seen.append(shapes)
        target = as_target(None)
        if nearest is None:  # concrete shapes
            kernel = eager_kernel(op.check(list(shapes), list(dtypes), attrs), target)
        else:
            kernel = _general_kernel(op, nearest, shapes, dtypes, attrs, target)
        kernel = kernel or build(op, list(shapes), list(dtypes), attrs)
        return self._memo.setdefault(key, Dispatch(kernel, shapes))


def _nearest(seen, shapes):
    """The seen shapes that differ from ``shapes`` in the fewest dims."""
    def differing(other):
        return sum(a != b for x, y in zip(other, shapes) for a, b in zip(x, y))
    return min(seen, key=differing)


def _general_kernel(op, before, shapes, dtypes, attrs, target):
    """One kernel for ``before`` and ``shapes``: the dims that differ are
    symbolic (dims that changed alike share a symbol); None if the op rejects it."""
    changes = sorted({(a, b) for x, y in zip(before, shapes) for a, b in zip(x, y) if a != b})
    syms = {change: sym(f"d{k}") for k, change in enumerate(changes)}
    general = [tuple(syms.get((a, b), b) for a, b in zip(x, y)) for x, y in zip(before, shapes)]
    try:
        kernel = eager_kernel(op.check(general, list(dtypes), attrs), target)
        kernel.output_specs(shapes)  # the current shapes bind consistently
    except KilnError:
        return None
    return kernel


_DEFAULT = KernelPool()
_active: contextvars.ContextVar = contextvars.ContextVar("kiln_kernel_site", default=None)
_DEFAULT_SITE = _DEFAULT.site()


def default_pool() -> KernelPool:
    """The pool of ops run where no site is active (shared by the process)."""
    return _DEFAULT


def active_site() -> Site | None:
    """The site activated in this context, or None where none is."""
    return _active.get()


def current_site() -> Site:
    """The site ops run on here: the active one, else the default pool's."""
    return _active.get() or _DEFAULT_SITE


class _Activation:
    """``with``: make ``site`` the active one, restore the previous on exit
    (a fresh object per use, so nested and concurrent uses of one site are safe)."""

    __slots__ = ("site", "_token")

    def __init__(self, site: Site):
        self.site = site

    def __enter__(self) -> Site:
        self._token = _active.set(self.site)
        return self.site

    def __exit__(self, *exc) -> None:
        _active.reset(self._token)


def activate(site: Site) -> _Activation:
    """``with activate(site):`` runs ops on ``site`` (e.g. a gradient on the
    site its forward ran on)."""
    return _Activation(site)


__all__ = ["Dispatch", "KernelPool", "SPECIALIZE_LIMIT", "Site", "activate", "active_site",
           "current_site", "default_pool"]

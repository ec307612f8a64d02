"""An eager op run as the implementation the strategy layer chose
(``kiln.strategy.choose``): the op's own kernel where it runs directly, else
a ``StagedKernel`` launching the implementation's kernels in one dispatch."""
from __future__ import annotations

import tvm_ffi

from .. import config
from ..errors import ShapeError
from ..strategy import Direct, choose
from .build import build, build_workload
from .device import alloc


class StagedKernel:
    """Stands for the op's kernel in a ``Dispatch``: the op's workload
    (``attrs``, ``shapes``... as ``Kernel`` has them, what autograd and the
    recorder read) run as the ``implementation``'s ``stages``: the input's
    blocking (``blocked``, when it reads the input in channel blocks), the
    weight's preparation (``weight``: a transform or a pack) and the kernel
    computing the result (``main``), their intermediates allocated per call
    (one dispatch may run in two engine threads at once)."""

    def __init__(self, workload, target, implementation):
        (x_shape, w_shape), (x_dtype, w_dtype) = workload.shapes[:2], workload.dtypes[:2]
        self.workload, self.target, self.implementation = workload, target, implementation
        block = implementation.in_block
        blocked = build("to_blocked", [x_shape], [x_dtype], {"block": block}, target) if block else None
        weight = build(implementation.weight_op, [w_shape], [w_dtype], implementation.weight_attrs, target) \
            if implementation.weight_op else None
        x_spec = blocked.output_specs([x_shape])[0] if blocked else (tuple(x_shape), x_dtype)
        w_spec = weight.output_specs([w_shape])[0] if weight else (tuple(w_shape), w_dtype)
        main = build(implementation.op, [x_spec[0], w_spec[0], *workload.shapes[2:]],
                     [x_dtype, w_dtype, *workload.dtypes[2:]], implementation.attrs, target)
        self.blocked, self.weight, self.main = blocked, weight, main
        self._scratch = [(tvm_ffi.Shape(s), tvm_ffi.dtype(d))
                         for s, d in ([x_spec] if blocked else []) + ([w_spec] if weight else [])]
        self._device = target.device()

    op = property(lambda self: self.workload.op)
    stages = property(lambda self: [k for k in (self.blocked, self.weight, self.main) if k is not None])
    attrs = property(lambda self: self.workload.attrs)
    shapes = property(lambda self: self.workload.shapes)
    dtypes = property(lambda self: self.workload.dtypes)
    out_dtypes = property(lambda self: self.workload.out_dtypes)

    def output_specs(self, shapes) -> list[tuple[tuple, str]]:
        """``(shape, dtype)`` of the output for inputs of ``shapes``, this kernel's static signature."""
        if [tuple(s) for s in shapes] != [tuple(s) for s in self.shapes]:
            raise ShapeError(f"got {shapes}, expected {self.shapes} (this kernel's signature)", op=self.op.name,
                             arg="inputs")
        return list(zip(self.workload.out_shapes, self.out_dtypes))

    def launch(self, inputs, outputs, checked: bool = False) -> None:
        """Run the stages on device tensors, writing ``outputs``."""
        x, w, *rest = inputs
        scratch = [alloc(shape, dtype, self._device, None) for shape, dtype in self._scratch]
        if self.blocked is not None:
            self.blocked.launch([x], scratch[:1], checked)
            x = scratch[0]
        if self.weight is not None:
            self.weight.launch([w], scratch[-1:], checked)
            w = scratch[-1]
        self.main.launch([x, w, *rest], outputs, checked)

    def __repr__(self) -> str:
        return f"<StagedKernel {self.op.name} {self.shapes} as {' + '.join(k.op.name for k in self.stages)}>"


def eager_kernel(workload, target):
    """The kernel an eager op runs for ``workload``: its own (``Direct``), or
    the ``StagedKernel`` of what ``choose`` picked (the weight is no constant;
    ``KILN_WINOGRAD=0`` rules Winograd out)."""
    implementation = choose(workload, target, without=() if config.winograd() else ("winograd",))
    if isinstance(implementation, Direct):
        return build_workload(workload, target)
    return StagedKernel(workload, target, implementation)

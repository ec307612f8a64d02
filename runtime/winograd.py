"""An eager conv2d (or stride-1 data gradient) run as a Winograd convolution:
the kernels ``graph.winograd.plan`` chooses, launched in one dispatch."""
from __future__ import annotations

import tvm_ffi

from ..errors import ShapeError
from .build import build
from .device import alloc


class WinogradKernel:
    """Stands for the op's kernel in a ``Dispatch``: the op's workload
    (``attrs``, ``shapes``... as ``Kernel`` has them, what autograd and the
    recorder read) run as ``stages``: the input's blocking (``blocked``, when
    planned), the weight transform (``weight``) and ``conv2d_winograd``
    (``conv``), their intermediates allocated per call (one dispatch may run
    in two engine threads at once)."""

    def __init__(self, workload, target, plan):
        (x_shape, w_shape), (x_dtype, w_dtype) = workload.shapes, workload.dtypes
        self.workload, self.target = workload, target
        weight = build("winograd_conv2d_weight", [w_shape], [w_dtype], plan.weight_attrs, target)
        blocked = build("to_blocked", [x_shape], [x_dtype], {"block": plan.in_block}, target) \
            if plan.in_block else None
        u_spec = weight.output_specs([w_shape])[0]
        x_spec = blocked.output_specs([x_shape])[0] if blocked else (tuple(x_shape), x_dtype)
        conv = build("conv2d_winograd", [x_spec[0], u_spec[0]], [x_dtype, w_dtype], plan.conv_attrs, target)
        self.blocked, self.weight, self.conv = blocked, weight, conv
        self._scratch = [(tvm_ffi.Shape(s), tvm_ffi.dtype(d)) for s, d in ([x_spec] if blocked else []) + [u_spec]]
        self._device = target.device()

    op = property(lambda self: self.workload.op)
    stages = property(lambda self: [k for k in (self.blocked, self.weight, self.conv) if k is not None])
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
        x, w = inputs
        scratch = [alloc(shape, dtype, self._device, None) for shape, dtype in self._scratch]
        if self.blocked is not None:
            self.blocked.launch([x], scratch[:1], checked)
            x = scratch[0]
        self.weight.launch([w], scratch[-1:], checked)
        self.conv.launch([x, scratch[-1]], outputs, checked)

    def __repr__(self) -> str:
        return f"<WinogradKernel {self.op.name} {self.shapes} as {' + '.join(k.op.name for k in self.stages)}>"


def winograd_kernel(op, shapes, dtypes, attrs, target):
    """A ``WinogradKernel`` for this eager signature, or None where
    ``graph.winograd.plan`` keeps it direct (or ``KILN_WINOGRAD`` is off)."""
    from .. import config
    from ..graph.winograd import plan

    if op.name not in ("conv2d", "conv2d_backward_data") or not config.winograd():
        return None
    workload = op.check(list(shapes), list(dtypes), attrs)
    found = plan(op.name, workload.shapes, workload.dtypes, workload.attrs, target)
    return None if found is None else WinogradKernel(workload, target, found)

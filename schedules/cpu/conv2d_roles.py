"""The roles of a direct convolution's loops, read once before a CPU conv
template (``conv2d.py``, ``conv2d_transposed.py``) changes anything: which
loop of the block runs over the batch, the output channels, the output rows
and columns, and the reduction's input channels, kernel rows and kernel
columns, with the extents the templates' defaults are computed from.

``conv2d`` and ``conv2d_packed`` lay their block out as ``n, o, y, z | rc,
ry, rx`` (NCHW), ``conv2d`` NHWC as ``n, y, z, o | ry, rx, rc``, a
``conv2d_packed`` writing channel blocks (``out_block``) as ``n, o block, y,
z, o lane | rc, ry, rx``; ``conv2d_backward_data`` as NCHW, its output
channels being ``w``'s input channels.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..util import const_int, extent, find_block, work


@dataclass(frozen=True)
class ConvRoles:
    """A convolution block's loops by role (``tvm.s_tir`` loop handles) and
    what they run over.

    ``o`` is None when the output is already in channel blocks: ``blocks``
    then holds the loops over the blocks and over a block's channels (empty
    otherwise). ``reduction`` is the reduction's loops in the block's order,
    ``ry`` and ``rx`` among them. ``channels`` and ``width`` are static (a
    template declines otherwise); ``batch``, ``height``, ``kernel_rows`` and
    ``per_output`` (the reduction's iterations per output) are None when
    symbolic.
    ``pad`` is the zero-padding stage, None without padding.
    """

    conv: object
    n: object
    o: object | None
    blocks: tuple
    y: object
    z: object
    reduction: tuple
    ry: object
    rx: object
    channels: int
    width: int
    height: int | None
    batch: int | None
    kernel_rows: int | None
    per_output: int | None
    lanes: int
    pad: object | None


def conv_roles(sch, conv, cfg, nchw: bool = True, blocked: bool = False) -> ConvRoles | None:
    """The roles of ``conv``'s loops (NCHW, or NHWC with ``nchw`` False; an
    output in channel blocks with ``blocked``), or None where the output
    channels or width are symbolic: the accumulator's write-back would have a
    tile of unknown extent, which TVM cannot bound."""
    if blocked:
        n, oo, y, z, oi, *reduction = sch.get_loops(conv)
        o, blocks, channels = None, (oo, oi), work(sch, (oo, oi))
    else:
        n, a, b, c, *reduction = sch.get_loops(conv)
        o, y, z = (a, b, c) if nchw else (c, a, b)
        blocks, channels = (), const_int(extent(sch, o))
    width = const_int(extent(sch, z))
    if channels is None or width is None:
        return None
    ry, rx = reduction[1:] if nchw else reduction[:2]
    return ConvRoles(conv=conv, n=n, o=o, blocks=blocks, y=y, z=z, reduction=tuple(reduction), ry=ry, rx=rx,
                     channels=channels, width=width, height=const_int(extent(sch, y)),
                     batch=const_int(extent(sch, n)), kernel_rows=const_int(extent(sch, ry)),
                     per_output=work(sch, reduction), lanes=cfg.target.lanes(str(sch.get(conv).writes[0].source.dtype)),
                     pad=find_block(sch, "_pad"))

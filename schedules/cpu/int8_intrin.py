"""The 8-bit dot-product instructions the int8 templates tensorize with,
registered as TVM tensor intrinsics. Each adds, to each of 16 int32 lanes,
the 4 products of 4 uint8 (one broadcast 32-bit word) and the lane's 4 int8:

``VNNI_16x4``   one ``vpdpbusd`` (AVX-512 VNNI), exact for any int8;
``AVX2_16x4``   per 8 lanes ``vpmaddubsw`` (the products summed in pairs, in
                int16 with saturation), ``vpmaddwd`` by ones (the pairs summed
                in int32) and ``vpaddd``: exact where the weights lie in
                -63..63 (7 bits: a pair of products is at most 2 x 255 x 63 =
                32130, within int16), which the ops' ``weight_bits=7`` promises.

Each has a variant (``local``) whose lanes are a "local" buffer: a register
tile its template writes back tile by tile. They are registered on their
first use (``registered``), not at import: parsing their TVMScript takes
seconds, which every process that imports kiln would pay.

TVM's own ``dot_16x4_vnni`` passes the bytes as ``<16 x i32>``, which the
LLVM it is built with no longer accepts (the intrinsic takes ``<64 x i8>``
since LLVM 20); these pass bytes.
"""
from __future__ import annotations

import threading

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

VNNI_16x4 = "kiln_dot_16x4_u8i8i32_vnni"
AVX2_16x4 = "kiln_dot_16x4_u8i8i32_avx2"
#: the suffix of each intrinsic's variant whose int32 lanes are a "local" buffer (``local``)
LOCAL = "_local"
_registered = False
_lock = threading.Lock()


def local(intrinsic: str) -> str:
    """The variant of ``intrinsic`` that accumulates into a "local" buffer: a
    register tile its template writes back tile by tile."""
    return intrinsic + LOCAL


def _register(scope: str, suffix: str) -> None:
    """Both intrinsics, with their int32 lanes ``c`` in ``scope``."""

    @T.prim_func(s_tir=True)
    def desc(a: T.Buffer((4,), "uint8", offset_factor=1), b: T.Buffer((16, 4), "int8", offset_factor=1),
             c: T.Buffer((16,), "int32", offset_factor=1, scope=scope)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:4], b[0:16, 0:4])
            T.writes(c[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def vnni(a: T.Buffer((4,), "uint8", offset_factor=1), b: T.Buffer((16, 4), "int8", offset_factor=1),
             c: T.Buffer((16,), "int32", offset_factor=1, scope=scope)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:4], b[0:16, 0:4])
            T.writes(c[0:16])
            word = T.reinterpret(a.vload([0], "uint8x4"), dtype="int32")
            c[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"), c.vload([0], dtype="int32x16"),
                T.reinterpret(T.broadcast(word, 16), dtype="uint8x64"), b.vload([0, 0], dtype="int8x64"),
                dtype="int32x16")

    @T.prim_func(s_tir=True)
    def avx2(a: T.Buffer((4,), "uint8", offset_factor=1), b: T.Buffer((16, 4), "int8", offset_factor=1),
             c: T.Buffer((16,), "int32", offset_factor=1, scope=scope)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:4], b[0:16, 0:4])
            T.writes(c[0:16])
            word = T.reinterpret(a.vload([0], "uint8x4"), dtype="int32")
            for half in T.unroll(2):
                pairs = T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.ub.sw"),
                    T.reinterpret(T.broadcast(word, 8), dtype="uint8x32"), b.vload([half * 8, 0], dtype="int8x32"),
                    dtype="int16x16")
                c[T.ramp(half * 8, 1, 8)] = c.vload([half * 8], dtype="int32x8") + T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"), pairs, T.broadcast(T.int16(1), 16),
                    dtype="int32x8")

    TensorIntrin.register(VNNI_16x4 + suffix, desc, vnni)
    TensorIntrin.register(AVX2_16x4 + suffix, desc, avx2)


def registered(intrinsic: str) -> str:
    """``intrinsic``, with every intrinsic here registered with TVM first."""
    global _registered
    with _lock:
        if not _registered:
            _register("global", "")
            _register("local", LOCAL)
            _registered = True
    return intrinsic

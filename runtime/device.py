"""Compilation targets: ``kiln.cpu()`` and ``kiln.cuda(arch=...)``.

TVM 0.27 takes targets as dicts. ``mcpu=native`` silently builds generic code,
so the CPU name is detected with ``llvm_get_system_cpu()``; the vector width
comes from the CPU's features (AVX-512: 512 bits, AVX/AVX2: 256, else 128),
and a CPU with AVX-512 builds at that width even where LLVM's tuning for it
prefers 256-bit vectors (``PREFER_512``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi
from tvm.runtime import _ffi_api
from tvm.target import codegen

from .. import config
from ..config import num_threads
from ..errors import ConfigError, KernelRuntimeError, TargetError
from ..schedules.cuda.check import MAX_SHARED, MAX_THREADS

CUDA_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90")
#: the instruction-set features a kernel may use: a CPU runs a kernel built for
#: another CPU when it has every one of these that the other has (LLVM's other
#: features, e.g. ``fast-variable-perlane-shuffle``, only tune the code)
ISA_FEATURES = ("sse4.2", "avx", "avx2", "fma", "f16c", "bmi", "bmi2", "avx512f", "avx512bw", "avx512dq",
                "avx512vl", "avx512cd", "avx512vnni", "avxvnni", "avx512bf16", "avx512fp16", "avx512vbmi",
                "amx-tile", "sse4a")  # sse4a: AMD's (LLVM's znver code uses its extrq/insertq; Intel has none)
#: a CPU of each x86 vector width, for building at the widths the host does not have
#: (``vector_levels``): the AVX2 machine kind kiln runs on, and an AVX-512 one
LEVEL_CPUS = {256: "znver3", 512: "znver4"}
#: the AVX2 stand-in where the host cannot run ``LEVEL_CPUS``'s (an Intel host: no SSE4A): the x86-64 level
#: of AVX2, no vendor's own extensions
PORTABLE_AVX2 = "x86-64-v3"
#: the LLVM feature that keeps a CPU with AVX-512 on its full width (ResNet-50 int8 at batch 8 on
#: ``emeraldrapids``: 77.5 -> 70.9 ms with the register-tile write-back; the float models unchanged)
PREFER_512 = "-prefer-256-bit"
#: a core's L2 where the machine does not say (a target other than the host's CPU): Zen 3's, the smallest
#: of the x86 kinds kiln runs on (Zen 4 1 MB, the Xeons 2 MB)
L2_BYTES = 512 << 10


@dataclass(frozen=True)
class Target:
    """A compilation target. ``kind`` is ``"cpu"`` or ``"cuda"``."""

    kind: str
    mcpu: str = ""
    arch: str = ""

    @cached_property
    def tvm(self) -> tvm.target.Target:
        if self.kind == "cpu":
            plain = tvm.target.Target({"kind": "llvm", "mcpu": self.mcpu})
            if not codegen.llvm_cpu_has_features(["avx512f"], plain):
                return plain
            # LLVM splits 512-bit vectors in halves where the CPU's tuning prefers 256-bit ones: the int8
            # write-backs (int32 sums to uint8 codes) ran at half width, reading each 64-byte tile of sums back
            # in two 32-byte loads that the stores before could not forward (``PREFER_512``)
            return tvm.target.Target({"kind": "llvm", "mcpu": self.mcpu, "mattr": [PREFER_512]})
        # the per-block limits are stated so TVM's GPU verification can check against them
        return tvm.target.Target({"kind": "cuda", "arch": self.arch, "max_threads_per_block": MAX_THREADS,
                                  "max_shared_memory_per_block": MAX_SHARED, "registers_per_block": 65536,
                                  "thread_warp_size": 32})

    @property
    def key(self) -> str:
        """Stable text naming the target in cache keys and records."""
        return f"llvm -mcpu={self.mcpu}" if self.kind == "cpu" else f"cuda -arch={self.arch}"

    @property
    def build_key(self) -> str:
        """``key`` and what else the template defaults read off this machine
        and process (the threads and the L2 size: a task's row blocks,
        ``cols_first``): the kernel caches' key, so that a kernel built for
        1 thread is not served to 2."""
        return f"{self.key} -threads={self.cores} -l2={self.l2_bytes}" if self.kind == "cpu" else self.key

    @property
    def l2_bytes(self) -> int:
        """A core's L2 cache: the host's as Linux reports it where this target
        is the host's CPU, else ``L2_BYTES`` (the smallest of the x86 kinds
        kiln runs on)."""
        return _host_l2() if self.kind == "cpu" and self.mcpu == _host_name() else L2_BYTES

    @cached_property
    def vector_bits(self) -> int:
        if self.kind != "cpu":
            return 128
        has = lambda f: bool(codegen.llvm_cpu_has_features([f], self.tvm))  # noqa: E731
        return 512 if has("avx512f") else 256 if has("avx") else 128

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers (AVX-512: 32 zmm; AVX2/SSE: 16)."""
        return 32 if self.vector_bits == 512 else 16

    def lanes(self, dtype: str) -> int:
        """Vector lanes for ``dtype`` (e.g. 16 float32 lanes with AVX-512)."""
        bits = 8 if dtype == "bool" else int("".join(c for c in dtype if c.isdigit()) or 32)
        return max(1, self.vector_bits // bits)

    @cached_property
    def isa(self) -> frozenset:
        """The ``ISA_FEATURES`` this target's code may use (empty for CUDA)."""
        if self.kind != "cpu":
            return frozenset()
        return frozenset(codegen.llvm_get_cpu_features(self.tvm)) & frozenset(ISA_FEATURES)

    @property
    def runs_here(self) -> bool:
        """Whether this machine can run the target's kernels: a CPU target whose
        instruction sets the host has (an AVX-512 host runs AVX2 code), or a
        CUDA target where a GPU is present."""
        if self.kind != "cpu":
            return present_arch() is not None
        return self.isa <= host().isa

    @property
    def cores(self) -> int:
        return num_threads() if self.kind == "cpu" else 1

    def device(self):
        """The TVM device kernels for this target run on."""
        return tvm.cpu(0) if self.kind == "cpu" else tvm.cuda(0)

    def __str__(self) -> str:
        return self.key


def cpu(mcpu: str | None = None) -> Target:
    """The CPU kernels are built for: the named ``mcpu``, else ``KILN_CPU``'s,
    else the host's (its LLVM name detected)."""
    named = config.cpu_name() if mcpu is None else None
    if named is not None:
        try:
            return _cpu(named)
        except TargetError as exc:
            raise ConfigError("KILN_CPU", named, "an LLVM CPU name such as znver3, skylake-avx512 or x86-64-v3") \
                from exc
    return _cpu(mcpu or _host_name())


@lru_cache(maxsize=None)
def _cpu(name: str) -> Target:
    if name in ("native", "generic", ""):
        raise TargetError(f"got mcpu={name!r}, expected a CPU name such as 'znver3' (native builds generic code)",
                          arg="mcpu")
    if not codegen.llvm_is_valid_cpu(name, codegen.llvm_get_system_triple()):
        raise TargetError(f"got mcpu={name!r}, which LLVM does not know; expected a CPU name such as 'znver3', "
                          f"'skylake-avx512' or 'x86-64-v3'", arg="mcpu")
    return Target("cpu", mcpu=name)


@lru_cache(maxsize=None)
def _host_l2() -> int:
    """The L2 size Linux reports for CPU 0 (``L2_BYTES`` where it reports none)."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2" and (index / "type").read_text().strip() != "Instruction":
                size = (index / "size").read_text().strip().upper()
                return int(size[:-1]) << {"K": 10, "M": 20}[size[-1]] if size[-1] in "KM" else int(size)
        except (OSError, ValueError):
            break
    return L2_BYTES


@lru_cache(maxsize=None)
def _host_name() -> str:
    """LLVM's name of this machine's CPU (asking LLVM costs about 40 us)."""
    return str(codegen.llvm_get_system_cpu())


def host() -> Target:
    """The CPU this process runs on, whatever ``KILN_CPU`` says."""
    return _cpu(_host_name())


def check_runs_here(target: Target, **where) -> None:
    """Refuse to run code built for a CPU whose instruction sets this one lacks
    (``KILN_CPU``, ``kiln.cpu("skylake-avx512")`` on an AVX2 host): it would
    die of an illegal instruction. ``where`` names the op or object for the
    ``KernelRuntimeError``."""
    if target.kind == "cpu" and not target.runs_here:
        missing = ", ".join(sorted(target.isa - host().isa))
        raise KernelRuntimeError(f"this code was built for {target.mcpu}, whose {missing} this CPU "
                                 f"({host().mcpu}) lacks; build for kiln.cpu() to run it here", **where)


def vector_levels() -> list[Target]:
    """A CPU target of each x86 vector width (AVX2, AVX-512): ``cpu()``'s for its
    own width, a ``LEVEL_CPUS`` stand-in for the others (``PORTABLE_AVX2`` for
    AVX2 on a host that cannot run Zen 3's code). ``runs_here`` tells which of
    them this machine can also run (an AVX2 host only builds AVX-512 code)."""
    own = cpu()
    levels = [own]
    for bits, name in LEVEL_CPUS.items():
        if bits != own.vector_bits:
            stand_in = _cpu(name)
            levels.append(_cpu(PORTABLE_AVX2) if bits < own.vector_bits and not stand_in.runs_here else stand_in)
    return levels


def present_arch() -> str | None:
    """The compute capability of the GPU present (``"sm_90"`` on an H100), or None without one."""
    dev = tvm.cuda(0)
    return "sm_" + dev.compute_version.replace(".", "") if dev.exist else None


@lru_cache(maxsize=None)
def cuda(arch: str | None = None) -> Target:
    """An NVIDIA GPU of compute capability ``arch`` (e.g. ``"sm_80"``); by
    default the GPU present's, or ``sm_80`` where there is none."""
    arch = arch or present_arch() or "sm_80"
    if arch not in CUDA_ARCHS:  # kernels are compiled to machine code for exactly this architecture
        raise TargetError(f"got {arch!r}, expected one of {', '.join(CUDA_ARCHS)}", arg="arch")
    return Target("cuda", arch=arch)


def as_target(target) -> Target:
    """Accept a Target, None (the CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:sm_90"``."""
    if target is None:
        return cpu()
    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        kind, _, detail = target.partition(":")
        if kind in ("cpu", "llvm"):
            return cpu(detail or None)
        if kind == "cuda":
            return cuda(detail or None)
    raise TargetError(f"got {target!r}, expected kiln.cpu(), kiln.cuda(arch), 'cpu' or 'cuda[:sm_XX]'",
                      arg="target")


#: a new, uninitialized TVM tensor ``alloc(tvm_ffi.Shape, tvm_ffi.dtype, device, None)``, 64-byte
#: aligned: ``tvm.runtime.empty`` without its argument conversions (a few microseconds a call)
alloc = _ffi_api.TVMTensorAllocWithScope
_DTYPES: dict = {}


def host_tensor(array: np.ndarray, device) -> "tvm.runtime.Tensor":
    """A new TVM tensor on the CPU ``device`` holding a copy of ``array``
    (allocated as TVM allocates, 64-byte aligned, and filled through a numpy
    view of it): 4-5 us, against 27 for ``tvm.runtime.tensor``'s conversions."""
    dtype = _DTYPES.get(array.dtype)
    if dtype is None:
        dtype = _DTYPES[array.dtype] = tvm_ffi.dtype(str(array.dtype))
    out = alloc(tvm_ffi.Shape(array.shape), dtype, device, None)
    np.copyto(np.from_dlpack(out), array)
    return out

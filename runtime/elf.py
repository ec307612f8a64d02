"""A structural check of a shared library before ``dlopen``: a truncated ELF
file passes the loader's header checks and then crashes the process (SIGBUS)
when a segment past the end of the file is touched. Checking that every
segment and the section table lie inside the file turns that into an error.
It cannot detect bytes corrupted in place (the kernel cache hashes its files
for that)."""
from __future__ import annotations

import struct
from pathlib import Path


def elf_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete 64-bit little-endian ELF file, or None."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF":
            if path.suffix.lower() == ".onnx":
                return (f"an ONNX model, not a compiled module: compile it first with kiln export {path} --out "
                        f"{path.with_suffix('.so').name} (kiln.frontend.from_onnx, then kiln.export)")
            if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
                return ("an archive (a checkpoint .npz or a PyTorch .pt?), not a compiled module: kiln export "
                        "compiles a checkpoint; a PyTorch module is imported with kiln.frontend.from_torch")
            return "not an ELF shared library"
        if head[4] != 2 or head[5] != 1:
            return "not a 64-bit little-endian ELF file"
        phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
        if shoff + shnum * shentsize > size or phoff + phnum * phentsize > size:
            return f"truncated: its headers point past its end ({size} bytes)"
        f.seek(phoff)
        table = f.read(phnum * phentsize)
    for i in range(phnum):
        offset, = struct.unpack_from("<Q", table, i * phentsize + 0x08)
        filesz, = struct.unpack_from("<Q", table, i * phentsize + 0x20)
        if offset + filesz > size:
            return f"truncated: segment {i} ends at byte {offset + filesz}, the file has {size}"
    return None

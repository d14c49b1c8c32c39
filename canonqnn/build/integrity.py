"""An integrity record on the libraries ``Built.export`` writes, checked before one is loaded.

Loading a shared library runs its code, and a damaged one can crash the process (a library cut
to half its size segfaults in the loader), so canonqnn loads only bytes it can tell are the
ones it exported. The record is a trailer appended to the library: the length and the SHA-256
of the bytes before it, then ``MAGIC``. A trailer rather than a sidecar file: the library stays
one file to copy, and the dynamic loader maps only what the ELF headers name, so it never reads
the trailer.

This tells a library as exported from a damaged or edited one, not a trusted one from a hostile
one: anyone can write a trailer. A ``.tar`` export (object files, linked when loaded) has no
trailer: it is gzipped, and gzip's own CRC-32 and length refuse damaged bytes before anything
is linked.
"""

from __future__ import annotations

import hashlib
import struct

from ..errors import CanonqnnError

MAGIC = b"CQNNLIB1"
_TRAILER = struct.Struct("<Q32s8s")  # length, SHA-256, MAGIC


def seal(path: str) -> None:
    """Append the record to the file at ``path``."""
    with open(path, "rb+") as f:
        data = f.read()
        f.write(_TRAILER.pack(len(data), hashlib.sha256(data).digest(), MAGIC))


def check(path: str) -> None:
    """Raise a ``CanonqnnError`` naming ``path`` unless it ends with a record that matches the
    bytes before it."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _TRAILER.size or not data.endswith(MAGIC):
        raise CanonqnnError(f"{path}: {_without_record(data)}")
    length, digest, _ = _TRAILER.unpack(data[-_TRAILER.size:])
    body = memoryview(data)[:-_TRAILER.size]
    if length != len(body):
        raise CanonqnnError(f"{path}: modified since export: {len(body)} bytes before its "
                            f"integrity record, {length} when exported")
    if hashlib.sha256(body).digest() != digest:
        raise CanonqnnError(f"{path}: modified since export: its SHA-256 differs from the one "
                            "recorded at export")


def _without_record(data: bytes) -> str:
    """Why a file does not end with a record."""
    record = data.rfind(MAGIC)
    if record >= 0:
        return (f"modified since export: {len(data) - record - len(MAGIC)} bytes after its "
                "integrity record")
    described = _elf_size(data)
    if described is not None and described > len(data):
        return (f"truncated: its ELF headers describe at least {described} bytes, the file "
                f"has {len(data)}")
    if described is not None and described + 8 <= len(data) < described + _TRAILER.size \
            and struct.unpack_from("<Q", data, described)[0] == described:
        return "truncated: its integrity record is cut short"
    return ("not a library written by canonqnn build (no integrity record at its end; a "
            "library built before canonqnn wrote one must be built again)")


def _elf_size(data: bytes) -> int | None:
    """Where an ELF file's program and section header tables end (the section headers come
    last in what linkers write); None if ``data`` does not start as an ELF file."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) \
            or data[5] not in (1, 2):
        return None
    order = "<" if data[5] == 1 else ">"
    if data[4] == 2:  # 64-bit: e_phoff, e_shoff at 0x20; e_phentsize .. e_shnum at 0x36
        phoff, shoff = struct.unpack_from(order + "QQ", data, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "4H", data, 0x36)
    else:  # 32-bit: e_phoff, e_shoff at 0x1C; e_phentsize .. e_shnum at 0x2A
        phoff, shoff = struct.unpack_from(order + "II", data, 0x1C)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "4H", data, 0x2A)
    return max(phoff + phentsize * phnum, shoff + shentsize * shnum)

"""Is a shared object whole? Checked before dlopen maps it (runtime's cache entries)."""
from __future__ import annotations
import struct


# ELF header and program header fields by class (1: 32-bit, 2: 64-bit): (struct format, offset) of e_phoff, e_shoff,
# e_phentsize, e_phnum, e_shentsize, e_shnum; then p_type, p_offset, p_filesz inside a program header
ELF_FIELDS = {1: (("I", 28), ("I", 32), ("H", 42), ("H", 44), ("H", 46), ("H", 48), ("I", 0), ("I", 4), ("I", 16)),
              2: (("Q", 32), ("Q", 40), ("H", 54), ("H", 56), ("H", 58), ("H", 60), ("I", 0), ("Q", 8), ("Q", 32))}
MACHO_64 = b"\xcf\xfa\xed\xfe"   # little-endian 64-bit Mach-O (arm64 and x86_64 macOS)
PT_LOAD, LC_SEGMENT_64 = 1, 0x19


def complete_object(data: bytes) -> bool:
  """Every byte the object's headers say is there is in the file. dlopen maps segments by those headers, and reading a
  mapped page past the end of a truncated file is SIGBUS, which no exception handler sees; so a short file whose
  checksum file was written to match (copied half-way, a disk filled) must be caught before dlopen."""
  try:
    if data[:4] == b"\x7fELF": return _complete_elf(data)
    if data[:4] == MACHO_64: return _complete_macho(data)
  except (struct.error, IndexError): return False
  return False


def _complete_elf(data: bytes) -> bool:
  fields, order = ELF_FIELDS.get(data[4]), {1: "<", 2: ">"}.get(data[5])
  if fields is None or order is None: return False
  get = lambda k, base=0: struct.unpack_from(order + fields[k][0], data, base + fields[k][1])[0]
  phoff, shoff, phentsize, phnum, shentsize, shnum = (get(k) for k in range(6))
  if phoff + phnum * phentsize > len(data) or shoff + shnum * shentsize > len(data): return False
  for i in range(phnum):
    ph = phoff + i * phentsize
    if get(6, ph) == PT_LOAD and get(7, ph) + get(8, ph) > len(data): return False
  return True


def _complete_macho(data: bytes) -> bool:
  ncmds, sizeofcmds = struct.unpack_from("<II", data, 16)
  if 32 + sizeofcmds > len(data): return False
  at = 32
  for _ in range(ncmds):
    cmd, size = struct.unpack_from("<II", data, at)
    if cmd == LC_SEGMENT_64:
      fileoff, filesize = struct.unpack_from("<QQ", data, at + 40)
      if fileoff + filesize > len(data): return False
    at += max(size, 8)
  return True

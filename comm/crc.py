"""Unitree's LowCmd_/LowState_ CRC: CRC-32/MPEG-2 over the message's 32-bit words.

Definition (unitree_sdk2py `utils/crc.py`): polynomial 0x04C11DB7, init 0xFFFFFFFF, no reflection,
no final xor, fed MSB first with the message packed as a little-endian C struct (natural
alignment), taken as 32-bit words, excluding the trailing crc word. That is CRC-32/MPEG-2 over each
word's bytes in big-endian order. Pure functions; tests check the fast path against a bitwise CRC
written from the definition.
"""
from __future__ import annotations

import zlib

import numpy as np


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        c = byte << 24
        for _ in range(8):
            c = ((c << 1) ^ 0x04C11DB7) if c & 0x80000000 else (c << 1)
        table.append(c & 0xFFFFFFFF)
    return tuple(table)


_CRC_TABLE = _crc_table()
# CRC-32/MPEG-2 is the bit mirror of zlib's reflected CRC-32 (same polynomial and initial
# register): mpeg2(d) = rev32(zlib.crc32(rev8(d)) ^ 0xFFFFFFFF), rev8 reversing the bits of each
# byte. zlib's table-driven C does a LowState in ~10 us, 3x faster than unitree's bitwise C
# library through ctypes.
_REV8 = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


def crc32_bytes_mpeg2(data: bytes, crc: int = 0xFFFFFFFF) -> int:
    """CRC-32/MPEG-2 of a byte string (poly 0x04C11DB7, init ~0, MSB first, no xorout)."""
    for b in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _CRC_TABLE[((crc >> 24) ^ b) & 0xFF]
    return crc


def crc32_mpeg2_fast(data: bytes) -> int:
    """crc32_bytes_mpeg2(data) through zlib."""
    r = zlib.crc32(data.translate(_REV8)) ^ 0xFFFFFFFF
    return int.from_bytes(r.to_bytes(4, "little").translate(_REV8), "big")


def crc32_words(words: np.ndarray) -> int:
    """Unitree's CRC over 32-bit words (uint32 array), as `utils.crc.CRC` computes it: each
    word's bits MSB first, i.e. CRC-32/MPEG-2 over the words' big-endian bytes."""
    return crc32_mpeg2_fast(np.ascontiguousarray(words, dtype=">u4").tobytes())


def struct_crc(record: np.ndarray) -> int:
    """CRC of a LOWCMD_DTYPE / LOWSTATE_DTYPE record (comm.hg): all words but the trailing crc."""
    words = np.frombuffer(record.tobytes(), dtype="<u4")[:-1]
    return crc32_mpeg2_fast(words.byteswap().tobytes())  # = crc32_words(words), one copy fewer

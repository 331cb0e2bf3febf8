"""The wireless remote as LowState_ carries it (40 bytes): pure encode/decode.

Layout: [2:4] buttons u16 little endian (bit i = `BUTTONS[i]`), float32 [4:8] lx, [8:12] rx,
[12:16] ry, [16:20] L2 analog, [20:24] ly; the rest zero.
"""
from __future__ import annotations

import dataclasses
import struct
from typing import Iterable, Sequence

import numpy as np

BUTTONS: tuple[str, ...] = (
    "R1", "L1", "Start", "Select", "R2", "L2", "F1", "F2",
    "A", "B", "X", "Y", "Up", "Right", "Down", "Left",
)
_BUTTON_BIT = {name.lower(): i for i, name in enumerate(BUTTONS)}
REMOTE_BYTES = 40
STICKS = ("lx", "rx", "ry", "l2", "ly")


@dataclasses.dataclass(frozen=True)
class RemoteState:
    """The wireless remote as LowState carries it: a button bit mask and five analog axes."""

    buttons: int = 0
    lx: float = 0.0
    rx: float = 0.0
    ry: float = 0.0
    l2: float = 0.0
    ly: float = 0.0

    def pressed(self) -> tuple[str, ...]:
        return button_names(self.buttons)

    def is_pressed(self, name: str) -> bool:
        return bool(self.buttons & button_mask(name))


def button_mask(*names: str | Iterable[str]) -> int:
    """Bit mask of buttons by name (case-insensitive): button_mask("L2", "B")."""
    mask = 0
    for n in names:
        if not isinstance(n, str):
            mask |= button_mask(*n)
            continue
        try:
            mask |= 1 << _BUTTON_BIT[n.strip().lower()]
        except KeyError:
            raise ValueError(f"unknown remote button {n!r}; buttons are {list(BUTTONS)}") from None
    return mask


def button_names(mask: int) -> tuple[str, ...]:
    return tuple(name for i, name in enumerate(BUTTONS) if mask >> i & 1)


def encode_remote(remote: RemoteState) -> bytes:
    """40 wireless_remote bytes: head 0, buttons u16 LE at [2:4], floats lx rx ry L2 ly."""
    if not 0 <= remote.buttons <= 0xFFFF:
        raise ValueError(f"button mask {remote.buttons} does not fit in 16 bits")
    body = struct.pack("<2xH5f", remote.buttons, remote.lx, remote.rx, remote.ry, remote.l2, remote.ly)
    return body + bytes(REMOTE_BYTES - len(body))


def decode_remote(data: bytes | Sequence[int] | np.ndarray) -> RemoteState:
    raw = bytes(data) if isinstance(data, (bytes, bytearray)) else np.asarray(data, dtype=np.uint8).tobytes()
    if len(raw) < 24:
        raise ValueError(f"wireless_remote needs at least 24 bytes, got {len(raw)}")
    buttons, lx, rx, ry, l2, ly = struct.unpack_from("<2xH5f", raw)
    return RemoteState(buttons, lx, rx, ry, l2, ly)

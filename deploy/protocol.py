"""Unitree "hg" low-level protocol: the pieces the deploy loop and the sim bridge share.

Everything here is a pure function of its arguments except `init_dds` (which initialises
unitree_sdk2py's process-wide DDS ChannelFactory). Importing this module has no side effects.

Wire facts (shared/reference/unitree_g1.md, unitree_sdk2py `utils/crc.py`, `idl/unitree_hg`):
- `LowCmd_` and `LowState_` carry 35 motor slots; the G1 uses the first 29 (`g1.NUM_MOTORS`).
- CRC: CRC-32, polynomial 0x04C11DB7, init 0xFFFFFFFF, no reflection, no final xor, fed
  MSB first with the message packed as a little-endian C struct (natural alignment), taken
  as 32-bit words, excluding the trailing crc word (LowCmd_ 1004 bytes, LowState_ 2092).
  That is CRC-32/MPEG-2 over each word's bytes in big-endian order.
- The C-struct images used for the CRC are numpy structured dtypes here (`LOWCMD_DTYPE`,
  `LOWSTATE_DTYPE`); the XCDR1 wire encoding differs from them only by the padding in
  front of motor slot 0 (`*_cdr` functions), which lets the bridge encode a 500 Hz
  LowState in ~20 us instead of ~800 us through cyclonedds' Python serializer.
- wireless_remote (40 bytes): [2:4] buttons u16 little endian (bit 0..15 = `BUTTONS`),
  float32 [4:8] lx, [8:12] rx, [12:16] ry, [16:20] L2 analog, [20:24] ly.
"""
from __future__ import annotations

import dataclasses
import math
import socket
import struct
import threading
import zlib
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from robots import g1

# ----------------------------------------------------------------------------- topics, domains
TOPIC_LOWSTATE = "rt/lowstate"
TOPIC_LOWCMD = "rt/lowcmd"
ROBOT_DOMAIN = 0  # real G1: domain 0 on the ethernet interface wired to 192.168.123.x
SIM_DOMAIN = 1  # simulation convention: domain 1 on loopback
SIM_INTERFACE = "lo"
MAX_DOMAIN_ID = 232  # cyclonedds' default port mapping (7400 + 250 d + ...) must stay < 65536

NUM_SLOTS = g1.NUM_MOTOR_SLOTS
MOTOR_MODE_DISABLE = 0
MOTOR_MODE_ENABLE = 1
IFF_MULTICAST = 0x1000  # <linux/if.h>

# ----------------------------------------------------------------------------- C-struct images
MOTOR_CMD_DTYPE = np.dtype(
    [("mode", "u1"), ("q", "<f4"), ("dq", "<f4"), ("tau", "<f4"), ("kp", "<f4"), ("kd", "<f4"),
     ("reserve", "<u4")],
    align=True,
)
LOWCMD_DTYPE = np.dtype(
    [("mode_pr", "u1"), ("mode_machine", "u1"), ("motor_cmd", MOTOR_CMD_DTYPE, (NUM_SLOTS,)),
     ("reserve", "<u4", (4,)), ("crc", "<u4")],
    align=True,
)
IMU_DTYPE = np.dtype(
    [("quaternion", "<f4", (4,)), ("gyroscope", "<f4", (3,)), ("accelerometer", "<f4", (3,)),
     ("rpy", "<f4", (3,)), ("temperature", "<i2")],
    align=True,
)
MOTOR_STATE_DTYPE = np.dtype(
    [("mode", "u1"), ("q", "<f4"), ("dq", "<f4"), ("ddq", "<f4"), ("tau_est", "<f4"),
     ("temperature", "<i2", (2,)), ("vol", "<f4"), ("sensor", "<u4", (2,)), ("motorstate", "<u4"),
     ("reserve", "<u4", (4,))],
    align=True,
)
LOWSTATE_DTYPE = np.dtype(
    [("version", "<u4", (2,)), ("mode_pr", "u1"), ("mode_machine", "u1"), ("tick", "<u4"),
     ("imu_state", IMU_DTYPE), ("motor_state", MOTOR_STATE_DTYPE, (NUM_SLOTS,)),
     ("wireless_remote", "u1", (40,)), ("reserve", "<u4", (4,)), ("crc", "<u4")],
    align=True,
)
# Sizes of unitree_sdk2py's CRC pack formats (`__packFmtHGLowCmd` / `__packFmtHGLowState`).
assert LOWCMD_DTYPE.itemsize == 1004 and LOWSTATE_DTYPE.itemsize == 2092

_XCDR1_LE_HEADER = b"\x00\x01\x00\x00"  # encapsulation CDR_LE, options 0

# ----------------------------------------------------------------------------- CRC


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
# library through ctypes; tests check both against a bitwise CRC written from the definition.
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
    """CRC of a LOWCMD_DTYPE / LOWSTATE_DTYPE record: all words but the trailing crc."""
    words = np.frombuffer(record.tobytes(), dtype="<u4")[:-1]
    return crc32_mpeg2_fast(words.byteswap().tobytes())  # = crc32_words(words), one copy fewer


# ----------------------------------------------------------------------------- remote


BUTTONS: tuple[str, ...] = (
    "R1", "L1", "Start", "Select", "R2", "L2", "F1", "F2",
    "A", "B", "X", "Y", "Up", "Right", "Down", "Left",
)
_BUTTON_BIT = {name.lower(): i for i, name in enumerate(BUTTONS)}
REMOTE_BYTES = 40


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


# ----------------------------------------------------------------------------- LowCmd


@dataclasses.dataclass(frozen=True)
class LowCmdArrays:
    """A LowCmd_ as numpy arrays over all 35 slots (float64 values of the float32 fields)."""

    mode_pr: int
    mode_machine: int
    mode: np.ndarray  # (35,) uint8
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    crc: int

    def is_finite(self) -> bool:
        return bool(all(np.isfinite(a).all() for a in (self.q, self.dq, self.tau, self.kp, self.kd)))


def _slots(x: Any, name: str, default: float = 0.0) -> np.ndarray:
    """Broadcast a scalar, a 29-vector (G1 motors) or a 35-vector to the 35 slots."""
    out = np.full(NUM_SLOTS, default, dtype=np.float64)
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        out[: g1.NUM_MOTORS] = a
    elif a.shape in ((g1.NUM_MOTORS,), (NUM_SLOTS,)):
        out[: a.shape[0]] = a
    else:
        raise ValueError(f"{name}: expected a scalar, {g1.NUM_MOTORS} or {NUM_SLOTS} values, got {a.shape}")
    return out


def lowcmd_record(
    q: Any = 0.0, dq: Any = 0.0, tau: Any = 0.0, kp: Any = 0.0, kd: Any = 0.0,
    mode: Any = MOTOR_MODE_ENABLE,
    mode_machine: int = g1.MODE_MACHINE_29DOF_REV1, mode_pr: int = g1.MODE_PR,
) -> np.ndarray:
    """LOWCMD_DTYPE record with the CRC filled. Slots beyond the G1's 29 motors stay disabled."""
    rec = np.zeros((), dtype=LOWCMD_DTYPE)
    rec["mode_pr"], rec["mode_machine"] = mode_pr, mode_machine
    mc = rec["motor_cmd"]
    mc["mode"] = _slots(mode, "mode", MOTOR_MODE_DISABLE).astype(np.uint8)
    for name, val in (("q", q), ("dq", dq), ("tau", tau), ("kp", kp), ("kd", kd)):
        mc[name] = _slots(val, name)
    rec["crc"] = struct_crc(rec)
    return rec


def lowcmd_record_from_msg(msg: Any) -> np.ndarray:
    """LOWCMD_DTYPE record from a unitree_hg LowCmd_ (crc copied, not recomputed)."""
    rec = np.zeros((), dtype=LOWCMD_DTYPE)
    rec["mode_pr"], rec["mode_machine"] = msg.mode_pr, msg.mode_machine
    cmds = msg.motor_cmd
    mc = rec["motor_cmd"]  # field by field: a whole-struct copy would carry non-zero padding
    with np.errstate(over="ignore"):  # a value beyond float32 becomes inf (then rejected)
        for name in ("mode", "q", "dq", "tau", "kp", "kd", "reserve"):
            mc[name] = [getattr(m, name) for m in cmds]
    rec["reserve"] = msg.reserve
    rec["crc"] = msg.crc
    return rec


def lowcmd_msg_from_record(rec: np.ndarray) -> Any:
    """A unitree_hg LowCmd_ object with the record's values (slow path; for tests and tools)."""
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_, MotorCmd_

    mc = rec["motor_cmd"]
    motors = [
        MotorCmd_(int(m["mode"]), float(m["q"]), float(m["dq"]), float(m["tau"]), float(m["kp"]),
                  float(m["kd"]), int(m["reserve"]))
        for m in mc
    ]
    return LowCmd_(int(rec["mode_pr"]), int(rec["mode_machine"]), motors,
                   [int(x) for x in rec["reserve"]], int(rec["crc"]))


def lowcmd_arrays(rec: np.ndarray) -> LowCmdArrays:
    mc = rec["motor_cmd"]
    return LowCmdArrays(
        mode_pr=int(rec["mode_pr"]), mode_machine=int(rec["mode_machine"]),
        mode=mc["mode"].copy(), q=mc["q"].astype(np.float64), dq=mc["dq"].astype(np.float64),
        tau=mc["tau"].astype(np.float64), kp=mc["kp"].astype(np.float64),
        kd=mc["kd"].astype(np.float64), crc=int(rec["crc"]),
    )


def lowcmd_to_arrays(msg: Any) -> LowCmdArrays:
    return lowcmd_arrays(lowcmd_record_from_msg(msg))


def build_lowcmd(
    q: Any = 0.0, dq: Any = 0.0, tau: Any = 0.0, kp: Any = 0.0, kd: Any = 0.0,
    mode: Any = MOTOR_MODE_ENABLE,
    mode_machine: int = g1.MODE_MACHINE_29DOF_REV1, mode_pr: int = g1.MODE_PR,
) -> Any:
    """A ready-to-write unitree_hg LowCmd_ with the CRC filled (29 G1 motors enabled).

    `mode_machine` must be the robot's (copy it from LowState); the robot ignores others.
    This builds the full IdlStruct (cyclonedds serializes it in ~0.3 ms); for a 500 Hz
    stream `lowcmd_wire_sample(lowcmd_record(...))` writes the same bytes ~20x cheaper.
    """
    return lowcmd_msg_from_record(lowcmd_record(q, dq, tau, kp, kd, mode, mode_machine, mode_pr))


def lowcmd_crc(msg: Any) -> int:
    """The CRC a LowCmd_ should carry (same value as unitree_sdk2py `CRC().Crc(msg)`)."""
    return struct_crc(lowcmd_record_from_msg(msg))


def lowcmd_crc_ok(msg: Any) -> bool:
    rec = lowcmd_record_from_msg(msg)
    return struct_crc(rec) == int(rec["crc"])


# Reasons a robot (and the bridge) ignores a LowCmd_.
REJECT_CRC = "crc"
REJECT_MODE_MACHINE = "mode_machine"
REJECT_MODE_PR = "mode_pr"
REJECT_NONFINITE = "nonfinite"
REJECT_MALFORMED = "malformed"  # a payload that does not decode as an hg LowCmd_
REJECT_REASONS = (REJECT_CRC, REJECT_MODE_MACHINE, REJECT_MODE_PR, REJECT_NONFINITE, REJECT_MALFORMED)


def check_lowcmd_record(
    rec: np.ndarray, mode_machine: int = g1.MODE_MACHINE_29DOF_REV1, mode_pr: int = g1.MODE_PR
) -> tuple[LowCmdArrays | None, str | None]:
    """Validate a received LowCmd_ as the robot does: (arrays, None) or (None, reason).

    Order: CRC, mode_machine, mode_pr (only pitch/roll mode is simulated), non-finite fields.
    """
    if struct_crc(rec) != int(rec["crc"]):
        return None, REJECT_CRC
    if int(rec["mode_machine"]) != mode_machine:
        return None, REJECT_MODE_MACHINE
    if int(rec["mode_pr"]) != mode_pr:
        return None, REJECT_MODE_PR
    arrays = lowcmd_arrays(rec)
    if not arrays.is_finite():
        return None, REJECT_NONFINITE
    return arrays, None


def check_lowcmd(
    msg: Any, mode_machine: int = g1.MODE_MACHINE_29DOF_REV1, mode_pr: int = g1.MODE_PR
) -> tuple[LowCmdArrays | None, str | None]:
    """`check_lowcmd_record` of a LowCmd_ object, or of its wire payload (bytes)."""
    try:
        rec = lowcmd_record_from_payload(msg) if isinstance(msg, (bytes, bytearray)) else lowcmd_record_from_msg(msg)
    except (OverflowError, TypeError, ValueError, AttributeError):
        return None, REJECT_MALFORMED
    return check_lowcmd_record(rec, mode_machine, mode_pr)


def lowcmd_cdr(rec: np.ndarray) -> bytes:
    """XCDR1 little-endian encoding of a LowCmd_ record (what cyclonedds puts on the wire)."""
    b = rec.tobytes()
    return _XCDR1_LE_HEADER + b[0:2] + b[4:5] + b"\x00" + b[8:]


def lowcmd_record_from_payload(payload: bytes) -> np.ndarray:
    """LOWCMD_DTYPE record of a raw rt/lowcmd sample: the XCDR1 fast path, else cyclonedds'
    deserializer (e.g. an XCDR2 or big-endian writer). Raises ValueError if it is no LowCmd_."""
    try:
        return lowcmd_record_from_cdr(payload)
    except ValueError:
        from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_

        try:
            return lowcmd_record_from_msg(LowCmd_.deserialize(bytes(payload)))
        except Exception as e:
            raise ValueError(f"undecodable LowCmd_ payload ({len(payload)} bytes): {e}") from None


def lowcmd_record_from_cdr(payload: bytes) -> np.ndarray:
    b = payload[4:]
    if len(b) != 1000 or payload[:2] != _XCDR1_LE_HEADER[:2]:
        raise ValueError(f"not an XCDR1 little-endian hg LowCmd_ ({len(payload)} bytes)")
    raw = bytearray(b[0:2] + b"\x00\x00" + b[2:3] + b"\x00\x00\x00" + b[4:])
    return np.frombuffer(raw, dtype=LOWCMD_DTYPE).reshape(())  # (.copy() would not keep padding)


# ----------------------------------------------------------------------------- LowState


@dataclasses.dataclass(frozen=True)
class LowStateArrays:
    """A LowState_ as numpy arrays; motor arrays hold the G1's 29 motors."""

    tick: int
    mode_machine: int
    mode_pr: int
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray
    tau_est: np.ndarray
    quat: np.ndarray  # (4,) w, x, y, z
    gyro: np.ndarray  # (3,) rad/s, IMU frame
    acc: np.ndarray  # (3,) m/s^2, IMU frame (specific force: +9.81 z at rest)
    rpy: np.ndarray  # (3,)
    remote: RemoteState
    remote_bytes: bytes
    crc: int
    crc_ok: bool


def lowstate_record(
    tick: int, q: Any, dq: Any, tau_est: Any, quat: Any, gyro: Any, acc: Any, rpy: Any,
    ddq: Any = 0.0, remote: bytes = bytes(REMOTE_BYTES),
    mode_machine: int = g1.MODE_MACHINE_29DOF_REV1, mode_pr: int = g1.MODE_PR,
) -> np.ndarray:
    """LOWSTATE_DTYPE record with the CRC filled (slots beyond 29 zero)."""
    rec = np.zeros((), dtype=LOWSTATE_DTYPE)
    rec["mode_pr"], rec["mode_machine"], rec["tick"] = mode_pr, mode_machine, tick & 0xFFFFFFFF
    imu = rec["imu_state"]
    imu["quaternion"], imu["gyroscope"], imu["accelerometer"], imu["rpy"] = quat, gyro, acc, rpy
    ms = rec["motor_state"]
    n = g1.NUM_MOTORS
    ms["q"][:n], ms["dq"][:n], ms["ddq"][:n], ms["tau_est"][:n] = q, dq, ddq, tau_est
    rec["wireless_remote"] = np.frombuffer(bytes(remote), dtype=np.uint8)
    rec["crc"] = struct_crc(rec)
    return rec


def lowstate_record_from_msg(msg: Any) -> np.ndarray:
    """LOWSTATE_DTYPE record from a unitree_hg LowState_ (crc copied, not recomputed)."""
    rec = np.zeros((), dtype=LOWSTATE_DTYPE)
    rec["version"] = msg.version
    rec["mode_pr"], rec["mode_machine"], rec["tick"] = msg.mode_pr, msg.mode_machine, msg.tick
    s = msg.imu_state
    imu = rec["imu_state"]
    imu["quaternion"], imu["gyroscope"], imu["accelerometer"] = s.quaternion, s.gyroscope, s.accelerometer
    imu["rpy"], imu["temperature"] = s.rpy, s.temperature
    motors = msg.motor_state
    ms = rec["motor_state"]  # field by field: a whole-struct copy would carry non-zero padding
    for name in MOTOR_STATE_DTYPE.names:
        ms[name] = [getattr(m, name) for m in motors]
    remote = msg.wireless_remote  # cyclonedds hands uint8 arrays back as bytes
    rec["wireless_remote"] = np.frombuffer(bytes(remote), np.uint8) if isinstance(remote, (bytes, bytearray)) else remote
    rec["reserve"] = msg.reserve
    rec["crc"] = msg.crc
    return rec


def lowstate_msg_from_record(rec: np.ndarray) -> Any:
    """A unitree_hg LowState_ object with the record's values (slow path; tests and tools)."""
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import IMUState_, LowState_, MotorState_

    i = rec["imu_state"]
    imu = IMUState_([float(x) for x in i["quaternion"]], [float(x) for x in i["gyroscope"]],
                    [float(x) for x in i["accelerometer"]], [float(x) for x in i["rpy"]],
                    int(i["temperature"]))
    motors = [
        MotorState_(int(m["mode"]), float(m["q"]), float(m["dq"]), float(m["ddq"]), float(m["tau_est"]),
                    [int(x) for x in m["temperature"]], float(m["vol"]), [int(x) for x in m["sensor"]],
                    int(m["motorstate"]), [int(x) for x in m["reserve"]])
        for m in rec["motor_state"]
    ]
    return LowState_([int(x) for x in rec["version"]], int(rec["mode_pr"]), int(rec["mode_machine"]),
                     int(rec["tick"]), imu, motors, [int(x) for x in rec["wireless_remote"]],
                     [int(x) for x in rec["reserve"]], int(rec["crc"]))


def lowstate_arrays(rec: np.ndarray) -> LowStateArrays:
    n = g1.NUM_MOTORS
    ms = rec["motor_state"]
    imu = rec["imu_state"]
    remote = rec["wireless_remote"].tobytes()
    crc = int(rec["crc"])
    return LowStateArrays(
        tick=int(rec["tick"]), mode_machine=int(rec["mode_machine"]), mode_pr=int(rec["mode_pr"]),
        q=ms["q"][:n].astype(np.float64), dq=ms["dq"][:n].astype(np.float64),
        ddq=ms["ddq"][:n].astype(np.float64), tau_est=ms["tau_est"][:n].astype(np.float64),
        quat=imu["quaternion"].astype(np.float64), gyro=imu["gyroscope"].astype(np.float64),
        acc=imu["accelerometer"].astype(np.float64), rpy=imu["rpy"].astype(np.float64),
        remote=decode_remote(remote), remote_bytes=remote, crc=crc, crc_ok=struct_crc(rec) == crc,
    )


def lowstate_to_arrays(msg: Any) -> LowStateArrays:
    """Read a received unitree_hg LowState_ into numpy (crc_ok tells whether its CRC holds)."""
    return lowstate_arrays(lowstate_record_from_msg(msg))


def lowstate_crc(msg: Any) -> int:
    return struct_crc(lowstate_record_from_msg(msg))


def lowstate_crc_ok(msg: Any) -> bool:
    rec = lowstate_record_from_msg(msg)
    return struct_crc(rec) == int(rec["crc"])


def lowstate_cdr(rec: np.ndarray) -> bytes:
    """XCDR1 little-endian encoding of a LowState_ record (motor slot 0 is packed tighter)."""
    b = rec.tobytes()
    return _XCDR1_LE_HEADER + b[0:70] + b[72:73] + b"\x00" + b[76:]


def lowstate_record_from_cdr(payload: bytes) -> np.ndarray:
    b = payload[4:]
    if len(b) != 2088 or payload[:2] != _XCDR1_LE_HEADER[:2]:
        raise ValueError(f"not an XCDR1 little-endian hg LowState_ ({len(payload)} bytes)")
    raw = bytearray(b[0:70] + b"\x00\x00" + b[70:71] + b"\x00\x00\x00" + b[72:])
    return np.frombuffer(raw, dtype=LOWSTATE_DTYPE).reshape(())


def wire_sample(msg_type: type, payload: bytes) -> Any:
    """An instance of `msg_type` that a cyclonedds DataWriter (or unitree ChannelPublisher)
    writes as the pre-encoded XCDR1 `payload`. It has no fields: only for writing."""
    sample = msg_type.__new__(msg_type)

    def serialize(buffer: Any = None, endianness: Any = None, use_version_2: bool | None = None) -> bytes:
        if use_version_2:
            raise RuntimeError(f"{msg_type.__name__}: pre-encoded XCDR1 sample written by an XCDR2 writer")
        return payload

    sample.serialize = serialize
    return sample


def take_raw_payloads(reader: Any, n: int = 64) -> list[bytes]:
    """Serialized payloads of up to n valid samples taken from a cyclonedds DataReader, without
    cyclonedds' Python deserializer (~0.3 ms for a LowCmd_, ~0.5 ms for a LowState_)."""
    from cyclonedds._clayer import ddspy_take
    from cyclonedds.core import InstanceState, SampleState, ViewState

    ret = ddspy_take(reader._ref, SampleState.Any | ViewState.Any | InstanceState.Any, n)
    if isinstance(ret, int):
        return []
    return [data for data, info in ret if info.valid_data]


def delete_entity(entity: Any) -> None:
    """Delete a cyclonedds entity (reader, writer, topic) now, safely.

    Its listener is detached first: that call waits (GIL released) until a callback in flight
    has returned. Deleting a reader while its listener runs can otherwise deadlock: cyclonedds'
    callback holds a temporary reference to the Python reader, so the reader's last reference
    can drop, and dds_delete run, inside the callback's own thread. Same for the garbage
    collector running in a listener thread: delete explicitly, never leave it to the GC."""
    from cyclonedds.core import Entity

    ref = getattr(entity, "_ref", None)
    if ref is None or Entity._entities.get(ref) is not entity:
        return
    if getattr(entity, "_listener", None) is not None:
        entity._set_listener(ref, None)  # the C listener first; the Python one stays alive till after
    del Entity._entities[ref]
    entity._delete(ref)


def close_channel(channel: Any) -> None:
    """Close a unitree_sdk2py ChannelPublisher/ChannelSubscriber: reader/writer and Topic deleted
    now with `delete_entity` (the SDK's Close() drops the reader with its listener possibly
    running, and leaves the Topic to the garbage collector)."""
    inner = getattr(channel, "_ChannelPublisher__channel", None) or getattr(channel, "_ChannelSubscriber__channel", None)
    if inner is not None:
        reader = getattr(getattr(inner, "_Channel__reader", None), "_Reader__reader", None)
        writer = getattr(getattr(inner, "_Channel__writer", None), "_Writer__writer", None)
        for e in (reader, writer):
            if e is not None:
                delete_entity(e)
    channel.Close()
    topic = getattr(inner, "_Channel__topic", None)
    if topic is not None:
        delete_entity(topic)


def lowcmd_wire_sample(rec: np.ndarray) -> Any:
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_

    return wire_sample(LowCmd_, lowcmd_cdr(rec))


def lowstate_wire_sample(rec: np.ndarray) -> Any:
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowState_

    return wire_sample(LowState_, lowstate_cdr(rec))


# ----------------------------------------------------------------------------- DDS set-up


class DDSInitError(RuntimeError):
    """DDS could not be set up as asked; the message says how to fix it."""


_dds_lock = threading.Lock()
_dds_initialized: tuple[int, str | None] | None = None


def available_interfaces() -> list[str]:
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:  # pragma: no cover - platform without if_nameindex
        return []


def interface_multicast(name: str) -> bool | None:
    """Whether the interface has the MULTICAST flag (None where that cannot be read)."""
    try:
        return bool(int(Path(f"/sys/class/net/{name}/flags").read_text(), 16) & IFF_MULTICAST)
    except (OSError, ValueError):
        return None


def multicast_note(interface: str) -> str | None:
    """A note for the user when `interface` lacks MULTICAST, else None.

    Measured here (cyclonedds 11, unitree's config): discovery still works between processes on
    this host through cyclonedds' unicast fallback to localhost peers, limited to the ~10
    participant indices it probes; the robust fix is enabling multicast on the interface.
    """
    if interface_multicast(interface) is False:
        return (
            f"network interface {interface!r} is not multicast-capable; cyclonedds falls back to "
            f"unicast discovery on this host. If DDS peers do not see each other run "
            f"`sudo ip link set {interface} multicast on` (or `make lo-multicast` as root)."
        )
    return None


def check_interface(interface: str | None) -> None:
    """Raise DDSInitError naming the available interfaces when `interface` does not exist."""
    if interface is None:
        return
    names = available_interfaces()
    if names and interface not in names:
        hint = "use --interface lo for the sim bridge" if "lo" in names else ""
        raise DDSInitError(
            f"network interface {interface!r} does not exist; available: {', '.join(names)}"
            + (f" ({hint}; the real G1 is on the interface wired to 192.168.123.x)" if hint else "")
        )


def _factory_participant() -> Any:
    try:
        from unitree_sdk2py.core.channel import ChannelFactory

        return getattr(ChannelFactory, "_ChannelFactory__participant", None)
    except Exception:  # pragma: no cover - SDK internals changed
        return None


def _factory_domain() -> int | None:
    """Domain id of unitree_sdk2py's ChannelFactory participant, if it was initialised."""
    participant = _factory_participant()
    return None if participant is None else int(participant.domain_id)


def dds_participant() -> Any:
    """The process's DDS participant: unitree_sdk2py's ChannelFactory participant (after
    `init_dds`). Put extra cyclonedds readers/writers on it rather than on a second
    DomainParticipant: one participant per process is what the robot's clients use, and a second
    one in the same process was seen (loaded machine, loopback) not to discover its peers."""
    participant = _factory_participant()
    if participant is None:
        raise DDSInitError("DDS is not initialised in this process: call deploy.protocol.init_dds first")
    return participant


def init_dds(domain: int = SIM_DOMAIN, interface: str | None = SIM_INTERFACE) -> None:
    """Initialise unitree_sdk2py's DDS ChannelFactory once per process, with clear errors.

    The factory is a process-wide singleton: a second call with the same arguments is a no-op,
    a call with a different domain or interface raises (the SDK would silently keep the first).
    """
    global _dds_initialized
    if not isinstance(domain, int) or not 0 <= domain <= MAX_DOMAIN_ID:
        raise DDSInitError(f"DDS domain must be an integer in 0..{MAX_DOMAIN_ID}, got {domain!r}")
    with _dds_lock:
        if _dds_initialized is not None:
            if _dds_initialized != (domain, interface):
                raise DDSInitError(
                    f"DDS is already initialised in this process on domain {_dds_initialized[0]} "
                    f"interface {_dds_initialized[1]!r}; unitree_sdk2py allows one per process, so "
                    f"domain {domain} interface {interface!r} cannot be used here (run it in another process)"
                )
            return
        existing = _factory_domain()
        if existing is not None:
            if existing != domain:
                raise DDSInitError(
                    f"unitree_sdk2py's ChannelFactory was already initialised on domain {existing}; "
                    f"cannot switch this process to domain {domain}"
                )
            _dds_initialized = (domain, interface)
            return
        check_interface(interface)
        from unitree_sdk2py.core.channel import ChannelFactoryInitialize

        try:
            ChannelFactoryInitialize(domain, interface)
        except Exception as e:
            raise DDSInitError(
                f"DDS initialisation failed on domain {domain} interface {interface!r}: {e}. "
                f"Check the interface name (available: {', '.join(available_interfaces())}) and "
                "that cyclonedds is installed (`make setup`)."
            ) from e
        _dds_initialized = (domain, interface)


def dds_initialized() -> tuple[int, str | None] | None:
    """(domain, interface) this process initialised through `init_dds`, or None."""
    return _dds_initialized


# ----------------------------------------------------------------------------- orientation


def quat_to_rpy(quat: Any) -> np.ndarray:
    """Roll, pitch, yaw (ZYX Euler, rad) of a w, x, y, z quaternion, as the IMU reports rpy."""
    w, x, y, z = (float(v) for v in quat)
    roll = math.atan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2.0 * (w * y - z * x))))
    yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    return np.array([roll, pitch, yaw])

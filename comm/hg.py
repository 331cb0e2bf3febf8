"""Unitree "hg" low-level messages (LowCmd_, LowState_) as numpy: layouts, encode/decode, checks.

Pure functions of their arguments; no DDS participants, no side effects at import (beyond
comm.dds_compat's version check). Shared by the deploy loop and the sim bridge.

Wire facts (unitree_sdk2py `utils/crc.py`, `idl/unitree_hg`):
- `LowCmd_` and `LowState_` carry 35 motor slots; the G1 uses the first 29 (`g1.NUM_MOTORS`).
- CRC (comm.crc): over the message packed as a little-endian C struct (natural alignment),
  excluding the trailing crc word (LowCmd_ 1004 bytes, LowState_ 2092).
- The C-struct images used for the CRC are numpy structured dtypes here (`LOWCMD_DTYPE`,
  `LOWSTATE_DTYPE`); the XCDR1 wire encoding differs from them only by the padding in
  front of motor slot 0 (`*_cdr` functions), which lets the bridge encode a 500 Hz
  LowState in ~20 us instead of ~800 us through cyclonedds' Python serializer.
- wireless_remote (40 bytes): comm.remote.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from comm import dds_compat
from comm.crc import struct_crc
from comm.remote import REMOTE_BYTES, RemoteState, decode_remote
from robots import g1

# ----------------------------------------------------------------------------- topics, slots
TOPIC_LOWSTATE = "rt/lowstate"
TOPIC_LOWCMD = "rt/lowcmd"

NUM_SLOTS = g1.NUM_MOTOR_SLOTS
MOTOR_MODE_DISABLE = 0
MOTOR_MODE_ENABLE = 1

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


def lowcmd_wire_sample(rec: np.ndarray) -> Any:
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_

    return dds_compat.wire_sample(LowCmd_, lowcmd_cdr(rec))


def lowstate_wire_sample(rec: np.ndarray) -> Any:
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowState_

    return dds_compat.wire_sample(LowState_, lowstate_cdr(rec))

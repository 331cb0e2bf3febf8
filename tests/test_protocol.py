"""comm (hg, crc, remote, dds, dds_compat): CRC, wire encoding, LowCmd/LowState conversion, remote bytes, DDS init errors.

Oracles: the CRC catalogue's check value for CRC-32/MPEG-2, a bit-serial CRC written here from
the spec, unitree_sdk2py's own CRC (C library and its Python fallback), cyclonedds' serializer
for the wire bytes, and hand-packed remote bytes.
"""
import math
import struct

import numpy as np
import pytest

from comm import crc, dds, dds_compat, hg, remote
from robots import g1
from robots.physics import quat_to_rpy


def crc_bitwise(data: bytes) -> int:
    """CRC-32/MPEG-2 from the definition: poly 0x04C11DB7, init ~0, MSB first, no xorout."""
    crc = 0xFFFFFFFF
    for byte in data:
        for bit in range(7, -1, -1):
            top = (crc >> 31) ^ (byte >> bit & 1)
            crc = (crc << 1) & 0xFFFFFFFF
            if top:
                crc ^= 0x04C11DB7
    return crc


def test_crc_catalogue_check_value():
    # CRC RevEng catalogue: CRC-32/MPEG-2 check("123456789") = 0x0376E6E7.
    assert crc_bitwise(b"123456789") == 0x0376E6E7
    assert crc.crc32_bytes_mpeg2(b"123456789") == 0x0376E6E7


def test_crc_words_hand_cases():
    # No words: the initial value. One word: its bytes fed MSB first (big-endian order).
    assert crc.crc32_words(np.zeros(0, dtype="<u4")) == 0xFFFFFFFF
    for word in (0x00000000, 0xFFFFFFFF, 0x04C11DB7, 0x12345678):
        assert crc.crc32_words(np.array([word], dtype="<u4")) == crc_bitwise(word.to_bytes(4, "big"))
    # Two little-endian words from "12345678" are the bytes 4,3,2,1,8,7,6,5 to the CRC.
    words = np.frombuffer(b"12345678", dtype="<u4")
    assert crc.crc32_words(words) == crc_bitwise(b"43218765")


def test_crc_matches_unitree_c_library_and_python_fallback():
    from unitree_sdk2py.utils.crc import CRC

    rng = np.random.default_rng(1)
    for n in (1, 7, 250, 522):
        words = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype("<u4")
        expected = CRC()._crc_py([int(w) for w in words])
        assert crc.crc32_words(words) == expected == CRC()._crc_ctypes([int(w) for w in words])
        assert crc.crc32_bytes_mpeg2(words.astype(">u4").tobytes()) == expected
    data = rng.integers(0, 256, size=333, dtype=np.uint8).tobytes()
    assert crc.crc32_mpeg2_fast(data) == crc_bitwise(data) == crc.crc32_bytes_mpeg2(data)


def _random_lowcmd(rng):
    return hg.lowcmd_record(
        q=rng.uniform(-1, 1, 29), dq=rng.uniform(-1, 1, 29), tau=rng.uniform(-5, 5, 35),
        kp=rng.uniform(0, 200, 29), kd=rng.uniform(0, 5, 29),
    )


def test_lowcmd_crc_equals_unitree_crc_and_wire_bytes_equal_cyclonedds():
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_
    from unitree_sdk2py.utils.crc import CRC

    rng = np.random.default_rng(2)
    for _ in range(5):
        rec = _random_lowcmd(rng)
        msg = hg.lowcmd_msg_from_record(rec)
        assert CRC().Crc(msg) == int(rec["crc"]) == hg.lowcmd_crc(msg)
        assert hg.lowcmd_crc_ok(msg)
        wire = msg.serialize(use_version_2=False)
        assert hg.lowcmd_cdr(rec) == wire
        assert hg.lowcmd_record_from_cdr(wire).tobytes() == rec.tobytes()
        back = LowCmd_.deserialize(hg.lowcmd_cdr(rec))
        assert hg.lowcmd_record_from_msg(back).tobytes() == rec.tobytes()


def test_lowstate_crc_equals_unitree_crc_and_wire_bytes_equal_cyclonedds():
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowState_
    from unitree_sdk2py.utils.crc import CRC

    rng = np.random.default_rng(3)
    for _ in range(5):
        remote_bytes = remote.encode_remote(remote.RemoteState(int(rng.integers(0, 2**16)), *rng.uniform(-1, 1, 5)))
        rec = hg.lowstate_record(
            int(rng.integers(0, 2**32)), rng.normal(size=29), rng.normal(size=29), rng.normal(size=29),
            rng.normal(size=4), rng.normal(size=3), rng.normal(size=3), rng.normal(size=3),
            ddq=rng.normal(size=29), remote=remote_bytes,
        )
        msg = hg.lowstate_msg_from_record(rec)
        assert CRC().Crc(msg) == int(rec["crc"]) == hg.lowstate_crc(msg)
        wire = msg.serialize(use_version_2=False)
        assert hg.lowstate_cdr(rec) == wire
        back = LowState_.deserialize(wire)
        assert hg.lowstate_record_from_msg(back).tobytes() == rec.tobytes()
        assert hg.lowstate_record_from_cdr(wire).tobytes() == rec.tobytes()


def test_wire_sample_is_written_as_its_payload():
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowState_

    rec = hg.lowstate_record(5, np.zeros(29), np.zeros(29), np.zeros(29), [1, 0, 0, 0], [0] * 3, [0] * 3, [0] * 3)
    sample = hg.lowstate_wire_sample(rec)
    assert isinstance(sample, LowState_)
    assert sample.serialize(use_version_2=False) == hg.lowstate_cdr(rec)
    with pytest.raises(RuntimeError, match="XCDR2"):
        sample.serialize(use_version_2=True)


def test_build_lowcmd_fields_and_round_trip():
    from unitree_sdk2py.utils.crc import CRC

    msg = hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD, tau=0.5)
    assert msg.mode_pr == 0 and msg.mode_machine == g1.MODE_MACHINE_29DOF_REV1
    assert len(msg.motor_cmd) == 35 and msg.crc == CRC().Crc(msg)
    assert [m.mode for m in msg.motor_cmd] == [1] * 29 + [0] * 6
    a = hg.lowcmd_to_arrays(msg)
    np.testing.assert_allclose(a.q[:29], g1.DEFAULT_JOINT_POS.astype(np.float32))
    np.testing.assert_allclose(a.kp[:29], g1.KP)
    np.testing.assert_allclose(a.tau[:29], 0.5)
    assert not a.q[29:].any() and not a.kp[29:].any()
    with pytest.raises(ValueError, match="expected a scalar"):
        hg.build_lowcmd(q=np.zeros(12))


def test_check_lowcmd_rejections():
    good = hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD)
    arrays, reason = hg.check_lowcmd(good)
    assert reason is None and arrays is not None

    bad_crc = hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD)
    bad_crc.crc ^= 1
    assert hg.check_lowcmd(bad_crc) == (None, hg.REJECT_CRC)

    wrong_machine = hg.build_lowcmd(q=0.0, mode_machine=4)
    assert hg.check_lowcmd(wrong_machine) == (None, hg.REJECT_MODE_MACHINE)

    wrong_pr = hg.build_lowcmd(q=0.0, mode_pr=1)
    assert hg.check_lowcmd(wrong_pr) == (None, hg.REJECT_MODE_PR)

    q = g1.DEFAULT_JOINT_POS.copy()
    q[3] = math.nan
    assert hg.check_lowcmd(hg.build_lowcmd(q=q, kp=g1.KP))[1] == hg.REJECT_NONFINITE  # CRC is valid
    assert hg.check_lowcmd(hg.build_lowcmd(q=0.0, kd=math.inf))[1] == hg.REJECT_NONFINITE

    # Raw wire payloads: the XCDR1 fast path, an XCDR2 payload through cyclonedds, garbage.
    assert hg.check_lowcmd(good.serialize(use_version_2=False))[1] is None
    assert hg.check_lowcmd(good.serialize(use_version_2=True))[1] is None
    assert hg.check_lowcmd(bad_crc.serialize())[1] == hg.REJECT_CRC
    assert hg.check_lowcmd(b"\x00\x01\x00\x00" + bytes(17)) == (None, hg.REJECT_MALFORMED)

    # A field that cannot even be packed (the sender's struct would overflow) is rejected too.
    huge = hg.build_lowcmd(q=0.0)
    huge.motor_cmd[0].q = 1e300
    assert hg.check_lowcmd(huge)[0] is None


def test_lowstate_to_arrays():
    rec = hg.lowstate_record(
        1234, np.arange(29) * 0.01, np.arange(29) * 0.1, -np.arange(29), [1, 0, 0, 0], [0.1, 0.2, 0.3],
        [0, 0, 9.81], [0.0, 0.0, 0.5], remote=remote.encode_remote(remote.RemoteState(remote.button_mask("A"), lx=0.5)),
    )
    a = hg.lowstate_to_arrays(hg.lowstate_msg_from_record(rec))
    assert a.tick == 1234 and a.mode_machine == g1.MODE_MACHINE_29DOF_REV1 and a.crc_ok
    assert a.q.shape == (29,) and a.q[5] == pytest.approx(0.05)
    np.testing.assert_allclose(a.acc, [0, 0, 9.81], rtol=1e-6)
    assert a.remote.is_pressed("A") and a.remote.lx == pytest.approx(0.5)
    broken = hg.lowstate_msg_from_record(rec)
    broken.crc ^= 0x80000000
    assert not hg.lowstate_to_arrays(broken).crc_ok


def test_remote_hand_packed_bytes():
    # Start is bit 2 -> byte 2 = 0x04; A is bit 8 -> byte 3 = 0x01; Left is bit 15 -> byte 3 0x80.
    raw = bytearray(40)
    raw[2], raw[3] = 0x04, 0x81
    struct.pack_into("<5f", raw, 4, 0.25, -0.5, 0.75, 1.0, -1.0)  # lx rx ry L2 ly
    r = remote.decode_remote(bytes(raw))
    assert r.pressed() == ("Start", "A", "Left")
    assert (r.lx, r.rx, r.ry, r.l2, r.ly) == (0.25, -0.5, 0.75, 1.0, -1.0)
    assert remote.encode_remote(r) == bytes(raw)


def test_remote_round_trip_all_buttons():
    for i, name in enumerate(remote.BUTTONS):
        mask = remote.button_mask(name)
        assert mask == 1 << i
        r = remote.RemoteState(mask, lx=0.1 * i, ly=-0.1 * i)
        back = remote.decode_remote(remote.encode_remote(r))
        assert back.pressed() == (name,)
        assert back.lx == pytest.approx(0.1 * i) and back.ly == pytest.approx(-0.1 * i)
    assert remote.button_mask("l2", "B") == (1 << 5) | (1 << 9)
    assert remote.decode_remote(list(remote.encode_remote(remote.RemoteState(7)))).buttons == 7
    with pytest.raises(ValueError, match="unknown remote button"):
        remote.button_mask("Z")


def test_quat_to_rpy():
    half = math.pi / 8  # 45 deg about each axis in turn
    np.testing.assert_allclose(quat_to_rpy([math.cos(half), math.sin(half), 0, 0]), [math.pi / 4, 0, 0], atol=1e-12)
    np.testing.assert_allclose(quat_to_rpy([math.cos(half), 0, math.sin(half), 0]), [0, math.pi / 4, 0], atol=1e-12)
    np.testing.assert_allclose(quat_to_rpy([math.cos(half), 0, 0, math.sin(half)]), [0, 0, math.pi / 4], atol=1e-12)


def test_unknown_interface_is_a_clear_error():
    with pytest.raises(dds.DDSInitError, match=r"'nosuch0' does not exist; available: .*lo"):
        dds.check_interface("nosuch0")
    dds.check_interface("lo")
    assert dds.interface_multicast("nosuch0") is None


def test_init_dds_rejects_bad_domain_before_touching_dds():
    with pytest.raises(dds.DDSInitError, match="0..232"):
        dds.init_dds(500, "lo")


def test_dds_compat_refuses_other_versions():
    pinned = dict(dds_compat.PINNED)
    dds_compat.check_versions(pinned)  # the pinned versions pass
    dds_compat.check_versions(dds_compat.installed_versions())  # and are what is installed here
    with pytest.raises(dds_compat.DDSCompatError, match=r"cyclonedds 11\.0\.2 \(need 11\.0\.1\).*make setup"):
        dds_compat.check_versions({**pinned, "cyclonedds": "11.0.2"})
    with pytest.raises(dds_compat.DDSCompatError, match="unitree-sdk2py-dimos not installed"):
        dds_compat.check_versions({"cyclonedds": pinned["cyclonedds"]})

"""`pelvis_pitch` on keyframes (motions.schema, motions.reference, motions.kinematics.leg_ik): the pelvis leans
about y, the legs are solved for it, the Motion carries the orientation; checked by C MuJoCo FK of the result."""
import mujoco
import numpy as np
import pytest
import yaml

from motions.clips import _fk_model
from motions.library import MOTIONS_DIR, load_motion_file
from motions.momentum import com_positions
from motions.motion import MotionError
from robots import g1
from robots.physics import GRAVITY


def _write(tmp_path, raw, name="lean"):
    raw = {**raw, "name": name}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


LEAN = {"duration": 3.0, "reward_weights": {"joint_pos": 1.0}, "keyframes": [
    {"t": 0.0, "pelvis_height": 0.785},
    {"t": 1.0, "pelvis_height": 0.70, "pelvis_x": -0.04, "pelvis_pitch": 0.35},
    {"t": 2.0, "pelvis_height": 0.785, "pelvis_x": 0.0, "pelvis_pitch": -0.1},
    {"t": 2.5, "pelvis_height": 0.785}]}


def test_leaning_pelvis_keeps_the_feet_flat_on_the_floor(tmp_path):
    """FK of (ref_base_pos, ref_base_quat, ref_q) on the bridge model: every sole sphere's bottom stays at the
    home stance height (flat foot, same place) within 1e-9 m while the pelvis pitches to 0.35 rad and back;
    the orientation is the keyframe's pitch about y at the keyframe."""
    m = load_motion_file(_write(tmp_path, LEAN))
    assert m.ref_base_quat is not None
    k = int(round(1.0 / m.dt))
    np.testing.assert_allclose(m.ref_base_quat[k], [np.cos(0.175), 0.0, np.sin(0.175), 0.0], atol=1e-12)
    model, qadr, soles = _fk_model()[:3]
    d = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, d, model.key("home").id)
    mujoco.mj_kinematics(model, d)
    home = np.concatenate([d.geom_xpos[s] for s in soles])
    home[:, 0] -= d.qpos[0]
    for i in range(m.num_steps):
        d.qpos[:3], d.qpos[3:7], d.qpos[qadr] = m.ref_base_pos[i], m.ref_base_quat[i], m.ref_q[i]
        mujoco.mj_kinematics(model, d)
        np.testing.assert_allclose(np.concatenate([d.geom_xpos[s] for s in soles]), home, atol=1e-9)


def test_without_pelvis_pitch_the_reference_is_upright_and_unchanged():
    """No keyframe pitches: ref_base_quat stays None (the motions written before the field are unchanged;
    tests/test_reference_com.py holds them byte for byte)."""
    m = load_motion_file(MOTIONS_DIR / "jump_ballistic.yaml")
    assert m.ref_base_quat is None


def test_pitched_ballistic_com_flight(tmp_path):
    """`ballistic: com` with the pelvis pitching through the flight: the COM by FK with the orientation falls
    at g in the air (the solve uses the pitched pelvis)."""
    raw = yaml.safe_load((MOTIONS_DIR / "jump_swing.yaml").read_text())
    k = raw["keyframes"]
    i = next(i for i, kf in enumerate(k) if kf.get("phase") == "flight")
    k[i + 1]["pelvis_pitch"] = 0.15
    k[i + 2]["pelvis_pitch"] = 0.3
    m = load_motion_file(_write(tmp_path, raw, "jump_swing"))
    com = com_positions(m.ref_base_pos, m.ref_q, m.ref_base_quat)
    fl = np.flatnonzero(m.flight_mask)[1:-1]
    az = (com[fl + 1, 2] - 2 * com[fl, 2] + com[fl - 1, 2]) / m.dt**2
    np.testing.assert_allclose(az, -GRAVITY, atol=1e-5)
    assert abs(m.ref_base_quat[fl[-1], 2]) > 0.05  # it does pitch in the air


def test_pelvis_pitch_out_of_range_names_the_field(tmp_path):
    raw = {**LEAN, "keyframes": [LEAN["keyframes"][0], {**LEAN["keyframes"][1], "pelvis_pitch": 1.2}]}
    with pytest.raises(MotionError, match=r"keyframes\[1\]\.pelvis_pitch"):
        load_motion_file(_write(tmp_path, raw))


def test_leg_ik_pitch_sign():
    """A forward lean (pitch > 0) with the ankle where it was: the hip flexes further (hip pitch more negative
    on the G1, whose hip pitch is negative forward) by about the lean and the ankle takes the rest, the sum
    pitch + hip + knee + ankle = 0 (flat foot)."""
    from motions.kinematics import leg_geometry, leg_ik

    geo = leg_geometry()[0]
    x, z = geo.home_ankle_x, geo.ankle_height - g1.DEFAULT_BASE_HEIGHT
    h0, k0, a0, _ = leg_ik(geo, x, z)
    h1, k1, a1, _ = leg_ik(geo, x, z, 0.2)
    assert h1 + k1 + a1 + 0.2 == pytest.approx(0.0, abs=1e-12) and h0 + k0 + a0 == pytest.approx(0.0, abs=1e-12)
    assert h1 < h0


def test_jump_swing_lands_with_its_momentum(tmp_path):
    """jump_swing's landing: the pelvis pitches forward as the legs flex (0.03 -> 0.48 rad in 0.12 s). With it the
    CoP the reference needs stays inside the feet after touch-down and the angular momentum about the COM changes
    by less than 3.5 N m s across touch-down; the same keyframes with a level pelvis need the CoP outside the
    feet and a jump of more than 7 N m s (the flexing legs' nose-up momentum, which no floor force gives in a frame)."""
    from motions.balance import balance
    from motions.momentum import motion_angmom

    def landing(m):
        b = balance(m)
        after = b["checked"] & (m.times > m.flight_windows[0][1])
        L, _ = motion_angmom(m)
        k = int(round(m.flight_windows[0][1] / m.dt))
        return float(np.min(b["cop_margin"][after])), float(L[k + 1, 1] - L[k - 1, 1])

    cop, dL = landing(load_motion_file(MOTIONS_DIR / "jump_swing.yaml"))
    assert cop > 0.0 and abs(dL) < 3.5, (cop, dL)
    raw = yaml.safe_load((MOTIONS_DIR / "jump_swing.yaml").read_text())
    for k in raw["keyframes"]:
        k.pop("pelvis_pitch", None)
    cop, dL = landing(load_motion_file(_write(tmp_path, raw, "jump_swing")))
    assert cop < -0.02 and dL < -7.0, (cop, dL)

"""motions.momentum: the reference's whole-robot COM in flight against a ballistic oracle."""
import numpy as np
import pytest

from motions import load_motion
from motions.library import hold_pose_motion
from motions.momentum import com_trajectory, flight_consistency
from robots.physics import GRAVITY


def _thrown(vx=0.4, vz=1.5, T=60):
    """The default pose thrown as a rigid body: pelvis x = vx t, z = 0.79 + vz t - g t^2 / 2 (every frame)."""
    base = hold_pose_motion(T)
    t = np.arange(T) * base.dt
    pos = np.c_[vx * t, np.zeros(T), 0.79 + vz * t - 0.5 * GRAVITY * t ** 2]
    import dataclasses

    return dataclasses.replace(base, ref_base_pos=pos, flight_windows=((0.2, 0.6),)), pos


def test_rigid_ballistic_throw_is_consistent():
    m, pos = _thrown()
    com = com_trajectory(m)
    np.testing.assert_allclose(com - com[0], pos - pos[0], atol=1e-9)  # rigid pose: the COM moves with the pelvis
    (f,) = flight_consistency(m, com)
    assert f["com_dvxy"] == pytest.approx(0.0, abs=1e-9)
    assert f["com_vxy_takeoff"][0] == pytest.approx(0.4, abs=1e-9)
    assert f["com_az_mean"] == pytest.approx(-GRAVITY, abs=1e-6)  # central differences are exact on a parabola


def test_a_floating_stance_is_no_flight():
    """The same window over a pose held 1 cm above the floor (the COM does not accelerate): floating; the
    ballistic throw is not."""
    import dataclasses

    m, _ = _thrown()
    T = m.num_steps
    held = dataclasses.replace(m, ref_base_pos=np.c_[np.zeros((T, 2)), np.full(T, 0.80)])
    (f,) = flight_consistency(held)
    assert f["com_az_mean"] == pytest.approx(0.0, abs=1e-9) and f["floating"]
    (g,) = flight_consistency(m)
    assert not g["floating"]


def test_arm_swing_with_a_ballistic_pelvis_is_flagged():
    """The keyframe references' flaw (README "Motions"): a ballistic PELVIS while the arms swing forward
    moves the COM forward relative to the pelvis, so the COM's horizontal velocity changes in flight."""
    import dataclasses

    from robots import g1

    m, _ = _thrown()
    q = np.array(m.ref_q)
    t = np.arange(m.num_steps) * m.dt
    for side in ("left", "right"):
        q[:, g1.JOINT_NAMES.index(f"{side}_shoulder_pitch_joint")] = 0.5 - 3.0 * t ** 2  # accelerating swing
    (f,) = flight_consistency(dataclasses.replace(m, ref_q=q))
    assert f["com_dvxy"] > 0.05
    (ok,) = flight_consistency(m)
    assert ok["com_dvxy"] < 1e-9


def test_held_pose_in_flight_has_constant_angular_momentum():
    m, _ = _thrown()
    (f,) = flight_consistency(m)
    assert f["angmom_y_range"] < 1e-9 and abs(f["free_pitch_drift_deg"]) < 1e-9


def test_free_pitch_drift_matches_a_free_flying_robot_in_c_mujoco():
    """Oracle: the bridge model in the air (gravity off, so no contact) tucks its legs under PD for 0.3 s;
    MuJoCo conserves its angular momentum and the pelvis pitches. The same joint trajectory with a level
    pelvis (what a keyframe reference writes) gives L_y(t) and I_yy(t); their integral must predict the
    simulated pitch change. Measured: +15.74 deg predicted, +15.75 simulated."""
    import mujoco

    from motions.momentum import centroidal_angmom, free_pitch_drift
    from robots import g1
    from robots import model as RM

    m = RM.build_bridge_model()
    m.opt.gravity[:] = 0.0
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    d.qpos[2] = 2.0
    qa, da = RM.motor_qpos_adr(m), RM.motor_dof_adr(m)
    q0 = np.array(d.qpos[qa])
    tuck = np.zeros(29)
    for side in ("left", "right"):
        tuck[g1.JOINT_NAMES.index(f"{side}_hip_pitch_joint")] = -1.0
        tuck[g1.JOINT_NAMES.index(f"{side}_knee_joint")] = 1.4
        tuck[g1.JOINT_NAMES.index(f"{side}_shoulder_pitch_joint")] = -0.8
    kp, kd = np.asarray(g1.KP) * 2, np.asarray(g1.KD) * 2
    n, rec = int(round(0.3 / m.opt.timestep)), []
    for k in range(n + 1):
        s = min(k / n, 1.0)
        target = q0 + tuck * (10 * s**3 - 15 * s**4 + 6 * s**5)
        if k % 2 == 0:
            rec.append((d.qpos[:3].copy(), d.qvel[:3].copy(), d.qpos[qa].copy(), d.qvel[da].copy(), d.qpos[3:7].copy()))
        d.ctrl[:] = np.clip(kp * (target - d.qpos[qa]) - kd * d.qvel[da], -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT)
        mujoco.mj_step(m, d)
    pos, vel, q, dq, quat = (np.array(x) for x in zip(*rec))
    w = np.zeros(3)
    mujoco.mju_rotVecQuat(w, np.array([0.0, 0.0, 1.0]), quat[-1])
    simulated = np.arctan2(w[0], w[2])  # pelvis pitch (about +y) at the end, from level
    L, iyy = centroidal_angmom(pos, None, q, vel, None, dq)  # level pelvis: the reference's view
    predicted = free_pitch_drift(L[:, 1], iyy, 2 * m.opt.timestep)
    print(f"tuck in free flight: simulated pelvis pitch {np.degrees(simulated):+.2f} deg, predicted "
          f"{np.degrees(predicted):+.2f} deg; L_y range {np.ptp(L[:, 1]):.2f} N m s, I_yy {iyy[0]:.2f} kg m^2")
    assert abs(np.degrees(simulated)) > 2.0  # the tuck does rotate the pelvis
    assert predicted == pytest.approx(simulated, rel=0.02)


def test_root_angular_velocity_of_a_constant_pitch_rate():
    """The reference root's angular velocity by differences of its orientation: a constant 1.5 rad/s pitch."""
    import dataclasses

    from motions.momentum import _base_angvel

    m, _ = _thrown()
    th = 1.5 * np.arange(m.num_steps) * m.dt
    quat = np.c_[np.cos(th / 2), np.zeros_like(th), np.sin(th / 2), np.zeros_like(th)]
    w = _base_angvel(dataclasses.replace(m, ref_base_quat=quat))
    np.testing.assert_allclose(w, np.tile([0.0, 1.5, 0.0], (m.num_steps, 1)), atol=1e-9)

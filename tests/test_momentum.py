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

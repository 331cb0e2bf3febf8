"""motions.torques: the upper body's inverse-dynamics torque of a reference.

Oracle: a still pose held with the pelvis fixed in the air (zero velocity and acceleration) needs at each
upper-body joint exactly the torque that holds its subtree against gravity, axis . ((c - p) x m g) with c the
subtree's COM, p the joint's anchor and m its mass, computed here from C MuJoCo's kinematics, not mj_inverse."""
import dataclasses

import mujoco
import numpy as np
import pytest

from motions.clips import _fk_model
from motions.library import load_motion
from motions.torques import UPPER, upper_body_torque, upper_torque_ratio
from robots import g1
from robots.physics import GRAVITY


def _still(q: np.ndarray, n: int = 5):
    m, T = load_motion("hop"), n
    return dataclasses.replace(m, ref_q=np.tile(q, (T, 1)), ref_height=np.full(T, 0.9),
                               ref_foot_height=np.zeros((T, 2)), ref_dq=np.zeros((T, 29)),
                               ref_base_pos=np.tile([0.0, 0.0, 0.9], (T, 1)), ref_base_lin_vel=np.zeros((T, 3)),
                               ref_base_quat=None, contact=np.ones((T, 2), bool), flight_mask=np.zeros(T, bool))


def test_a_still_pose_needs_the_gravity_torque_of_each_subtree():
    q = g1.DEFAULT_JOINT_POS.copy()
    q[g1.joint_index("waist_pitch_joint")] = 0.4
    q[g1.joint_index("left_shoulder_pitch_joint")] = -1.2
    q[g1.joint_index("right_elbow_joint")] = 0.9
    tau = upper_body_torque(_still(q))
    model, qadr = _fk_model()[:2]
    d = mujoco.MjData(model)
    d.qpos[:3], d.qpos[3:7], d.qpos[qadr] = (0, 0, 0.9), (1, 0, 0, 0), q
    mujoco.mj_kinematics(model, d)
    mujoco.mj_comPos(model, d)
    for col, motor in enumerate(UPPER):
        jid = model.joint(g1.JOINT_NAMES[motor]).id
        b = model.jnt_bodyid[jid]
        weight = np.array([0.0, 0.0, -model.body_subtreemass[b] * GRAVITY])
        expect = -d.xaxis[jid] @ np.cross(d.subtree_com[b] - d.xanchor[jid], weight)
        np.testing.assert_allclose(tau[:, col], expect, atol=1e-6 + 1e-6 * abs(expect))
    assert abs(tau[0, list(UPPER).index(g1.joint_index("waist_pitch_joint"))]) > 5.0  # a torso leaning 0.4 rad


def test_the_ratio_names_the_worst_joint():
    r = upper_torque_ratio(_still(g1.DEFAULT_JOINT_POS.copy()))
    assert r["peak"] == pytest.approx(max(r["waist"], r["arms"])) and r["peak_joint"] in g1.JOINT_NAMES


def test_preview_prints_the_upper_body_torque(capsys):
    from motions.__main__ import main

    assert main(["preview", "hop", "--out", "/tmp/jump_torque_preview.png"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "upper-body torque" in x)
    r = upper_torque_ratio(load_motion("hop"))
    assert f"waist {r['waist']:.2f}, arms {r['arms']:.2f}" in line

"""The eval video (eval.video: side camera, checker floor, sky, reference ghost, key-frame strip)
and the dynamic-motion measurements (eval.measures) on hand-computable cases."""
import math

import mujoco
import numpy as np
import pytest

from eval.measures import GROUPS, MotionMeter, motion_stats
from eval.sim import EvalSim
from eval.video import GHOST_RGBA, key_times, open_video, render_model, write_strip
from motions import load_motion
from robots import g1
from robots.physics import GRAVITY


def test_dropped_robot_flies_for_the_ballistic_time():
    """The robot released 0.2 m above its standing pose with the drives off falls freely: no
    contact for sqrt(2 h / g) = 0.202 s, and its apex is the release height."""
    sim = EvalSim()
    sim.reset()
    m, d = sim.m, sim.d
    h = 0.2
    d.qpos[2] += h
    mujoco.mj_forward(m, d)
    gap = float(sim.sole_heights().min())  # the lowest sole above the floor: h + the home stance's 0.8 mm
    z0 = float(d.qpos[2])
    meter = MotionMeter(m, sim.floor, [m.body(n).id for n in g1.FOOT_BODIES], float(d.qpos[0]))
    for _ in range(400):
        d.ctrl[:] = 0
        mujoco.mj_step(m, d)
        meter.step(d, np.zeros(29), float(d.qpos[2]))
    x_end = float(d.qpos[0])
    r = meter.result(x_end)
    assert gap == pytest.approx(h, abs=0.002)
    t_fall = math.sqrt(2 * gap / GRAVITY)
    assert r["flight_time_s"] == pytest.approx(t_fall, abs=0.003)
    assert r["pelvis_apex_rise_m"] == pytest.approx(z0 - g1.DEFAULT_BASE_HEIGHT, abs=2e-5)  # release height - g dt^2 / 2 (first step)
    assert r["forward_displacement_m"] == x_end - meter.x0 and meter.x0 == float(sim.m.key("home").qpos[0])


def test_torque_ratio_per_group_and_stats():
    sim = EvalSim()
    meter = MotionMeter(sim.m, sim.floor, [sim.m.body(n).id for n in g1.FOOT_BODIES], 0.0)
    tau = np.zeros(29)
    tau[3] = -0.5 * g1.TORQUE_LIMIT[3]  # left knee at half its limit
    tau[13] = 1.2 * g1.TORQUE_LIMIT[13]  # waist roll demanded beyond it
    meter.step(sim.d, tau, 0.8)
    r = meter.result(None)
    assert r["peak_torque_ratio"] == {"legs": 0.5, "waist": pytest.approx(1.2), "arms": 0.0}
    assert r["forward_displacement_m"] is None
    s = motion_stats([r, {**r, "peak_torque_ratio": {k: 0.0 for k in GROUPS}, "flight_time_s": 0.3}])
    assert s["peak_torque_ratio"]["legs"] == {"mean": 0.25, "max": 0.5}
    assert s["flight_time_s"]["min"] == r["flight_time_s"] and s["forward_displacement_m"] is None


def test_key_times_of_the_high_jump():
    m = load_motion("jump_high")
    keys = dict(key_times(np.asarray(m.ref_height), m.dt, m.flight_windows, m.duration))
    t0, t1 = m.flight_windows[0]
    assert keys["take-off"] == t0 and keys["touch-down"] == t1 and keys["stand"] == m.duration
    assert abs(keys["apex"] - (t0 + t1) / 2) <= m.dt / 2 + 1e-9  # symmetric ballistic flight
    assert keys["crouch"] < t0 and m.ref_height[round(keys["crouch"] / m.dt)] == m.ref_height[: round(t0 / m.dt)].min()


def test_render_model_has_the_look_and_the_same_physics():
    base = EvalSim().m
    r = render_model((640, 480))
    assert r.ntex == base.ntex + 2 and r.nmat == base.nmat + 1
    assert r.geom_matid[r.geom("floor").id] >= 0
    assert r.vis.global_.offwidth >= 640 and r.vis.global_.offheight >= 480
    assert r.nq == base.nq and np.array_equal(r.body_mass, base.body_mass) and np.array_equal(r.geom_size, base.geom_size)


def test_frame_with_ghost_and_strip(tmp_path):
    sim = EvalSim()
    sim.reset()
    m = load_motion("jump_high")
    v = open_video(sim, (640, 480), np.asarray(m.ref_q), np.asarray(m.ref_base_pos))
    if v is None:
        pytest.skip("no offscreen renderer here (see the notice)")
    try:
        k = round(2.04 / m.dt)
        f = v.render(sim.d.qpos.copy(), k)
        scn = v.renderer.scene
        ghosts = [i for i in range(scn.ngeom) if np.allclose(scn.geoms[i].rgba, GHOST_RGBA)]
        assert f.shape == (480, 640, 3) and len(ghosts) > 20  # the ghost's bodies were added
        f_none = v.render(sim.d.qpos.copy(), 0)
        assert np.abs(f.astype(int) - f_none.astype(int)).sum() > 0  # the ghost moved with k
    finally:
        v.close()
    keys = key_times(np.asarray(m.ref_height), m.dt, m.flight_windows, m.duration)
    p = write_strip([f, f_none], [2.04, 0.0], keys, tmp_path / "strip.png")
    from PIL import Image

    with Image.open(p) as im:
        assert im.size == (5 * 640, 480)

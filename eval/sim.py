"""The bridge model (robots.model.build_bridge_model: full collisions, MuJoCo's default contact at
1 kHz) with per-episode domain randomisation, and the measurements an episode takes from it.

Invariants: `randomise` first restores the nominal model, so episodes are independent and a
seeded generator gives the same physics; `state()` is what the policy observes: true joint state,
pelvis gyro (the IMU sensor), orientation, pelvis-frame linear velocity and pelvis height over
the flat floor.
"""
from __future__ import annotations

import collections

import mujoco
import numpy as np

from eval.bridge_setup import BridgeSetup
from eval.config import KEY_BODIES, DRConfig
from policies.tracking import KEY_BODIES as TRACK_BODIES
from policies.tracking import Reference, body_pos_error, pelvis_pose
from robots import calibration as C
from robots import g1
from robots import model as RM
from robots.body_frames import BodyFrames, mat_to_quat
from robots.physics import GRAVITY, quat_rotate_inverse


class EvalSim:
    def __init__(self, setup: BridgeSetup | None = None):
        self.setup = setup = setup or BridgeSetup()  # nominal, a calibration's model or a hidden robot
        self.m = RM.build_bridge_model(setup.model)
        if setup.calibration is not None:
            C.apply_to_model(self.m, setup.calibration, setup.model.mjcf)
        self.d = mujoco.MjData(self.m)
        self._cmd_delay = setup.cmd_delay_s
        self._state_steps = int(round(setup.state_delay_s / self.m.opt.timestep))
        self._pending: collections.deque = collections.deque()
        self._issued = self._applied = None
        self._states: collections.deque = collections.deque(maxlen=self._state_steps + 1)
        m = self.m
        self.qadr, self.dadr = RM.motor_qpos_adr(m), RM.motor_dof_adr(m)
        self.floor = m.geom("floor").id
        self.pelvis = m.body(g1.BASE_BODY).id
        self.soles = list(RM.sole_spheres(m))
        self.key_bodies = np.array([m.body(n).id for n in KEY_BODIES])
        self.gyro_adr, self.acc_adr = (self._sensor(n) for n in ("imu-pelvis-angular-velocity",
                                                                 "imu-pelvis-linear-acceleration"))
        self.nominal = dict(friction=m.geom_friction.copy(), mass=m.body_mass.copy(), inertia=m.body_inertia.copy())
        self.home = m.key("home").id
        self.weight = float(m.body_subtreemass[0]) * GRAVITY
        self._force = np.zeros(6)

    def _sensor(self, name: str) -> slice | None:
        try:
            s = self.m.sensor(name)
        except KeyError:
            return None
        return slice(int(self.m.sensor_adr[s.id]), int(self.m.sensor_adr[s.id]) + 3)

    def randomise(self, rng: np.random.Generator, dr: DRConfig) -> dict:
        """Draw this episode's physics; returns the per-motor kp/kd scales and what was drawn."""
        m, nom = self.m, self.nominal
        m.geom_friction[:] = nom["friction"]
        m.body_mass[:] = nom["mass"]
        m.body_inertia[:] = nom["inertia"]
        kp_s = np.ones(g1.NUM_MOTORS)
        kd_s = np.ones(g1.NUM_MOTORS)
        info = {}
        if dr.enabled:
            mu = rng.uniform(*dr.friction)
            m.geom_friction[:, 0] = mu
            s = rng.uniform(*dr.mass_scale, size=m.nbody)
            s[0] = 1.0
            m.body_mass[:] = nom["mass"] * s
            m.body_inertia[:] = nom["inertia"] * s[:, None]
            kp_s = rng.uniform(*dr.kp_scale, size=g1.NUM_MOTORS)
            kd_s = rng.uniform(*dr.kd_scale, size=g1.NUM_MOTORS)
            info = {"friction": float(mu), "mass_kg": float((nom["mass"] * s).sum())}
        kp_s = kp_s * np.asarray(self.setup.kp_centre, float)  # a calibration's / hidden robot's kp (1: exact)
        mujoco.mj_setConst(self.m, self.d)
        return {"kp_scale": kp_s, "kd_scale": kd_s, **info}

    def reset(self):
        mujoco.mj_resetDataKeyframe(self.m, self.d, self.home)
        mujoco.mj_forward(self.m, self.d)
        self._pending.clear()
        self._issued = self._applied = None
        self._states.clear()
        if self._state_steps:
            self._states.append(self._now())

    def reset_to(self, qpos: np.ndarray, qvel: np.ndarray):
        """Start from a given state (eval.sim.reference_start) instead of the home keyframe."""
        self.reset()
        self.d.qpos[:], self.d.qvel[:] = qpos, qvel
        mujoco.mj_forward(self.m, self.d)
        if self._state_steps:
            self._states.clear()
            self._states.append(self._now())

    def step(self):
        """One physics step (mj_step); records the state when the observation is delayed."""
        mujoco.mj_step(self.m, self.d)
        if self._state_steps:
            self._states.append(self._now())

    def applied_target(self, target: np.ndarray, ts: float) -> np.ndarray:
        """The target the drives use at time ts: `target` (issued now) itself without a command delay;
        with one, the newest target issued at least cmd_delay_s ago (before any: the first issued)."""
        if self._cmd_delay <= 0:
            return target
        if self._issued is None or not np.array_equal(target, self._issued):
            self._issued = np.array(target, float)
            self._pending.append((ts + self._cmd_delay, self._issued))
        while self._pending and self._pending[0][0] <= ts + 1e-9:
            self._applied = self._pending.popleft()[1]
        return self._issued if self._applied is None else self._applied

    def state(self):
        """(q, dq, gyro, quat, pelvis-frame linear velocity, pelvis height): the runtime's inputs
        (state_delay_s old when the setup delays the observation)."""
        return self._record()[:6]

    def sensors(self):
        """(q, dq, quat, gyro, acc, tau): what the robot measures (LowState: encoders, the pelvis IMU's
        orientation, gyro and accelerometer, the drives' torque), as old as `state()`."""
        q, dq, gyro, quat, _, _, acc, tau = self._record()
        return q, dq, quat, gyro, acc, tau

    def _record(self):
        if self._state_steps:
            return tuple(x.copy() if isinstance(x, np.ndarray) else x for x in self._states[0])
        return self._now()

    def _now(self):
        d = self.d
        quat = d.qpos[3:7].copy()
        gyro = d.sensordata[self.gyro_adr].copy() if self.gyro_adr is not None else d.qvel[3:6].copy()
        vel_b = quat_rotate_inverse(quat, d.qvel[0:3].copy())
        acc = d.sensordata[self.acc_adr].copy() if self.acc_adr is not None else np.array([0.0, 0.0, GRAVITY])
        return (d.qpos[self.qadr].copy(), d.qvel[self.dadr].copy(), gyro, quat, vel_b, float(d.qpos[2]), acc,
                d.ctrl.copy())

    def sole_heights(self) -> np.ndarray:
        d, m = self.d, self.m
        return np.array([np.min(d.geom_xpos[s, 2] - m.geom_size[s, 0]) for s in self.soles])

    def floor_contacts(self) -> tuple[float, float, float]:
        """(max penetration m, total normal force N, sum over contacts of normal force x penetration
        N m) over robot-floor contacts now; the last / the second is the load-weighted penetration."""
        d = self.d
        n = d.ncon
        if n == 0:
            return 0.0, 0.0, 0.0
        c = d.contact
        on_floor = (c.geom1[:n] == self.floor) | (c.geom2[:n] == self.floor)
        if not on_floor.any():
            return 0.0, 0.0, 0.0
        pen = float(max(0.0, -np.min(c.dist[:n][on_floor])))
        fz = fpen = 0.0
        for i in np.flatnonzero(on_floor):
            mujoco.mj_contactForce(self.m, d, int(i), self._force)
            fz += self._force[0]
            fpen -= self._force[0] * c.dist[i]
        return pen, fz, fpen


def reference_key_positions(sim: EvalSim, ref_q: np.ndarray, ref_base_pos: np.ndarray) -> np.ndarray:
    """(T, 5, 3) world positions of KEY_BODIES for the reference (pelvis upright at ref_base_pos)."""
    d = mujoco.MjData(sim.m)
    out = np.zeros((ref_q.shape[0], len(KEY_BODIES), 3))
    for k in range(ref_q.shape[0]):
        d.qpos[:] = 0
        d.qpos[:3] = ref_base_pos[k]
        d.qpos[3] = 1.0
        d.qpos[sim.qadr] = ref_q[k]
        mujoco.mj_kinematics(sim.m, d)
        out[k] = d.xpos[sim.key_bodies]
    return out


def reference_qpos(sim: EvalSim, ref: Reference, k: int, kin: BodyFrames, anchor: int) -> np.ndarray:
    """The bridge model's qpos of a tracking reference at frame k (its pelvis from the anchor pose and the joints)."""
    k = int(min(max(k, 0), ref.frames - 1))
    p, r = pelvis_pose(ref, k, anchor, kin)
    qpos = np.zeros(sim.m.nq)
    qpos[0:3], qpos[3:7], qpos[sim.qadr] = p, mat_to_quat(r), ref.joint_pos[k]
    return qpos


def reference_start(sim: EvalSim, ref: Reference, k: int, dt: float, kin: BodyFrames, anchor: int):
    """(qpos, qvel): the reference's state at frame k, velocities by central differences of its neighbours
    (mj_differentiatePos); raised out of the floor when a sole sphere would start inside it."""
    a, b = max(k - 1, 0), min(k + 1, ref.frames - 1)
    qpos = reference_qpos(sim, ref, k, kin, anchor)
    qvel = np.zeros(sim.m.nv)
    mujoco.mj_differentiatePos(sim.m, qvel, (b - a) * dt, reference_qpos(sim, ref, a, kin, anchor),
                               reference_qpos(sim, ref, b, kin, anchor))
    d = mujoco.MjData(sim.m)
    d.qpos[:] = qpos
    mujoco.mj_kinematics(sim.m, d)
    low = min(float(np.min(d.geom_xpos[s, 2] - sim.m.geom_size[s, 0])) for s in sim.soles)
    qpos[2] += max(0.0, -low)
    return qpos, qvel


class BodyTracker:
    """Body-position error (m) of the simulated robot against a tracking reference at frame k:
    policies.tracking.body_pos_error over policies.tracking.KEY_BODIES (and the anchor body, if not one of them)."""

    def __init__(self, sim: EvalSim, ref: Reference, anchor_body: str):
        self.sim, self.ref = sim, ref
        self.kin = BodyFrames(sim.m)
        self.anchor_id = self.kin.body_id(anchor_body)
        names = list(TRACK_BODIES) + ([] if anchor_body in TRACK_BODIES else [anchor_body])
        self.ids = np.array([sim.m.body(b).id for b in names])
        self.anchor = names.index(anchor_body)
        self._d = mujoco.MjData(sim.m)

    def error(self, k: int) -> float:
        m, d, sd, ids = self.sim.m, self._d, self.sim.d, self.ids
        d.qpos[:] = reference_qpos(self.sim, self.ref, k, self.kin, self.anchor_id)
        mujoco.mj_kinematics(m, d)
        return body_pos_error(self.anchor, sd.xpos[ids], sd.xmat[ids].reshape(-1, 3, 3), d.xpos[ids],
                              d.xmat[ids].reshape(-1, 3, 3))

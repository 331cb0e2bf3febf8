"""Eval's view of the plant (plant.robot.Plant: the bridge model, full collisions, MuJoCo's default contact at
1 kHz, the drives' PD, the pelvis IMU): per-episode domain randomisation, the setup's delays (plant.faults.DelayLine)
and the measurements an episode takes.

Invariants: `randomise` first restores the nominal model, so episodes are independent and a seeded generator gives
the same physics; `state()` is the true state the --true-state path observes (joint state, pelvis gyro, orientation,
pelvis-frame linear velocity, pelvis height over the flat floor), `sensors()` what the robot measures; both of the
instant after the last physics step, or state_delay_s older when the setup delays the observation.
"""
from __future__ import annotations

import mujoco
import numpy as np

from eval.bridge_setup import BridgeSetup
from eval.config import KEY_BODIES, DRConfig
from plant.config import BandConfig, PlantConfig, Push
from plant.faults import DelayLine
from plant.robot import Plant
from policies.tracking import KEY_BODIES as TRACK_BODIES
from policies.tracking import Reference, body_pos_error, pelvis_pose
from robots import g1
from robots import model as RM
from robots.body_frames import BodyFrames, mat_to_quat
from robots.physics import GRAVITY, quat_rotate_inverse


class EvalSim:
    def __init__(self, setup: BridgeSetup | None = None):
        self.setup = setup = setup or BridgeSetup()  # nominal, a calibration's model or a hidden robot
        self.plant = Plant(PlantConfig(model=setup.model, band=BandConfig(enabled=False),
                                       torque_speed_envelope=setup.torque_speed_envelope), setup.calibration,
                           record_floor_contacts=True)
        m = self.m = self.plant.model
        self.d = self.plant.data
        self._cmd_delay = setup.cmd_delay_s
        self._state_delay = setup.state_delay_s
        self._commands, self._states = DelayLine(), DelayLine()
        self._issued = self._applied = self._state = None
        self.qadr, self.dadr = self.plant.qadr, self.plant.dadr
        self.floor = m.geom("floor").id
        self.pelvis = m.body(g1.BASE_BODY).id
        self.soles = list(RM.sole_spheres(m))
        self.key_bodies = np.array([m.body(n).id for n in KEY_BODIES])
        self.nominal = dict(friction=m.geom_friction.copy(), mass=m.body_mass.copy(), inertia=m.body_inertia.copy())
        self.weight = float(m.body_subtreemass[0]) * GRAVITY
        self._t0 = 0.0

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
        """The home keyframe, no set-point, no pushes; episode time 0 from here."""
        self.plant.reset(count=False)
        self._restart()

    def reset_to(self, qpos: np.ndarray, qvel: np.ndarray):
        """Start from a given state (eval.sim.reference_start) instead of the home keyframe."""
        self.plant.reset_to(qpos, qvel)
        self._restart()

    def _restart(self):
        self.plant.pushes.clear()
        self._t0 = self.plant.clock
        self._commands.clear()
        self._states.clear()
        self._issued = self._applied = None
        self._state = self._now()

    def push(self, t0: float, t1: float, force: np.ndarray):
        """A horizontal pelvis push from episode time t0 to t1."""
        self.plant.schedule(Push(self._t0 + t0, tuple(float(f) for f in force), t1 - t0))

    def drive(self, target: np.ndarray, kp: np.ndarray, kd: np.ndarray, ts: float):
        """The drives' set-point at episode time ts: `target` (issued now) itself without a command delay; with
        one, the newest target issued at least cmd_delay_s ago (before any: the first issued)."""
        if self._cmd_delay > 0:
            if self._issued is None or not np.array_equal(target, self._issued):
                self._issued = np.array(target, float)
                self._commands.push(ts + self._cmd_delay, self._issued)
            due = self._commands.pop_due(ts)
            if due:
                self._applied = due[-1]
            target = self._issued if self._applied is None else self._applied
        self.plant.set_drive(target, kp, kd)

    def step(self) -> np.ndarray:
        """One physics step at the drives' set-point; returns the torque the drives demanded (before the motor
        limits) and records the state when the observation is delayed."""
        self.plant.step()
        if self._state_delay > 0:
            self._states.push(self.plant.clock + self._state_delay, self._now())
            due = self._states.pop_due(self.plant.clock)
            if due:
                self._state = due[-1]
        else:
            self._state = None
        return self.plant.tau_demand

    def state(self):
        """(q, dq, gyro, quat, pelvis-frame linear velocity, pelvis height): the runtime's inputs on the true state
        (state_delay_s old when the setup delays the observation)."""
        return self._record()[:6]

    def sensors(self):
        """(q, dq, quat, gyro, acc, tau): what the robot measures (LowState: encoders, the pelvis IMU's
        orientation, gyro and accelerometer, the drives' torque), as old as `state()`."""
        q, dq, gyro, _, _, _, acc, tau, imu_quat = self._record()
        return q, dq, imu_quat, gyro, acc, tau

    def _record(self):
        rec = self._state if self._state is not None else self._now()
        return tuple(x.copy() if isinstance(x, np.ndarray) else x for x in rec)

    def _now(self):
        d, s = self.d, self.plant.sensor_state()
        quat = d.qpos[3:7].copy()
        vel_b = quat_rotate_inverse(quat, d.qvel[0:3].copy())
        return (s.q, s.dq, s.gyro, quat, vel_b, float(d.qpos[2]), s.acc, s.tau, s.quat)

    def sole_heights(self) -> np.ndarray:
        d, m = self.d, self.m
        return np.array([np.min(d.geom_xpos[s, 2] - m.geom_size[s, 0]) for s in self.soles])

    def floor_contacts(self) -> tuple[float, float, float]:
        """(max penetration m, total normal force N, sum over contacts of normal force x penetration
        N m) over the robot-floor contacts of the last physics step (plant.robot.FloorContacts: the contacts at
        its start, the forces it applied); the last / the second is the load-weighted penetration."""
        c = self.plant.floor_contacts
        if c.geom.size == 0:
            return 0.0, 0.0, 0.0
        return float(max(0.0, -c.dist.min())), float(c.normal_force.sum()), float(-(c.normal_force * c.dist).sum())

    def sole_forces(self) -> np.ndarray:
        """(2,) normal force of the floor on each foot's sole spheres in the last physics step (N), left then right."""
        c = self.plant.floor_contacts
        return np.array([c.normal_force[np.isin(c.geom, np.atleast_1d(geoms))].sum() for geoms in self.soles])


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

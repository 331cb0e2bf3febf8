"""Sigmoid-activated compliant foot contact (the seed's contact knob k), in JAX, as generalised forces.

The seed paper (BCG, on the smoothed compliant contact of Schwarke et al., CoRL 2025) scales contact
impulses by s_k(d) = 1 / (1 + exp(k d)), d the signed sphere-floor distance (m, > 0 apart), k the sharpness (1/m): 50 / 100 / 300, training at
300. Here the 8 foot spheres of the feet-only training model get a penalty contact written in JAX;
MJX's own foot-floor contact is switched off (`disable_foot_contact`) and MJX integrates the rest
(joint limits, PD torques, gravity) with the contact entering as `qfrc_applied`.

Force law (per sphere, floor z = 0, d = z_centre - radius, v = velocity of the sphere's lowest point):

    f_n = max(0, (K / k) softplus(-k d) - D v_n s_k(d))            normal (N), along +z
    f_t = -mu f_n v_t / (sqrt(|v_t|^2 + eps^2) + c mu f_n)          tangential (N)

Why this law (and not s_k(d) max(0, -K d - D v_n)): it is the hard spring-damper
1[d' < 0] (K (-d') - D v_n) averaged over a floor height that is uncertain by a logistic offset of
scale 1/k (E[max(0, xi - d)] = softplus(-k d) / k, P(xi > d) = s_k(d), before the clip). So
- the sigmoid is literally the contact probability and the local stiffness is d f_n / d(-d) = K s_k(d):
  "stiffness scaled by s_k", the seed's statement, with the force acting BEFORE touch-down over the
  sigmoid's width (5-95 %: |d| < 2.94 / k = +-59 mm at k = 50, +-10 mm at k = 300), even at rest;
- k -> infinity recovers the hard penalty K max(0, -d) - D v_n 1[d < 0]; the static part is conservative
  (potential (K / k^2) * integral of softplus), so it injects no energy by itself;
- the product law s_k(d) max(0, -K d - D v_n) is zero at rest for every d > 0: the sigmoid would then
  only halve the stiffness around d = 0 and act before touch-down only through damping.
Rest distance of a sphere carrying a load f (damping and friction zero at rest), from the law:

    d_rest = -(1 / k) log(expm1(k f / K))        (> 0: the sphere hovers, when k f / K < log 2)

At the defaults (K = 2e4 N/m, 41 N per sphere standing): d_rest = +0.54 mm at k = 300, +14.8 mm at
k = 100, +44.5 mm at k = 50. Soft k holds the robot tens of mm above the floor: that is the seed's
"soft contact pushes back tens of millimetres before touch-down", and the sim-to-sim gap k controls.

Friction is regularised Coulomb, f_t = -mu f_n v_t / sqrt(|v_t|^2 + eps^2) when c = 0. Applied
explicitly its small-slip slope mu f_n / eps is a stiff damper: at a 5 ms substep on this model it is
stable only for eps >~ 0.26 m/s at standing load. With c = `friction_compliance` = dt / m_eff (s/kg)
the slope is taken linear-implicitly (f = -c_v v / (1 + c c_v), c_v the viscous slope), which bounds it
by 1 / c whatever eps and f_n are: stable (needs c >= dt / (2 m)), sliding friction unchanged
(|v_t| >> c mu f_n), stick reached within about one substep. Set c = 0 for the plain formula.

Stability under MuJoCo's semi-implicit Euler (qvel first, then qpos with the new qvel) at substep h,
per contact mode of effective mass m (linearised, stiffness K, damping D):
    h D / m < 2   and   h^2 K / m + 2 h D / m < 4
(the Jury conditions of x' = x + h v', v' = v + h (-K x - D v) / m: trace 2 - h^2 K/m - h D/m,
determinant 1 - h D / m; tests/test_contact.py checks them on an oscillator). m is NOT the robot mass
over the spheres in stance (33.3 kg / 8 = 4.2 kg): the stiffest mode is the foot rocking on its ankle,
1 / lambda_max(J_n M^-1 J_n^T) = 0.37 kg at the home pose (`effective_sphere_mass`), and the ankle's
explicit PD adds stiffness and damping to that same mode. Measured on the robot (PD-held default pose,
C MuJoCo stepping the training model with this contact as qfrc_applied, K = 2e4, D = 60, k = 300):
stable at h = 1, 2.5, 3.33 ms, rocking grows at 4 and 5 ms, for every (K, D) tried at 5 ms (5e3-4e4
N/m, 20-90 N s/m). The criterion matches that with m = G1_SPHERE_MASS = 0.18 kg (3.46 < 4 at 3.33 ms,
4.4 at 4 ms, 6.1 at 5 ms): this contact needs a 300 Hz substep (6 per 20 ms control step), not 200 Hz.

Everything is pure, jit / vmap / grad-able and float32-safe (softplus, sigmoid, eps > 0 norms).
"""
from __future__ import annotations

import copy
import dataclasses
import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from robots import model as M

# Effective mass of the stiffest foot-contact mode of the feet-only training model, calibrated so that
# the stability criterion matches the robot's measured limit (module docstring); the contact-only value
# 1 / lambda_max(J_n M^-1 J_n^T) at the home pose is 0.37 kg (effective_sphere_mass).
G1_SPHERE_MASS = 0.18  # kg
SUBSTEP = 1.0 / 300.0  # s: the substep this contact needs on the G1 (6 per 20 ms control step)
LAWS = ("softplus", "product")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ContactParams:
    """Parameters of the sigmoid contact; a pytree, so it can be a jit argument (k swept without
    recompiling) or a closure constant. `validate` needs Python numbers."""

    kappa: float = 300.0  # k, sigmoid sharpness (1/m)
    stiffness: float = 2.0e4  # K, normal stiffness per sphere (N/m)
    damping: float = 60.0  # D, normal damping per sphere (N s/m)
    friction: float = 0.6  # mu (the training model's foot friction)
    eps: float = 0.01  # friction regularisation velocity (m/s)
    friction_compliance: float = 0.01  # c, s/kg: >= dt / (2 m_eff); 0 = explicit friction
    law: str = dataclasses.field(default="softplus", metadata=dict(static=True))  # LAWS

    def stability(self, substep_dt: float, sphere_mass: float) -> dict:
        """The two criteria's values (each must be below its bound) and the largest stable K, D."""
        h, m, K, D = float(substep_dt), float(sphere_mass), float(self.stiffness), float(self.damping)
        return {
            "damping_number": h * D / m,  # < 2
            "stability_number": h * h * K / m + 2 * h * D / m,  # < 4
            "max_stiffness": (4 - 2 * h * D / m) * m / (h * h),  # N/m at this D
            "max_damping": min(2 * m / h, (4 - h * h * K / m) * m / (2 * h)),  # N s/m at this K
        }

    def validate(self, substep_dt: float, sphere_mass: float = G1_SPHERE_MASS) -> "ContactParams":
        """Raise ValueError naming the limit: k <= 0, non-physical values, or a (K, D, dt) that the
        semi-implicit Euler integrator cannot keep stable (criteria in the module docstring)."""
        if not self.kappa > 0:
            raise ValueError(f"contact kappa (sigmoid sharpness k) must be > 0 1/m, got {self.kappa}")
        if not self.stiffness > 0:
            raise ValueError(f"contact stiffness K must be > 0 N/m, got {self.stiffness}")
        if not self.damping >= 0:
            raise ValueError(f"contact damping D must be >= 0 N s/m, got {self.damping}")
        if not self.friction >= 0:
            raise ValueError(f"contact friction mu must be >= 0, got {self.friction}")
        if not self.eps > 0:
            raise ValueError(f"friction regularisation eps must be > 0 m/s, got {self.eps}")
        if not self.friction_compliance >= 0:
            raise ValueError(f"friction_compliance must be >= 0 s/kg, got {self.friction_compliance}")
        if not (substep_dt > 0 and sphere_mass > 0):
            raise ValueError(f"substep_dt and sphere_mass must be > 0, got {substep_dt}, {sphere_mass}")
        s = self.stability(substep_dt, sphere_mass)
        where = f"at substep {substep_dt} s, effective sphere mass {sphere_mass} kg"
        if s["damping_number"] >= 2:
            raise ValueError(
                f"contact damping D = {self.damping} N s/m is unstable {where}: dt D / m = "
                f"{s['damping_number']:.3g} must be < 2 (D < {2 * sphere_mass / substep_dt:.4g})")
        if s["stability_number"] >= 4:
            raise ValueError(
                f"contact stiffness K = {self.stiffness} N/m with D = {self.damping} N s/m is unstable "
                f"{where}: dt^2 K / m + 2 dt D / m = {s['stability_number']:.3g} must be < 4 "
                f"(K < {s['max_stiffness']:.4g} N/m at this D; or a smaller substep)")
        if self.friction_compliance and self.friction_compliance < substep_dt / (2 * sphere_mass):
            raise ValueError(
                f"friction_compliance {self.friction_compliance} s/kg is below dt / (2 m) = "
                f"{substep_dt / (2 * sphere_mass):.4g}: the implicit friction would be unstable {where}")
        return self


def sigmoid(d, kappa):
    """s_k(d) = 1 / (1 + exp(k d)): 1 deep in contact, 1/2 at touch, 0 far apart."""
    return jax.nn.sigmoid(-kappa * d)


def normal_force(d, v_n, p: ContactParams):
    """f_n (N); d (m, > 0 apart), v_n (m/s, > 0 separating).
    "softplus": max(0, (K/k) softplus(-k d) - D v_n s_k(d)); "product": s_k(d) max(0, -K d - D v_n)."""
    k = p.kappa
    if p.law == "softplus":
        f = (p.stiffness / k) * jax.nn.softplus(-k * d) - p.damping * v_n * sigmoid(d, k)
        return jnp.maximum(f, 0.0)
    if p.law == "product":
        return sigmoid(d, k) * jnp.maximum(-p.stiffness * d - p.damping * v_n, 0.0)
    raise ValueError(f"unknown contact law {p.law!r}; use one of {LAWS}")


def friction_force(f_n, v_t, p: ContactParams):
    """f_t = -mu f_n v_t / (sqrt(|v_t|^2 + eps^2) + c mu f_n); v_t (..., 2) tangential slip (m/s)."""
    speed = jnp.sqrt(jnp.sum(v_t * v_t, axis=-1) + p.eps * p.eps)  # > 0: safe at v_t = 0
    mf = p.friction * f_n
    return -(mf / (speed + p.friction_compliance * mf))[..., None] * v_t


def rest_distance(load, p: ContactParams):
    """d (m) where the static law carries `load` N: -(1/k) log(expm1(k f / K)); > 0 = hovering."""
    return -np.log(np.expm1(p.kappa * np.asarray(load, float) / p.stiffness)) / p.kappa


def sphere_contact_forces(sphere_pos, sphere_vel, radius, p: ContactParams):
    """(S, 3) world forces on the spheres at their lowest points; floor z = 0.

    sphere_pos (S, 3) centres, sphere_vel (S, 3) velocities of the lowest points, radius (S,)."""
    d = sphere_pos[..., 2] - radius
    f_n = normal_force(d, sphere_vel[..., 2], p)
    f_t = friction_force(f_n, sphere_vel[..., :2], p)
    return jnp.concatenate([f_t, f_n[..., None]], axis=-1)


def sphere_state(m: mjx.Model, d: mjx.Data, sphere_geoms, update_kinematics: bool = True):
    """(pos (S,3) of the lowest points' spheres' centres, velocity (S,3) of the lowest points,
    jacp (S, nv, 3), radius (S,)). `update_kinematics`: recompute kinematics from d.qpos first
    (an mjx.step leaves geom_xpos at the PREVIOUS qpos; a one-substep lag acts as negative damping
    -K dt, which at the defaults is larger than D)."""
    if update_kinematics:
        d = mjx.com_pos(m, mjx.kinematics(m, d))
    g = jnp.asarray(sphere_geoms)
    radius = m.geom_size[g, 0]
    centre = d.geom_xpos[g]
    point = centre - radius[:, None] * jnp.array([0.0, 0.0, 1.0], centre.dtype)
    body = jnp.asarray(m.geom_bodyid)[g]
    jacp, _ = jax.vmap(lambda pt, b: mjx.jac(m, d, pt, b))(point, body)  # (S, nv, 3)
    vel = jnp.einsum("snk,n->sk", jacp, d.qvel)
    return centre, vel, jacp, radius


def generalized_forces(m: mjx.Model, d: mjx.Data, sphere_geoms, p: ContactParams,
                       update_kinematics: bool = True, return_forces: bool = False):
    """qfrc (nv,) = sum_s J_s^T f_s of the sigmoid contact at d's state; add it to qfrc_applied
    before mjx.step. With return_forces, also the (S, 3) sphere forces (f[:, 2] is the normal)."""
    pos, vel, jacp, radius = sphere_state(m, d, sphere_geoms, update_kinematics)
    f = sphere_contact_forces(pos, vel, radius, p)
    qfrc = jnp.einsum("snk,sk->n", jacp, f)
    return (qfrc, f) if return_forces else qfrc


def step(m: mjx.Model, d: mjx.Data, sphere_geoms, p: ContactParams, qfrc_other=0.0):
    """One mjx.step with the sigmoid contact as qfrc_applied (= contact + qfrc_other).
    Returns (data, sphere forces (S, 3))."""
    qfrc, f = generalized_forces(m, d, sphere_geoms, p, return_forces=True)
    return mjx.step(m, d.replace(qfrc_applied=qfrc + qfrc_other)), f


# ---------------------------------------------------------------- model helpers (C MuJoCo, numpy)
def disable_foot_contact(mj_model: mujoco.MjModel, sphere_geoms=None) -> mujoco.MjModel:
    """A copy of the model whose foot spheres collide with nothing (contype = conaffinity = 0), so
    MJX's native foot-floor contact does not add to the sigmoid contact. Other contacts stay."""
    out = copy.copy(mj_model)  # MjModel.__copy__ copies the C model
    g = M.sole_spheres(mj_model).ravel() if sphere_geoms is None else np.asarray(sphere_geoms)
    out.geom_contype[g] = 0
    out.geom_conaffinity[g] = 0
    return out


def effective_sphere_mass(mj_model: mujoco.MjModel, sphere_geoms=None, qpos=None) -> float:
    """1 / lambda_max(J_n M^-1 J_n^T) (kg) over the spheres' normal rows at qpos (default: the home
    keyframe): the effective mass of the stiffest contact mode, the m of the stability criterion."""
    g = M.sole_spheres(mj_model).ravel() if sphere_geoms is None else np.asarray(sphere_geoms)
    d = mujoco.MjData(mj_model)
    if qpos is None:
        mujoco.mj_resetDataKeyframe(mj_model, d, 0)
    else:
        d.qpos[:] = qpos
    mujoco.mj_forward(mj_model, d)
    J = np.zeros((len(g), mj_model.nv))
    jp = np.zeros((3, mj_model.nv))
    for i, gi in enumerate(g):
        pt = d.geom_xpos[gi].copy()
        pt[2] -= mj_model.geom_size[gi, 0]
        mujoco.mj_jac(mj_model, d, jp, None, pt, mj_model.geom_bodyid[gi])
        J[i] = jp[2]
    MinvJT = np.zeros_like(J)
    mujoco.mj_solveM(mj_model, d, MinvJT, J)  # rows: (M^-1 J_i^T)^T
    return float(1.0 / np.linalg.eigvalsh(J @ MinvJT.T).max())


def sigmoid_width(kappa: float, level: float = 0.95) -> float:
    """Half-width (m) of the band where s_k goes from 1 - level to level: log(level / (1-level)) / k."""
    return math.log(level / (1 - level)) / kappa

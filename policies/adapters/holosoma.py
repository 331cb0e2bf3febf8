"""holosoma (holosoma-inference) ONNX policies. The file's metadata_props are JSON:

    dof_names (policy joint order), kp, kd (per joint, that order), command_ranges
    {lin_vel_x, lin_vel_y, ang_vel_yaw, heading}

Default pose, action scale, rate and the observation terms are not in the file: holosoma keeps them in
its Python config, and concatenates the terms in sorted(term name) order (not the listed order). They
come from a sidecar YAML beside the ONNX (`<stem>.yaml` or `holosoma.yaml`; README "Third-party
policies"):

    default_dof_angles: [29 floats, dof_names order]   # rad
    policy_action_scale: 0.25                           # target = default + scale * action
    rl_rate: 50                                         # Hz (only 50 runs here)
    gait_period: 1.0                                    # s; 0 = no gait phase
    actor_obs: [base_ang_vel, projected_gravity, ...]   # term names (sorted by the adapter)
    obs_dims: {base_ang_vel: 3, ...}
    obs_scales: {base_ang_vel: 0.25, ...}
    history_length: 1

or, for holosoma-inference 0.1.3's published G1 29-DoF locomotion models (input `actor_obs` [1, 100],
the G1's 29 dof_names), from BUILT_IN_LOCO below: the values of its `g1-29dof-loco` config
(robot g1_29dof, observation loco_g1_29dof, task locomotion), used only when no sidecar exists and
stated in the artifact's `source`.

Whole-body-tracking models (inputs `obs` + `time_step`, outputs `actions`, `joint_pos`, `joint_vel`,
`ref_pos_xyz`, `ref_quat_xyzw`: the reference, the torso's, baked into the graph) without a sidecar get
BUILT_IN_WBT, holosoma-inference 0.1.3's `g1-29dof-wbt` config: observation `wbt` (sorted: actions,
base_ang_vel, dof_pos, dof_vel, motion_command, motion_ref_ori_b = 154, scales 1), the loco default pose,
anchor `torso_link` (robot config motion.body_name_ref), actions clipped to +-100, and the action scale
(`_action_scales`): the metadata's `action_scale` when present; a sidecar's
`action_scales_by_effort_limit_over_p_gain` (false: its policy_action_scale; true: the effort rule); 1
when the graph squashes its actions to the joint limits around the default pose (FastSAC's tanh x
per-joint bound: its output is the offset in rad); otherwise the BeyondMimic rule 0.25 x effort limit /
kp per joint (task.action_scales_by_effort_limit_over_p_gain; effort limits of robots/g1.py). The
observed size must be 154: any other is refused naming the key, the expected and the found size.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from policies.adapters.common import (TIME_STEP, clip_frames, finish, io_shapes, metadata, tanh_bound, term,
                                      to_motor_order)
from policies.artifact import Artifact, ArtifactError, MotionSpec, joint_name_errors
from policies.tracking import TrackingSpec
from policies.observation import RUNTIME_TERMS
from robots import g1

TERMS = {"motion_command": "motion_command", "motion_ref_ori_b": "motion_anchor_ori_b",
         "motion_ref_pos_b": "motion_anchor_pos_b", "actions": "last_action", "base_ang_vel": "base_ang_vel", "base_lin_vel": "base_lin_vel",
         "projected_gravity": "projected_gravity", "dof_pos": "joint_pos_rel", "dof_vel": "joint_vel_rel",
         "command_lin_vel": "velocity_command_xy", "command_ang_vel": "velocity_command_yaw",
         "sin_phase": "gait_phase_sin", "cos_phase": "gait_phase_cos"}
SIDECAR_KEYS = ("default_dof_angles", "policy_action_scale", "actor_obs", "obs_dims", "obs_scales")

BUILT_IN_LOCO = {  # holosoma-inference 0.1.3, config g1-29dof-loco (config_values/{robot,observation,task}.py)
    "default_dof_angles": [-0.312, 0.0, 0.0, 0.669, -0.363, 0.0] * 2 + [0.0, 0.0, 0.0]
    + [0.2, 0.2, 0.0, 0.6, 0.0, 0.0, 0.0] + [0.2, -0.2, 0.0, 0.6, 0.0, 0.0, 0.0],
    "policy_action_scale": 0.25, "rl_rate": 50, "gait_period": 1.0, "history_length": 1,
    "actor_obs": ["base_ang_vel", "projected_gravity", "command_lin_vel", "command_ang_vel", "dof_pos", "dof_vel",
                  "actions", "sin_phase", "cos_phase"],
    "obs_dims": {"base_ang_vel": 3, "projected_gravity": 3, "command_lin_vel": 2, "command_ang_vel": 1,
                 "dof_pos": 29, "dof_vel": 29, "actions": 29, "sin_phase": 2, "cos_phase": 2},
    "obs_scales": {"base_ang_vel": 0.25, "projected_gravity": 1.0, "command_lin_vel": 1.0, "command_ang_vel": 1.0,
                   "dof_pos": 1.0, "dof_vel": 0.05, "actions": 1.0, "sin_phase": 1.0, "cos_phase": 1.0},
}
BUILT_IN_WBT = {  # holosoma-inference 0.1.3, config g1-29dof-wbt (config_values/{inference,observation,task}.py)
    "default_dof_angles": BUILT_IN_LOCO["default_dof_angles"], "rl_rate": 50, "gait_period": 0.0, "history_length": 1,
    "actor_obs": ["motion_command", "motion_ref_ori_b", "base_ang_vel", "dof_pos", "dof_vel", "actions"],
    "obs_dims": {"motion_command": 58, "motion_ref_ori_b": 6, "base_ang_vel": 3, "dof_pos": 29, "dof_vel": 29,
                 "actions": 29},
    "obs_scales": {"motion_command": 1.0, "motion_ref_ori_b": 1.0, "base_ang_vel": 1.0, "dof_pos": 1.0,
                   "dof_vel": 1.0, "actions": 1.0},
    "anchor_body": "torso_link",
}
WBT_OUTPUTS = ("joint_pos", "joint_vel", "ref_pos_xyz", "ref_quat_xyzw")
EFFORT_RULE = 0.25  # BeyondMimic's action scale: 0.25 x effort limit / kp


def is_holosoma(meta: dict) -> bool:
    return "dof_names" in meta and "kp" in meta


def _json(meta, key, where):
    try:
        return json.loads(meta[key])
    except KeyError as e:
        raise ArtifactError(f"{where}: holosoma metadata_props lacks {key!r}; export with holosoma's exporter "
                            "(it writes dof_names, kp, kd as JSON)") from e
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{where}: metadata_props[{key!r}] is not JSON: {e}") from e


def sidecar_path(path: Path) -> Path | None:
    for p in (path.with_suffix(".yaml"), path.parent / "holosoma.yaml"):
        if p.is_file():
            return p
    return None


def read(path: Path, model, blob) -> Artifact:
    where = str(path)
    meta = metadata(model)
    names = _json(meta, "dof_names", where)
    errs = joint_name_errors(names, key=f"{where}: metadata_props['dof_names']")
    if errs:
        raise ArtifactError("\n".join(errs))
    kp, kd = _json(meta, "kp", where), _json(meta, "kd", where)
    ins, outs = io_shapes(model)
    side = sidecar_path(path)
    if side is not None:
        try:
            cfg = yaml.safe_load(side.read_text()) or {}
        except yaml.YAMLError as e:
            raise ArtifactError(f"{side} is not valid YAML: {e}") from e
        missing = [k for k in SIDECAR_KEYS if k not in cfg]
        if missing:
            raise ArtifactError(f"{side}: holosoma sidecar lacks {missing}; it needs {list(SIDECAR_KEYS)} "
                                "(README, 'Third-party policies')")
        origin = f"sidecar {side.name}"
    elif TIME_STEP in ins:
        missing = [o for o in WBT_OUTPUTS if o not in outs]
        if missing or "obs" not in ins:
            raise ArtifactError(f"{where}: holosoma whole-body-tracking file without a sidecar and not shaped like "
                                f"holosoma-inference 0.1.3's (inputs obs + time_step, outputs {list(WBT_OUTPUTS)}): "
                                f"inputs {sorted(ins)}, outputs missing {missing}; write "
                                f"{path.with_suffix('.yaml').name} with {list(SIDECAR_KEYS)}")
        want = sum(BUILT_IN_WBT["obs_dims"].values())
        if ins["obs"][1:] != [want]:
            raise ArtifactError(f"{where}: ONNX input 'obs' has shape {ins['obs']}: expected [1, {want}] "
                                f"(holosoma-inference 0.1.3's g1-29dof-wbt observation "
                                f"{sorted(BUILT_IN_WBT['actor_obs'])}), found {ins['obs'][1:]}; a file of another "
                                f"observation needs a sidecar {path.with_suffix('.yaml').name} listing its terms")
        cfg, origin = BUILT_IN_WBT, "built-in defaults of holosoma-inference 0.1.3's g1-29dof-wbt config"
    elif list(ins) == ["actor_obs"] and ins["actor_obs"][1:] == [100] and list(names) == list(g1.JOINT_NAMES):
        cfg, origin = BUILT_IN_LOCO, "built-in defaults of holosoma-inference 0.1.3's g1-29dof-loco config"
    else:
        raise ArtifactError(f"{where}: holosoma file without a sidecar, and not one of the published G1 29-DoF "
                            f"locomotion models (inputs {ins}); write {path.with_suffix('.yaml').name} with "
                            f"{list(SIDECAR_KEYS)} (README, 'Third-party policies')")
    rate = float(cfg.get("rl_rate", 50))
    hist = cfg.get("history_length", 1)
    obs = []
    for n in sorted(cfg["actor_obs"]):  # holosoma concatenates terms in sorted order
        canon = TERMS.get(n, n)
        if canon not in RUNTIME_TERMS:
            raise ArtifactError(f"{where}: observation term {n!r} ({origin}: actor_obs) is not one this runtime "
                                f"builds (holosoma names {sorted(TERMS)}); retrain without it")
        if n not in cfg["obs_dims"] or n not in cfg["obs_scales"]:
            raise ArtifactError(f"{where}: term {n!r} needs obs_dims[{n!r}] and obs_scales[{n!r}] ({origin})")
        t = term(canon, f"actor_obs: {n}", cfg["obs_scales"][n], history=hist)
        obs.append(t if int(cfg["obs_dims"][n]) == t.size else
                   type(t)(t.name, int(cfg["obs_dims"][n]), t.scale, t.history, t.clip, t.scales, t.source))
    rng = json.loads(meta["command_ranges"]) if meta.get("command_ranges") not in (None, "null") else None
    ranges = () if not rng else tuple((ours, float(rng[k][0]), float(rng[k][1]))
                                      for ours, k in (("lin_vel_x", "lin_vel_x"), ("lin_vel_y", "lin_vel_y"),
                                                      ("ang_vel_z", "ang_vel_yaw")) if k in rng)
    kp_m = to_motor_order(kp, names, "kp", where)
    extra = {}
    if TIME_STEP in ins:
        extra = _wbt_fields(path, model, meta, cfg, names, kp, ins, outs)
        scales = extra["action_scales"]
        scale = float(max(scales))
    else:
        scale = float(cfg["policy_action_scale"])
        extra = {"kind": "velocity", "motion": MotionSpec(path.stem, 0.0)}
    note = f"; {extra.pop('source_extra')}" if "source_extra" in extra else ""
    return finish(
        path, blob, model, format="holosoma",
        policy_joint_names=tuple(names), control_dt=1.0 / rate,
        kp=kp_m, kd=to_motor_order(kd, names, "kd", where),
        default_joint_pos=to_motor_order(cfg["default_dof_angles"], names, "default_dof_angles", where),
        action_scale=scale, action_clip=100.0, observation=tuple(obs),
        input_name="obs" if TIME_STEP in ins else next(iter(ins)),
        output_name="action" if "action" in outs else "actions", command_ranges=ranges, gait_period=float(cfg.get("gait_period", 0.0) or 0.0),
        history_fill="zeros", source=f"{path.name} (holosoma JSON metadata; {origin}{note})",
        provenance={k: meta[k][:200] for k in ("wandb_run_path", "iteration") if k in meta}, **extra)


def _action_scales(meta: dict, names, kp, where: str, cfg: dict, model, default) -> tuple[tuple[float, ...], str]:
    """holosoma's WBT action scale (in holosoma-inference's policies/wbt.py order): metadata action_scale (JSON or CSV,
    one or per joint); else a sidecar's action_scales_by_effort_limit_over_p_gain (false: policy_action_scale
    on every joint; true: the effort rule); else 1 when the graph squashes its actions to exactly the joint
    limits around the default pose (tanh x max(q_max - default, default - q_min): FastSAC's actor, whose
    output is then the target offset in rad); else the effort rule 0.25 x effort limit / kp per joint."""
    raw = meta.get("action_scale")
    rule = cfg.get("action_scales_by_effort_limit_over_p_gain")
    if raw is None and rule is False:
        return (float(cfg["policy_action_scale"]),) * len(names), "policy_action_scale (effort rule off)"
    if raw is None and rule is None:
        bound = tanh_bound(model, "actions")
        mi = [g1.JOINT_NAMES.index(n) for n in names]
        d = np.asarray(default, float)
        span = np.maximum(g1.JOINT_POS_MAX[mi] - d, d - g1.JOINT_POS_MIN[mi])
        if bound is not None and bound.shape == span.shape and np.allclose(bound, span, atol=2e-3):
            return (1.0,) * len(names), ("1: the graph's tanh x per-joint scale spans the joint limits around the "
                                         "default pose (its output is the target offset in rad)")
    if raw is None:
        lim = [float(g1.TORQUE_LIMIT[g1.JOINT_NAMES.index(n)]) for n in names]
        return tuple(EFFORT_RULE * t / float(k) for t, k in zip(lim, kp)), "0.25 x effort limit / kp"
    try:
        v = json.loads(raw)
    except json.JSONDecodeError:
        v = raw
    try:
        vals = [float(v)] if isinstance(v, (int, float)) else (
            [float(x) for x in v.split(",") if x.strip()] if isinstance(v, str) else [float(x) for x in v])
    except (TypeError, ValueError) as e:
        raise ArtifactError(f"{where}: metadata_props['action_scale'] is not a number or list ({raw[:60]!r})") from e
    if len(vals) == 1:
        vals = vals * len(names)
    if len(vals) != len(names):
        raise ArtifactError(f"{where}: metadata_props['action_scale'] has {len(vals)} entries, expected 1 or "
                            f"{len(names)}")
    return tuple(vals), "metadata action_scale"


def _wbt_fields(path: Path, model, meta: dict, cfg: dict, names, kp, ins, outs) -> dict:
    """The PolicySpec fields of a whole-body-tracking file: clip length, reference outputs, anchor, scales."""
    where = str(path)
    frames = clip_frames(model)
    if frames is None or frames < 2:
        raise ArtifactError(f"{where}: tracking graph (input 'time_step') with {frames or 0} reference frames "
                            "(the (T, 29) table its joint_pos output gathers): a clip needs at least 2; "
                            "re-export with the motion baked in")
    if ins[TIME_STEP] != [1, 1]:
        raise ArtifactError(f"{where}: ONNX input 'time_step' has shape {ins[TIME_STEP]}, expected [1, 1]")
    scales, how = _action_scales(meta, names, kp, where, cfg, model, cfg["default_dof_angles"])
    anchor = cfg.get("anchor_body", "torso_link")
    tr = TrackingSpec(anchor_body=anchor, anchor_pos="ref_pos_xyz" if "ref_pos_xyz" in outs else "",
                      anchor_quat="ref_quat_xyzw" if "ref_quat_xyzw" in outs else "", quat_order="xyzw")
    return {"kind": "tracking", "motion": MotionSpec(path.stem, (frames - 1) / float(cfg.get("rl_rate", 50))),
            "time_step_input": TIME_STEP, "tracking": tr, "action_scales": scales,
            "action_offset": tuple(float(x) for x in cfg["default_dof_angles"]),
            "source_extra": f"action scale: {how}; anchor {anchor}; {frames} frames"}

"""mjlab / BeyondMimic ONNX policies: everything is in the ONNX metadata_props, as CSV strings
(mjlab's exporter writes floats with 3 decimals):

    joint_names, joint_stiffness, joint_damping, default_joint_pos   per joint, in joint_names' order
    action_scale                                                     one number or one per joint
    observation_names                                                the actor's terms, in order
    command_names, run_path (anchor_body_name, body_names: tracking)

Velocity policy: input `obs`, output `actions`; its `command` term is the twist (lin_vel_x, lin_vel_y,
ang_vel_z). Tracking policy: inputs `obs` and `time_step` [1, 1], outputs `actions`, `joint_pos`,
`joint_vel`, ...; the reference is baked into the graph, and the clip's length is the leading size of
the (T, 29) reference table in the graph (it runs time_step 0 .. T-2, then HOLD). Its terms `command`
(the graph's joint_pos + joint_vel at the step), `motion_anchor_ori_b` and `motion_anchor_pos_b` (the
body `anchor_body_name`'s row of the graph's body_quat_w / body_pos_w, w x y z) are built by
policies.tracking; the listed terms must add up to the ONNX input's size (BeyondMimic's 160-entry
variant with state estimation vs the 154-entry one without motion_anchor_pos_b and base_lin_vel).
What mjlab's metadata does not carry and this adapter assumes: observation scales 1 and no clip
(mjlab's G1 tasks scale nothing), action offset = default_joint_pos (use_default_offset), 50 Hz
(mjlab's velocity and tracking tasks: 200 Hz physics, decimation 4), no history.
"""
from __future__ import annotations

from pathlib import Path

from policies.adapters.common import TIME_STEP, clip_frames, finish, io_shapes, metadata, term, to_motor_order
from policies.artifact import Artifact, ArtifactError, MotionSpec, joint_name_errors
from policies.observation import RUNTIME_TERMS
from policies.tracking import TrackingSpec
from robots import g1

REQUIRED = ("joint_names", "joint_stiffness", "joint_damping", "default_joint_pos", "action_scale",
            "observation_names")
# mjlab term name -> runtime term (any runtime term may also be named directly)
TERMS = {"base_lin_vel": "base_lin_vel", "base_ang_vel": "base_ang_vel", "projected_gravity": "projected_gravity",
         "joint_pos": "joint_pos_rel", "joint_vel": "joint_vel_rel", "actions": "last_action",
         "command": "velocity_command"}
NOT_BUILT = {"height_scan": "a terrain height scan (no terrain sensor on the G1)"}
# a tracking policy's terms (BeyondMimic): the motion command and the anchor relative to the reference
TRACKING = {"command": "motion_command", "motion_anchor_pos_b": "motion_anchor_pos_b",
            "motion_anchor_ori_b": "motion_anchor_ori_b"}
ANCHOR_TERMS = ("motion_anchor_pos_b", "motion_anchor_ori_b")


def is_mjlab(meta: dict) -> bool:
    return "joint_names" in meta and "observation_names" in meta


def _csv(meta, key, where, as_float=True):
    raw = meta[key]
    items = [x.strip() for x in raw.split(",") if x.strip()]
    if not as_float:
        return items
    try:
        return [float(x) for x in items]
    except ValueError as e:
        raise ArtifactError(f"{where}: metadata_props[{key!r}] is not a list of numbers ({raw[:60]!r}); "
                            "mjlab writes comma-separated floats") from e


def check_variant(where: str, obs, ins) -> None:
    """The observation the metadata lists must be the size of the ONNX input: BeyondMimic's 160-entry variant
    (with state estimation: motion_anchor_pos_b, base_lin_vel) and its 154-entry one are otherwise run with
    the wrong layout."""
    want = sum(t.size * t.history for t in obs)
    found = ins.get("obs", [None, None])[1:]
    if found != [want]:
        names = [t.source.split(": ")[1] for t in obs]
        hint = ""
        if found and isinstance(found[0], int) and abs(found[0] - want) == 6:
            hint = (" (BeyondMimic's 160-entry observation has motion_anchor_pos_b and base_lin_vel, the 154-entry "
                    "one has neither: the metadata describes the other variant than the network)")
        raise ArtifactError(f"{where}: metadata_props['observation_names'] {names} add up to {want} entries, the "
                            f"ONNX input 'obs' takes {found[0] if found else None}: expected {want}, found "
                            f"{found[0] if found else None}{hint}; re-export so that the two agree")


def _tracking_spec(where: str, meta: dict, names: list[str], ins, outs) -> TrackingSpec:
    """Where a BeyondMimic / mjlab tracking graph keeps its reference, and its anchor body."""
    if ins[TIME_STEP] != [1, 1]:
        raise ArtifactError(f"{where}: ONNX input 'time_step' has shape {ins[TIME_STEP]}, expected [1, 1] (the "
                            "exporters' time step); re-export the policy")
    missing = [o for o in ("joint_pos", "joint_vel") if o not in outs]
    if missing:
        raise ArtifactError(f"{where}: tracking graph without the reference outputs {missing} (outputs "
                            f"{sorted(outs)}); export with the motion's joint_pos and joint_vel as outputs")
    anchored = [n for n in names if n in ANCHOR_TERMS]
    if not anchored:
        return TrackingSpec(anchor_body=meta.get("anchor_body_name", ""))
    if "anchor_body_name" not in meta:
        raise ArtifactError(f"{where}: observation terms {anchored} need metadata_props['anchor_body_name'] (the "
                            "body they are relative to, usually torso_link), which this file lacks (older "
                            "exports): re-export with a current exporter, or add the key")
    anchor = meta["anchor_body_name"].strip()
    bodies = _csv(meta, "body_names", where, as_float=False) if "body_names" in meta else []
    if anchor not in bodies:
        raise ArtifactError(f"{where}: metadata_props['anchor_body_name'] {anchor!r} is not in "
                            f"metadata_props['body_names'] {bodies}: the graph's body outputs have no row for it")
    need = ["body_quat_w"] + (["body_pos_w"] if "motion_anchor_pos_b" in anchored else [])
    missing = [o for o in need if o not in outs]
    if missing:
        raise ArtifactError(f"{where}: observation terms {anchored} need the graph outputs {missing} (outputs "
                            f"{sorted(outs)})")
    return TrackingSpec(anchor_body=anchor, anchor_pos="body_pos_w" if "body_pos_w" in outs else "",
                        anchor_quat="body_quat_w", body_index=bodies.index(anchor), quat_order="wxyz")


def read(path: Path, model, blob) -> Artifact:
    where = str(path)
    meta = metadata(model)
    missing = [k for k in REQUIRED if k not in meta]
    if missing:
        raise ArtifactError(f"{where}: mjlab metadata_props lacks {missing}; export the policy with mjlab's "
                            "exporter (attach_onnx_metadata), which writes all of " + ", ".join(REQUIRED))
    names = _csv(meta, "joint_names", where, as_float=False)
    errs = joint_name_errors(names, key=f"{where}: metadata_props['joint_names']")
    if errs:
        raise ArtifactError("\n".join(errs))
    ins, outs = io_shapes(model)
    tracking = TIME_STEP in ins
    scale = _csv(meta, "action_scale", where)
    scales = tuple(scale * len(names)) if len(scale) == 1 else tuple(scale)
    obs = []
    for n in _csv(meta, "observation_names", where, as_float=False):
        if n in NOT_BUILT:
            raise ArtifactError(f"{where}: observation term {n!r} (metadata_props['observation_names']) is "
                                f"{NOT_BUILT[n]}, which this runtime does not build; retrain without it")
        if not tracking and n in ANCHOR_TERMS:
            raise ArtifactError(f"{where}: observation term {n!r} (metadata_props['observation_names']) needs a "
                                "tracking graph: an ONNX input 'time_step' [1, 1] and the reference outputs "
                                "(joint_pos, joint_vel, body_pos_w, body_quat_w); this file has inputs "
                                f"{sorted(ins)}")
        canon = TRACKING[n] if tracking and n in TRACKING else TERMS.get(n, n)
        if canon not in RUNTIME_TERMS:
            raise ArtifactError(f"{where}: observation term {n!r} (metadata_props['observation_names']) is not one "
                                f"this runtime builds (mjlab names {sorted(TERMS)}, or {sorted(RUNTIME_TERMS)}); "
                                "retrain without it")
        obs.append(term(canon, f"observation_names: {n}"))
    name = path.parent.name if path.stem == "policy" else path.stem
    kind, motion, extra = "velocity", MotionSpec(name, 0.0), {}
    if tracking:
        T = clip_frames(model)
        if T is None or T < 2:
            raise ArtifactError(f"{where}: tracking policy (input 'time_step') with {T or 0} frames of (T, 29) "
                                "reference table in the graph: a clip needs at least 2; re-export with the motion's "
                                "reference baked in")
        kind, motion = "tracking", MotionSpec(name, (T - 1) * g1.CONTROL_DT)
        extra["time_step_input"] = TIME_STEP
        extra["tracking"] = _tracking_spec(where, meta, [t.source.split(": ")[1] for t in obs], ins, outs)
    check_variant(where, obs, ins)
    return finish(
        path, blob, model, format="mjlab", kind=kind, motion=motion, policy_joint_names=tuple(names),
        kp=to_motor_order(_csv(meta, "joint_stiffness", where), names, "joint_stiffness", where),
        kd=to_motor_order(_csv(meta, "joint_damping", where), names, "joint_damping", where),
        default_joint_pos=to_motor_order(_csv(meta, "default_joint_pos", where), names, "default_joint_pos", where),
        action_scale=float(max(scales)) if scales else 1.0, action_scales=scales,
        action_offset=tuple(_csv(meta, "default_joint_pos", where)),
        observation=tuple(obs), input_name="obs", output_name="actions",
        command_ranges=(("lin_vel_x", -1.0, 1.0), ("lin_vel_y", -1.0, 1.0), ("ang_vel_z", -0.5, 0.5)) if kind == "velocity" else (),
        provenance={"run_path": meta.get("run_path", ""), "command_names": meta.get("command_names", "")},
        source=f"{path.name} (mjlab metadata; command ranges: mjlab's velocity task defaults)", **extra)

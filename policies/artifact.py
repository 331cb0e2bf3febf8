"""Policy artifact: `policy.onnx` + `policy.yaml` (+ `reference.npz`) in policies/<robot>/<motion>/.

- policy.onnx: input `obs` float32 [batch, n_obs], output `actions` float32 [batch, 29],
  normalisation inside the graph, deterministic. Its metadata_props["policy.yaml"] holds the
  YAML below without `onnx_sha256` (the hash covers the ONNX file itself).
- policy.yaml: everything needed to run it; `validate_for_robot` checks it against robots/.
- reference.npz: the motion's reference (ref_q [T, 29], ref_height [T]) at control_dt,
  sampled from t = 0; the observation's reference terms are read from it. Tracking policies (the YAML's
  `tracking: {anchor_body: ...}`) add the pelvis states ref_base_pos [T, 3] and ref_base_quat [T, 4]
  (w, x, y, z): their anchor terms are the forward kinematics of these (policies.tracking).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import io
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml

from policies.observation import MAX_HISTORY, RUNTIME_TERMS, TERMS, TRACKING_TERMS, ObsTermSpec, obs_size
from policies.tracking import TrackingSpec
from robots import g1
from robots.gains import gain_errors

SCHEMA_VERSION = 1
ROBOT = "g1_29dof_rev1"
ONNX_NAME, YAML_NAME, REFERENCE_NAME = "policy.onnx", "policy.yaml", "reference.npz"
INPUT_NAME, OUTPUT_NAME = "obs", "actions"
META_KEY = "policy.yaml"
POLICY_ROOT = Path(__file__).resolve().parent / "g1"


class ArtifactError(ValueError):
    """The artifact is missing, corrupt, or does not fit this robot. The message says what to do."""


@dataclasses.dataclass(frozen=True)
class MotionSpec:
    name: str
    duration: float  # s


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    joint_names: tuple[str, ...]
    control_dt: float
    action_scale: float
    default_joint_pos: tuple[float, ...]
    kp: tuple[float, ...]
    kd: tuple[float, ...]
    observation: tuple[ObsTermSpec, ...]
    motion: MotionSpec
    provenance: dict[str, Any]
    robot: str = ROBOT
    schema_version: int = SCHEMA_VERSION
    onnx_sha256: str = ""
    # What adapted (third-party) artifacts add; native artifacts keep the defaults (and their YAML).
    format: str = "native"  # native | mjlab | holosoma | rl_lab
    kind: str = "motion"  # motion (native, reference.npz) | velocity (command input) | tracking (time_step input)
    policy_joint_names: tuple[str, ...] = ()  # the policy's joint order; () = motor order
    action_scales: tuple[float, ...] = ()  # per policy joint; () = action_scale on every joint
    action_offset: tuple[float, ...] = ()  # per policy joint; () = default_joint_pos
    action_clip: float | None = None  # |raw action| clipped to this before scaling
    history_fill: str = "zeros"  # zeros (holosoma) | first (IsaacLab: the first frame fills the history)
    command_ranges: tuple[tuple[str, float, float], ...] = ()  # (lin_vel_x|lin_vel_y|ang_vel_z, lo, hi)
    gait_period: float = 0.0  # s, > 0: the runtime keeps holosoma's two-foot gait phase
    input_name: str = INPUT_NAME
    output_name: str = OUTPUT_NAME
    time_step_input: str = ""  # ONNX input fed the policy step (tracking policies)
    tracking: TrackingSpec | None = None  # where a tracking graph keeps its reference (policies.tracking)
    source: str = ""  # the files the description was read from, and which values are built-in defaults

    @property
    def n_obs(self) -> int:
        return obs_size(self.observation)

    @property
    def motor_index(self) -> np.ndarray:
        """policy joint i -> motor index (identity for motor-order policies)."""
        names = self.policy_joint_names or self.joint_names
        return np.array([g1.JOINT_NAMES.index(n) if n in g1.JOINT_NAMES else -1 for n in names], dtype=np.intp)

    def command_range(self, name: str) -> tuple[float, float] | None:
        for n, lo, hi in self.command_ranges:
            if n == name:
                return lo, hi
        return None

    def to_dict(self, with_sha: bool = True) -> dict:
        d = {
            "schema_version": self.schema_version,
            "robot": self.robot,
            "joint_names": list(self.joint_names),
            "control_dt": float(self.control_dt),
            "action_scale": float(self.action_scale),
            "default_joint_pos": [float(x) for x in self.default_joint_pos],
            "kp": [float(x) for x in self.kp],
            "kd": [float(x) for x in self.kd],
            "observation": [{"name": t.name, "size": int(t.size), "scale": float(t.scale)} for t in self.observation],
            "motion": {"name": self.motion.name, "duration": float(self.motion.duration)},
            "provenance": dict(self.provenance),
        }
        if self.tracking is not None:
            d["tracking"] = {"anchor_body": self.tracking.anchor_body}
        if with_sha:
            d["onnx_sha256"] = self.onnx_sha256
        return d

    @staticmethod
    def from_dict(d: Any, where: str = "policy.yaml") -> "PolicySpec":
        if not isinstance(d, dict):
            raise ArtifactError(f"{where}: expected a mapping at top level, got {type(d).__name__}")
        required = ["schema_version", "robot", "joint_names", "control_dt", "action_scale",
                    "default_joint_pos", "kp", "kd", "observation", "motion", "provenance"]
        missing = [k for k in required if k not in d]
        if missing:
            raise ArtifactError(f"{where}: missing keys {missing}; re-export the policy (make export RUN=...)")
        if d["schema_version"] != SCHEMA_VERSION:
            raise ArtifactError(
                f"{where}: schema_version {d['schema_version']} is not supported (this toolkit reads "
                f"{SCHEMA_VERSION}); re-export the policy with this version"
            )
        tr = d.get("tracking")
        if tr is not None and not (isinstance(tr, dict) and set(tr) == {"anchor_body"}):
            raise ArtifactError(f"{where}: tracking must be a mapping with anchor_body only (got {tr!r}); "
                                "re-export the policy")
        try:
            obs = tuple(ObsTermSpec(str(t["name"]), int(t["size"]), float(t["scale"])) for t in d["observation"])
            return PolicySpec(
                tracking=TrackingSpec(anchor_body=str(tr["anchor_body"]), source="reference") if tr else None,
                joint_names=tuple(str(n) for n in d["joint_names"]),
                control_dt=float(d["control_dt"]),
                action_scale=float(d["action_scale"]),
                default_joint_pos=tuple(float(x) for x in d["default_joint_pos"]),
                kp=tuple(float(x) for x in d["kp"]),
                kd=tuple(float(x) for x in d["kd"]),
                observation=obs,
                motion=MotionSpec(str(d["motion"]["name"]), float(d["motion"]["duration"])),
                provenance=dict(d["provenance"] or {}),
                robot=str(d["robot"]),
                schema_version=int(d["schema_version"]),
                onnx_sha256=str(d.get("onnx_sha256", "")),
            )
        except (TypeError, KeyError, ValueError) as e:
            raise ArtifactError(f"{where}: malformed field ({e!r}); re-export the policy") from e


@dataclasses.dataclass(frozen=True)
class Artifact:
    path: Path
    spec: PolicySpec
    onnx_bytes: bytes
    ref_q: np.ndarray  # (T, 29)
    ref_height: np.ndarray  # (T,)
    ref_base_pos: np.ndarray | None = None  # (T, 3) tracking policies' pelvis position, world
    ref_base_quat: np.ndarray | None = None  # (T, 4) tracking policies' pelvis orientation, w, x, y, z


def robot_spec_fields() -> dict:
    """What every G1 artifact must carry, from robots/ (the one source of truth)."""
    return dict(
        joint_names=tuple(g1.JOINT_NAMES),
        control_dt=g1.CONTROL_DT,
        default_joint_pos=tuple(float(x) for x in g1.DEFAULT_JOINT_POS),
        kp=tuple(float(x) for x in g1.KP),
        kd=tuple(float(x) for x in g1.KD),
    )


COMMAND_NAMES = ("lin_vel_x", "lin_vel_y", "ang_vel_z")
KINDS = ("motion", "velocity", "tracking")


def validate_for_robot(spec: PolicySpec) -> None:
    """Refuse an artifact that does not fit robots/ (g1.py, gains.py), naming every mismatch and its key."""
    errs = []
    where = f" ({spec.source})" if spec.source else ""
    if spec.robot != ROBOT:
        errs.append(f"robot is {spec.robot!r}, this deploy drives {ROBOT!r}")
    if len(spec.joint_names) != g1.NUM_MOTORS:
        errs.append(f"{len(spec.joint_names)} joints, the G1 has {g1.NUM_MOTORS}")
    elif tuple(spec.joint_names) != tuple(g1.JOINT_NAMES):
        bad = [i for i, (a, b) in enumerate(zip(spec.joint_names, g1.JOINT_NAMES)) if a != b]
        errs.append(f"joint order differs from the motor order at indices {bad[:5]} (e.g. {spec.joint_names[bad[0]]!r} vs {g1.JOINT_NAMES[bad[0]]!r})")
    errs += joint_name_errors(spec.policy_joint_names) if spec.policy_joint_names else []
    errs += gain_errors(spec.kp, spec.kd)
    dq = np.asarray(spec.default_joint_pos, dtype=float)
    if dq.shape != (g1.NUM_MOTORS,):
        errs.append(f"default_joint_pos has {dq.size} entries, expected {g1.NUM_MOTORS}")
    elif spec.format == "native" and not np.allclose(dq, g1.DEFAULT_JOINT_POS, atol=1e-6):
        i = int(np.argmax(np.abs(dq - g1.DEFAULT_JOINT_POS)))
        errs.append(f"default_joint_pos differs from robots/g1.py (joint {g1.JOINT_NAMES[i]}: {dq[i]} vs "
                    f"{g1.DEFAULT_JOINT_POS[i]}): native observation terms are relative to robots/g1.py's pose")
    elif not (np.all(np.isfinite(dq)) and np.all(dq >= g1.JOINT_POS_MIN) and np.all(dq <= g1.JOINT_POS_MAX)):
        errs.append("default_joint_pos is non-finite or outside the joint limits of robots/g1.py")
    if abs(spec.control_dt - g1.CONTROL_DT) > 1e-9:
        errs.append(f"control_dt {spec.control_dt} != {g1.CONTROL_DT} (the deploy loop runs policies at 50 Hz)")
    if not (0 < spec.action_scale < 2.0):
        errs.append(f"action_scale {spec.action_scale} outside (0, 2) rad")
    n = g1.NUM_MOTORS
    for key, v, ok in (("action_scale", spec.action_scales, lambda a: np.all((a > 0) & (a < 2.0))),
                       ("action_offset", spec.action_offset, lambda a: np.all(np.abs(a) < 2 * np.pi))):
        if v:
            a = np.asarray(v, dtype=float)
            if a.shape != (n,):
                errs.append(f"{key} has {a.size} entries, the policy has {n} joints")
            elif not (np.all(np.isfinite(a)) and ok(a)):
                errs.append(f"{key} has entries that are non-finite or out of range "
                            f"({'each in (0, 2) rad' if key == 'action_scale' else '|offset| < 2 pi'})")
    if spec.action_clip is not None and not (np.isfinite(spec.action_clip) and spec.action_clip > 0):
        errs.append(f"action clip {spec.action_clip} must be a positive number (or absent)")
    if spec.kind not in KINDS:
        errs.append(f"kind {spec.kind!r} is not one of {KINDS}")
    if spec.history_fill not in ("zeros", "first"):
        errs.append(f"history_fill {spec.history_fill!r} must be 'zeros' or 'first'")
    vocab = TERMS if spec.format == "native" else {k: v[0] for k, v in RUNTIME_TERMS.items()}
    for t in spec.observation:
        key = t.source or t.name
        want = (TERMS[t.name].size if spec.format == "native" else vocab[t.name]) if t.name in vocab else None
        if want is None:
            errs.append(f"unknown observation term {key!r}: not one this runtime builds (known: {sorted(vocab)}); "
                        "retrain without it, or map it in the adapter")
            continue
        if t.size != want:
            errs.append(f"observation term {key!r} has size {t.size}, this runtime builds {want}")
        if not (isinstance(t.history, int) and 1 <= t.history <= MAX_HISTORY):
            errs.append(f"observation term {key!r}: history length {t.history} cannot be built "
                        f"(the runtime stacks 1..{MAX_HISTORY} frames)")
        if t.clip is not None and not (len(t.clip) == 2 and np.all(np.isfinite(t.clip)) and t.clip[0] < t.clip[1]):
            errs.append(f"observation term {key!r}: clip {t.clip} must be [low, high] with low < high")
        if t.scales is not None and (len(t.scales) != t.size or not np.all(np.isfinite(t.scales))):
            errs.append(f"observation term {key!r}: {len(t.scales)} scales for {t.size} entries")
    for name, lo, hi in spec.command_ranges:
        if name not in COMMAND_NAMES or not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            errs.append(f"command range {name}: [{lo}, {hi}] (names {COMMAND_NAMES}, finite, low <= high)")
    if spec.kind == "velocity" and not any(t.name.startswith("velocity_command") for t in spec.observation):
        errs.append("a velocity policy without a velocity command term in its observation")
    errs += tracking_errors(spec)
    if spec.kind != "velocity" and not (0 < spec.motion.duration < 600):
        errs.append(f"motion duration {spec.motion.duration} s is out of range")
    if errs:
        raise ArtifactError("policy artifact does not match this robot" + where + ":\n  - " + "\n  - ".join(errs)
                            + "\nRe-train/re-export for this robot, or fix robots/g1.py if the robot changed.")


def tracking_errors(spec: PolicySpec) -> list[str]:
    """Tracking terms need a tracking graph, and the anchor terms a G1 anchor body and its reference pose."""
    from robots.body_frames import g1_body_names

    used = {t.name for t in spec.observation} & TRACKING_TERMS
    tr = spec.tracking
    if not used:
        return []
    if tr is not None and tr.source == "reference":  # native: reference.npz's states (checked at load)
        return ([] if tr.anchor_body in g1_body_names() else
                [f"anchor body {tr.anchor_body!r} (tracking.anchor_body) is not a G1 body (its bodies: "
                 f"{', '.join(g1_body_names())}); re-export with one of them, usually torso_link"])
    if tr is None or not spec.time_step_input:
        return [f"observation terms {sorted(used)} need a tracking graph (a time_step input and the reference "
                "outputs joint_pos, joint_vel and the anchor pose)"]
    errs = []
    anchor_terms = used - {"motion_command"}
    if anchor_terms and tr.anchor_body not in g1_body_names():
        errs.append(f"anchor body {tr.anchor_body!r} (metadata anchor_body_name) is not a G1 body (its bodies: "
                    f"{', '.join(g1_body_names())}); re-export with one of them, usually torso_link")
    if anchor_terms and not tr.anchor_quat:
        errs.append(f"observation terms {sorted(anchor_terms)} need the reference anchor orientation among the "
                    "graph's outputs (body_quat_w or ref_quat_xyzw)")
    if "motion_anchor_pos_b" in used and not tr.anchor_pos:
        errs.append("observation term motion_anchor_pos_b needs the reference anchor position among the graph's "
                    "outputs (body_pos_w or ref_pos_xyz)")
    if tr.quat_order not in ("wxyz", "xyzw"):
        errs.append(f"reference quaternion order {tr.quat_order!r} must be wxyz or xyzw")
    return errs


def joint_name_errors(names, key: str = "joint names") -> list[str]:
    """A policy's joint list must name each of the G1's 29 joints once."""
    names = list(names)
    unknown = [n for n in names if n not in g1.JOINT_NAMES]
    dup = sorted({n for n in names if names.count(n) > 1})
    missing = [n for n in g1.JOINT_NAMES if n not in names]
    errs = []
    if unknown:
        errs.append(f"{key}: {unknown[:4]} {'are' if len(unknown) > 1 else 'is'} not a G1 joint "
                    f"({len(unknown)} unknown; the G1 29-DoF names are robots/g1.py's JOINT_NAMES): is this "
                    "policy for another robot or a 23-DoF G1?")
    if dup:
        errs.append(f"{key}: {dup[:4]} listed more than once")
    if missing and not unknown:
        errs.append(f"{key}: {missing[:4]} missing ({len(missing)} of the G1's joints); every joint must be listed")
    return errs


def _git_commit(cwd: Path = Path(__file__).parent) -> str:
    """Short HEAD hash, "-dirty" when tracked files differ from it (e.g. an edited motion file)."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=cwd)
    try:
        head = git("rev-parse", "--short", "HEAD").stdout.strip()
        if not head:
            return "unknown"
        return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no").stdout.strip() else "")
    except Exception:
        return "unknown"


def provenance(algorithm: str, seed: int, iterations: int, **extra) -> dict:
    return {"algorithm": algorithm, "seed": int(seed), "iterations": int(iterations), "git_commit": _git_commit(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **extra}


def _sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def write_artifact(out_dir: str | Path, model: onnx.ModelProto, spec: PolicySpec,
                   ref_q: np.ndarray, ref_height: np.ndarray, ref_base_pos: np.ndarray | None = None,
                   ref_base_quat: np.ndarray | None = None) -> Path:
    """Validate, embed the YAML in the ONNX metadata, write the three files. Returns out_dir.
    ref_base_pos / ref_base_quat: the pelvis states, required by (and only kept for) a tracking spec."""
    validate_for_robot(spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ref_q = np.asarray(ref_q, np.float32)
    ref_height = np.asarray(ref_height, np.float32)
    _check_reference(ref_q, ref_height, spec, where=str(out))
    base = {}
    if spec.tracking is not None:
        _check_base(ref_base_pos, ref_base_quat, ref_q, spec, where=str(out))
        base = {"ref_base_pos": np.asarray(ref_base_pos, np.float32), "ref_base_quat": np.asarray(ref_base_quat, float)}
    meta_yaml = yaml.safe_dump(spec.to_dict(with_sha=False), sort_keys=False)
    del model.metadata_props[:]
    model.metadata_props.add(key=META_KEY, value=meta_yaml)
    _check_io(model, spec.n_obs, where="model to export")
    onnx.checker.check_model(model)
    blob = model.SerializeToString()
    spec = dataclasses.replace(spec, onnx_sha256=_sha256(blob))
    (out / ONNX_NAME).write_bytes(blob)
    (out / YAML_NAME).write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    buf = io.BytesIO()
    np.savez(buf, ref_q=ref_q, ref_height=ref_height, **base)
    (out / REFERENCE_NAME).write_bytes(buf.getvalue())
    return out


def _dim(d) -> int | str:
    return d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")


def _check_io(model: onnx.ModelProto, n_obs: int, where: str) -> None:
    g = model.graph
    init = {i.name for i in g.initializer}
    inputs = [i for i in g.input if i.name not in init]
    if [i.name for i in inputs] != [INPUT_NAME] or [o.name for o in g.output] != [OUTPUT_NAME]:
        raise ArtifactError(f"{where}: ONNX inputs {[i.name for i in inputs]} / outputs {[o.name for o in g.output]}, "
                            f"expected [{INPUT_NAME!r}] / [{OUTPUT_NAME!r}]; export with train/export.py")
    ishape = [_dim(d) for d in inputs[0].type.tensor_type.shape.dim]
    oshape = [_dim(d) for d in g.output[0].type.tensor_type.shape.dim]
    if len(ishape) != 2 or ishape[1] != n_obs:
        raise ArtifactError(f"{where}: ONNX input shape {ishape}, the YAML's observation has {n_obs} entries")
    if len(oshape) != 2 or oshape[1] != g1.NUM_MOTORS:
        raise ArtifactError(f"{where}: ONNX output shape {oshape}, expected [batch, {g1.NUM_MOTORS}]")
    if inputs[0].type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        raise ArtifactError(f"{where}: ONNX input must be float32")


def _check_reference(ref_q, ref_height, spec: PolicySpec, where: str) -> None:
    T = int(round(spec.motion.duration / spec.control_dt))
    if ref_q.ndim != 2 or ref_q.shape[1] != g1.NUM_MOTORS or ref_height.shape != (ref_q.shape[0],):
        raise ArtifactError(f"{where}: reference shapes {ref_q.shape}, {ref_height.shape}; expected (T, 29), (T,)")
    if abs(ref_q.shape[0] - T) > 1:
        raise ArtifactError(f"{where}: reference has {ref_q.shape[0]} rows, motion duration implies {T}")
    if not (np.all(np.isfinite(ref_q)) and np.all(np.isfinite(ref_height))):
        raise ArtifactError(f"{where}: reference contains NaN/inf")
    if np.any(ref_q < g1.JOINT_POS_MIN - 1e-6) or np.any(ref_q > g1.JOINT_POS_MAX + 1e-6):
        raise ArtifactError(f"{where}: reference joint positions exceed the joint limits")


def _check_base(pos, quat, ref_q, spec: PolicySpec, where: str) -> None:
    """A tracking artifact's pelvis states: one row per reference row, finite, unit quaternions, and the
    anchor's reference built from them (policies.tracking.reference_from_states)."""
    from policies.tracking import TrackingError, reference_from_states

    if pos is None or quat is None:
        raise ArtifactError(f"{where}: a tracking policy needs ref_base_pos and ref_base_quat in {REFERENCE_NAME}; "
                            "re-export the policy (make export RUN=...)")
    try:
        reference_from_states(ref_q, pos, quat, spec.control_dt, spec.tracking.anchor_body)
    except (TrackingError, ValueError) as e:
        raise ArtifactError(f"{where}: tracking reference rejected: {e}") from e


def artifact_dir(motion: str, root: Path = POLICY_ROOT) -> Path:
    return root / motion


def available_motions(root: Path = POLICY_ROOT) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / YAML_NAME).is_file()) if root.is_dir() else []


def load_artifact(path: str | Path) -> Artifact:
    """Read and fully validate an artifact directory. Raises ArtifactError with the fix."""
    p = Path(path)
    if not p.is_dir():
        raise ArtifactError(f"no policy artifact at {p}; available: {available_motions()} "
                            "(train one with `make train MOTION=<name>`)")
    for name in (ONNX_NAME, YAML_NAME, REFERENCE_NAME):
        if not (p / name).is_file():
            raise ArtifactError(f"{p}: {name} is missing; re-export the policy (make export RUN=...)")
    try:
        d = yaml.safe_load((p / YAML_NAME).read_text())
    except yaml.YAMLError as e:
        raise ArtifactError(f"{p / YAML_NAME} is not valid YAML: {e}") from e
    spec = PolicySpec.from_dict(d, where=str(p / YAML_NAME))
    validate_for_robot(spec)
    blob = (p / ONNX_NAME).read_bytes()
    if _sha256(blob) != spec.onnx_sha256:
        raise ArtifactError(f"{p / ONNX_NAME}: sha256 does not match policy.yaml (file corrupt or swapped); "
                            "re-export the policy")
    try:
        model = onnx.load_from_string(blob)
        onnx.checker.check_model(model)
    except Exception as e:
        raise ArtifactError(f"{p / ONNX_NAME} is not a valid ONNX model: {e}") from e
    meta = {m.key: m.value for m in model.metadata_props}
    if META_KEY not in meta or yaml.safe_load(meta[META_KEY]) != spec.to_dict(with_sha=False):
        raise ArtifactError(f"{p}: policy.yaml differs from the YAML embedded in policy.onnx; re-export the policy")
    _check_io(model, spec.n_obs, where=str(p / ONNX_NAME))
    try:
        with np.load(p / REFERENCE_NAME) as z:
            ref_q, ref_height = np.asarray(z["ref_q"]), np.asarray(z["ref_height"])
            base_pos = np.asarray(z["ref_base_pos"]) if "ref_base_pos" in z.files else None
            base_quat = np.asarray(z["ref_base_quat"]) if "ref_base_quat" in z.files else None
    except Exception as e:
        raise ArtifactError(f"{p / REFERENCE_NAME} is unreadable: {e}") from e
    _check_reference(ref_q, ref_height, spec, where=str(p / REFERENCE_NAME))
    if spec.tracking is not None:
        _check_base(base_pos, base_quat, ref_q, spec, where=str(p / REFERENCE_NAME))
    return Artifact(path=p, spec=spec, onnx_bytes=blob, ref_q=ref_q, ref_height=ref_height,
                    ref_base_pos=base_pos, ref_base_quat=base_quat)

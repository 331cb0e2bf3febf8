"""Third-party G1 policies read into the artifact description the runtime and deploy use
(`policies.artifact.Artifact` with a `PolicySpec`): joint order by name, gains, default pose, action
scale / offset / clip, observation terms (order, scales, clips, history), command ranges, extra inputs.

    load_policy(path)   # a native artifact folder, an mjlab / BeyondMimic or holosoma .onnx (or the
                        # folder holding it), or an unitree_rl_lab folder (exported/ + params/)

Formats: policies/adapters/{mjlab,holosoma,rl_lab}.py; writing our own artifacts in the mjlab and
rl_lab formats: policies/adapters/export.py. Anything else is refused with what each format needs.
"""
from __future__ import annotations

from pathlib import Path

from policies import artifact as A
from policies.adapters import holosoma, mjlab, rl_lab
from policies.adapters.common import load_onnx, metadata
from policies.artifact import Artifact, ArtifactError

FORMATS = ("native", "mjlab", "holosoma", "rl_lab")
_HELP = ("expected one of: a native artifact folder (policy.onnx + policy.yaml + reference.npz); an mjlab / "
         "BeyondMimic .onnx (metadata_props joint_names, joint_stiffness, ..., observation_names); a holosoma "
         ".onnx (JSON metadata_props dof_names, kp, kd); an unitree_rl_lab folder (exported/policy.onnx + "
         "params/deploy.yaml)")


def detect(path: str | Path) -> str:
    """The format of `path` (see FORMATS); ArtifactError naming what was found otherwise."""
    p = Path(path)
    if p.is_dir():
        if (p / A.YAML_NAME).is_file():
            return "native"
        if rl_lab.find(p) is not None:
            return "rl_lab"
        onnx_files = sorted(p.glob("*.onnx"))
        if len(onnx_files) == 1:
            return detect(onnx_files[0])
        raise ArtifactError(f"{p}: unknown policy format ({len(onnx_files)} .onnx files, no policy.yaml, no "
                            f"params/deploy.yaml); {_HELP}")
    if not p.exists():
        raise ArtifactError(f"{p}: no such file or folder; {_HELP}")
    if p.suffix != ".onnx":
        raise ArtifactError(f"{p}: unknown policy format (not an .onnx file or a folder); {_HELP}")
    meta = metadata(load_onnx(p)[0])
    if A.META_KEY in meta:
        return "native"
    if mjlab.is_mjlab(meta):
        return "mjlab"
    if holosoma.is_holosoma(meta):
        return "holosoma"
    raise ArtifactError(f"{p}: unknown policy format: metadata_props keys {sorted(meta) or 'none'}; {_HELP}")


def load_policy(path: str | Path) -> Artifact:
    """Read and fully validate a policy of any supported format. Raises ArtifactError with the fix."""
    p = Path(path)
    fmt = detect(p)
    if fmt == "native":
        return A.load_artifact(p if p.is_dir() else p.parent)
    if fmt == "rl_lab":
        return rl_lab.read(p)
    if p.is_dir():
        p = sorted(p.glob("*.onnx"))[0]
    model, blob = load_onnx(p)
    return (mjlab if fmt == "mjlab" else holosoma).read(p, model, blob)


__all__ = ["FORMATS", "detect", "load_policy"]

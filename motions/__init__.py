"""The G1 motion library: keyframe YAML files beside this package -> 50 Hz reference trajectories.

    from motions import load_motion
    m = load_motion("jump")          # or a path to a .yaml / .npz / .csv; $G1_MOTIONS_DIR overrides the folder
    m.ref_q, m.ref_base_pos, m.flight_mask, ...

    python -m motions list
    python -m motions preview jump [--out runs/motions/jump.png]

Modules: schema (the YAML schema, pydantic), reference (keyframes -> trajectory), kinematics
(leg geometry and IK), clip_files (npz / csv clip files), clips (clip -> trajectory: checks,
resampling, alignment, FK contacts), library (find / load / summarise), plot (preview). Imports numpy, yaml,
scipy, mujoco, pydantic and robots only: never jax or train.
"""
from motions.kinematics import IK_JOINTS, LegGeometry, leg_geometry, leg_ik
from motions.library import (MOTIONS_DIR, MOTIONS_ENV_VAR, available_motions, contact_phases, hold_pose_motion,
                             load_motion, load_motion_file, motion_path, motions_dir, summary)
from motions.clips import load_clip
from motions.motion import Motion, MotionError
from motions.plot import plot_motion

__all__ = [
    "IK_JOINTS", "LegGeometry", "leg_geometry", "leg_ik", "MOTIONS_DIR", "MOTIONS_ENV_VAR", "available_motions",
    "contact_phases", "hold_pose_motion", "load_motion", "load_motion_file", "motion_path", "motions_dir", "summary",
    "Motion", "MotionError", "plot_motion", "load_clip",
]

"""Sim-to-sim evaluation of an exported policy artifact in C MuJoCo (`make eval MOTION=<m>`,
`python -m eval`): the artifact runs in `policies.runtime.PolicyRuntime`, the same runtime the deploy
loop runs on the robot, on the bridge model with the drives' PD at 1 kHz.

Modules: config (EvalConfig, DRConfig, EvalError), sim (the randomised bridge model and its
measurements), episode (one episode), evaluate (episodes -> eval.json), report (statistics, plot,
table), video (offscreen frames, gif), cli.
"""
import ctypes.util
import os

if "MUJOCO_GL" not in os.environ:  # before any submodule imports mujoco: offscreen rendering for the video
    os.environ["MUJOCO_GL"] = "osmesa" if ctypes.util.find_library("OSMesa") else "egl"

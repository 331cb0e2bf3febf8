"""`python -m eval --motion jump | --policy <onnx or folder> [--duration S] [--start-frame K] [--episodes 20] [--seed 0] [--no-dr] [--no-video] [--hold S]
[--artifacts DIR] [--out DIR] [--calibration YAML | --bridge-perturbation K=V,...]`
(`make eval MOTION=jump [CALIB=calibration/<id>.yaml] ARGS=...`): prints the table and the path
of eval.json; exit 2 when the evaluation cannot run, 0 otherwise (falls included)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eval.bridge_setup import PERTURBATION_KEYS, from_calibration, parse_perturbation
from eval.config import EVAL_ROOT, DRConfig, EvalConfig, EvalError
from eval.evaluate import evaluate
from eval.policy_eval import evaluate_policy, format_policy_table
from eval.report import format_table


def tracking_artifact(motion: str, root: str | None) -> Path | None:
    """The artifact folder of `motion` when it is a native tracking policy (its YAML has `tracking`), else None."""
    import yaml

    from policies.artifact import YAML_NAME, artifact_dir

    folder = Path(root) / motion if root else artifact_dir(motion)
    try:
        d = yaml.safe_load((folder / YAML_NAME).read_text())
    except (OSError, yaml.YAMLError):
        return None  # evaluate() reports a missing or broken artifact
    return folder if isinstance(d, dict) and d.get("tracking") else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval", description="Sim-to-sim evaluation in C MuJoCo")
    ap.add_argument("--motion", help="a native artifact policies/g1/<motion> (or give --policy)")
    ap.add_argument("--policy", help="any policy the runtime loads: a third-party .onnx or folder (eval.policy_eval)")
    ap.add_argument("--duration", type=float, default=None,
                    help="--policy: seconds of policy (tracking: at most the clip; velocity: default 10)")
    ap.add_argument("--start-frame", type=int, default=None,
                    help="tracking policies: start in the reference's state at this frame (default: standing, frame 0)")
    ap.add_argument("--true-state", action="store_true",
                    help="give the policy the simulator's true state, targets straight to the drives (default: the "
                         "deploy loop's estimator on simulated sensors and its safety gate on every command)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-dr", action="store_true", help="no domain randomisation or pushes")
    ap.add_argument("--no-video", action="store_true")
    ap.add_argument("--hold", type=float, default=EvalConfig.hold_s, help="seconds of HOLD after the motion")
    ap.add_argument("--artifacts", help="artifact root (default policies/g1)")
    ap.add_argument("--out", default=str(EVAL_ROOT), help="output root (default runs/eval)")
    ap.add_argument("--calibration", help="evaluate on the calibrated bridge model of this calibration YAML "
                                          "(armature, damping, friction loss, kp centre, action delay)")
    ap.add_argument("--bridge-perturbation", metavar="K=V,...",
                    help="evaluate on a hidden robot: " + ", ".join(PERTURBATION_KEYS) + " (eval.bridge_setup)")
    args = ap.parse_args(argv)
    if not args.motion and not args.policy:
        ap.error("give --motion (make eval MOTION=...) or --policy (make eval POLICY=...)")
    cfg = EvalConfig(episodes=args.episodes, seed=args.seed, video=not args.no_video, hold_s=args.hold,
                     dr=DRConfig(enabled=not args.no_dr), duration_s=args.duration, start_frame=args.start_frame,
                     true_state=args.true_state)
    try:
        bridge = None
        if args.calibration and args.bridge_perturbation:
            raise EvalError("give --calibration (the calibrated model) or --bridge-perturbation (a hidden robot), "
                            "not both")
        if args.calibration:
            bridge = from_calibration(args.calibration)
        elif args.bridge_perturbation is not None:
            bridge = parse_perturbation(args.bridge_perturbation)
        policy = args.policy or tracking_artifact(args.motion, args.artifacts)
        if policy:  # third-party files, and native tracking policies (measured against their reference)
            summary, out = evaluate_policy(policy, cfg, Path(args.out), bridge=bridge)
            print(format_policy_table(summary))
            print(out / "eval.json")
            return 0
        summary, out = evaluate(args.motion, cfg, Path(args.artifacts) if args.artifacts else None, Path(args.out),
                                bridge=bridge)
    except EvalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_table(summary))
    if summary["video"] is None and cfg.video:
        print("notice: no video written")
    print(out / "eval.json")
    return 0

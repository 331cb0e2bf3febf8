"""`make train MOTION=jump [ALGO=bcg|shac] [PRESET=cpu|gpu] [SEED=0] [CALIB=calibration/<id>.yaml]`.

Trains a G1 policy with SHAC through the differentiable MJX rollout (BCG on for ALGO=bcg),
shows a progress bar, writes runs/<motion>/<stamp>/ (config.yaml, metrics.csv, curves.png,
checkpoints/) and exports policies/g1/<motion>/ at the end. Settings: the preset (a
train.config.TrainConfig), then each `--set SECTION.KEY=VALUE` (sections: env, dr (=
domain_rand), actor, shac, bcg); derived settings (e.g. actor.action_scale, which follows
env.action_scale) are refused with the name of their source.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

OVERRIDE_SECTIONS = ("shac", "actor", "bcg", "env", "dr", "domain_rand")
RECIPES = Path(__file__).with_name("recipes.yaml")
SIGMOID_SUBSTEPS = 6  # 300 Hz: the sigmoid contact is unstable at 200 Hz on the G1 (train/contact.py)


def recipe(motion: str) -> list[str]:
    """The flags that trained the committed policy of `motion` (train/recipes.yaml); [] when it has none."""
    import yaml

    table = yaml.safe_load(RECIPES.read_text()) or {}
    return shlex.split(table.get(motion, "") or "")


def parse_overrides(items: list[str]) -> dict:
    """["shac.num_envs=32", "actor.hidden=[64, 64]"] -> {"shac": {"num_envs": 32}, "actor": {"hidden": (64, 64)}}.

    Field names are checked against the config classes so a typo fails before the compile."""
    import yaml

    from train.config import settable_fields

    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        section, dot, field = key.strip().partition(".")
        if not sep or not dot or section not in OVERRIDE_SECTIONS:
            raise ValueError(f"--set {item!r}: use SECTION.KEY=VALUE with SECTION one of {list(OVERRIDE_SECTIONS)}")
        names = settable_fields(section)
        if field not in names:
            raise ValueError(f"--set {item!r}: {section} has no setting {field!r}; it has {names}")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ValueError(f"--set {item!r}: the value is not valid YAML ({e})") from e
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        out.setdefault(section, {})[field] = tuple(value) if isinstance(value, list) else value
    return out


def parser() -> argparse.ArgumentParser:
    from train.config import PRESETS

    ap = argparse.ArgumentParser(prog="make train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--motion", default="jump")
    ap.add_argument("--algo", default="bcg", choices=["bcg", "shac"])
    ap.add_argument("--preset", default="cpu", choices=list(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=None, help="override the preset's iteration count")
    ap.add_argument("--stiffness", default="stiff", help="contact stiffness: soft|medium|stiff or a solref timeconst (s)")
    ap.add_argument("--contact", default=None, choices=["mjx", "sigmoid", "impulse"],
                    help="foot-floor contact model: mjx (MJX constraint contact, knob --stiffness), sigmoid "
                         "(a sigmoid-activated compliant penalty contact, knob --kappa; sets env.substeps=6, "
                         "the 300 Hz substep it needs, unless --set env.substeps is given) or impulse (the seed's "
                         "velocity-level impulse solve gated by distance, knob --kappa, mode --impulse-mode)")
    ap.add_argument("--kappa", type=float, default=None, help="contact gate sharpness k (1/m), e.g. 50, 100, 300")
    ap.add_argument("--impulse-mode", default=None, choices=["soft", "hard", "mixed"],
                    help="impulse contact: soft (gated by s_k(d)), hard (no gate) or mixed (hard forward, soft gradient)")
    ap.add_argument("--calibration", default=None, metavar="CALIB.yaml",
                    help="train for one calibrated robot (make train CALIB=...): its armature, damping, friction "
                         "loss in the model; randomisation centred on its kp scales and action delay (train/calibrated.py)")
    ap.add_argument("--resume", default=None, help="a run folder to continue from its latest checkpoint")
    ap.add_argument("--init-from", default=None, metavar="RUN_OR_CHECKPOINT",
                    help="start a new run from another run's networks and observation statistics (its latest "
                         "checkpoint, or the .npz given): a warm start, e.g. a clip changed at its end trained on "
                         "from the policy of the clip before; the same actor, critic and observation terms needed")
    ap.add_argument("--export-dir", default=None, help="where to export (default policies/g1/<motion>/)")
    ap.add_argument("--tag", default="", help="suffix of the run folder name")
    ap.add_argument("--time-budget-min", type=float, default=None,
                    help="stop after this many minutes of wall time, then save and export (Ctrl-C does the same)")
    ap.add_argument("--select-every", type=int, default=0, metavar="N",
                    help="every N iterations (a multiple of 25) export the policy and evaluate it (python -m eval, "
                         "seed 1000, in a subprocess); export the best of them and the final one (train/select.py)")
    ap.add_argument("--select-episodes", type=int, default=20, help="episodes of each selection evaluation")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override one preset setting, e.g. --set shac.num_envs=32 --set shac.actor_lr=3e-4 "
                         "(sections: shac, actor, bcg, env, dr; repeatable; values parsed as YAML)")
    ap.add_argument("--no-recipe", action="store_true",
                    help="ignore the motion's recipe (train/recipes.yaml): the preset's settings and the flags given")
    return ap


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The flags of `argv` after the motion's recipe (train/recipes.yaml; flags given win), and the recipe."""
    ap = parser()
    a = ap.parse_args(argv)
    steps = [] if a.no_recipe else recipe(a.motion)
    return (ap.parse_args(steps + argv) if steps else a), steps


def config_of(a: argparse.Namespace):
    """The TrainConfig a parsed command line trains (ValueError naming the key when a setting is refused)."""
    from train.config import preset

    stiffness: str | float = a.stiffness
    try:
        stiffness = float(a.stiffness)
    except ValueError:
        pass
    user = parse_overrides(a.set)
    overrides: dict = {}
    if a.calibration is not None:
        from robots import g1
        from train.calibrated import overrides as calibration_overrides

        overrides = calibration_overrides(a.calibration, g1.CONTROL_DT)
    for sec, fields in user.items():  # the user's --set wins over the calibration's
        overrides.setdefault(sec, {}).update(fields)
    if a.iterations is not None:
        overrides.setdefault("shac", {})["iterations"] = a.iterations
    env = overrides.setdefault("env", {})
    if a.contact is not None:
        env["contact"] = a.contact
        if a.contact == "sigmoid":
            env.setdefault("substeps", SIGMOID_SUBSTEPS)
    if a.kappa is not None:
        env["kappa"] = a.kappa
    if a.impulse_mode is not None:
        env["impulse_mode"] = a.impulse_mode
    return preset(a.preset, motion=a.motion, algo=a.algo, seed=a.seed, stiffness=stiffness).with_overrides(overrides)


def main(argv=None) -> int:
    ap = parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    a, steps = parse(argv)
    if steps:
        print(f"recipe of {a.motion} (train/recipes.yaml): {shlex.join(steps)}")
    command = shlex.join(["python", "-m", "train.cli"] + argv)
    if a.select_every < 0 or a.select_every % 25:
        ap.error(f"--select-every {a.select_every}: use a multiple of 25 (the checkpoint interval), or 0 for off")
    if a.resume and a.init_from:
        ap.error("--resume continues a run, --init-from starts a new one from another run's networks: give one")
    from motions import MotionError
    from robots.calibration import CalibrationFileError
    from train.checkpoint import CheckpointError
    from train.pipeline import run
    from train.trainer import TrainingDiverged

    try:
        cfg = config_of(a)
    except CalibrationFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        ap.error(str(e))
    try:
        run(cfg, resume=a.resume, init_from=a.init_from, export_dir=a.export_dir, tag=a.tag,
            time_budget_s=None if a.time_budget_min is None else 60 * a.time_budget_min,
            select_every=a.select_every, select_episodes=a.select_episodes,
            command=command + (f" (recipe: {shlex.join(steps)})" if steps else ""))
    except (MotionError, TrainingDiverged, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

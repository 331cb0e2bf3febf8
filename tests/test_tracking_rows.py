"""What a tracking row says (experiments.tracking): the settings its label names (changed_settings), read from real
config.yaml files, and which rows the summary table keeps."""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

from experiments.tracking import changed_settings

JUMP = Path(__file__).resolve().parents[1] / "policies" / "g1" / "jump" / "training" / "config.yaml"


def _jump_config() -> dict:
    return yaml.safe_load(JUMP.read_text())


def test_the_committed_jumps_contact_and_bundle_are_named():
    cfg = _jump_config()
    named = dict(changed_settings(cfg))
    assert cfg["env"]["contact"] == "impulse"
    assert (named["kappa"], named["gate"], named["relaxation"]) == (300.0, "soft", "block")
    assert named["seed bundle, slots"] == 4  # train/recipes.yaml's jump line: the seed's bundle, 4 slots


def test_mjx_contact_and_the_presets_bundle_name_nothing():
    from train.config import preset

    cfg = _jump_config()
    cfg["env"]["contact"] = "mjx"
    cfg["bcg"] = preset(cfg["preset"]).to_dict()["bcg"]
    names = [k for k, _ in changed_settings(cfg)]
    assert not {"kappa", "gate", "relaxation", "seed bundle, slots"} & set(names)
    assert not [k for k in names if k.startswith("bcg.")]


def test_a_bundle_other_than_the_seeds_lists_its_changes():
    cfg = _jump_config()
    other = copy.deepcopy(cfg)
    other["bcg"]["branches"] = 3
    named = dict(changed_settings(other))
    assert "seed bundle, slots" not in named
    assert named["bcg.branches"] == 3 and named["bcg.tau"] == cfg["bcg"]["tau"]  # the trigger, 2e-4 N
    other["algo"] = "shac"  # plain SHAC: no bundle to name
    assert not [k for k, _ in changed_settings(other) if k.startswith("bcg.") or k.startswith("seed bundle")]


def test_network_sizes_other_than_the_presets_are_named():
    cfg = _jump_config()
    assert "actor_hidden" not in dict(changed_settings(cfg)) and "critic_hidden" not in dict(changed_settings(cfg))
    cfg["actor"]["hidden"], cfg["shac"]["critic_hidden"] = [512, 256, 128], [256, 256]
    named = dict(changed_settings(cfg))
    assert named["actor_hidden"] == [512, 256, 128] and named["critic_hidden"] == [256, 256]


def _row(clip, policy, mean_s, err, samples):
    return {"clip": clip, "policy": policy, "seconds": 15.0, "falls": 20 if mean_s < 15 else 0, "episodes": 20,
            "mean_policy_s": mean_s, "body_pos_err_cm": err, "training": {"samples": samples, "wall_min": 10}}


def test_the_summary_keeps_the_fields_policies_and_our_furthest_recipe_with_every_seed():
    from experiments.tracking import render_tracking_summary

    rows = {"a/ppo": _row("a", "holosoma PPO", 15.0, 2.7, 3e9), "a/one": _row("a", "ours one", 7.0, 4.1, 1e5),
            "a/two": _row("a", "ours two", 9.7, 2.8, 5e5), "a/three": _row("a", "ours three", 9.7, 2.5, 5e5),
            "a/pd": _row("a", "the reference on PD", 12.0, 9.0, 0), "b/one": _row("b", "ours four", 1.7, 8.9, 5e5)}
    lines = render_tracking_summary({"rows": rows}).splitlines()[2:]
    assert [ln.split(" | ")[1] for ln in lines] == ["holosoma PPO", "ours three", "ours four"]  # ties: lower error
    assert "| 9.70 | 2.5 |" in lines[1]
    # a second seed of "ours two" (mean 9.7 and 11.0: 10.35 over both) makes it the furthest recipe: both its
    # rows, the weaker seed included
    rows["a/two_s1"] = _row("a", "ours two", 11.0, 3.0, 5e5)
    lines = render_tracking_summary({"rows": rows}).splitlines()[2:]
    assert [ln.split(" | ")[1] for ln in lines] == ["holosoma PPO", "ours two", "ours two", "ours four"]
    assert "| 9.70 | 2.8 |" in lines[1] and "| 11.00 | 3.0 |" in lines[2]


def test_a_warm_starts_row_counts_the_run_it_began_from(tmp_path):
    """experiments.tracking.warm_start_training: the parent run's samples (iterations x envs x steps, from its
    config.yaml) and its wall time at the checkpoint's iteration (its metrics.csv), nothing invented when the
    folder is gone."""
    from experiments.tracking import warm_start_training

    run = tmp_path / "parent"
    (run / "checkpoints").mkdir(parents=True)
    cfg = _jump_config()
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "metrics.csv").write_text("reward,iteration,wall_s\n0.1,1,10.5\n0.2,2,21.0\n0.3,3,31.5\n")
    got = warm_start_training(run / "checkpoints" / "latest.npz", 2)
    assert got == {"motion": cfg["motion"], "iterations": 2, "wall_s": 21.0,
                   "samples": 2 * cfg["shac"]["num_envs"] * cfg["shac"]["horizon"]}
    gone = warm_start_training(tmp_path / "nowhere" / "checkpoints" / "latest.npz", 2)
    assert gone["samples"] is None and gone["wall_s"] is None


def test_a_resumed_runs_sessions_are_found_in_its_metrics():
    from experiments.tracking import training_sessions_s

    rows = [{"iteration": i, "wall_s": w} for i, w in ((1, 5.0), (2, 10.0), (3, 2.0), (4, 4.0), (5, 6.0))]
    assert training_sessions_s(rows, 2) == [10.0]
    assert training_sessions_s(rows, 4) == [10.0, 4.0]  # resumed after iteration 2
    assert training_sessions_s(rows, 6) is None

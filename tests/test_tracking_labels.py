"""The settings a tracking row's label names (experiments.tracking.changed_settings): what a run changed against
its preset, the contact's gate and the bundle among them, read from real config.yaml files."""
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

"""experiments.impulse_training's summaries on hand-made runs and rows (no training, no JAX program)."""
import pytest
import yaml

from experiments.impulse_training import (bundle_activity, render_bundle_activity_table, render_impulse_training_summary,
                                          summary_by_setting)


def test_bundle_activity_of_a_run_folder(tmp_path):
    (tmp_path / "metrics.csv").write_text("iteration,bundled_frac,contact_force_max\n1,0.0,100\n2,0.25,140\n3,0.05,120\n"
                                          "4,0.1,120\n")
    bcg = dict(branches=8, horizon=1, tau=0.0002, max_bundled_envs=4, sigma_p=0.01, sigma_v=0.01, clamp_q=0.1, clamp_v=0.5)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"algo": "bcg", "bcg": bcg, "shac": {"num_envs": 32},
                                                          "env": {"contact": "impulse", "impulse_mode": "soft"}}))
    a = bundle_activity(tmp_path)
    assert a["iterations"] == 4
    assert a["bundled_frac_mean"] == pytest.approx(0.1)  # (0 + 0.25 + 0.05 + 0.1) / 4
    assert a["bundle_budget_frac"] == pytest.approx(4 / 32)
    assert a["contact_force_max_mean_n"] == pytest.approx(120.0)
    table = render_bundle_activity_table({"bundle_activity": [a]})
    # p50 of (0, .05, .1, .25) = .075; p99 (linear) = .1 + .97 x .15 = .2455, printed 24.5
    assert "| 8, 1, any impulse, 4 | 4 | 10.0 % (7.5 / 24.5 %) | 12.5 % | 120 N |" in table


def _row(algo, seed, falls, relax="block", wall_s=None):
    bcg = dict(tau=400.0, branches=4, horizon=2, max_bundled_envs=4) if algo == "bcg" else None
    return {"algo": algo, "bcg": bcg, "contact": "impulse", "impulse_mode": "soft", "kappa": 300.0, "relaxation": relax,
            "seed": seed, "iterations_run": 100 * (seed + 1), "train_wall_s": wall_s or 600.0 + 60.0 * seed,
            "eval_seed0": {"falls": falls, "stood_at_end": 20 - falls}}


def test_summary_groups_seeds_by_setting_and_wall_time():
    res = {"rows": [_row("bcg", 0, 4), _row("shac", 0, 5), _row("bcg", 1, 1), _row("bcg", 2, 2, relax="seed"),
                    _row("shac", 2, 0, wall_s=4500.0)]}
    groups = {(g["algo"], g["relaxation"], round(g["wall_min"][0], -1)): g for g in summary_by_setting(res)}
    assert groups[("bcg", "block", 10)]["falls"] == [4, 1]
    assert groups[("bcg", "block", 10)]["falls_mean"] == pytest.approx(2.5)
    assert groups[("bcg", "block", 10)]["wall_min"] == pytest.approx([10.0, 11.0])  # 600 and 660 s: one 10-min class
    assert groups[("shac", "block", 10)]["seeds"] == [0]
    assert groups[("shac", "block", 80)]["seeds"] == [2]  # 75 min: compared at equal wall time, not with the 10-min run
    groups = {(g["algo"], g["relaxation"]): g for g in summary_by_setting(res) if g["wall_min"][0] < 60}
    assert groups[("bcg", "seed")]["falls"] == [2]
    assert groups[("bcg", "block")]["bundle"] == "400 N, B 4, window 2, 4 slots"
    assert ("| bcg | 400 N, B 4, window 2, 4 slots | impulse soft | 300 | block | 2 | 4 / 1 | 2.5 | 16 / 19 | 100 / 200 | 10 / 11 |"
            in render_impulse_training_summary(res))
    assert "| shac | - | impulse soft |" in render_impulse_training_summary(res)


def test_rows_given_the_same_iterations_share_a_setting_whatever_their_wall_time():
    a, b = _row("shac", 1, 6, wall_s=2520.0), _row("shac", 3, 0, wall_s=2100.0)  # 42 and 35 min, both 1150 it
    c = _row("shac", 2, 0, wall_s=4500.0)  # 2600 it, stopped by 75 min
    for r, it in ((a, 1150), (b, 1150), (c, 2600)):
        r["iterations_budget"] = it
    groups = summary_by_setting({"rows": [c, a, b]})
    assert [g["seeds"] for g in groups] == [[1, 3], [2]]  # the shorter setting first
    assert groups[0]["falls"] == [6, 0] and groups[0]["wall_min"] == pytest.approx([42.0, 35.0])

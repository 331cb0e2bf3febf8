"""Sim-to-sim evaluation (eval/) on the committed `stand` and `jump` artifacts."""
import json

import numpy as np
import pytest

from eval import cli
from eval import evaluate as EV
from eval.config import EvalConfig, EvalError
from eval.report import format_table
from eval.sim import EvalSim, reference_key_positions
from policies import artifact as A


def test_stand_artifact_does_not_fall_and_writes_eval_json(tmp_path):
    cfg = EvalConfig(episodes=2, duration_s=1.0, hold_s=0.5, video=False)
    summary, out = EV.evaluate("stand", cfg, out_root=tmp_path, progress=False)
    data = json.loads((out / "eval.json").read_text())
    for key in ("episodes", "falls", "apex_foot_clearance_m", "tracking_error_cm", "penetration_mm"):
        assert key in data
    assert data["episodes"] == 2 and data["falls"] == 0 and data["stood_at_end"] == 2
    assert data["apex_foot_clearance_m"] is None  # stand has no flight
    assert data["tracking_error_cm"] < 3.0  # holding the default pose
    assert 0 <= data["penetration_mm"] < 10
    assert (out / "eval.png").is_file()
    # the per-episode randomisation is seeded and differs between episodes
    d0, d1 = (e["dr"] for e in data["per_episode"])
    assert d0["friction"] != d1["friction"]
    table = format_table(summary)
    assert "falls 0" in table


def test_same_seed_same_result(tmp_path):
    cfg = EvalConfig(episodes=1, duration_s=0.4, hold_s=0.0, video=False, seed=7)
    a, _ = EV.evaluate("stand", cfg, out_root=tmp_path / "a", progress=False)
    b, _ = EV.evaluate("stand", cfg, out_root=tmp_path / "b", progress=False)
    assert a["per_episode"][0]["tracking_error_cm"] == b["per_episode"][0]["tracking_error_cm"]


def test_a_shove_trips_the_safety_gate_on_the_tick_not_on_the_true_state(tmp_path):
    """A 400 N x 0.3 s shove tips the standing robot: through the deploy tick the safety gate's tilt limit trips to
    damping and the episode records it; on the true state there is no gate to trip."""
    import dataclasses

    dr = dataclasses.replace(EvalConfig().dr, push_force_n=(400.0, 400.0), push_duration_s=0.3)
    cfg = EvalConfig(episodes=1, duration_s=2.0, hold_s=0.5, video=False, seed=3, dr=dr)
    tick, _ = EV.evaluate("stand", cfg, out_root=tmp_path / "a", progress=False)
    true, _ = EV.evaluate("stand", dataclasses.replace(cfg, true_state=True), out_root=tmp_path / "b", progress=False)
    assert tick["policy_input"] == "estimator + safety gate" and true["policy_input"] == "true state"
    ep = tick["per_episode"][0]
    assert tick["tilt_tripped"] == 1 and ep["tilt_tripped"] and ep["fell"]
    assert [e["kind"] for e in ep["safety_events"]] == ["tilt"]
    assert true["tilt_tripped"] == 0 and true["per_episode"][0]["safety_events"] == []


def test_unknown_motion_lists_available_artifacts(capsys):
    with pytest.raises(EvalError) as e:
        EV.resolve_artifact("moonwalk")
    assert "moonwalk" in str(e.value) and "stand" in str(e.value)
    assert cli.main(["--motion", "moonwalk", "--no-video"]) == 2
    assert "available artifacts" in capsys.readouterr().err


def test_reference_fk_matches_stance(tmp_path):
    """The tracking metric's reference: home pose FK puts the feet where the model's home keyframe does."""
    sim = EvalSim()
    art = A.load_artifact(A.artifact_dir("stand"))
    T = art.ref_q.shape[0]
    base = np.stack([np.zeros(T), np.zeros(T), art.ref_height], 1)
    ref = reference_key_positions(sim, art.ref_q[:2].astype(float), base[:2])
    sim.reset()
    np.testing.assert_allclose(ref[0], sim.d.xpos[sim.key_bodies], atol=1e-5)


def test_video_or_notice(tmp_path, capsys):
    cfg = EvalConfig(episodes=1, duration_s=0.2, hold_s=0.0, video=True)  # 25 fps, 640x480 by default
    summary, out = EV.evaluate("stand", cfg, out_root=tmp_path, progress=False)
    if summary["video"] is None:
        assert "skipping the video" in capsys.readouterr().out
    else:
        from PIL import Image

        with Image.open(summary["video"]) as im:
            assert im.n_frames >= 5 and im.size == (640, 480)  # 25 fps x 0.2 s


def test_committed_jump_policy_lands_and_stands_in_randomised_c_mujoco(tmp_path):
    """The bar of the jump issue, on the committed artifact: 20 randomised episodes of `make eval`
    (seed 0): no fall, both feet >= 5 cm off the floor at the apex, standing still at the end.
    Also a guard that nobody commits a worse jump: the untrained actor falls in 17 of these 20."""
    summary, _ = EV.evaluate("hop", EvalConfig(episodes=20, video=False), out_root=tmp_path, progress=False)
    assert summary["artifact_provenance"]["iterations"] > 0  # a trained policy, not the zero residual
    assert summary["falls"] == 0, [e["fell_at_s"] for e in summary["per_episode"]]
    assert summary["stood_at_end"] == 20
    assert summary["apex_foot_clearance_m"]["min"] >= 0.05
    assert summary["penetration_mm"] < 15

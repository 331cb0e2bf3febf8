"""The key-frame strips the repository keeps (policy cards, the tracking page), written from the runs that exist
on this machine only; the tracking rows' training facts read from their runs."""
import numpy as np
import pytest
from PIL import Image

from experiments import tracking
from experiments.policy_cards import small_strip, small_video


def _strip(path, w=64, h=16):
    rgb = np.zeros((h, w, 3), np.uint8)
    rgb[:, : w // 2] = (255, 0, 0)
    Image.fromarray(rgb).save(path)
    return path


def test_small_strip_halves_and_keeps_colours(tmp_path):
    out = small_strip(_strip(tmp_path / "k.png"), tmp_path / "sub" / "small.png")
    img = Image.open(out)
    assert img.size == (32, 8) and img.mode == "P"
    rgb = np.asarray(img.convert("RGB"))
    assert tuple(rgb[4, 2]) == (255, 0, 0) and tuple(rgb[4, 30]) == (0, 0, 0)


def test_small_video_halves_size_and_frame_rate(tmp_path):
    """Six 40 ms frames of 32x16, each one flat colour -> three 80 ms frames of 16x8: frames 0, 2 and 4."""
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (255, 255, 255), (0, 255, 255)]
    frames = [Image.new("RGB", (32, 16), c) for c in colours]
    frames[0].save(tmp_path / "e.gif", save_all=True, append_images=frames[1:], duration=40, loop=0)
    out = small_video(tmp_path / "e.gif", tmp_path / "card" / "video.webp")
    img = Image.open(out)
    assert img.format == "WEBP" and img.size == (16, 8) and img.n_frames == 3
    for k, want in enumerate(colours[::2]):
        img.seek(k)
        img.load()  # the WebP reader sets a frame's duration when it decodes it
        assert img.info["duration"] == 80
        assert np.abs(np.asarray(img.convert("RGB"))[4, 8].astype(int) - want).max() < 24, (k, want)


def test_docs_strips_only_for_rows_with_a_strip_here(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking, "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    src = _strip(tmp_path / "episode0_keyframes.png")
    rows = {"dance/ours": {"whole_clip": {"video_keyframes": str(src)}},
            "box_lift/ours": {"whole_clip": {"video_keyframes": str(tmp_path / "gone.png")}},
            "dance/ppo": {"whole_clip": None}}
    out = tracking.docs_strips({"rows": rows})
    assert out == [tmp_path / "docs" / "tracking_dance_ours.png"] and out[0].is_file()


def test_termination_trend_by_hand():
    rows = [{"done_frac": "0.04"}] * 100 + [{"done_frac": "0.03"}] * 50 + [{"done_frac": "0.02"}] * 100
    out = tracking.termination_trend(rows)
    assert out == {"first": 0.04, "last": 0.02, "iterations": 250, "steps_per_termination_last": 50.0}
    assert tracking.termination_trend(rows[:150]) == {}  # first and last 100 would overlap


def test_holosomas_graphs_run_the_windows_of_their_own_dance_only():
    """The three dance windows name the PPO graph of holosoma-inference 0.1.3 as their source; the box lift and the
    jump are committed clips without one."""
    assert all(tracking.of_holosomas_dance(c) for c in ("dance", "dance_in_limits", "dance_calm"))
    assert not tracking.of_holosomas_dance("dance_calm_grounded")  # its feet put down: not the graphs' reference
    assert not tracking.of_holosomas_dance("box_lift") and not tracking.of_holosomas_dance("jump")
    with pytest.raises(SystemExit):  # refused before anything is evaluated
        tracking.main(["--clip", "box_lift", "--policy", "ppo"])


def test_survival_figure_one_panel_per_clip_and_none_without_maps(tmp_path):
    surv = [{"start_s": k, "falls": f, "episodes": 5, "fell_after_s": [], "mean_policy_s": 2.0 - 0.3 * f,
             "body_pos_err_cm": 4.0} for k, f in enumerate([0, 5, 2])]
    rows = {"dance/ours": {"clip": "dance", "policy": "ours", "survival": surv},
            "dance/ppo": {"clip": "dance", "policy": "holosoma PPO", "survival": surv[:2]},
            "box_lift/ours": {"clip": "box_lift", "policy": "ours", "survival": None}}
    out = tracking.survival_figure({"rows": rows}, tmp_path / "s.png")
    w, h = tracking.SURVIVAL_PANEL_IN
    dpi = tracking.SURVIVAL_DPI
    assert out.is_file() and Image.open(out).size == (round(w * dpi), round(h * dpi))  # one clip with a map: one panel
    assert tracking.survival_figure({"rows": {"box_lift/ours": rows["box_lift/ours"]}}, tmp_path / "n.png") is None


def test_survival_only_needs_a_measured_row(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking, "RESULTS", tmp_path / "tracking.json")
    (tmp_path / "tracking.json").write_text('{"rows": {}}')
    with pytest.raises(SystemExit):
        tracking.main(["--clip", "dance", "--survival-only"])


def test_a_rows_label_names_the_weights_and_shac_settings_its_run_changed(tmp_path):
    """The row of a run trained with two reward weights at 0, 6 s windows and gamma 0.99 says so; the preset's own run says
    nothing more than algorithm and contact. Samples: iterations x envs x horizon."""
    import yaml

    from train.config import preset, save_config

    def row(overrides, name):
        run = tmp_path / name
        run.mkdir()
        save_config(run, preset("cpu").with_overrides(overrides))
        art = tmp_path / f"{name}_policy"
        art.mkdir()
        (art / "policy.yaml").write_text(yaml.safe_dump({"provenance": {
            "algorithm": "shac+bcg", "contact": "mjx", "iterations": 10, "run": str(run)}}))
        return tracking.our_training(art)

    changed = row({"env": {"task": "tracking", "tracking": {"weights": [["joint_pos", 0.0], ["residual", 0.0]],
                                                            "window_s": 6.0}},
                   "shac": {"gamma": 0.99}}, "changed")
    assert changed["label"] == "ours (shac+bcg, mjx contact; joint_pos 0, residual 0, window_s 6, gamma 0.99)"
    cpu = preset("cpu").shac
    assert changed["samples"] == 10 * cpu.num_envs * cpu.horizon
    assert row({"env": {"task": "tracking"}}, "plain")["label"] == "ours (shac+bcg, mjx contact)"
    longer = row({"env": {"task": "tracking"}, "shac": {"horizon": 32, "iterations": 700}}, "h32")
    assert longer["label"] == "ours (shac+bcg, mjx contact; horizon 32)" and longer["samples"] == 10 * cpu.num_envs * 32


def test_survival_summary_counts_the_full_windows_only():
    """A 15 s segment, 2 s windows: starts 0..13 are full, 14 runs 1 s and is left out."""
    row = {"seconds": 15.0, "survival": [{"start_s": 0, "falls": 5, "episodes": 5, "mean_policy_s": 1.0},
                                         {"start_s": 13, "falls": 0, "episodes": 5, "mean_policy_s": 2.0},
                                         {"start_s": 14, "falls": 0, "episodes": 5, "mean_policy_s": 1.0}]}
    assert tracking.survival_summary(row) == (5, 10, 1.5)
    assert tracking.survival_summary({"seconds": 15.0, "survival": None}) is None

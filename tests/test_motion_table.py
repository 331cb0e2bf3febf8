"""experiments/motion_table.py's pure parts (no eval, no DDS, no bridge process; jax-free, fast): a row built
from a given eval.json and provenance, the markdown table against a hand-written string, which folders are
evaluated, the resumability keys, and the driver with its subprocess steps replaced by stubs."""
from __future__ import annotations

import json
import sys

import pytest
import yaml

from experiments import motion_table as T

EVAL_JSON = {  # the keys eval.evaluate writes (numbers of a made-up jump)
    "motion": "jump", "episodes": 20, "falls": 1, "stood_at_end": 19,
    "apex_foot_clearance_m": {"mean": 0.0645, "min": 0.0581},
    "tracking_error_cm": 4.83, "tracking_error_cm_max": 6.2,
    "penetration_mm": 7.9, "landing_impact_bw": {"mean": 3.8, "max": 4.1},
    "flight_time_s": {"mean": 0.1725, "min": 0.151},
    "pelvis_apex_rise_m": {"mean": 0.0042, "min": -0.00001},
    "forward_displacement_m": {"mean": 0.012, "min": -0.004, "max": 0.03},
    "peak_torque_ratio": {"legs": {"mean": 1.10, "max": 1.136}, "waist": {"mean": 0.17, "max": 0.1896},
                          "arms": {"mean": 0.15, "max": 0.154}},
    "seconds_per_episode": 2.2,
}
PROV = {"algorithm": "shac+bcg", "seed": 0, "iterations": 800, "git_commit": "af0f05f", "date": "2026-11-30T21:45:46+00:00",
        "preset": "cpu", "stiffness": "stiff", "run": "runs/jump/x", "wall_time_s": 1501.2}
DRY = {"final_state": "HOLD", "safety_events": 0, "safety_event_kinds": [], "gt_flight_s": 0.152,
       "gt_apex_pelvis_m": 0.7912, "host_stalled": False, "host_stall_attempts": [{"summary": "s", "safety_events": ["x"]}]}


def test_no_jax_imported():
    """Checked in a fresh interpreter: other test modules of a full run import jax into this one."""
    import subprocess

    code = "import sys, experiments.motion_table; sys.exit(1 if 'jax' in sys.modules else 0)"
    from pathlib import Path

    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1]).returncode == 0


def test_row_from_eval_json_and_provenance():
    row = T.build_row("jump", "policies/g1/jump", "c" * 64, PROV, EVAL_JSON, DRY)
    e, p = row["eval"], row["provenance"]
    assert (e["episodes"], e["falls"], e["stood_at_end"]) == (20, 1, 19)
    assert e["apex_clearance_cm"] == {"mean": 6.45, "min": 5.81}
    assert e["pelvis_apex_rise_cm"] == {"mean": 0.42, "min": -0.001}
    assert e["flight_time_s"] == {"mean": 0.1725, "min": 0.151}
    assert e["forward_displacement_cm"] == {"mean": 1.2, "min": -0.4, "max": 3.0}
    assert e["peak_torque_ratio"] == {"legs": 1.136, "waist": 0.19, "arms": 0.154}  # max over episodes
    assert e["tracking_error_cm"] == 4.83
    assert p["algorithm"] == "shac+bcg" and p["iterations"] == 800 and p["preset"] == "cpu"
    assert (p["contact"], p["contact_knob"]) == ("mjx", "stiffness stiff")  # exported before `contact` was recorded
    assert p["training_wall_time_s"] == 1501.2 and p["calibration"] is None
    assert row["dry_run"]["final_state"] == "HOLD" and row["policy_onnx_sha256"] == "c" * 64


def test_contact_of_each_model():
    assert T.contact_of({"contact": "sigmoid", "kappa": 300.0, "contact_law": "x"}) == ("sigmoid", "k = 300")
    assert T.contact_of({"contact": "mjx", "stiffness": "medium"}) == ("mjx", "stiffness medium")
    assert T.contact_of({"algorithm": "none (zero policy)"}) == (None, None)
    p = T.provenance_row({"algorithm": "bcg", "calibration": {"robot_id": "sim_perturbed", "sha256": "a"}})
    assert p["calibration"] == "sim_perturbed" and p["training_wall_time_s"] is None
    assert T.provenance_row(None)["algorithm"] is None


def test_eval_metrics_of_a_motion_without_flight():
    ev = {"episodes": 20, "falls": 20, "stood_at_end": 0, "apex_foot_clearance_m": None, "tracking_error_cm": 1.0,
          "flight_time_s": {"mean": 0.0, "min": 0.0}, "pelvis_apex_rise_m": None, "forward_displacement_m": None,
          "peak_torque_ratio": {"legs": None, "waist": {"mean": 0.1, "max": 0.2}, "arms": None}}
    e = T.eval_metrics(ev)
    assert e["apex_clearance_cm"] is None and e["forward_displacement_cm"] is None and e["pelvis_apex_rise_cm"] is None
    assert e["flight_time_s"] == {"mean": 0.0, "min": 0.0} and e["peak_torque_ratio"] == {"waist": 0.2}
    assert T.eval_metrics({"episodes": 1, "falls": 0})["peak_torque_ratio"] is None


EXPECTED_TABLE = (
    "| motion | falls | stood | apex foot clearance mean / min | pelvis apex rise mean / min | flight mean / min "
    "| forward displacement mean / min | tracking | peak torque ratio (legs / waist / arms) | training time | algorithm "
    "| contact | dry run: final state | dry run: safety events | dry run: gt flight | dry run: gt apex |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    "| jump | 1/20 | 19/20 | 6.5 / 5.8 cm | 0.4 / 0.0 cm | 0.17 / 0.15 s | 1.2 / -0.4 cm | 4.8 cm "
    "| 1.14 / 0.19 / 0.15 | 25.0 min | shac+bcg (800 it, cpu preset) | mjx, stiffness stiff | HOLD "
    "| 0 (after 1 host-stall rerun) | 0.15 s | 0.791 m (+0.6 cm) |\n"
    "| stand | 20/20 | 0/20 | - | -0.2 / -0.3 cm | 0.00 / 0.00 s | - (all fell) | 1.0 cm | 0.50 / 0.10 / 0.05 | - "
    "| none (zero policy) | - | DAMPING | 2 (deadline, tilt) | 0.00 s | 0.780 m (-0.5 cm) |\n"
    "| walk | - | - | - | - | - | - | - | - | 40 s | bcg (calibration sim_perturbed) | sigmoid, k = 300 | - | - | - | - |"
)


def test_markdown_table_hand_written():
    jump = T.build_row("jump", "policies/g1/jump", "c" * 64, PROV, EVAL_JSON, DRY)
    stand_ev = {"episodes": 20, "falls": 20, "stood_at_end": 0, "apex_foot_clearance_m": None, "tracking_error_cm": 1.04,
                "flight_time_s": {"mean": 0.0, "min": 0.0}, "pelvis_apex_rise_m": {"mean": -0.0021, "min": -0.0031},
                "forward_displacement_m": None,
                "peak_torque_ratio": {g: {"mean": 0.0, "max": v} for g, v in (("legs", 0.5), ("waist", 0.1), ("arms", 0.05))}}
    stand_dry = {"final_state": "DAMPING", "safety_events": 2, "safety_event_kinds": ["deadline", "tilt"],
                 "gt_flight_s": 0.0, "gt_apex_pelvis_m": 0.78}
    stand = T.build_row("stand", "policies/g1/stand", "d" * 64, {"algorithm": "none (zero policy)", "iterations": 0},
                        stand_ev, stand_dry)
    walk = T.build_row("walk", "x/walk", "e" * 64, {"algorithm": "bcg", "contact": "sigmoid", "kappa": 300,
                                                    "wall_time_s": 40.0, "calibration": {"robot_id": "sim_perturbed"}})
    assert T.markdown_table([jump, stand, walk]) == EXPECTED_TABLE


def test_events_cell_of_a_run_the_host_stalled_every_time():
    d = {"safety_events": 1, "safety_event_kinds": ["deadline"], "host_stalled": True,
         "host_stall_attempts": [{}, {}, {}]}
    assert T._events(d) == "1 (deadline), host stall after 3 attempts"


def test_resumability_keys():
    inp = T.eval_inputs("a" * 64, 20, 0)
    assert inp == {"policy_onnx_sha256": "a" * 64, "episodes": 20, "seed": 0, "flags": ["--no-video"]}
    assert T.keep_row({"inputs": T.eval_inputs("a" * 64, 20, 0), "falls": 0}, inp)
    assert not T.keep_row({"inputs": T.eval_inputs("b" * 64, 20, 0)}, inp)  # retrained: new ONNX
    assert not T.keep_row({"inputs": T.eval_inputs("a" * 64, 2, 0)}, inp)
    assert not T.keep_row({"inputs": T.eval_inputs("a" * 64, 20, 1)}, inp)
    assert not T.keep_row(None, inp)
    dry = T.dry_run_inputs("a" * 64)
    assert T.keep_row({"inputs": T.dry_run_inputs("a" * 64)}, dry)
    assert not T.keep_row({"inputs": dict(dry), "host_stalled": True}, dry)  # a stalled dry run is redone
    assert not T.keep_row({"inputs": T.dry_run_inputs("b" * 64)}, dry)


def test_skip_reason():
    files = ["policy.onnx", "policy.yaml", "reference.npz"]
    assert T.skip_reason({"motion": {"name": "stand", "duration": 4.0}}, files) is None  # the zero policy has a motion
    assert "velocity" in T.skip_reason({"kind": "velocity", "motion": {"duration": 0}}, files)
    tracking = {"motion": {"name": "dance", "duration": 19.0}, "tracking": {"anchor_body": "torso_link"}}
    assert "tracking policy" in T.skip_reason(tracking, files)
    assert "no motion" in T.skip_reason({"motion": {"name": "x", "duration": 0}}, files)
    assert "policy.onnx missing" in T.skip_reason({"motion": {"duration": 4}}, files[1:])


# ------------------------------------------------------------------------------------- the driver, stubbed
def _artifact(root, name, onnx=b"net", duration=4.6, prov=None):
    d = root / name
    d.mkdir(parents=True)
    (d / "policy.onnx").write_bytes(onnx)
    (d / "reference.npz").write_bytes(b"")
    (d / "policy.yaml").write_text(yaml.safe_dump({"motion": {"name": name, "duration": duration},
                                                   "provenance": prov or dict(PROV)}))
    return d


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    root = tmp_path / "policies"
    _artifact(root, "jump")
    _artifact(root, "stand", prov={"algorithm": "none (zero policy)", "iterations": 0})
    monkeypatch.setattr(T, "REPO", tmp_path)
    monkeypatch.setattr(T, "RESULTS_PATH", tmp_path / "results" / "motions.json")
    monkeypatch.setattr(T, "OUT", tmp_path / "runs")
    calls = []

    def fake_eval(motion, root_, episodes, seed):
        calls.append(("eval", motion))
        return {**EVAL_JSON, "motion": motion, "episodes": episodes}, f"runs/{motion}/eval.json"

    def fake_dry(motion, policy_dir, domain, attempts):
        calls.append(("dry", motion))
        assert domain == 185
        return dict(DRY, host_stall_attempts=[])

    monkeypatch.setattr(T, "run_eval", fake_eval)
    monkeypatch.setattr(T, "run_dry", fake_dry)
    return {"root": root, "calls": calls, "tmp": tmp_path}


def _main(sb, *extra):
    return T.main(["--artifacts", str(sb["root"]), "--domain", "185", *extra])


def test_driver_keeps_rows_and_redoes_a_retrained_motion(sandbox, capsys):
    sb = sandbox
    assert _main(sb) == 0
    assert sb["calls"] == [("eval", "jump"), ("dry", "jump"), ("eval", "stand"), ("dry", "stand")]
    out = capsys.readouterr().out
    assert "[motion-table 1/4] jump: eval" in out and "[motion-table 4/4] stand: dry run" in out
    assert "| jump | 1/20 | 19/20 |" in out
    res = json.loads((sb["tmp"] / "results" / "motions.json").read_text())
    assert [r["motion"] for r in res["rows"]] == ["jump", "stand"]
    assert res["rows"][0]["eval"]["inputs"]["policy_onnx_sha256"] == T.onnx_file_sha(sb["root"] / "jump")
    sb["calls"].clear()
    assert _main(sb) == 0 and sb["calls"] == []  # nothing changed: nothing redone
    (sb["root"] / "jump" / "policy.onnx").write_bytes(b"retrained")
    assert _main(sb, "--skip-dry-run") == 0 and sb["calls"] == [("eval", "jump")]
    assert _main(sb) == 0 and sb["calls"] == [("eval", "jump"), ("dry", "jump")]
    sb["calls"].clear()
    _artifact(sb["root"], "jump_high")  # a new motion: only it runs
    assert _main(sb) == 0 and sb["calls"] == [("eval", "jump_high"), ("dry", "jump_high")]
    sb["calls"].clear()
    assert _main(sb, "--motions", "stand", "--force") == 0 and sb["calls"] == [("eval", "stand"), ("dry", "stand")]
    res = json.loads((sb["tmp"] / "results" / "motions.json").read_text())
    assert [r["motion"] for r in res["rows"]] == ["jump", "jump_high", "stand"]  # --motions keeps the other rows


def test_driver_errors(sandbox, capsys):
    sb = sandbox
    assert _main(sb, "--motions", "nope") == 1
    err = capsys.readouterr().err
    assert "unknown motion(s) nope" in err and "jump, stand" in err
    (sb["root"] / "broken").mkdir()
    (sb["root"] / "broken" / "policy.yaml").write_text(yaml.safe_dump({"motion": {"duration": 1.0}}))
    assert _main(sb, "--motions", "broken") == 1
    err = capsys.readouterr().err
    assert "broken" in err and "policy.onnx, reference.npz missing" in err
    assert sb["calls"] == []
    # without --motions an incomplete folder is listed as skipped, the rest runs
    assert _main(sb, "--skip-dry-run") == 0
    res = json.loads((sb["tmp"] / "results" / "motions.json").read_text())
    assert [s["motion"] for s in res["skipped"]] == ["broken"] and "policy.onnx" in res["skipped"][0]["reason"]
    assert T.main(["--artifacts", str(sb["tmp"] / "none")]) == 1
    assert "not a folder" in capsys.readouterr().err

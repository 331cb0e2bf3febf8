"""experiments/calibration_loop.py's pure parts (no DDS, no bridge process, no training; jax-free, fast):
the recovery table against hand-computed numbers, the hidden robot's bridge flags and eval string
describing the same robot, the calibration-file check, and the resumability of the steps (with the
subprocess steps replaced by stubs)."""
from __future__ import annotations

import shlex
import sys

import pytest
import yaml

from experiments import calibration_loop as L

REPO = L.REPO


def test_no_jax_imported():
    """Checked in a fresh interpreter: other test modules of a full run import jax into this one."""
    import subprocess

    code = "import sys, experiments.calibration_loop; sys.exit(1 if 'jax' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


def test_truth_of_the_hidden_robot():
    t = L.truth(L.HIDDEN)
    assert t["latency.action_delay_s"] == pytest.approx(0.010)  # 6 ms command + 4 ms state
    assert t["latency.latency_s"] == pytest.approx(0.012)  # + one 2 ms state period (lockstep)
    assert (t["armature_scale"], t["damping"], t["frictionloss_scale"], t["kp_scale"]) == (1.5, 0.5, 0.6, 1.0)
    assert t["imu.gyro_bias"] == (0.03, -0.02, 0.025)
    with pytest.raises(L.LoopError, match="damping_scale"):
        L.truth({**L.HIDDEN, "damping_scale": 2.0})


def test_recovery_table_hand_computed():
    calib = {
        "imu": {"gyro_bias": [0.0306, -0.0196, 0.025], "gyro_bias_std": [1e-4, 1e-4, 1e-4],
                "accel_bias": [0.198, -0.15, 0.103]},
        "latency": {"latency_s": 0.012, "latency_std_s": 0.0, "action_delay_s": 0.0105},
        "actuators": {"legs": {"armature_scale": {"value": 1.53, "std": 0.2, "identified": True},
                               "damping": {"value": 0.49, "std": 0.01, "identified": True},
                               "frictionloss_scale": {"value": 0.6, "std": 0.01, "identified": True},
                               "kp_scale": {"value": 1.004, "std": 0.006, "identified": True}},
                      "waist": {"armature_scale": {"value": 3.0, "std": 2.0, "identified": False}}},
        "joints": {"offsets": [0.0] * 28 + [-0.003]},
    }
    rows = {(r["group"], r["parameter"]): r for r in L.recovery_table(calib, L.HIDDEN)}
    # (recovered - truth) / |truth| * 100, by hand
    assert rows[(None, "gyro_bias.x")]["error_pct"] == 2.0  # (0.0306 - 0.03) / 0.03
    assert rows[(None, "gyro_bias.y")]["error_pct"] == 2.0  # (-0.0196 + 0.02) / 0.02
    assert rows[(None, "gyro_bias.z")]["error_pct"] == 0.0
    assert rows[(None, "gyro_bias.x")]["std"] == 1e-4
    assert rows[(None, "accel_bias.x")]["error_pct"] == -1.0  # (0.198 - 0.2) / 0.2
    assert rows[(None, "accel_bias.z")]["error_pct"] == 3.0  # (0.103 - 0.1) / 0.1
    assert rows[(None, "action_delay_ms")]["truth"] == 10.0 and rows[(None, "action_delay_ms")]["recovered"] == 10.5
    assert rows[(None, "action_delay_ms")]["error_pct"] == 5.0
    assert rows[(None, "latency_ms")]["error_pct"] == 0.0
    assert rows[("legs", "armature_scale")]["error_pct"] == 2.0  # 1.53 vs 1.5
    assert rows[("legs", "damping")]["error_pct"] == -2.0  # 0.49 vs 0.5
    assert rows[("legs", "frictionloss_scale")]["error_pct"] == 0.0
    assert rows[("legs", "kp_scale")]["error_pct"] == 0.4  # 1.004 vs 1.0
    assert rows[("waist", "armature_scale")]["error_pct"] == 100.0 and rows[("waist", "armature_scale")]["identified"] is False
    off = rows[(None, "joint_offset_max_abs")]
    assert off["truth"] == 0.0 and off["recovered"] == 0.003 and off["error_pct"] is None and off["abs_error"] == 0.003


def test_error_pct_of_a_zero_truth_is_none():
    assert L.error_pct(0.0, 0.1) is None
    assert L.error_pct(-2.0, -1.0) == 50.0  # signed, against |truth|: recovered above a negative truth is +


def _bridge_config(flags):
    from sim.cli import build_arg_parser, config_from_args

    return config_from_args(build_arg_parser().parse_args(list(flags)))


def test_bridge_flags_and_eval_string_describe_the_same_robot():
    from eval.bridge_setup import parse_perturbation

    flags = L.bridge_flags(L.HIDDEN)
    cfg = _bridge_config(flags)
    setup = parse_perturbation(L.eval_perturbation(L.HIDDEN))
    assert cfg.model == setup.model  # armature, friction loss, extra damping: one BridgeModelConfig
    assert cfg.model.armature_scale == 1.5 and cfg.model.frictionloss_scale == 0.6 and cfg.model.extra_joint_damping == 0.5
    assert cfg.faults.cmd_latency_ms * 1e-3 == pytest.approx(setup.cmd_delay_s) == pytest.approx(0.006)
    assert cfg.faults.state_latency_ms * 1e-3 == pytest.approx(setup.state_delay_s) == pytest.approx(0.004)
    assert cfg.noise.gyro_bias == L.HIDDEN["gyro_bias"] and cfg.noise.accel_bias == L.HIDDEN["accel_bias"]
    assert cfg.noise.gyro_std == cfg.noise.accel_std == 0.0 and not cfg.lockstep
    # every hidden key reaches the bridge; eval gets all but the IMU biases (it has no IMU model)
    pert_keys = {item.split("=")[0] for item in L.eval_perturbation(L.HIDDEN).split(",")}
    assert pert_keys == set(L.HIDDEN) - {"gyro_bias", "accel_bias"}


def test_vector_flag_with_a_negative_first_component_parses():
    cfg = _bridge_config(L.bridge_flags({"gyro_bias": (-0.03, 0.0, 0.01), "cmd_latency_ms": 2}))
    assert cfg.noise.gyro_bias == (-0.03, 0.0, 0.01) and cfg.faults.cmd_latency_ms == 2.0
    with pytest.raises(L.LoopError, match="no sim bridge flag"):
        L.bridge_flags({"kp_scale": 0.9})


def _source_args(flags, realtime=False):
    """What calibration.cli records in source.bridge_args for --bridge-args " ".join(flags)."""
    from calibration.cli import SIM_BRIDGE_ARGS

    base = SIM_BRIDGE_ARGS[1:] if realtime else list(SIM_BRIDGE_ARGS)
    return " ".join(base + shlex.split(" ".join(flags)))


def test_calibration_matches_the_hidden_robot():
    flags = L.bridge_flags(L.HIDDEN)
    ok, _ = L.calibration_matches({"mode": "lockstep", "source": {"bridge_args": _source_args(flags)}}, flags)
    assert ok
    ok, why = L.calibration_matches({"mode": "real time", "source": {"bridge_args": _source_args(flags, True)}}, flags)
    assert not ok and "real time" in why
    other = L.bridge_flags({**L.HIDDEN, "armature_scale": 1.3})
    ok, why = L.calibration_matches({"mode": "lockstep", "source": {"bridge_args": _source_args(other)}}, flags)
    assert not ok and "1.3" in why
    ok, _ = L.calibration_matches({"mode": "lockstep", "source": {"bridge_args": _source_args([])}}, flags)
    assert not ok  # the nominal bridge's calibration (calibration/sim.yaml)


def test_keep_row():
    inputs = {"policy_onnx_sha256": "a", "bridge": "perturbed", "episodes": 20}
    assert L.keep_row({"inputs": dict(inputs)}, inputs)
    assert not L.keep_row(None, inputs)
    assert not L.keep_row({"inputs": {**inputs, "policy_onnx_sha256": "b"}}, inputs)
    assert not L.keep_row({"inputs": {**inputs, "episodes": 2}}, inputs)
    assert not L.keep_row({}, inputs)
    assert not L.keep_row({"inputs": dict(inputs), "host_stalled": True}, inputs)  # a stalled dry run is redone


def test_host_stall_is_the_machine_not_the_robot():
    assert L.host_stalled({"safety_events": [{"kind": "deadline", "detail": "128 ms behind"}]})
    assert L.host_stalled({"safety_events": [{"kind": "stale_state"}]})
    assert not L.host_stalled({"safety_events": [{"kind": "tilt"}]})
    assert not L.host_stalled({"safety_events": []}) and not L.host_stalled({})


def test_dry_run_repeated_after_a_host_stall(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(L, "OUT", tmp_path)
    events = [[{"kind": "deadline", "detail": "control loop 128 ms behind its deadline"}], [{"kind": "tilt", "detail": "x"}]]
    runs = []

    def fake_run(cmd, log, ok=(0,)):
        runs.append(cmd)
        root = tmp_path / "deploy" / "dry_run_nominal_perturbed"
        assert cmd[cmd.index("--run-root") + 1] == str(root)
        assert cmd[cmd.index("--bridge-args") + 1] == " ".join(L.bridge_flags())
        d = root / f"run{len(runs)}"
        d.mkdir(parents=True)
        ev = events[len(runs) - 1]
        (d / "summary.json").write_text(json.dumps({"final_state": "DAMPING", "fell": True, "safety_events": ev,
                                                    "gt_pelvis_max_m": 0.78, "gt_flight_s": 0.08}))
        return 1

    monkeypatch.setattr(L, "_run", fake_run)
    row = L.run_dry("dry_run/nominal/perturbed", tmp_path / "p", L.bridge_flags(), None, 172, attempts=3)
    assert len(runs) == 2  # the stalled run, then one the robot decided
    assert row["safety_event_kinds"] == ["tilt"] and row["falls"] == 1 and not row["host_stalled"]
    assert row["exit_code"] == 1 and row["gt_apex_pelvis_m"] == 0.78 and row["gt_flight_s"] == 0.08
    assert len(row["host_stall_attempts"]) == 1 and "128 ms" in row["host_stall_attempts"][0]["safety_events"][0]


def test_dry_run_row():
    summary = {"final_state": "DAMPING", "fell": True, "safety_events": [{"time": 7.3, "kind": "tilt", "detail": "46 deg"}],
               "transitions": [{"time": 0.5, "to": "STAND_UP"}, {"time": 4.002, "to": "POLICY"}, {"time": 7.3, "to": "DAMPING"}],
               "gt_pelvis_max_m": 0.78, "gt_flight_s": 0.1, "deadline_misses": 0}
    row = L.dry_run_row(summary, 1)
    assert (row["falls"], row["safety_events"], row["safety_event_kinds"]) == (1, 1, ["tilt"])
    assert row["first_safety_event"] == {"time": 7.3, "kind": "tilt", "detail": "46 deg"} and row["policy_started_s"] == 4.002
    assert (row["gt_apex_pelvis_m"], row["gt_flight_s"], row["exit_code"]) == (0.78, 0.1, 1)
    ok = L.dry_run_row({"final_state": "HOLD", "fell": False, "safety_events": []}, 0)
    assert ok["falls"] == 0 and ok["first_safety_event"] is None and ok["policy_started_s"] is None


def test_eval_row_in_cm():
    ev = {"episodes": 20, "falls": 3, "stood_at_end": 17, "tracking_error_cm": 4.8, "tracking_error_cm_max": 6.0,
          "apex_foot_clearance_m": {"mean": 0.0645, "min": 0.06264}, "flight_time_s": {"mean": 0.15, "min": 0.14}}
    row = L.eval_row(ev)
    assert row["apex_clearance_cm"] == {"mean": 6.45, "min": 6.264} and row["falls"] == 3 and row["episodes"] == 20
    assert L.eval_row({"episodes": 1, "falls": 1, "apex_foot_clearance_m": None})["apex_clearance_cm"] is None


# ------------------------------------------------------------------------------------- resumability
@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """The experiment pointed at tmp_path: a calibration of the hidden robot, a nominal policy (its YAML
    only), stubbed steps that count their calls."""
    calib = yaml.safe_load((REPO / "calibration" / "sim.yaml").read_text())
    calib["robot_id"] = L.ROBOT_ID
    calib["source"]["bridge_args"] = _source_args(L.bridge_flags())
    calib_path = tmp_path / "calibration" / f"{L.ROBOT_ID}.yaml"
    calib_path.parent.mkdir()
    calib_path.write_text(yaml.safe_dump(calib))
    nominal = tmp_path / "nominal" / "hop"
    nominal.mkdir(parents=True)
    (nominal / "policy.yaml").write_text(yaml.safe_dump({"onnx_sha256": "n" * 64, "provenance": {}}))
    monkeypatch.setattr(L, "CALIB_PATH", calib_path)
    monkeypatch.setattr(L, "RESULTS_PATH", tmp_path / "results" / "calibration_loop.json")
    monkeypatch.setattr(L, "OUT", tmp_path / "runs")
    calls = []

    def fake_eval(row_id, policy_dir, label, perturbation, episodes, seed):
        calls.append(row_id)
        return {"episodes": episodes, "falls": 1, "tracking_error_cm": 5.0, "apex_clearance_cm": {"mean": 6.0, "min": 5.0}}

    def fake_dry(row_id, policy_dir, flags, calibration, domain, attempts):
        calls.append(row_id)
        assert domain == 91  # --domain 90 + 1
        return {"episodes": 1, "final_state": "HOLD", "fell": False, "falls": 0, "safety_events": 0,
                "safety_event_kinds": [], "gt_apex_pelvis_m": 0.79, "gt_flight_s": 0.16}

    def no_calibration(domain):
        raise AssertionError("the calibration must be kept, not redone")

    monkeypatch.setattr(L, "run_eval", fake_eval)
    monkeypatch.setattr(L, "run_dry", fake_dry)
    monkeypatch.setattr(L, "calibrate", no_calibration)
    return {"tmp": tmp_path, "nominal": nominal, "calls": calls, "calib_path": calib_path}


def _main(sb, *extra):
    return L.main(["--nominal-policy", str(sb["nominal"]), "--calibrated-policy", str(sb["tmp"] / "cal" / "hop"),
                   "--episodes", "3", "--domain", "90", *extra])


def _results(sb):
    import json

    return json.loads((sb["tmp"] / "results" / "calibration_loop.json").read_text())


def test_steps_are_kept_and_calibrated_rows_wait_for_the_policy(sandbox):
    sb = sandbox
    assert _main(sb) == 0
    assert sb["calls"] == ["eval/nominal/perturbed", "eval/nominal/nominal", "dry_run/nominal/perturbed",
                           "dry_run/nominal+deploy_calibration/perturbed", "dry_run/nominal/nominal"]
    res = _results(sb)
    assert [r["id"] for r in res["skipped"]] == ["eval/calibrated/perturbed", "eval/calibrated/nominal",
                                                  "dry_run/calibrated/perturbed"]
    assert "train.cli" in res["skipped"][0]["reason"] and "--calibration" in res["skipped"][0]["reason"]
    assert res["eval_perturbation"] == L.eval_perturbation() and res["recovery"]
    assert {r["id"] for r in res["rows"]} == set(sb["calls"])
    # a second run: nothing is redone
    sb["calls"].clear()
    assert _main(sb) == 0
    assert sb["calls"] == []
    # --redo by prefix
    assert _main(sb, "--redo", "dry_run/nominal/") == 0
    assert sb["calls"] == ["dry_run/nominal/perturbed", "dry_run/nominal/nominal"]
    sb["calls"].clear()
    # another episode count: the eval rows are redone, the dry runs kept
    assert _main(sb, "--episodes", "4") == 0
    assert sb["calls"] == ["eval/nominal/perturbed", "eval/nominal/nominal"]
    # the calibrated policy appears (trained with this calibration): only its rows run
    from robots import calibration as C

    cal = sb["tmp"] / "cal" / "hop"
    cal.mkdir(parents=True)
    prov = {"calibration": {"robot_id": L.ROBOT_ID, "sha256": C.file_sha256(sb["calib_path"]), "date": "x"}}
    (cal / "policy.yaml").write_text(yaml.safe_dump({"onnx_sha256": "c" * 64, "provenance": prov}))
    sb["calls"].clear()
    assert _main(sb, "--episodes", "4") == 0
    assert sb["calls"] == ["eval/calibrated/perturbed", "eval/calibrated/nominal", "dry_run/calibrated/perturbed"]
    res = _results(sb)
    assert res["skipped"] == [] and len(res["rows"]) == 8
    # the calibrated policy is retrained (new ONNX): its rows are redone, the nominal ones kept
    (cal / "policy.yaml").write_text(yaml.safe_dump({"onnx_sha256": "d" * 64, "provenance": prov}))
    sb["calls"].clear()
    assert _main(sb, "--episodes", "4") == 0
    assert sb["calls"] == ["eval/calibrated/perturbed", "eval/calibrated/nominal", "dry_run/calibrated/perturbed"]


def test_refusals(sandbox, capsys):
    sb = sandbox
    cal = sb["tmp"] / "cal" / "hop"
    cal.mkdir(parents=True)
    # a "calibrated" policy trained without a calibration, then with another version of it
    (cal / "policy.yaml").write_text(yaml.safe_dump({"onnx_sha256": "c" * 64, "provenance": {}}))
    assert _main(sb) == 1
    assert "not trained with a calibration" in capsys.readouterr().err
    prov = {"calibration": {"robot_id": L.ROBOT_ID, "sha256": "0" * 64, "date": "x"}}
    (cal / "policy.yaml").write_text(yaml.safe_dump({"onnx_sha256": "c" * 64, "provenance": prov}))
    assert _main(sb) == 1
    assert "--allow-calibration-mismatch" in capsys.readouterr().err
    # a calibration file of another bridge: refused, the fix named
    calib = yaml.safe_load(sb["calib_path"].read_text())
    calib["source"]["bridge_args"] = _source_args([])
    sb["calib_path"].write_text(yaml.safe_dump(calib))
    assert _main(sb) == 1
    assert "--recalibrate" in capsys.readouterr().err
    assert sb["calls"] == []

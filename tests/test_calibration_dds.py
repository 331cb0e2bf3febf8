"""`make calibrate ROBOT=sim` end to end over real DDS: the sim bridge (subprocess, lockstep) started
with hidden perturbations, on a stiff support (calibration.cli.SIM_SUPPORT_ARGS: the fits hold the
pelvis, a swinging band biases the legs' damping); calibration.cli runs the whole sequence through the deploy link and
safety/, fits, writes the YAML. Recovered values must be within 10 % (latency within 2 ms).

Covered here: IMU bias (3 + 3 components), joint offset check (no offsets: none flagged), latency
(6 ms command + 4 ms state latency), actuator identification of the `arms` and `legs` groups
(armature, damping, friction loss, kp scale). `make calibrate` also fits `waist` (by default), which
the fixed-pelvis model cannot identify on the elastic band (the torso swings the pelvis): it is
reported with `identified: false` there, not tested here.
"""
import os
from pathlib import Path

import numpy as np
import pytest

from calibration import cli, store
from robots import calibration as calib_file

pytestmark = [pytest.mark.dds, pytest.mark.realtime]  # the sim bridge in real time over DDS on lo

ARMATURE, DAMPING, FRICTION = 1.5, 0.5, 0.6
GYRO_BIAS, ACCEL_BIAS = (0.03, -0.02, 0.025), (0.2, -0.15, 0.1)
CMD_LATENCY_MS, STATE_LATENCY_MS = 6.0, 4.0
HIDDEN = (f"--armature-scale {ARMATURE} --extra-joint-damping {DAMPING} --frictionloss-scale {FRICTION} "
          f"--gyro-bias {','.join(map(str, GYRO_BIAS))} --accel-bias {','.join(map(str, ACCEL_BIAS))} "
          f"--gyro-noise 0.01 --accel-noise 0.05 --cmd-latency-ms {CMD_LATENCY_MS} --state-latency-ms {STATE_LATENCY_MS}")


def bridges_on(domain):
    """Our sim bridge processes still alive on `domain` (from /proc)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-m" in cmd and b"sim" in cmd and b"--domain" in cmd and cmd[cmd.index(b"--domain") + 1] == str(domain).encode():
            out.append(int(pid))
    return out


def test_calibration_recovers_hidden_perturbations(dds_domain, tmp_path, capsys):
    out = tmp_path / "hidden.yaml"
    rc = cli.main(["--robot", "sim", "--domain", str(dds_domain), "--robot-id", "hidden", "--out", str(out),
                   "--runs-root", str(tmp_path / "runs"), "--groups", "arms,legs", "--excitation-s", "4",
                   "--bridge-args", HIDDEN])
    printed = capsys.readouterr().out
    assert not bridges_on(dds_domain), "the sim bridge was left running"
    assert rc == cli.EXIT_OK, printed
    calib = calib_file.load(out)
    errors = {}

    # IMU: every component within 10 %
    for key, true in (("gyro_bias", GYRO_BIAS), ("accel_bias", ACCEL_BIAS)):
        got = np.array(calib["imu"][key])
        rel = np.abs(got - true) / np.abs(true)
        errors[key] = rel.max()
        assert (rel < 0.10).all(), (key, got, true)
    assert store.estimator_config(calib).gyro_bias == pytest.approx(calib["imu"]["gyro_bias"])

    # latency: the action delay is the injected command + state latency, within 2 ms
    delay_ms = calib["latency"]["action_delay_s"] * 1e3
    errors["action_delay_ms"] = abs(delay_ms - (CMD_LATENCY_MS + STATE_LATENCY_MS))
    assert errors["action_delay_ms"] <= 2.0, calib["latency"]

    # held pose: the model predicts where every joint settles (gravity sag), nothing flagged
    assert calib["joints"]["flagged"] == []
    assert np.abs(calib["joints"]["residual"]).max() < 0.005

    # actuators: within 10 % of the hidden values (kp as sent: scale 1)
    truth = {"armature_scale": ARMATURE, "damping": DAMPING, "frictionloss_scale": FRICTION, "kp_scale": 1.0}
    for group in ("arms", "legs"):
        fit = calib["actuators"][group]
        for k, true in truth.items():
            rel = abs(fit[k]["value"] - true) / true
            errors[f"{group}.{k}"] = rel
            assert rel < 0.10, (group, k, fit[k])
        # the fit explains the motion to 1 % of the excitation and most of what the nominal model leaves (the
        # legs' floor, ~0.7 mrad of 120 mrad, is the support's rotational give that the held-pelvis replay lacks;
        # the viscous-only extra damping leaves the nominal model 4.9 mrad off, so 0.15 of it)
        assert fit["residual_rms_rad"] < 0.01 * fit["motion_std_rad"]
        assert fit["residual_rms_rad"] < 0.2 * fit["residual_rms_nominal_rad"]
        for k in ("damping", "frictionloss_scale", "kp_scale"):
            assert fit[k]["identified"], (group, k, fit[k])
    centre = calib_file.dr_centre(calib)
    assert centre["damping"][20] == pytest.approx(calib["actuators"]["arms"]["damping"]["value"])
    assert centre["action_delay_s"] == calib["latency"]["action_delay_s"]

    # raw logs and one report plot per fit, pointed to by the YAML
    raw = Path(calib["raw_logs"])
    raw = raw if raw.is_absolute() else Path(cli.REPO_ROOT) / raw
    assert {"still.npz", "latency.npz", "excite_arms.npz", "excite_legs.npz"} <= {p.name for p in raw.iterdir()}
    for name in ("imu", "latency", "joints", "actuators_arms", "actuators_legs"):
        p = Path(calib["reports"][name])
        assert (p if p.is_absolute() else Path(cli.REPO_ROOT) / p).is_file(), name
    print("recovery errors: " + ", ".join(f"{k} {v:.2f}" if k.endswith("_ms") else f"{k} {v:.2%}" for k, v in errors.items()))
    print(f"durations: {calib['durations_s']}")

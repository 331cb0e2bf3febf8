"""The FastSAC diagnosis helpers of experiments.tracking_policies: tilt traces, their alignment and figures
(expected values computed by hand)."""
import json
import math

import numpy as np
import pytest

from experiments.tracking_policies import (TRIP_DEG, deploy_tilt_trace, first_divergence, first_over, peak,
                                           sample_at, tilt_deg, tilt_figures)


def _about_x(deg: float) -> list[float]:
    h = math.radians(deg) / 2
    return [math.cos(h), math.sin(h), 0.0, 0.0]


def test_tilt_of_a_roll_is_its_angle_and_a_yaw_has_none():
    np.testing.assert_allclose(tilt_deg([_about_x(30.0), [math.cos(math.pi / 4), 0, 0, math.sin(math.pi / 4)]]),
                               [30.0, 0.0], atol=1e-9)


def test_trip_is_the_safety_limit_in_degrees():
    assert TRIP_DEG == pytest.approx(0.8 * 180 / math.pi)  # 45.84 deg


def test_sample_at_takes_the_latest_row_at_or_before():
    np.testing.assert_array_equal(sample_at([0, 1, 2], [10, 20, 30], [-0.5, 0, 0.5, 1.0, 2.7]), [10, 10, 10, 20, 30])


def test_peak_first_over_and_divergence():
    t, x = [0, 1, 2, 3], [1, 5, 3, 5]
    assert peak(t, x) == (5.0, 1.0)
    assert peak(t, x, 2, 4) == (5.0, 3.0)
    assert peak(t, x, 4, 5) is None
    assert first_over([0, 1, 2], [1, 3, 5], 2.5) == 1.0
    assert first_over([0, 1, 2], [1, 3, 5], 6) is None
    assert first_divergence([0, 1, 2, 3], [0, 0, 0, 0], [0, 1, 3], 2) == 2.0  # over the 3 common steps
    assert first_divergence([0, 1], [0, 0], [0, 1], 2) is None


def test_tilt_figures_by_hand():
    f = tilt_figures(np.array([0.0, 0.02, 0.04]), np.array([10.0, 50.0, 20.0]), np.array([5.0, 6.0, 7.0]))
    assert f == {"policy_s": 0.06, "max_tilt_deg": 50.0, "max_tilt_at_s": 0.02, "margin_deg": -4.16,
                 "reference_tilt_at_max_deg": 6.0, "window_max_tilt_deg": None, "window_max_at_s": None,
                 "window_reference_max_deg": None, "first_over_trip_s": 0.02}
    k = np.arange(2000)  # 40 s of steps; window 30-35 s
    t = k * 0.02
    tilt = np.where((k >= 1596) & (k <= 1604), 30.0, 1.0)  # 30 deg from step 1596 = 31.92 s
    f = tilt_figures(t, tilt, np.full(len(t), 2.0))
    assert (f["max_tilt_deg"], f["max_tilt_at_s"], f["margin_deg"]) == (30.0, 31.92, 15.84)
    assert (f["window_max_tilt_deg"], f["window_max_at_s"], f["window_reference_max_deg"]) == (30.0, 31.92, 2.0)
    assert f["first_over_trip_s"] is None and f["policy_s"] == 40.0


def test_deploy_tilt_trace_reads_policy_and_the_tick_after_it(tmp_path):
    from deploy.log import StreamLog

    names = ["PASSIVE", "STAND_UP", "HOLD", "POLICY", "DAMPING"]
    log = StreamLog(tmp_path / "log.mcap", {"tick": {"t": (), "state": (), "quat": (4,)}, "policy": {"t": (), "step": ()}},
                    {"tick": 8, "policy": 8}, metadata={"state_names": json.dumps(names)})
    for t, state, deg in ((0.00, 2, 0), (0.01, 3, 10), (0.02, 3, 20), (0.03, 3, 30), (0.04, 4, 50), (0.05, 4, 60)):
        log.columns("tick").append(t=t, state=state, quat=np.array(_about_x(deg)))
    for t, step in ((0.01, 0), (0.025, 1)):
        log.columns("policy").append(t=t, step=step)
    log.close()
    tr = deploy_tilt_trace(tmp_path)
    np.testing.assert_allclose(tr["tick_t"], [0.0, 0.01, 0.02, 0.03], atol=1e-12)
    np.testing.assert_allclose(tr["tick_tilt"], [10, 20, 30, 50], atol=1e-6)  # POLICY + the tick that tripped
    np.testing.assert_allclose(tr["t"], [0.0, 0.02])
    np.testing.assert_allclose(tr["tilt"], [10, 20], atol=1e-6)  # the ticks at 0.01 and 0.02 s


def test_diagnosis_table_renders_each_run():
    from experiments.tracking_policies import render_diagnosis

    fig = {"policy_s": 36.9, "max_tilt_deg": 45.71, "max_tilt_at_s": 36.88, "margin_deg": 0.13,
           "window_max_tilt_deg": 17.08, "first_over_trip_s": None}
    d = {"trip_deg": 45.84, "window_s": [30.0, 35.0], "diverge_deg": 5.0,
         "reference": {"max_tilt_deg": 43.52, "max_tilt_at_s": 67.52, "window_max_tilt_deg": 29.21},
         "eval": {**fig, "fell": True, "fell_at_s": 136.72},
         "eval_delayed": [{**fig, "cmd_delay_ms": 2.0, "state_delay_ms": 0.0, "fell": False, "fell_at_s": None,
                           "diverges_from_eval_s": 16.5}],
         "deploy": [{**fig, "fell": True, "tick_max_tilt_deg": 46.38, "tick_max_tilt_at_s": 36.882,
                     "tick_first_over_trip_s": 36.882, "diverges_from_eval_s": 28.02},
                    {"error": "exit 2: no bridge"}],
         "ppo_eval": {**fig, "fell": False, "fell_at_s": None, "window_max_tilt_deg": None}}
    lines = render_diagnosis(d).splitlines()
    assert lines[1] == ("| pelvis tilt (trip 45.8 deg) | s in POLICY | fell (at s) | max tilt (deg, at s) | margin to trip (deg) "
                        "| max over 30-35 s | first past trip (s) | leaves nominal eval's tilt by > 5 deg (s) |")
    assert lines[3] == "| FastSAC reference (the graph's clip) | - | - | 43.5 (at 67.5) | 2.3 | 29.2 | - | - |"
    assert lines[4] == "| FastSAC make eval (C MuJoCo, no DR) | 36.9 | yes (136.7) | 45.7 (at 36.9) | 0.1 | 17.1 | - | - |"
    assert lines[5] == ("| FastSAC eval, command delay 2 ms, state delay 0 ms | 36.9 | no | 45.7 (at 36.9) | 0.1 | 17.1 "
                        "| - | 16.5 |")
    assert lines[6] == "| FastSAC make deploy ROBOT=sim, run 1 | 36.9 | yes | 46.4 (at 36.9) | -0.5 | 17.1 | 36.9 | 28.0 |"
    assert lines[7].startswith("| FastSAC make deploy ROBOT=sim, run 2 | did not run: exit 2: no bridge |")
    assert lines[8] == "| PPO make eval (C MuJoCo, no DR) | 36.9 | no | 45.7 (at 36.9) | 0.1 | - | - | - |"

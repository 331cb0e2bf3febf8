"""Third-party policies on the sim bridge through `python -m deploy.cli --policy ...` (what `make deploy
ROBOT=sim POLICY=...` runs): holosoma's G1 locomotion model walking under a scripted --velocity command
(commanded vs achieved speed, distance, tilt from the bridge's ground truth), our jump exported in the
mjlab tracking format completing its clip, and a bad third-party file refused with nothing sent; plus
the pure velocity-command functions (schedule, sticks)."""
import time

import numpy as np
import pytest

from deploy import velocity
from deploy.link import LowCmdObserver
from comm.sim_process import launch_bridge_process
from policies.adapters.export import export_mjlab
from policies.artifact import load_artifact
from tests.test_adapters import HOLO_CACHE, LOCO, holosoma_models  # noqa: F401 - the cached-download fixture
from tests.test_deploy_bad_input import assert_refused
from tests.test_deploy_support import REPO, assert_played_whole, run_cli, summary_of



# ---------------------------------------------------------------- pure functions
def test_schedule_parsing_and_lookup():
    w = velocity.parse_schedule(["0.5,0,0@5-10", "0,0,0.4@10-12 -0.2,0.1,0@13-14"])
    assert [x.t0 for x in w] == [5.0, 10.0, 13.0] and velocity.schedule_end(w) == 14.0
    assert velocity.scheduled(w, 4.99) == (0, 0, 0) and velocity.scheduled(w, 5.0) == (0.5, 0, 0)
    assert velocity.scheduled(w, 11.0) == (0, 0, 0.4) and velocity.scheduled(w, 12.5) == (0, 0, 0)
    assert velocity.run_s(w, None) == 15.0 and velocity.run_s(w, 8.0) == 8.0 and velocity.run_s(w, None, "motion") is None
    for bad, msg in (("0.5,0@1-2", "expected VX,VY,WZ@T0-T1"), ("1,0,0@3-2", "0 <= T0 < T1"),
                     ("1,0,0@nan-2", "expected VX,VY,WZ|finite")):
        with pytest.raises(ValueError, match=msg):
            velocity.parse_schedule([bad])
    with pytest.raises(ValueError, match="overlap"):
        velocity.parse_schedule(["1,0,0@1-3", "0,0,1@2-4"])


def test_sticks_dead_zone_and_ranges():
    r = {"lin_vel_x": (-0.5, 1.0), "lin_vel_y": (-0.3, 0.3), "ang_vel_z": (-0.2, 0.2)}
    assert velocity.stick_command(0.05, 0.09, -0.1, r) == (0.0, 0.0, 0.0)  # inside the 0.1 dead zone
    assert velocity.stick_command(0.0, 1.0, 0.0, r) == (1.0, 0.0, 0.0)  # full forward = range top
    assert velocity.stick_command(0.0, -1.0, 0.0, r) == (-0.5, 0.0, 0.0)  # full back = range bottom
    vx, vy, wz = velocity.stick_command(1.0, 0.55, 1.0, r)  # stick right = -y; right stick right = turn right
    assert vx == pytest.approx(0.5) and vy == pytest.approx(-0.3) and wz == pytest.approx(-0.2)
    assert velocity.stick_command(float("nan"), 0.0, 0.0, r) == (0.0, 0.0, 0.0)


# ---------------------------------------------------------------- on the bridge
@pytest.mark.dds
@pytest.mark.realtime
@pytest.mark.network
def test_holosoma_loco_walks_under_a_scripted_command(holosoma_models, tmp_path, fresh_domain):  # noqa: F811
    policy = holosoma_models / LOCO / "fastsac_g1_29dof.onnx"
    r = run_cli("--robot", "sim", "--policy", policy, "--velocity", "0.5,0,0@5-11", "--domain", fresh_domain,
                "--run-root", tmp_path, "--no-plot", timeout=240)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    s = summary_of(r.stdout)
    assert s["final_state"] == "HOLD" and s["safety_events"] == [] and s["fell"] is False
    assert s["policy"]["format"] == "holosoma" and s["policy"]["kind"] == "velocity"
    v = s["velocity"]
    seg = [x for x in v["segments"] if x["commanded"][0] == 0.5]
    assert len(seg) == 1, v
    vx, vy, wz = seg[0]["achieved"]
    assert 0.3 < vx < 0.7, v  # commanded 0.5 m/s forward
    assert abs(vy) < 0.15 and abs(wz) < 0.3, v
    assert v["distance_m"] > 1.5 and v["max_tilt_deg"] < 20.0, v
    print("holosoma walk:", v)


@pytest.mark.dds
@pytest.mark.realtime
def test_jump_as_mjlab_tracking_policy_completes_its_clip(tmp_path, fresh_domain):
    p = export_mjlab(load_artifact(REPO / "policies" / "g1" / "hop"), tmp_path / "jump_mjlab")
    r = run_cli("--robot", "sim", "--policy", p, "--domain", fresh_domain, "--run-root", tmp_path, "--no-plot",
                timeout=240)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    s = summary_of(r.stdout)
    assert s["policy"]["format"] == "mjlab" and s["policy"]["kind"] == "tracking"
    assert s["final_state"] == "HOLD" and s["safety_events"] == [] and s["fell"] is False
    assert [t["to"] for t in s["transitions"]] == ["STAND_UP", "HOLD", "POLICY", "HOLD"]
    assert_played_whole(s, 230)  # time_step 0..229: the whole clip, then HOLD
    assert s["gt_flight_s"] > 0.1  # it jumped: both feet off the floor in the bridge's ground truth
    tr = s["tracking"]  # against the graph's own reference (joint_pos output at each time step)
    assert (tr["policy_steps"], tr["clip_frames"], tr["clip_ended"]) == (s["policy_ticks"], 231, True), tr
    assert 0.0 < tr["joint_rms_rad"] <= tr["joint_rms_worst_s_rad"] < 0.5, tr


@pytest.mark.dds
@pytest.mark.realtime
def test_bad_third_party_policy_refused_with_nothing_sent(dds_domain, tmp_path):
    from tests.test_adapters import probe_onnx
    from tests.test_tracking import BM_154, bm_file

    probe_onnx(10, tmp_path / "plain.onnx")
    o = LowCmdObserver(dds_domain)
    try:
        with launch_bridge_process(["--gt-decimation", "5"], domain=dds_domain):
            t0 = time.monotonic()
            r = run_cli("--robot", "sim", "--no-bridge", "--domain", dds_domain, "--policy", tmp_path / "plain.onnx",
                        "--run-root", tmp_path)
            assert_refused(r, o, "policy artifact rejected", "unknown policy format", since=t0)
            r = run_cli("--robot", "sim", "--no-bridge", "--domain", dds_domain, "--motion", "hop",
                        "--velocity", "0.5,0,0@5-10", "--run-root", tmp_path)
            assert_refused(r, o, "--velocity given, but", "is a motion policy", since=t0)
            bad = bm_file(tmp_path / "bm160.onnx", names=BM_154, n_obs=160)  # 154 listed, the network takes 160
            r = run_cli("--robot", "sim", "--no-bridge", "--domain", dds_domain, "--policy", bad, "--run-root", tmp_path)
            assert_refused(r, o, "policy artifact rejected", "expected 154, found 160", since=t0)
    finally:
        o.close()

"""motions.compose: a whole-body clip from pelvis and upper-body waypoints, the legs solved by IK on the bridge
model; checked by forward kinematics in C MuJoCo of the written file and by the clip importer."""
import mujoco
import numpy as np
import pytest
import yaml

from motions import load_motion
from motions.__main__ import main as motions_cli
from motions.clips import _fk_model
from motions.compose import compose, load_spec
from motions.library import MOTIONS_DIR
from motions.motion import MotionError
from robots import g1

SPEC = MOTIONS_DIR / "compose" / "reach_twist.yaml"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return compose(SPEC, tmp_path_factory.mktemp("c") / "reach_twist.npz")


def test_feet_stay_planted_by_forward_kinematics(clip):
    model, qadr = _fk_model()[:2]
    d = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, d, model.key("home").id)
    mujoco.mj_kinematics(model, d)
    feet = [model.body(n).id for n in g1.FOOT_BODIES]
    home = [(d.xpos[b].copy(), d.xquat[b].copy()) for b in feet]
    z = np.load(clip)
    table = z["joint_pos"]
    assert float(z["fps"][0]) == 30.0 and table.shape == (223, 36) and list(z["joint_names"]) == list(g1.JOINT_NAMES)
    for row in table:
        d.qpos[:7], d.qpos[qadr] = row[:7], row[7:]
        mujoco.mj_kinematics(model, d)
        for b, (p, q) in zip(feet, home):
            np.testing.assert_allclose(d.xpos[b], p, atol=1e-9)
            assert abs(abs(np.dot(d.xquat[b], q)) - 1) < 1e-12
    assert np.all(table[:, 7:] >= g1.JOINT_POS_MIN) and np.all(table[:, 7:] <= g1.JOINT_POS_MAX)


def test_waypoints_are_met_and_the_clip_starts_and_ends_at_rest(clip):
    table = np.load(clip)["joint_pos"]
    spec = yaml.safe_load(SPEC.read_text())
    squat = next(w for w in spec["waypoints"] if w.get("pelvis", {}).get("z") == 0.64)
    k = int(round(squat["t"] * 30))
    assert table[k, 2] == pytest.approx(0.64, abs=1e-12)
    R = np.zeros(9)
    mujoco.mju_quat2Mat(R, table[k, 3:7])
    assert np.arctan2(-R[6], R[8]) == pytest.approx(squat["pelvis"]["pitch"], abs=1e-9)  # pitch about y
    i = g1.joint_index("left_shoulder_pitch_joint")
    assert table[k, 7 + i] == pytest.approx(g1.DEFAULT_JOINT_POS[i] + squat["joints"]["shoulder_pitch"], abs=1e-12)
    for row in (table[0], table[-1]):  # the home pose, exactly
        np.testing.assert_allclose(row[7:], g1.DEFAULT_JOINT_POS, atol=1e-9)
        np.testing.assert_allclose(row[:3], [0, 0, g1.DEFAULT_BASE_HEIGHT], atol=1e-12)
    np.testing.assert_allclose(table[1] - table[0], 0, atol=1e-6)  # smootherstep: at rest at the ends


def test_the_committed_clip_is_the_spec_composed(clip):
    np.testing.assert_allclose(np.load(MOTIONS_DIR / "reach_twist.npz")["joint_pos"], np.load(clip)["joint_pos"],
                               atol=1e-9)


def test_imported_by_name_as_a_both_feet_stance_clip():
    m = load_motion("reach_twist")
    assert m.duration == pytest.approx(7.4) and m.num_steps == 371 and m.source_fps == 30.0
    assert m.contact.all() and not m.flight_mask.any() and m.flight_windows == ()
    assert m.ref_foot_height.max() < 1e-3
    assert m.ref_height.min() == pytest.approx(0.64, abs=2e-3)


@pytest.mark.parametrize("patch, field, words", [
    ({"waypoints": [{"t": 0.0}, {"t": 1.0, "pelvis": {"z": 0.95}}]}, "waypoints",
     "cannot keep the feet planted at t = "),
    ({"waypoints": [{"t": 0.0}, {"t": 1.0, "joints": {"knee": 0.3}}]}, "waypoints[1].joints", "solved by the IK"),
    ({"waypoints": [{"t": 0.0}, {"t": 1.0}, {"t": 1.0}]}, "waypoints[2].t", "is not after"),
    ({"waypoints": [{"t": 0.5}, {"t": 1.0}]}, "waypoints[0].t", "must be at t = 0"),
    ({"waypoints": [{"t": 0.0}, {"t": 1.0, "pelvis": {"h": 0.7}}]}, "waypoints.1.pelvis.h", "Extra inputs"),
    ({"waypoints": [{"t": 0.0}, {"t": 1.0, "joints": {"elbowz": 0.3}}]}, "waypoints[1].joints.elbowz", "unknown joint"),
])
def test_bad_specs_name_the_file_and_field(tmp_path, patch, field, words):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump({"fps": 30, **patch}))
    with pytest.raises(MotionError) as e:
        compose(p, tmp_path / "bad.npz")
    msg = str(e.value)
    assert msg.startswith(f"{p}: {field}: ") and words in msg, msg
    assert not (tmp_path / "bad.npz").exists()


def test_cli_compose(tmp_path, capsys):
    out = tmp_path / "c.npz"
    assert motions_cli(["compose", str(SPEC), str(out)]) == 0 and out.exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("fps: 30\nwaypoints: [{t: 0}]\n")
    assert motions_cli(["compose", str(bad), str(out)]) == 2
    assert "waypoints" in capsys.readouterr().out
    assert load_spec(SPEC).fps == 30

"""The artifact contract and the observation builder."""
import shutil
import subprocess

import numpy as np
import onnxruntime as ort
import pytest
import yaml

from policies import artifact as A
from policies.observation import (MOTION_OBS_TERMS, TRACKING_OBS_TERMS, ObsInputs, build_observation, reference_window,
                                 term_specs)
from policies.stand import write_stand_artifact
from robots import g1
from robots.physics import projected_gravity, quat_rotate_inverse, upright_cos


@pytest.fixture()
def stand(tmp_path):
    return write_stand_artifact(tmp_path / "stand")


def _inputs(rng, batch=()):
    n = g1.NUM_MOTORS
    q = rng.normal(size=batch + (4,))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    return ObsInputs(
        gyro=rng.normal(size=batch + (3,)), quat=q, q=rng.normal(size=batch + (n,)), dq=rng.normal(size=batch + (n,)),
        last_action=rng.normal(size=batch + (n,)), base_lin_vel=rng.normal(size=batch + (3,)),
        base_height=rng.uniform(0.5, 1.0, size=batch), phase=rng.uniform(size=batch),
        ref_q=rng.normal(size=batch + (3, n)), ref_height=rng.normal(size=batch + (3,)),
        anchor_ori_b=rng.normal(size=batch + (6,)),
    )


def test_projected_gravity_hand_computed():
    # upright: gravity straight down in the body frame
    np.testing.assert_allclose(projected_gravity(np.array([1.0, 0, 0, 0])), [0, 0, -1], atol=1e-12)
    # pitched forward by 90 deg about y: body x points down, gravity along +x of the body
    s = np.sqrt(0.5)
    np.testing.assert_allclose(projected_gravity(np.array([s, 0, s, 0])), [1, 0, 0], atol=1e-12)
    # rolled by 90 deg about x: gravity along -y... body y points up -> gravity -y? check with rotation matrix
    qx = np.array([s, s, 0, 0])
    R = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]])  # rotation of +90 deg about x
    np.testing.assert_allclose(quat_rotate_inverse(qx, np.array([0.0, 0, -1])), R.T @ [0, 0, -1], atol=1e-12)


def test_upright_cos_is_minus_projected_gravity_z():
    q = np.random.default_rng(1).normal(size=(200, 4))
    unit = q / np.linalg.norm(q, axis=-1, keepdims=True)
    np.testing.assert_allclose(upright_cos(q), -projected_gravity(unit)[:, 2], atol=1e-12)  # any norm
    assert upright_cos(np.array([1.0, 0, 0, 0])) == 1.0


def test_observation_layout_and_scales():
    rng = np.random.default_rng(0)
    s = _inputs(rng)
    specs = term_specs(MOTION_OBS_TERMS)
    obs = build_observation(specs, s)
    assert obs.shape == (A.obs_size(specs),) == (189,)
    # hand-indexed slices
    np.testing.assert_allclose(obs[0:3], 0.25 * s.gyro)
    np.testing.assert_allclose(obs[6:35], s.q - g1.DEFAULT_JOINT_POS)
    np.testing.assert_allclose(obs[35:64], 0.05 * s.dq)
    np.testing.assert_allclose(obs[96], s.base_height - g1.DEFAULT_BASE_HEIGHT)
    np.testing.assert_allclose(obs[97:99], [np.sin(np.pi * s.phase), np.cos(np.pi * s.phase)])
    np.testing.assert_allclose(obs[99 + 29:99 + 58], s.ref_q[1] - g1.DEFAULT_JOINT_POS)
    np.testing.assert_allclose(obs[-3:], s.ref_height - g1.DEFAULT_BASE_HEIGHT)


@pytest.mark.jax
def test_observation_numpy_equals_jax_batched():
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.default_rng(1)
    s = _inputs(rng, batch=(5,))
    specs = term_specs(TRACKING_OBS_TERMS)  # every term
    o_np = build_observation(specs, s)
    o_jx = build_observation(specs, ObsInputs(*(jnp.asarray(x, jnp.float32) for x in s)), xp=jnp)
    np.testing.assert_allclose(np.asarray(o_jx), o_np, atol=1e-5)


def test_reference_window_clamps_at_end():
    ref_q = np.arange(10 * 29, dtype=float).reshape(10, 29)
    ref_h = np.arange(10, dtype=float)
    q, h = reference_window(ref_q, ref_h, 0)
    np.testing.assert_array_equal(h, [1, 2, 3])
    q, h = reference_window(ref_q, ref_h, 8)
    np.testing.assert_array_equal(h, [9, 9, 9])
    assert q.shape == (3, 29)


def test_stand_artifact_round_trip_and_runs(stand):
    art = A.load_artifact(stand)
    assert art.spec.motion.name == "stand" and art.spec.n_obs == 189
    sess = ort.InferenceSession(art.onnx_bytes, providers=["CPUExecutionProvider"])
    out = sess.run(["actions"], {"obs": np.ones((3, 189), np.float32)})[0]
    assert out.shape == (3, 29) and np.all(out == 0)


def test_committed_artifacts_are_valid():
    for motion in A.available_motions():
        A.load_artifact(A.artifact_dir(motion))


def _edit_yaml(path, fn):
    d = yaml.safe_load((path / A.YAML_NAME).read_text())
    fn(d)
    (path / A.YAML_NAME).write_text(yaml.safe_dump(d))


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d["joint_names"].pop(), "28 joints"),
        (lambda d: d["joint_names"].__setitem__(slice(0, 2), d["joint_names"][1::-1]), "joint order"),
        (lambda d: d["kp"].__setitem__(3, 1e4), "kp of left_knee_joint is 10000, outside 0 < kp <= 2780"),
        (lambda d: d.__setitem__("schema_version", 99), "schema_version 99"),
        (lambda d: d.pop("motion"), "missing keys"),
        (lambda d: d["observation"][0].__setitem__("name", "telepathy"), "unknown observation term"),
    ],
)
def test_bad_yaml_is_refused_with_reason(stand, edit, match):
    _edit_yaml(stand, edit)
    with pytest.raises(A.ArtifactError, match=match):
        A.load_artifact(stand)


def test_corrupt_or_missing_onnx(stand, tmp_path):
    other = tmp_path / "copy"
    shutil.copytree(stand, other)
    (other / A.ONNX_NAME).write_bytes(b"not an onnx file")
    with pytest.raises(A.ArtifactError, match="sha256"):
        A.load_artifact(other)
    (stand / A.ONNX_NAME).unlink()
    with pytest.raises(A.ArtifactError, match="policy.onnx is missing"):
        A.load_artifact(stand)
    (stand / A.YAML_NAME).write_text("{: not yaml")
    with pytest.raises(A.ArtifactError):
        A.load_artifact(stand)
    with pytest.raises(A.ArtifactError, match="no policy artifact"):
        A.load_artifact(tmp_path / "nothing")


def test_provenance_git_commit_marks_uncommitted_changes(tmp_path):
    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    assert A._git_commit(tmp_path) == "unknown"  # not a repository
    git("init", "-q")
    (tmp_path / "jump.yaml").write_text("a: 1\n")
    git("add", "jump.yaml")
    git("commit", "-qm", "motion")
    head = git("rev-parse", "--short", "HEAD")
    (tmp_path / "notes.txt").write_text("untracked files do not count\n")
    assert A._git_commit(tmp_path) == head
    (tmp_path / "jump.yaml").write_text("a: 2\n")  # a motion edited after the commit
    assert A._git_commit(tmp_path) == head + "-dirty"


# ---------------------------------------------------------------------- the policy runtime's pure functions


def test_runtime_phase_and_hold_blend_hand_computed():
    from policies.runtime import hold_blend, motion_phase, motion_steps

    assert motion_steps(4.6, 0.02) == 230
    assert motion_phase(0, 0.02, 4.0) == 0.0 and motion_phase(100, 0.02, 4.0) == pytest.approx(0.5)
    assert motion_phase(500, 0.02, 4.0) == 1.0 and motion_phase(-3, 0.02, 4.0) == 0.0
    frm, home = np.full(29, 1.0), np.zeros(29)
    np.testing.assert_allclose(hold_blend(frm, home, 0.0, 0.5), 1.0)
    np.testing.assert_allclose(hold_blend(frm, home, 0.125, 0.5), 0.75)
    np.testing.assert_allclose(hold_blend(frm, home, 0.5, 0.5), 0.0)
    np.testing.assert_allclose(hold_blend(frm, home, 9.0, 0.5), 0.0)
    np.testing.assert_allclose(hold_blend(frm, home, 0.0, 0.0), 0.0)  # no blend: the default pose at once


@pytest.mark.jax
def test_runtime_observation_inputs_numpy_equals_jax():
    """The training env's observe calls observation_inputs on jax arrays: same phase and window."""
    jnp = pytest.importorskip("jax.numpy")
    from policies.runtime import observation_inputs

    rng = np.random.default_rng(2)
    s = _inputs(rng)
    ref_q, ref_h = rng.normal(size=(12, 29)), rng.normal(size=12)
    state = {k: getattr(s, k) for k in ("gyro", "quat", "q", "dq", "last_action", "base_lin_vel", "base_height",
                                        "anchor_ori_b")}
    for step in (0, 5, 11):
        a = observation_inputs(step, ref_q, ref_h, 0.02, 0.24, **state)
        b = observation_inputs(jnp.int32(step), jnp.asarray(ref_q, jnp.float32), jnp.asarray(ref_h, jnp.float32),
                               0.02, 0.24, **{k: jnp.asarray(v, jnp.float32) for k, v in state.items()}, xp=jnp)
        assert b.phase.dtype == jnp.float32
        assert float(a.phase) == pytest.approx(min(step * 0.02 / 0.24, 1.0))
        for x, y in zip(a, b):
            np.testing.assert_allclose(np.asarray(y), x, atol=1e-6)

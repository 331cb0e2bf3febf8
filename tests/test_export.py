"""Actor network + exporter: JAX vs onnxruntime parity, artifact round trip, checkpoints."""
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
import yaml

from policies import artifact as A
from policies.action import action_to_joint_target
from policies.observation import MOTION_OBS_TERMS, obs_size, term_specs
from robots import g1
from train import checkpoint as C
from train import export as E
from train import networks as N
from motions import load_motion

pytestmark = pytest.mark.jax  # every test here compiles JAX programs

SPECS = term_specs(MOTION_OBS_TERMS)
NOBS = obs_size(SPECS)


@pytest.fixture(scope="module")
def small():
    cfg = N.ActorConfig.for_terms(SPECS, hidden=(32, 16))
    params = N.init_actor(jax.random.PRNGKey(1), NOBS, cfg)
    # a trained-looking net: non-trivial output layer and LayerNorm affine
    k = jax.random.split(jax.random.PRNGKey(2), 4)
    params["out"]["w"] = jax.random.normal(k[0], params["out"]["w"].shape) * 0.3
    params["layers"][0]["ln_g"] = 1 + 0.1 * jax.random.normal(k[1], (32,))
    params["layers"][1]["ln_b"] = 0.1 * jax.random.normal(k[2], (16,))
    rng = np.random.default_rng(0)
    norm = {"mean": rng.normal(0, 0.2, NOBS).astype(np.float32), "var": rng.uniform(0.05, 2, NOBS).astype(np.float32)}
    return cfg, params, norm


@pytest.fixture(scope="module")
def jump():
    return load_motion("hop")


def test_config_finds_reference_slice():
    cfg = N.ActorConfig.for_terms(MOTION_OBS_TERMS)
    off = sum(s.size for s in SPECS[: [s.name for s in SPECS].index("ref_joint_pos")])
    assert cfg.ref_index == off and cfg.hidden == (512, 256, 128) and cfg.layer_norm
    with pytest.raises(ValueError, match="ref_joint_pos"):
        N.ActorConfig.for_terms(["joint_pos", "joint_vel"])
    assert N.ActorConfig.from_dict(cfg.to_dict()) == cfg


def test_residual_with_zero_mlp_is_exactly_the_reference_target(small, jump):
    cfg, params, norm = small
    zero = jax.tree.map(jnp.zeros_like, params)
    obs = E.realistic_observations(jump, MOTION_OBS_TERMS, np.random.default_rng(3), n=16)
    a = np.asarray(N.actor_mean(zero, jnp.asarray(obs), cfg, norm))
    ref = obs[:, cfg.ref_index:cfg.ref_index + 29]
    assert np.array_equal(a * np.float32(cfg.action_scale), ref)  # bit-exact (scale is a power of 2)
    target = action_to_joint_target(a, cfg.action_scale)
    # ref_joint_pos[:29] = q_ref(t+1) - default, so the target is q_ref(t+1) (to float32 rounding)
    np.testing.assert_allclose(target, ref + g1.DEFAULT_JOINT_POS.astype(np.float32), atol=0, rtol=0)
    # the default-initialised net's residual is small: a fresh policy tracks the reference
    fresh = np.asarray(N.actor_mean(params | {"out": N.init_actor(jax.random.PRNGKey(5), NOBS, cfg)["out"]},
                                    jnp.asarray(obs), cfg, norm))
    assert np.abs(fresh * cfg.action_scale - ref).max() < 0.05


def test_residual_off_and_grad(small):
    cfg, params, norm = small
    cfg2 = N.ActorConfig.for_terms(SPECS, hidden=(32, 16), residual_on_reference=False)
    obs = jnp.ones((3, NOBS))
    d = N.actor_mean(params, obs, cfg, norm) - N.actor_mean(params, obs, cfg2, norm)
    np.testing.assert_allclose(d, N.reference_action(obs, cfg), rtol=1e-6)
    g = jax.grad(lambda p: N.actor_mean(p, obs, cfg, norm).sum())(params)
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(g))


def test_onnx_parity(small, jump):
    cfg, params, norm = small
    rng = np.random.default_rng(4)
    obs = np.concatenate([rng.normal(0, 2, (64, NOBS)), E.realistic_observations(jump, MOTION_OBS_TERMS, rng)]).astype(np.float32)
    model, err = E.to_onnx_checked(params, cfg, norm, NOBS, obs)
    assert err < 1e-5
    # NaN in the observation reaches the output (deploy's safety layer must see it)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = obs[:2].copy()
    x[0, 5] = np.nan
    y = sess.run(["actions"], {"obs": x})[0]
    assert np.isnan(y[0]).any() and np.isfinite(y[1]).all()


def test_parity_failure_raises(small, jump, monkeypatch):
    cfg, params, norm = small
    obs = np.zeros((4, NOBS), np.float32)
    monkeypatch.setattr(E, "parity", lambda *a, **k: 1e-2)
    with pytest.raises(E.ExportError, match="differs from JAX"):
        E.to_onnx_checked(params, cfg, norm, NOBS, obs)


def test_jax2onnx_failure_is_a_clear_export_error(small, monkeypatch):
    """jax2onnx is the only converter (no hand-written second network): its failure names it."""
    cfg, params, norm = small
    def boom(*a, **k):
        raise NotImplementedError("no plugin for primitive foo")
    monkeypatch.setattr(E, "to_onnx", boom)
    with pytest.raises(E.ExportError, match="jax2onnx could not convert.*primitive foo"):
        E.to_onnx_checked(params, cfg, norm, NOBS, np.zeros((2, NOBS), np.float32))


def test_export_policy_writes_a_loadable_artifact(small, jump, tmp_path):
    cfg, params, norm = small
    res = E.export_policy({"net": params, "log_std": jnp.zeros(29)}, cfg, norm, jump,
                          {"algorithm": "test", "seed": 3, "iterations": 7}, tmp_path / "hop")
    art = A.load_artifact(res.path)
    assert art.spec.motion.name == "hop" and art.spec.provenance["iterations"] == 7
    assert art.spec.provenance["onnx_converter"] == "jax2onnx" and res.parity_max_abs < 1e-4
    np.testing.assert_allclose(art.ref_q, jump.ref_q, atol=1e-6)
    sess = ort.InferenceSession(art.onnx_bytes, providers=["CPUExecutionProvider"])
    obs = E.realistic_observations(jump, [t.name for t in art.spec.observation], np.random.default_rng(1), n=5)
    y = sess.run(["actions"], {"obs": obs})[0]
    np.testing.assert_allclose(y, np.asarray(N.actor_mean(params, jnp.asarray(obs), cfg, norm)), atol=1e-4)


def test_export_rejects_mismatched_sizes(small, jump, tmp_path):
    cfg, params, norm = small
    with pytest.raises(E.ExportError, match="obs_norm"):
        E.export_policy(params, cfg, {"mean": np.zeros(5), "var": np.ones(5)}, jump, {}, tmp_path)


def test_checkpoint_round_trip_atomic_and_refuses_nan(small, tmp_path):
    cfg, params, norm = small
    from collections import namedtuple
    Norm = namedtuple("Norm", "count mean var")
    obs_norm = Norm(np.float32(10), norm["mean"], norm["var"])
    actor = {"net": params, "log_std": jnp.full(29, -0.5)}
    extra = {"critics": [{"w": np.ones((2, 3))}], "opt": Norm(np.int32(3), np.zeros(2), np.ones(2))}
    p = C.save_checkpoint(tmp_path / "checkpoints" / "latest.npz", actor, obs_norm, 42, {"reward": 1.5},
                          extra=extra, meta={"actor": cfg.to_dict()})
    assert [f.name for f in p.parent.iterdir()] == ["latest.npz"]  # no temp file left behind
    ck = C.load_checkpoint(p)
    assert ck.step == 42 and ck.metrics == {"reward": 1.5} and ck.meta["actor"]["hidden"] == [32, 16]
    for a, b in zip(jax.tree.leaves(ck.net_params), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ck.log_std, np.full(29, -0.5, np.float32))
    np.testing.assert_array_equal(ck.obs_norm["var"], norm["var"])
    assert ck.extra["opt"]["count"] == 3  # NamedTuple -> dict without a template
    ck2 = C.load_checkpoint(p, extra_template=extra)
    assert type(ck2.extra["opt"]) is Norm
    # a diverged state is refused and the good checkpoint stays
    bad = jax.tree.map(lambda x: x * np.nan, actor)
    with pytest.raises(C.CheckpointError, match="non-finite"):
        C.save_checkpoint(p, bad, obs_norm, 43)
    assert C.load_checkpoint(p).step == 42
    assert [f.name for f in p.parent.iterdir()] == ["latest.npz"]


def test_export_run_cli(small, tmp_path, capsys):
    cfg, params, norm = small
    run = tmp_path / "runs" / "hop" / "20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"motion": "hop", "algo": "bcg", "seed": 5,
                                                      "actor": {"hidden": [32, 16]}}))
    C.save_checkpoint(run / "checkpoints" / "latest.npz", {"net": params, "log_std": np.zeros(29)}, norm, 12,
                      {"wall_s": 123.44})
    out = tmp_path / "artifact"
    assert E.main(["--run", str(run), "--out", str(out)]) == 0
    art = A.load_artifact(out)
    prov = art.spec.provenance  # what the training's own export records (train.export.training_provenance)
    assert prov["algorithm"] == "shac+bcg" and prov["seed"] == 5 and prov["preset"] == "custom"
    assert prov["iterations"] == 12 and prov["wall_time_s"] == 123.4 and prov["checkpoint"] == "latest.npz"
    assert prov["run"] == str(run)  # outside the repository: kept as given
    # the untrained baseline of the same run: through onnxruntime, the reference's own next targets
    base = tmp_path / "zero"
    assert E.main(["--run", str(run), "--out", str(base), "--zero-residual"]) == 0
    zero = A.load_artifact(base)
    assert zero.spec.provenance["iterations"] == 0 and "zeroed" in zero.spec.provenance["untrained"]
    import onnxruntime as ort

    obs = np.random.default_rng(4).normal(0, 1, (8, NOBS)).astype(np.float32)
    sess = ort.InferenceSession(str(base / "policy.onnx"))
    a = sess.run(None, {sess.get_inputs()[0].name: obs})[0]
    np.testing.assert_allclose(a * cfg.action_scale, obs[:, cfg.ref_index:cfg.ref_index + 29], atol=1e-6)
    trained = ort.InferenceSession(str(out / "policy.onnx"))
    assert np.abs(trained.run(None, {trained.get_inputs()[0].name: obs})[0] - a).max() > 0.1
    cfg_file = yaml.safe_load((run / "config.yaml").read_text())
    cfg_file["actor"]["residual_on_reference"] = False  # nothing to zero towards: refused
    (run / "config.yaml").write_text(yaml.safe_dump(cfg_file))
    assert E.main(["--run", str(run), "--out", str(tmp_path / "no"), "--zero-residual"]) == 2
    assert "not a residual" in capsys.readouterr().err
    assert E.main(["--run", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_provenance_paths_inside_the_repository_are_relative(tmp_path):
    repo = Path(E.__file__).resolve().parents[1]
    assert E.repo_relative(repo / "runs" / "jump" / "20260101-000000-bcg") == "runs/jump/20260101-000000-bcg"
    assert E.repo_relative(tmp_path / "runs" / "x") == str(tmp_path / "runs" / "x")

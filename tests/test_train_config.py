"""The typed training config root: derived fields set once, overrides re-derived, config.yaml
reloaded exactly by export, the committed (older-layout) run config read by the legacy mapping."""
import dataclasses

import jax
import numpy as np
import onnxruntime as ort
import pytest

from motions import load_motion
from policies import artifact as A
from policies.observation import obs_size, term_specs
from robots import physics as P
from robots import randomization as RR
from train import config as C
from train import export as E
from train import networks as N
from train.checkpoint import save_checkpoint
from train.cli import parse_overrides


@pytest.mark.jax
def test_action_scale_override_reaches_env_actor_and_exported_artifact(tmp_path):
    """`--set env.action_scale=0.5` trains AND exports at 0.5 (it used to export 0.25)."""
    cfg = C.preset("cpu", motion="hop", algo="bcg").with_overrides(
        parse_overrides(["env.action_scale=0.5", "actor.hidden=[16]"]))
    assert cfg.env.action_scale == 0.5 and cfg.actor.action_scale == 0.5
    # the run folder as the trainer writes it, then export's own reader and writer
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    C.save_config(run, cfg)
    assert C.load_config(run) == cfg
    n_obs = obs_size(term_specs(cfg.obs_terms))
    params = N.init_actor(jax.random.PRNGKey(0), n_obs, cfg.actor)
    norm = {"mean": np.zeros(n_obs, np.float32), "var": np.ones(n_obs, np.float32)}
    save_checkpoint(run / "checkpoints" / "latest.npz", {"net": params, "log_std": np.zeros(29)}, norm, 1)
    rp = E.load_run_params(run)
    assert rp.config == cfg and rp.cfg.action_scale == 0.5
    res = E.export_run(run, tmp_path / "artifact")
    art = A.load_artifact(res.path)
    assert art.spec.action_scale == 0.5
    # the graph's residual divides the reference by the same 0.5: zero MLP -> exactly the reference target
    zero = jax.tree.map(np.zeros_like, params)
    spec = E.artifact_spec(cfg.actor, cfg.obs_terms, load_motion("hop"), {})
    assert spec.action_scale == 0.5
    obs = E.realistic_observations(load_motion("hop"), cfg.obs_terms, np.random.default_rng(0), n=4)
    a = np.asarray(N.actor_mean(zero, obs, cfg.actor, norm))
    ref = obs[:, cfg.actor.ref_index:cfg.actor.ref_index + 29]
    np.testing.assert_array_equal(a * np.float32(0.5), ref)
    y = ort.InferenceSession(art.onnx_bytes, providers=["CPUExecutionProvider"]).run(["actions"], {"obs": obs})[0]
    np.testing.assert_allclose(y, np.asarray(N.actor_mean(params, obs, cfg.actor, norm)), atol=1e-4)


def test_derived_fields_cannot_be_set():
    base = C.preset("cpu")
    for item, source in [("actor.action_scale=0.5", "env.action_scale"), ("actor.ref_index=3", "env.obs_terms"),
                         ("bcg.enabled=false", "algo")]:
        with pytest.raises(ValueError, match=f"derived from {source}"):
            base.with_overrides(parse_overrides([item]))
    # a direct construction derives too: the actor follows the env whatever it was given
    odd = dataclasses.replace(base, env=dataclasses.replace(base.env, action_scale=0.5))
    assert odd.actor.action_scale == 0.5
    assert C.preset("cpu", algo="shac").bcg.enabled is False and base.bcg.enabled is True
    with pytest.raises(ValueError, match="multiple of the BCG horizon"):
        base.with_overrides({"shac": {"horizon": 3}})
    with pytest.raises(ValueError, match="num_envs"):
        base.with_overrides({"shac": {"num_envs": 2.5}})


def test_presets_are_instances_with_todays_numbers():
    cpu, gpu = C.PRESETS["cpu"], C.PRESETS["gpu"]
    assert isinstance(cpu, C.TrainConfig) and isinstance(gpu, C.TrainConfig)
    dr = cpu.domain_rand
    assert (dr.friction, dr.mass_scale, dr.kp_scale, dr.kd_scale) == (
        RR.TRAINING_CPU.friction, RR.TRAINING_CPU.mass_scale, RR.TRAINING_CPU.kp_scale, RR.TRAINING_CPU.kd_scale)
    assert dr == C.DR.DomainRandConfig(friction=(0.5, 1.0), mass_scale=(0.93, 1.07), kp_scale=(0.95, 1.05),
                                       kd_scale=(0.95, 1.05), action_latency_prob=0.1, push_vel=0.2)
    assert cpu.env.domain_rand == dr and gpu.domain_rand.friction == RR.TRAINING.friction
    assert cpu.shac.init_log_std == -1.9 and cpu.actor.hidden == (128, 64) and cpu.actor.obs_clip == 5.0
    assert (cpu.shac.num_envs, cpu.shac.horizon, cpu.shac.iterations, cpu.shac.gamma) == (32, 16, 800, 0.95)
    assert not hasattr(cpu.shac, "obs_clip") and not hasattr(cpu.actor, "init_log_std")
    for c in (cpu, gpu):
        assert C.from_dict(c.to_dict()) == c
    # the dr section keeps its CLI name and its long name
    assert cpu.with_overrides(parse_overrides(["dr.friction=[0.3, 0.9]"])).env.domain_rand.friction == (0.3, 0.9)
    assert cpu.with_overrides({"domain_rand": {"push_vel": 0.1}}).env.domain_rand.push_vel == 0.1


def test_committed_run_config_reads_as_the_cpu_preset():
    """policies/g1/hop/training/config.yaml (the older layout) -> exactly today's cpu preset."""
    cfg = C.load_config(A.artifact_dir("hop") / "training")
    assert cfg == C.preset("cpu", motion="hop", algo="bcg", seed=0, stiffness="stiff")
    assert cfg.actor.ref_index == 99 and cfg.actor.action_scale == A.load_artifact(A.artifact_dir("hop")).spec.action_scale
    assert (P.FALL_HEIGHT_M, P.FALL_TILT_RAD) == (0.4, 1.0)  # the legacy file's min_base_height / max_tilt


def test_legacy_mapping_refuses_an_inconsistent_old_run():
    old = {"motion": "hop", "algo": "bcg", "env": {"action_scale": 0.5}, "actor": {"action_scale": 0.25}}
    with pytest.raises(ValueError, match="actor.action_scale"):
        C.from_legacy(old)
    with pytest.raises(ValueError, match="fall criterion"):
        C.from_legacy({"motion": "hop", "env": {"max_tilt": 0.8}})


@pytest.mark.parametrize("motion", ["jump", "dance_calm_settled"])
def test_the_recipe_is_what_trained_the_committed_policy(motion):
    """`make train MOTION=<motion>` with no ARGS runs train/recipes.yaml's flags; the config they give is the
    committed policy's training config (policies/g1/<motion>/training/config.yaml), every field, and its provenance
    names a checkpoint the selection picked within the recipe's iterations."""
    import yaml

    from train.cli import config_of, parse, recipe
    from train.config import load_config

    a, steps = parse(["--motion", motion])
    assert steps == recipe(motion) and steps
    assert config_of(a).to_dict() == load_config(f"policies/g1/{motion}/training").to_dict()
    art = yaml.safe_load(open(f"policies/g1/{motion}/policy.yaml"))
    assert "selected" in art["provenance"] and art["provenance"]["iterations"] <= config_of(a).shac.iterations
    assert art["provenance"]["seed"] == config_of(a).seed


def test_a_flag_after_the_recipe_wins():
    from train.cli import config_of, parse, recipe

    b, _ = parse(["--motion", "jump", "--seed", "7"])
    assert config_of(b).seed == 7
    assert recipe("no_such_motion") == []

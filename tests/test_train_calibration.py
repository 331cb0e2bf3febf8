"""`make train CALIB=...`: the calibration enters the training model, the domain
randomisation centre and the artifact's provenance; bad files are refused before any compile."""
import hashlib

import jax
import numpy as np
import pytest
import yaml

from robots import calibration as C
from robots import g1
from robots.model import TrainModelConfig, build_training_model, motor_dof_adr
from train import calibrated
from train import domain_rand as DR
from train.cli import main as train_main
from train.config import from_dict, preset

SIM = "calibration/sim.yaml"


def _write(tmp_path, edit, name="robot.yaml"):
    d = yaml.safe_load(open(SIM))
    edit(d)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d))
    return p


def _centre(d, **values):
    for k, v in values.items():
        if k == "action_delay_s":
            d["domain_randomization_centre"][k] = v
            d["latency"][k] = v
        else:
            d["domain_randomization_centre"][k] = [v] * g1.NUM_MOTORS


def test_training_model_takes_the_calibrated_joints(tmp_path):
    p = _write(tmp_path, lambda d: _centre(d, armature_scale=1.5, frictionloss_scale=0.6, damping=0.3))
    m0 = build_training_model(TrainModelConfig())
    m1 = calibrated.calibrated_model(build_training_model(TrainModelConfig()), p)
    a = motor_dof_adr(m0)
    np.testing.assert_allclose(m1.dof_armature[a], 1.5 * m0.dof_armature[a], rtol=1e-12)
    np.testing.assert_allclose(m1.dof_frictionloss[a], 0.6 * m0.dof_frictionloss[a], rtol=1e-12)
    np.testing.assert_allclose(m1.dof_damping[a], m0.dof_damping[a] + 0.3, atol=1e-12)  # Nm s/rad added per joint
    free = np.setdiff1d(np.arange(m0.nv), a)
    np.testing.assert_array_equal(m1.dof_armature[free], m0.dof_armature[free])


def test_overrides_centre_kp_and_delay(tmp_path):
    p = _write(tmp_path, lambda d: _centre(d, kp_scale=0.9, action_delay_s=0.010))
    o = calibrated.overrides(p, g1.CONTROL_DT)
    assert o["env"]["calibration"] == str(p)
    assert o["dr"]["kp_centre"] == tuple([0.9] * g1.NUM_MOTORS)
    assert o["dr"]["action_latency_prob"] == pytest.approx(0.5)  # 10 ms / 20 ms: mean randomised delay 10 ms
    # a calibration that measured no delay (lockstep) keeps the preset's latency probability
    assert "action_latency_prob" not in calibrated.overrides(SIM, g1.CONTROL_DT)["dr"]
    cfg = preset("cpu", motion="hop").with_overrides(o)
    assert cfg.env.domain_rand.kp_centre == cfg.domain_rand.kp_centre == tuple([0.9] * g1.NUM_MOTORS)
    assert from_dict(cfg.to_dict()) == cfg  # config.yaml round trip keeps the calibration


@pytest.mark.jax
def test_sampled_kp_is_centred_on_the_calibration():
    centre = tuple(np.linspace(0.8, 1.2, g1.NUM_MOTORS))
    cfg = DR.DomainRandConfig(kp_scale=(0.95, 1.05), kp_centre=centre)
    nom = DR.nominal_params(5, 0.6, 0.01, kp_centre=centre)
    np.testing.assert_allclose(nom.kp_scale, centre, rtol=1e-6)  # randomisation off: the centre itself
    ks = np.stack([DR.sample_params(k, cfg, nom).kp_scale for k in jax.random.split(jax.random.PRNGKey(0), 200)])
    ratio = ks / np.asarray(centre)
    assert ratio.min() >= 0.95 - 1e-6 and ratio.max() <= 1.05 + 1e-6
    np.testing.assert_allclose(ratio.mean(axis=0), 1.0, atol=0.015)
    # without a centre the sampled scales are exactly the uncentred ones (the default path is unchanged)
    plain = DR.sample_params(jax.random.PRNGKey(3), DR.DomainRandConfig(), DR.nominal_params(5, 0.6, 0.01))
    k = jax.random.split(jax.random.PRNGKey(3), 5)[2]
    np.testing.assert_array_equal(plain.kp_scale, jax.random.uniform(k, (g1.NUM_MOTORS,), plain.kp_scale.dtype,
                                                                     *DR.DomainRandConfig().kp_scale))


def test_provenance_records_the_calibration():
    cfg = preset("cpu", motion="hop").with_overrides(calibrated.overrides(SIM, g1.CONTROL_DT))
    prov = calibrated.provenance(cfg)["calibration"]
    assert prov["robot_id"] == "sim" and prov["date"].startswith("2026-11-30")
    assert prov["sha256"] == hashlib.sha256(open(SIM, "rb").read()).hexdigest()
    assert calibrated.provenance(preset("cpu", motion="hop")) == {}


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["domain_randomization_centre"].pop("kp_scale"), "lacks domain_randomization_centre.kp_scale"),
    (lambda d: d["domain_randomization_centre"].__setitem__("armature_scale", [float("nan")] * 29), "armature_scale"),
    (lambda d: d.__setitem__("robot", "h1"), "robot"),
])
def test_bad_calibration_refused_before_compile(tmp_path, capsys, edit, match):
    p = _write(tmp_path, edit)
    assert train_main(["--motion", "hop", "--calibration", str(p), "--iterations", "1"]) == 2
    assert match in capsys.readouterr().err


def test_missing_calibration_file_names_the_fix(capsys):
    assert train_main(["--motion", "hop", "--calibration", "calibration/nope.yaml"]) == 2
    assert "make calibrate" in capsys.readouterr().err


def test_kp_centre_validated():
    with pytest.raises(ValueError, match="kp_centre"):
        DR.DomainRandConfig(kp_centre=(1.0,) * 3)
    with pytest.raises(ValueError, match="probability"):
        DR.DomainRandConfig(action_latency_prob=1.5)


@pytest.mark.jax
def test_exported_artifact_records_the_calibration_and_preflight_accepts_it(tmp_path):
    """A calibrated run folder exported with train.export: provenance.calibration = the file's
    robot id, date and sha256, which deploy's pre-flight matches against the same file."""
    from deploy.preflight import check_calibration
    from policies import artifact as A
    from policies.observation import obs_size, term_specs
    from train import export as E
    from train import networks as N
    from train.checkpoint import save_checkpoint
    from train.config import save_config

    cfg = preset("cpu", motion="hop").with_overrides({**calibrated.overrides(SIM, g1.CONTROL_DT),
                                                       "actor": {"hidden": (8,)}})
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    save_config(run, cfg)
    n_obs = obs_size(term_specs(cfg.obs_terms))
    params = N.init_actor(jax.random.PRNGKey(0), n_obs, cfg.actor)
    norm = {"mean": np.zeros(n_obs, np.float32), "var": np.ones(n_obs, np.float32)}
    save_checkpoint(run / "checkpoints" / "latest.npz", {"net": params, "log_std": np.zeros(29)}, norm, 1)
    art = A.load_artifact(E.export_run(run, tmp_path / "artifact").path)
    prov = art.spec.provenance["calibration"]
    assert prov["robot_id"] == "sim" and prov["sha256"] == hashlib.sha256(open(SIM, "rb").read()).hexdigest()
    calib, warnings = check_calibration(art, SIM)
    assert calib["robot_id"] == "sim" and warnings == []

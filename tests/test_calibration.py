"""Calibration routines on synthetic logs (oracles) and bad input (clear refusals), the YAML store and
its consumers, and the safety of the command path (calibration.session) on the in-process bridge.

The DDS integration test against the sim bridge with hidden perturbations is
tests/test_calibration_dds.py.
"""
import mujoco
import numpy as np
import pytest

from calibration import excitation as ex
from calibration import store
from robots import calibration as calib_file
from calibration.imu import fit_imu
from calibration.joints import check_joints, equilibrium
from calibration.latency import estimate_latency
from calibration.runlog import CalibrationError, RunLog, State
from calibration.sysid import ActuatorParams, FitConfig, ReplayModel, fit_group, joint_params
from robots import g1
from robots.model import BridgeModelConfig, build_bridge_model, build_bridge_spec, motor_dof_adr
from safety.limits import soft_limits

N = g1.NUM_MOTORS


def make_log(n, *, q=None, dq=None, tau=None, quat=None, gyro=None, acc=None, cmd_q=None, ref_tick=None,
             lockstep=True, name="synthetic", **meta):
    ticks = 1000 + 2 * np.arange(n)
    q = np.tile(ex.hang_pose(), (n, 1)) if q is None else q
    states = [State(int(ticks[i]), q[i], np.zeros(N) if dq is None else dq[i], np.zeros(N) if tau is None else tau[i],
                    np.array([1.0, 0, 0, 0]) if quat is None else quat[i], np.zeros(3) if gyro is None else gyro[i],
                    np.array([0, 0, 9.81]) if acc is None else acc[i], 0.0) for i in range(n)]
    cq = q if cmd_q is None else cmd_q
    rt = ticks if ref_tick is None else ref_tick
    cmds = [{"ref_tick": rt[i], "q": cq[i], "kp": g1.KP, "kd": g1.KD, "proposed": cq[i], "tx_time": 0.0}
            for i in range(len(cq))]
    return RunLog.from_rows(name, states, cmds, lockstep=lockstep, **meta)


def quat_x(angle):
    return np.array([np.cos(angle / 2), np.sin(angle / 2), 0.0, 0.0])


# ----------------------------------------------------------------------------- IMU


def imu_log(n=1500, gyro_bias=(0.03, -0.02, 0.025), accel_bias=(0.2, -0.15, 0.1), gyro_noise=0.01, accel_noise=0.05,
            tilt=0.1, seed=0):
    rng = np.random.default_rng(seed)
    # IMU rolled by `tilt` about x: gravity in the IMU frame is (0, g sin, g cos) (hand-computed)
    g_imu = np.array([0.0, 9.81 * np.sin(tilt), 9.81 * np.cos(tilt)])
    quat = np.tile(quat_x(tilt), (n, 1))
    gyro = np.asarray(gyro_bias) + rng.normal(0, gyro_noise, (n, 3))
    acc = g_imu + np.asarray(accel_bias) + rng.normal(0, accel_noise, (n, 3))
    return make_log(n, quat=quat, gyro=gyro, acc=acc)


def test_imu_bias_recovered_from_a_tilted_still_imu():
    imu = fit_imu(imu_log())
    np.testing.assert_allclose(imu.gyro_bias, [0.03, -0.02, 0.025], atol=4 * imu.gyro_bias_std.max() + 1e-4)
    np.testing.assert_allclose(imu.accel_bias, [0.2, -0.15, 0.1], atol=4 * imu.accel_bias_std.max() + 1e-3)
    assert imu.gyro_bias_std.max() < 0.001 and imu.accel_bias_std.max() < 0.005
    np.testing.assert_allclose(imu.gravity_imu, [0, np.sin(0.1), np.cos(0.1)], atol=1e-9)
    # measured gravity direction (with the bias) vs the attitude's: the bias tilts it by ~atan(0.2/9.81)
    assert 0.01 < imu.tilt_misalignment_rad < 0.03


@pytest.mark.parametrize("case, match", [
    ("moving", "not still"), ("short", "too short"), ("noisy", "too noisy"), ("quat", "quaternion"),
    ("not_gravity", "not gravity"),
])
def test_imu_refuses_bad_logs(case, match):
    if case == "moving":
        log = imu_log()
        log.states["gyro"] += 0.3 * np.sin(np.linspace(0, 20, log.n_states))[:, None]
    elif case == "short":
        log = imu_log(n=150)
    elif case == "noisy":
        log = imu_log(n=600, gyro_noise=0.04, accel_noise=0.45)
    elif case == "quat":
        log = imu_log()
        log.states["quat"] *= 1.5
    else:
        log = imu_log()
        log.states["acc"] *= 0.5
    with pytest.raises(CalibrationError, match=match):
        fit_imu(log)


# ----------------------------------------------------------------------------- latency

J_LAT = g1.JOINT_NAMES.index("left_ankle_pitch_joint")


def latency_log(delay_ms=12, n=1000, tau_noise=0.0, n_edges=16, lockstep=True, respond=True, seed=0):
    """Commands every 2 ms from a square wave; a state shows the torque of the newest command sent at
    least `delay_ms` before it (q = dq = 0, so tau = kp * target offset)."""
    pose = ex.hang_pose()
    sq = ex.SquareWave(J_LAT, pose, n_edges=n_edges, seed=seed)
    t = 2e-3 * np.arange(n)
    cmd_q = np.array([sq(ti) for ti in t])
    rng = np.random.default_rng(seed)
    ticks = 1000 + 2 * np.arange(n)
    k = np.searchsorted(ticks, ticks - delay_ms, side="right") - 1
    tau = np.zeros((n, N))
    if respond:
        tau[:, J_LAT] = np.where(k >= 0, g1.KP[J_LAT] * (cmd_q[np.maximum(k, 0), J_LAT] - 0.0), 0.0)
    tau[:, J_LAT] += rng.normal(0, tau_noise, n) if tau_noise else 0.0
    q = np.zeros((n, N))
    return make_log(n, q=q, tau=tau, cmd_q=cmd_q, lockstep=lockstep)


def test_latency_recovered_from_torque_steps():
    lat = estimate_latency(latency_log(12), J_LAT)
    assert lat.latency_s == pytest.approx(0.012) and lat.edges_used == 16
    assert lat.action_delay_s == pytest.approx(0.010)  # lockstep: minus one state period
    rt = estimate_latency(latency_log(8, lockstep=False), J_LAT)
    assert rt.latency_s == pytest.approx(0.008) and rt.action_delay_s == pytest.approx(0.007)  # real time: half a period


@pytest.mark.parametrize("case, match", [
    ("no_response", "no response"), ("noisy", "disagree|only"), ("few_edges", "target steps"), ("short", "too short"),
])
def test_latency_refuses_bad_logs(case, match):
    log = {"no_response": lambda: latency_log(respond=False), "noisy": lambda: latency_log(tau_noise=15.0),
           "few_edges": lambda: latency_log(n_edges=3), "short": lambda: latency_log(n=60)}[case]()
    with pytest.raises(CalibrationError, match=match):
        estimate_latency(log, J_LAT)


# ----------------------------------------------------------------------------- joint offsets


@pytest.fixture(scope="module")
def replay():
    return ReplayModel()


def test_joint_offset_flagged_only_where_the_pose_is_off(replay):
    pose = ex.hang_pose()
    pred = equilibrium(replay, pose, g1.KP)
    # the predicted equilibrium holds: kp (q* - q) = gravity torque (the model's own inverse dynamics)
    m = replay.variant(joint_params({}))
    d = mujoco.MjData(m)
    d.qpos[replay.qadr] = pred
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(g1.KP * (pose - pred), d.qfrc_bias[replay.dadr], atol=1e-6)
    assert abs(pred - pose)[g1.JOINT_NAMES.index("waist_pitch_joint")] > 0.05  # the waist sags visibly
    j = g1.JOINT_NAMES.index("left_elbow_joint")
    rng = np.random.default_rng(0)
    q = pred + rng.normal(0, 2e-4, (600, N))
    q[:, j] += 0.05
    check = check_joints(make_log(600, q=q, cmd_q=np.tile(pose, (600, 1))), pose, replay)
    assert check.flagged == ("left_elbow_joint",)
    assert check.offsets[j] == pytest.approx(0.05, abs=1e-3) and np.count_nonzero(check.offsets) == 1


def test_joint_check_refuses_an_unsettled_robot(replay):
    pose = ex.hang_pose()
    q = np.tile(pose, (600, 1))
    q[:, 3] += 0.02 * np.sin(np.linspace(0, 30, 600))
    with pytest.raises(CalibrationError, match="not settled"):
        check_joints(make_log(600, q=q), pose, replay)


# ----------------------------------------------------------------------------- actuator identification

TRUE = ActuatorParams(armature_scale=1.3, damping=0.3, frictionloss_scale=0.7, kp_scale=0.92)


def simulate_wrists(params=TRUE, seconds=2.5, seed=1):
    """Oracle log: robots/model.py's builder with the parameters baked in (BridgeModelConfig), pelvis
    fixed, contacts off, friction-loss regularisation (dof_invweight0) as the floating bridge model
    compiles it, the drive law every 1 ms step, LowState/LowCmd every 2 ms, wrists excited."""
    cfg = BridgeModelConfig(contact="mjcf", armature_scale=params.armature_scale, extra_joint_damping=params.damping,
                            frictionloss_scale=params.frictionloss_scale)
    spec = build_bridge_spec(cfg)
    for jnt in list(spec.joints):
        if jnt.type == mujoco.mjtJoint.mjJNT_FREE:
            spec.delete(jnt)
    for k in list(spec.keys):
        spec.delete(k)
    spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    m = spec.compile()
    full = build_bridge_model(cfg)
    m.dof_invweight0[:] = full.dof_invweight0[motor_dof_adr(full)]
    d = mujoco.MjData(m)
    exc = ex.group_excitation("wrists", duration=seconds, seed=seed)
    d.qpos[:] = exc.q0
    n = int(seconds / 0.002)
    q, dq, cmd = np.empty((n, N)), np.empty((n, N)), np.empty((n, N))
    for i in range(n):
        cmd[i] = exc(i * 0.002)
        for _ in range(2):
            tau = params.kp_scale * g1.KP * (cmd[i] - d.qpos) - g1.KD * d.qvel
            d.ctrl[:] = np.clip(tau, -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT)
            mujoco.mj_step(m, d)
        q[i], dq[i] = d.qpos, d.qvel
    # state i (after command i acted for 2 ms) has tick 1000 + 2 i; command i was computed at the tick before
    return make_log(n, q=q, dq=dq, cmd_q=cmd, ref_tick=1000 + 2 * np.arange(n) - 2)


def test_actuator_fit_recovers_the_builders_parameters(replay):
    rest = tuple(j for j in range(N) if j not in ex.group_joints("wrists"))  # known: the oracle perturbs every joint
    fit = fit_group(simulate_wrists(), "wrists", action_delay=0.0, replay=replay, others={rest: TRUE})
    for k in ("armature_scale", "damping", "frictionloss_scale", "kp_scale"):
        assert getattr(fit.params, k) == pytest.approx(getattr(TRUE, k), rel=0.005), k
        assert fit.identified[k], k
    assert fit.residual_rms < 1e-4 < fit.residual_rms_nominal


@pytest.mark.parametrize("case, match", [
    ("still", "did not move"), ("one_still", "joints did not move"), ("short", "too short"), ("noisy", "too noisy"),
    ("unexplained", "does not explain"),
])
def test_actuator_fit_refuses_bad_logs(case, match, replay):
    if case in ("noisy", "unexplained"):
        log = simulate_wrists(seconds=2.2)
    else:
        exc = ex.group_excitation("wrists", duration=2.5)
        n = 1250 if case != "short" else 400
        cmd = np.array([exc(i * 0.002) for i in range(n)])
        q = np.tile(exc.q0, (n, 1))
        if case == "one_still":
            q = cmd.copy()
            q[:, 20] = exc.q0[20]
        log = make_log(n, q=q, cmd_q=cmd)
    cfg = FitConfig()
    if case == "noisy":
        log.states["q"] += np.random.default_rng(0).normal(0, 0.01, log.states["q"].shape)
    if case == "unexplained":  # joints move, but not as the commands say (another log's commands)
        log.cmds["q"] = simulate_wrists(seconds=2.2, seed=7).cmds["q"]
        cfg = FitConfig(max_nfev=1)
    with pytest.raises(CalibrationError, match=match):
        fit_group(log, "wrists", replay=replay, cfg=cfg)


# ----------------------------------------------------------------------------- excitation bounds and session safety


@pytest.mark.parametrize("group", sorted(ex.ALL_GROUPS))
def test_excitation_stays_inside_the_soft_limits(group):
    from calibration.routines import Plan, excitation_for

    exc = excitation_for(group, Plan()) if group in ex.GROUPS else ex.group_excitation(group)
    lo, hi = soft_limits()
    qs = np.array([exc(t) for t in np.arange(0, exc.duration, 0.002)])
    assert (qs >= lo - 1e-12).all() and (qs <= hi + 1e-12).all()
    moved = np.abs(qs - exc.q0).max(axis=0)
    assert (moved[list(ex.group_joints(group))] > 0.05).all() and (np.delete(moved, ex.group_joints(group)) == 0).all()


def test_session_clamps_targets_and_aborts_to_damping_on_nan():
    from calibration.robot import InProcessBridge
    from calibration.session import CalibrationAborted, Session

    robot = InProcessBridge()
    s = Session(robot, echo=lambda m: None)
    lo, hi = soft_limits()
    log = s.run("far", lambda t, st: np.full(N, 10.0), 0.05)  # far outside every joint's range
    q = log.cmds["q"]
    assert (q <= hi + 1e-12).all()  # soft limits
    steps = np.abs(np.diff(q, axis=0))
    assert (steps <= s.limits.max_step + 1e-9).all()  # rate limit
    with pytest.raises(CalibrationAborted, match="nonfinite_action"):
        s.run("nan", lambda t, st: np.full(N, np.nan), 0.05)
    cmd = robot.sim.setpoint  # what the bridge applies now
    assert (cmd.kp[:N] == 0).all() and (cmd.kd[:N] == g1.DAMPING_KD).all()
    with pytest.raises(CalibrationAborted):  # latched: nothing but damping from now on
        s.run("after", lambda t, st: ex.hang_pose(), 0.02)


# ----------------------------------------------------------------------------- YAML store and consumers


def sample_calibration():
    fits = {"arms": {"joints": [g1.JOINT_NAMES[j] for j in ex.GROUPS["arms"]],
                     "armature_scale": {"value": 1.5, "std": 0.1, "identified": True},
                     "damping": {"value": 0.4, "std": 0.02, "identified": True},
                     "frictionloss_scale": {"value": 0.6, "std": 0.05, "identified": True},
                     "kp_scale": {"value": 0.95, "std": 0.01, "identified": True}},
            "legs": {"joints": [g1.JOINT_NAMES[j] for j in ex.GROUPS["legs"]],
                     "armature_scale": {"value": 3.0, "std": 2.0, "identified": False},
                     "damping": {"value": 0.2, "std": 0.01, "identified": True},
                     "frictionloss_scale": {"value": 0.8, "std": 0.05, "identified": True},
                     "kp_scale": {"value": 1.02, "std": 0.01, "identified": True}}}
    centre = store.centre_from_fits(fits)
    offsets = np.zeros(N)
    offsets[18] = 0.04
    return {"robot_id": "unit", "imu": {"gyro_bias": [0.01, -0.02, 0.03], "accel_bias": [0.1, 0.2, -0.1]},
            "latency": {"action_delay_s": 0.01}, "joints": {"offsets": offsets}, "actuators": fits,
            "domain_randomization_centre": centre}


def test_yaml_roundtrip_and_consumers(tmp_path):
    path = store.write(sample_calibration(), tmp_path / "unit.yaml")
    calib = calib_file.load(path)
    est = store.estimator_config(calib)
    assert est.gyro_bias == (0.01, -0.02, 0.03) and est.accel_bias == (0.1, 0.2, -0.1)
    from estimation.estimator import EstimatorConfig

    assert EstimatorConfig.from_calibration(calib).gyro_bias == est.gyro_bias  # deploy's own reader agrees
    assert calib_file.joint_offsets(calib)[18] == pytest.approx(0.04)
    c = calib_file.dr_centre(calib)
    assert c["action_delay_s"] == 0.01
    assert c["armature_scale"][0] == 1.0 and c["armature_scale"][15] == 1.5  # unidentified legs: nominal
    assert c["damping"][0] == 0.2 and c["kp_scale"][28] == 0.95 and c["damping"][12] == 0.0  # waist: not fitted


def test_apply_to_model_matches_the_robots_builder():
    calib = {"domain_randomization_centre": {"armature_scale": [1.4] * N, "damping": [0.3] * N,
                                             "frictionloss_scale": [0.5] * N, "kp_scale": [1.0] * N}}
    got = store.apply_to_model(build_bridge_model(), calib)
    want = build_bridge_model(BridgeModelConfig(armature_scale=1.4, extra_joint_damping=0.3, frictionloss_scale=0.5))
    for f in ("dof_armature", "dof_damping", "dof_dampingpoly", "dof_frictionloss"):
        np.testing.assert_allclose(getattr(got, f), getattr(want, f), atol=1e-12, err_msg=f)


@pytest.mark.parametrize("edit, match", [
    (lambda c: c.update(schema_version=99), "schema_version"),
    (lambda c: c.update(robot="h1"), "not g1"),
    (lambda c: c["imu"].update(gyro_bias=[0.1, 0.2]), "gyro_bias must be 3"),
    (lambda c: c["joints"].update(offsets=[0.0] * 5), "offsets must be 29"),
])
def test_bad_calibration_file_is_refused(tmp_path, edit, match):
    import yaml

    path = store.write(sample_calibration(), tmp_path / "c.yaml")
    c = yaml.safe_load(path.read_text())
    edit(c)
    path.write_text(yaml.safe_dump(c))
    with pytest.raises(calib_file.CalibrationFileError, match=match):
        calib_file.load(path)
    with pytest.raises(calib_file.CalibrationFileError, match="does not exist"):
        calib_file.load(tmp_path / "missing.yaml")


def test_cli_refuses_bad_arguments_before_commanding(capsys):
    from calibration import cli

    assert cli.main(["--robot", "sim", "--groups", "tails"]) == cli.EXIT_PREFLIGHT
    assert cli.main(["--robot", "g1"]) == cli.EXIT_PREFLIGHT
    err = capsys.readouterr().err
    assert "unknown joint group" in err and "NET_IF" in err


def test_deploy_refuses_a_bad_calibration_before_starting(tmp_path, capsys):
    from deploy import cli as deploy_cli

    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nrobot: g1_29dof_rev1\nimu: {gyro_bias: [0.1, 0.2]}\n")
    assert deploy_cli.main(["--robot", "sim", "--no-bridge", "--calibration", str(bad)]) == deploy_cli.EXIT_PREFLIGHT
    assert "calibration rejected" in capsys.readouterr().err

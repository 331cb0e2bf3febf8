"""robots.physics against hand-computed values."""
import math

import numpy as np
import pytest

from robots import physics as P
from robots import randomization as R


def test_pd_torque_is_the_drive_law():
    # tau_ff + kp (q* - q) + kd (dq* - dq): 1 + 100 (0.3 - 0.1) + 2 (0.5 - (-1)) = 1 + 20 + 3 = 24
    assert P.pd_torque(0.3, 0.1, -1.0, 100.0, 2.0, dq_target=0.5, tau_ff=1.0) == pytest.approx(24.0)
    tau = P.pd_torque(np.array([1.0, -1.0]), np.zeros(2), np.zeros(2), 100.0, 1.0, tau_max=np.array([50.0, 30.0]))
    np.testing.assert_allclose(tau, [50.0, -30.0])


def test_orientation_helpers():
    a = 0.4
    qx = np.array([math.cos(a / 2), math.sin(a / 2), 0, 0])
    np.testing.assert_allclose(P.projected_gravity(qx), [0, -math.sin(a), -math.cos(a)], atol=1e-12)
    assert P.upright_cos(qx) == pytest.approx(math.cos(a))
    assert P.upright_cos(3 * qx) == pytest.approx(math.cos(a))  # any norm
    assert P.tilt_angle(qx) == pytest.approx(a)
    assert P.tilt_angle([math.cos(a / 2), 0, 0, math.sin(a / 2)]) == pytest.approx(0.0)  # yaw is not tilt
    assert math.isnan(P.tilt_angle([0, 0, 0, 0])) and math.isnan(P.tilt_angle([np.nan, 0, 0, 1]))
    np.testing.assert_allclose(P.quat_to_rpy(qx), [a, 0, 0], atol=1e-12)


def test_fall_criterion():
    up = np.array([1.0, 0, 0, 0])
    tilted = lambda ang: np.array([math.cos(ang / 2), 0, math.sin(ang / 2), 0])  # noqa: E731
    assert not P.fallen(0.78, up)
    assert P.fallen(P.FALL_HEIGHT_M - 1e-3, up)
    assert not P.fallen(0.78, tilted(P.FALL_TILT_RAD - 1e-3))
    assert P.fallen(0.78, tilted(P.FALL_TILT_RAD + 1e-3))
    batch = P.fallen(np.array([0.78, 0.3]), np.stack([up, up]))
    assert batch.tolist() == [False, True]
    # a reference that bends 58 deg and crouches to 0.5 m: bounds 78 deg and 0.25 m, never tighter than the plain ones
    bent = math.radians(58.0)
    assert not P.fallen(0.78, tilted(math.radians(77.9)), ref_tilt=bent)
    assert P.fallen(0.78, tilted(math.radians(78.1)), ref_tilt=bent)
    assert not P.fallen(0.26, up, ref_height=0.5) and P.fallen(0.24, up, ref_height=0.5)
    assert P.fallen(0.78, tilted(P.FALL_TILT_RAD + 1e-3), ref_tilt=0.1)  # an upright reference changes nothing
    assert P.fallen(0.39, up, ref_height=0.78)


def test_randomisation_ranges_are_nested_and_checked():
    for f in ("friction", "mass_scale", "kp_scale", "kd_scale"):
        ev, cpu = getattr(R.EVALUATION, f), getattr(R.TRAINING_CPU, f)
        assert cpu[0] <= ev[0] <= ev[1] <= cpu[1], f  # evaluation inside what the cpu preset trains on
    with pytest.raises(ValueError, match="friction"):
        R.ParamRanges(friction=(1.0, 0.5), mass_scale=(1, 1), kp_scale=(1, 1), kd_scale=(1, 1))

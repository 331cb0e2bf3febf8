"""train.bcg.bundle_trigger by hand: the seed's contact trigger and the pre-contact (foot height) trigger."""
import numpy as np

from train.bcg import BCGConfig, bundle_trigger

SPHERE_FOOT = np.array([0, 0, 0, 0, 1, 1, 1, 1])


def test_contact_trigger_only_by_default():
    force = np.zeros((3, 8))
    force[1, 5] = 2e-3  # env 1: a right sphere carries a tiny impulse
    heights = np.array([[0.01, 0.01], [0.2, 0.0], [0.0, 0.2]])
    stiff, feet = bundle_trigger(force, SPHERE_FOOT, heights, BCGConfig(tau=1e-3))
    assert np.asarray(stiff).tolist() == [False, True, False]
    assert np.asarray(feet).tolist() == [[False, False], [False, True], [False, False]]


def test_pre_contact_trigger_adds_feet_near_the_floor():
    force = np.zeros((3, 8))
    force[1, 5] = 2e-3
    heights = np.array([[0.03, 0.10], [0.2, 0.0], [0.05, 0.2]])
    stiff, feet = bundle_trigger(force, SPHERE_FOOT, heights, BCGConfig(tau=1e-3, trigger_height=0.04))
    assert np.asarray(stiff).tolist() == [True, True, False]  # env 0's left foot is 3 cm up; env 2's lowest is 5 cm
    assert np.asarray(feet).tolist() == [[True, False], [False, True], [False, False]]

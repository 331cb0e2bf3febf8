"""Projected gravity (gravity in the pelvis frame from a w, x, y, z quaternion) has one reference,
robots.physics.projected_gravity (numpy; the training env runs the same function on jax arrays). The
per-tick variants are checked against it on random quaternions: policies.observation's Python scalar
form and its compiled twin in policies.mlp_kernel bit for bit, the tilt forms (robots.physics.upright_cos,
tilt_angle) to rounding."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import mlp_kernel
from policies.observation import projected_gravity_scalar
from robots.physics import projected_gravity, tilt_angle, upright_cos

component = st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False)
quaternions = st.tuples(component, component, component, component)


def _unit(q):
    q = np.asarray(q, float)
    return q / np.linalg.norm(q)


@settings(max_examples=300, deadline=None)
@given(quaternions)
def test_scalar_and_compiled_forms_are_bit_identical_to_the_reference(q):
    want = projected_gravity(np.asarray(q, float))
    assert np.array(projected_gravity_scalar(*q)).tobytes() == want.tobytes()
    assert np.array(mlp_kernel.projected_gravity(*q)).tobytes() == want.tobytes()


@settings(max_examples=300, deadline=None)
@given(quaternions.filter(lambda q: sum(v * v for v in q) > 1e-6))
def test_tilt_forms_are_the_reference_z_component(q):
    gz = projected_gravity(_unit(q))[2]
    assert math.isclose(upright_cos(np.asarray(q, float)), -gz, abs_tol=1e-12)  # any norm
    assert math.isclose(tilt_angle(q), math.acos(min(1.0, max(-1.0, -gz))), abs_tol=1e-6)


def test_reference_on_hand_computed_rotations():
    a = 0.3
    pitch = [math.cos(a / 2), 0.0, math.sin(a / 2), 0.0]  # nose down by a about y: gravity gains +x
    np.testing.assert_allclose(projected_gravity(np.array(pitch)), [math.sin(a), 0.0, -math.cos(a)], atol=1e-12)
    np.testing.assert_allclose(projected_gravity(np.array([1.0, 0, 0, 0])), [0, 0, -1], atol=0)

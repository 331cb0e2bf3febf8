"""bench.gradients_touchdown's summaries, by hand (no JAX program is compiled)."""
import numpy as np
import pytest

from bench.gradients_touchdown import _local_cell, batch_var, local_summary


def test_local_summary_hand_values():
    # one seed, 2 envs x 2 copies: env 0's copies differ by +-1 in one component (sample variance 2), env 1's agree
    g = np.zeros((2, 2, 29))
    g[0, 0, 3], g[0, 1, 3] = 1.0, -1.0
    out = local_summary([g], seed_var=4.0, branches=8)
    assert out["copies"] == 2
    assert out["local_var"] == pytest.approx(1.0)  # mean over envs of (2 + 0)
    assert out["local_share"] == pytest.approx(0.25)
    assert out["bound_seed_var"] == pytest.approx(1 - 0.875 * 0.25)
    assert _local_cell(out) == "0.250 (0.78)"
    assert _local_cell(None) == "-"


def test_local_summary_means_over_seeds():
    a = np.zeros((1, 3, 29))
    a[0, :, 0] = [0.0, 1.0, 2.0]  # sample variance 1
    b = np.zeros((1, 3, 29))
    b[0, :, 0] = [0.0, 3.0, 6.0]  # sample variance 9
    out = local_summary([a, b], seed_var=10.0, branches=2)
    assert out["local_var"] == pytest.approx(5.0)
    assert out["bound_seed_var"] == pytest.approx(1 - 0.5 * 0.5)
    lo, hi = out["local_var_ci90"]
    assert 1.0 <= lo <= hi <= 9.0


def test_batch_var_is_trace_of_the_covariance():
    G = np.array([[1.0, 0.0], [3.0, 2.0]])  # per component sample variance 2 and 2
    assert batch_var(G) == pytest.approx(4.0)


def test_flight_window_of_a_reference():
    from types import SimpleNamespace

    from bench.gradients_jump import flight_window

    feet = np.zeros((10, 2))
    feet[3:6, 0] = 0.05  # left foot up at frames 3-5
    feet[4:7, 1] = 0.05  # right foot up at frames 4-6: both off the floor at 4 and 5
    assert flight_window(SimpleNamespace(name="m", ref_foot_height=feet)) == (4, 5)
    with pytest.raises(ValueError, match="no frame with both feet off"):
        flight_window(SimpleNamespace(name="m", ref_foot_height=np.zeros((10, 2))))

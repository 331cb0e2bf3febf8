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


def test_mean_and_se_by_hand():
    from bench.gradients_touchdown import mean_and_se

    g = np.zeros((4, 29))
    g[:, 0] = [1.0, 3.0, 1.0, 3.0]  # mean 2, sample variance 4/3
    mean, se = mean_and_se(g)
    assert mean[0] == pytest.approx(2.0) and np.all(mean[1:] == 0)
    assert se == pytest.approx(np.sqrt((4 / 3) / 4))


def test_against_reference_by_hand():
    from bench.gradients_touchdown import against_reference

    ref = (np.array([3.0, 4.0] + [0.0] * 27), 0.3)  # |ref| = 5
    est = (np.array([3.0, 4.0 + 1.0] + [0.0] * 27), 0.4)
    out = against_reference(est, ref)
    assert out["rel_diff_vs_plain"] == pytest.approx(0.2)
    assert out["noise_rel"] == pytest.approx(0.5 / 5)  # hypot(0.3, 0.4) = 0.5
    assert out["cos_vs_plain"] == pytest.approx((9 + 20) / (5 * np.hypot(3, 5)))


def test_paired_ratio_interval_holds_an_exact_ratio():
    from bench.gradients_touchdown import _boot_ratio

    rng = np.random.default_rng(3)
    b = rng.normal(size=(12, 29))
    lo, hi = _boot_ratio(0.5 * b, b, batch_var)  # every resample has the ratio 0.25 exactly
    assert lo == pytest.approx(0.25) and hi == pytest.approx(0.25)


def test_contacts_and_shown_rows():
    from bench.gradients_touchdown import (contact_label, env_config, kappa_label, ratio_cell,
                                           render_gradients_touchdown_table, shown_rows)

    assert (env_config("penalty").contact, env_config("penalty").substeps) == ("sigmoid", 6)  # 300 Hz
    assert env_config("mjx").contact == "mjx"
    assert (env_config("mixed").contact, env_config("mixed").impulse_mode) == ("impulse", "mixed")
    with pytest.raises(ValueError, match="one of soft, mixed, hard, mjx, penalty"):
        env_config("spring")
    est = {"seed_var": 1.0, "seed_var_ci90": [0.9, 1.1], "batch_var": 0.5, "batch_var_ci90": [0.4, 0.6],
           "bundled": 0.5, "touchdown_step": 1.0, "rel_diff_vs_plain": 0.1}

    def row(mode, envs, seeds, plain_var):
        return {"mode": mode, "kappa": 300.0, "horizon": 8, "envs": envs, "seeds": seeds,
                "plain": {**est, "seed_var": plain_var}, "bcg_seed": est, "bcg_ours": est}

    rows = shown_rows({"rows": [row("mjx", 64, 12, 2.0), row("soft", 16, 6, 4.0), row("soft", 64, 12, 2.0)]})
    assert [(r["mode"], r["envs"]) for r in rows] == [("soft", 64), ("mjx", 64)]  # the larger sample, contact order
    assert contact_label(rows[0]) == "impulse soft" and contact_label(rows[1]) == "MJX"
    assert kappa_label(rows[0]) == "300" and kappa_label(rows[1]) == "-"
    table = render_gradients_touchdown_table({"rows": rows})
    assert "| impulse soft | 300 | 8 | 64 x 12 |" in table and "| 0.50 (0.45-0.55) |" in table  # 1.0 / 2.0, CI over 2.0
    assert ratio_cell({"batch_var": 1.0}, est, "batch_var") == "0.50"  # no paired interval: the ratio alone
    paired = {**est, "ratio_seed_var_ci90": [0.4, 0.6]}
    assert ratio_cell({"seed_var": 2.0}, paired, "seed_var") == "0.50 (0.40-0.60)"


def test_a_larger_sample_keeps_the_smaller_ones_local_measure():
    from bench.gradients_touchdown import render_gradients_touchdown_table, shown_rows

    est = {"seed_var": 1.0, "seed_var_ci90": [0.9, 1.1], "batch_var": 0.5, "batch_var_ci90": [0.4, 0.6],
           "bundled": 0.5, "touchdown_step": 1.0, "rel_diff_vs_plain": 0.1}
    base = {"mode": "hard", "kappa": 300.0, "horizon": 8, "plain": est, "bcg_seed": est, "bcg_ours": est}
    small = {**base, "envs": 16, "seeds": 6, "local": {"local_share": 0.5, "bound_seed_var": 0.56}}
    big = {**base, "envs": 64, "seeds": 12}
    (row,) = shown_rows({"rows": [small, big]})
    assert row["envs"] == 64 and row["local"] == small["local"] and row["extras_from"] == "16 x 6"
    assert "| 0.500 (0.56) [16 x 6] |" in render_gradients_touchdown_table({"rows": [small, big]})


def test_held_nominal_cell_by_hand():
    from bench.gradients_touchdown import render_gradients_touchdown_table

    est = {"seed_var": 1.0, "seed_var_ci90": [0.9, 1.1], "batch_var": 0.5, "batch_var_ci90": [0.4, 0.6],
           "bundled": 0.5, "touchdown_step": 1.0, "rel_diff_vs_plain": 0.1}
    held = {**est, "seed_var": 0.5, "ratio_seed_var_ci90": [0.4, 0.7], "batch_var": 1.0,
            "ratio_batch_var_ci90": [1.5, 2.5], "rel_diff_vs_plain": 0.05, "noise_rel": 0.02}
    row = {"mode": "soft", "kappa": 300.0, "horizon": 32, "envs": 32, "seeds": 24, "plain": est, "bcg_seed": est,
           "bcg_ours": est, "bcg_seed_held": held}
    # seed var 0.5 / 1.0, batch var 1.0 / 0.5, bias 5 % against 2 % of noise
    assert render_gradients_touchdown_table({"rows": [row]}).endswith(
        "| - | 0.50 (0.40-0.70); 2.00 (1.50-2.50); 0.050 (0.020) |")


def test_bundle_drift_table_by_hand():
    from bench.bundle_drift import render_bundle_drift_table

    row = {"mode": "soft", "kappa": 300.0, "horizon": 32, "envs": 32, "seeds": 4, "bundled": 0.72,
           "obs_deviation_mean": {"1": 0.0, "32": 1.25}, "return_difference_std": 0.5}
    table = render_bundle_drift_table({"rows": [row, {**row, "mode": "mjx"}]})
    assert "| impulse soft | 300 | 32 | 32 x 4 | 0.72 | 0 | 1.25 | 0.5 |" in table
    assert "| MJX | - | 32 |" in table and table.count("\n") == 3

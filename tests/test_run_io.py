"""Run-folder files: the tracking sampler's per-bin failure counts (sampler.csv) round-trip through the CSV with
their bin names, a second writer (a resumed run) appends under the same header, and sampler.png is drawn."""
from __future__ import annotations

import numpy as np
from PIL import Image

from train import run_io


def test_sampler_csv_round_trip_and_plot(tmp_path):
    path = tmp_path / "sampler.csv"
    run_io.append_sampler(path, 25, np.array([0.0, 0.002, 0.0105]), bin_s=1.0)
    run_io.append_sampler(path, 50, np.array([[0.001, 0.0, 0.02]]), bin_s=1.0)  # (1, bins) as an env batch row
    run_io.append_sampler(path, 75, np.array([0.5, 0.25, 0.125]), bin_s=1.0)
    data = run_io.MetricsLog(path).read()
    assert list(data) == ["iteration", "fail_0s", "fail_1s", "fail_2s"]
    np.testing.assert_array_equal(data["iteration"], [25, 50, 75])
    np.testing.assert_allclose(data["fail_2s"], [0.0105, 0.02, 0.125])
    np.testing.assert_allclose(data["fail_0s"], [0.0, 0.001, 0.5])
    assert path.read_text().splitlines()[0] == "iteration,fail_0s,fail_1s,fail_2s"
    half = tmp_path / "half.csv"
    run_io.append_sampler(half, 1, np.zeros(2), bin_s=0.5)
    assert run_io.MetricsLog(half).fields == ["iteration", "fail_0s", "fail_0.5s"]
    png = run_io.plot_sampler(path, tmp_path / "sampler.png")
    with Image.open(png) as im:
        assert im.size[0] > 300 and im.size[1] > 150
        px = np.asarray(im.convert("L"), float)
    assert px.std() > 10  # drawn, not blank

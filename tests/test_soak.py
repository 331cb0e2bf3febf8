"""A 2-minute soak (`make soak MINUTES=2`): the deploy CLI against the sim bridge in real time, a scripted
remote running the stand motion again and again, pushes every 15 s. Memory after warm-up stays flat
(< 10 MB growth; the in-memory log of before grew ~1 MB/s = 90 MB here), deadline misses do not grow from
the first minute to the second, the streamed log lost nothing."""
import json

import pytest

from deploy import soak
from robots import g1

pytestmark = pytest.mark.dds


def test_per_minute_hand_values():
    import numpy as np

    t = np.array([0.0, 0.002, 0.004, 60.0, 60.003])
    sent = t.copy()
    late = np.array([0.0, 0.003, 0.0, 0.0, 0.0025])  # two woke > 1 period (2 ms) late
    pm = soak.per_minute(t, sent, late)
    assert [m["ticks"] for m in pm] == [3, 2] and [m["deadline_misses"] for m in pm] == [1, 1]
    # send intervals 2, 2, (59.996), 3 ms -> errors 0, 0, ..., 0.5 of the period
    assert pm[0]["stream_period_error_p50"] == 0.0 and abs(pm[1]["stream_period_error_p99"] - 0.5) < 1e-9
    assert soak.rss_growth([(0, 100.0), (30, 120.0), (60, 125.0), (90, 121.0)], 30) == 5.0


def test_two_minute_soak(tmp_path):
    s = soak.run(2.0, domain=64, out_root=tmp_path, echo=print)
    assert json.loads(open(s["path"]).read())["per_minute"] == s["per_minute"]
    assert s["operator_error"] is None and s["exit_code"] == 0, s
    assert s["final_state"] != "DAMPING" and s["safety_events"] == [], s["safety_events"]
    assert s["motions"] >= 15 and s["pushes"] >= 7  # 6 s per cycle (4 s stand + 2 s HOLD), a push every 15 s
    assert s["log_dropped_chunks"] == 0 and s["log_bytes"] > 0
    full = [m for m in s["per_minute"] if m["complete"]]
    assert len(full) == 2 and all(m["ticks"] > 0.9 * 60 / g1.COMMAND_DT for m in full)
    assert full[1]["deadline_misses"] <= full[0]["deadline_misses"] + 10, full  # no growing misses
    assert s["rss_growth_after_warmup_mb"] < 10.0, s["rss_mb"]
    print(f"soak 2 min: RSS {s['rss_start_mb']:.1f} -> {s['rss_end_mb']:.1f} MB (growth after warm-up "
          f"{s['rss_growth_after_warmup_mb']:.2f} MB), misses per minute {[m['deadline_misses'] for m in full]}, "
          f"period error p99 per minute {[round(m['stream_period_error_p99'], 3) for m in full]}, "
          f"log {s['log_bytes'] / 1e6:.1f} MB")

"""bench.host_stalls: the overlap rule by hand, and a real 1-s probe on every core."""
from bench import host_stalls


def test_coincident_hand_values():
    a = [[1.000, 0.050], [2.000, 0.020], [3.000, 0.010]]
    b = [[1.030, 0.080], [2.024, 0.010], [5.0, 0.1]]
    # [1.00, 1.05] overlaps [1.03, 1.11]; [2.00, 2.02] ends 4 ms before [2.024, ...] (inside the 5 ms slack);
    # [3.00, 3.01] meets nothing
    assert host_stalls.coincident(a, b) == 2
    assert host_stalls.coincident(a, b, slack_s=0.0) == 1
    assert host_stalls.coincident([], b) == 0 and host_stalls.coincident(a, []) == 0


def test_probe_runs_on_every_core():
    m = host_stalls.measure(1.0)
    assert len(m["per_core"]) == len(m["cores"]) >= 1
    # 1 ms sleeps for 1 s: never more than 1000 wake-ups; how many fewer is the host's (what `make bench` reports)
    assert all(0 < c["wakeups"] <= 1000 for c in m["per_core"]), m["per_core"]
    assert [r["over_ms"] for r in m["by_length"]] == [10, 40, 100]
    for r in m["by_length"]:
        assert len(r["stalls_per_core"]) == len(m["cores"])
        assert "on_every_core" not in r or r["on_every_core"] <= r["stalls_per_core"][0]

"""deploy.log's streamed MCAP log: exact round trip (hand values, chunk boundaries, NaN for missing
fields, events), the CDR bytes Foxglove decodes (built by hand from the ROS 2 CDR rules), a stalled disk
never blocking the appender (dropped chunks counted), memory bounded over a long synthetic run, and a real
deploy run killed with SIGKILL leaving a readable log up to its last chunk."""
import os
import signal
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from comm.sim_process import launch_bridge_process
from deploy.cli import BRIDGE_PRIORITY
from deploy.log import (CDR_HEADER, QUEUE_CHUNKS, StreamLog, fields_from_ros2msg, policy_fields, read_log,
                        ros2msg, row_dtype, tick_fields)
from deploy.realtime import boost_process
from deploy.state_machine import STATES
from tests.test_deploy_support import sim_args, start_cli, wait_until

FIELDS = {"t": (), "a": (), "v": (3,)}


def _log(path, rows=4, queue_chunks=QUEUE_CHUNKS):
    return StreamLog(path, {"tick": FIELDS}, {"tick": rows}, queue_chunks=queue_chunks)


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def test_round_trip_exact_across_chunks_with_missing_fields_and_events(tmp_path):
    log = _log(tmp_path / "log.mcap", rows=4)
    cols = log.columns("tick")
    for i in range(10):  # 2 full chunks of 4 + a partial one of 2 (flushed by close)
        cols.append(t=0.002 * i, a=None if i == 5 else i * 1.5, v=np.array([i, -i, 0.25]))
    log.event({"time": 0.004, "kind": "state", "detail": "PASSIVE -> STAND_UP"})
    log.close()
    d = read_log(tmp_path / "log.mcap")
    assert not d["truncated"] and d["rows"] == {"tick": 10} and cols.n == 10 and log.dropped_chunks == 0
    np.testing.assert_array_equal(d["t"], 0.002 * np.arange(10))
    assert np.isnan(d["a"][5]) and d["a"][4] == 6.0 and d["a"][9] == 13.5
    np.testing.assert_array_equal(d["v"][7], [7, -7, 0.25])
    assert d["events"] == [{"time": 0.004, "kind": "state", "detail": "PASSIVE -> STAND_UP"}]
    # every 3rd row, counted across chunk boundaries (the plot of a long run)
    np.testing.assert_array_equal(read_log(tmp_path, {"tick": ["t"]}, stride=3)["t"], 0.002 * np.arange(0, 10, 3))


def test_messages_are_ros2_cdr_as_written_by_hand(tmp_path):
    """The bytes Foxglove decodes with the `ros2msg` schema: the CDR little-endian encapsulation header
    00 01 00 00, then the float64 fields in order (8-aligned after the header, fixed arrays without a
    length prefix)."""
    assert ros2msg(FIELDS) == "float64 t\nfloat64 a\nfloat64[3] v\n"
    assert fields_from_ros2msg(ros2msg(tick_fields())) == tick_fields()
    rec = np.zeros(1, row_dtype(FIELDS))
    rec["_cdr"], rec["t"], rec["a"], rec["v"] = np.void(CDR_HEADER), 0.5, -2.0, [1, 2, 3]
    assert rec.tobytes() == b"\x00\x01\x00\x00" + struct.pack("<5d", 0.5, -2.0, 1, 2, 3)
    from mcap.reader import make_reader  # the library's own reader: schema, channel, message bytes

    log = _log(tmp_path / "log.mcap", rows=2)
    log.columns("tick").append(t=0.5, a=-2.0, v=[1, 2, 3])
    log.close()
    with open(tmp_path / "log.mcap", "rb") as f:
        (schema, channel, msg), = list(make_reader(f).iter_messages())
    assert (schema.encoding, channel.message_encoding, channel.topic) == ("ros2msg", "cdr", "/deploy/tick")
    assert msg.data == rec.tobytes()


def test_stalled_disk_never_blocks_the_appender(tmp_path):
    """The file is a FIFO nobody reads: the writer thread blocks in write() once the pipe is full. The
    appender keeps going; chunks beyond the queue are dropped and counted, never waited for."""
    fifo = tmp_path / "stuck.mcap"
    os.mkfifo(fifo)
    rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader exists (open for write succeeds), never reads
    log = _log(fifo, rows=500, queue_chunks=2)
    try:
        cols = log.columns("tick")
        noise = np.random.default_rng(0).normal(size=(20000, 4))  # incompressible: 20 kB per zstd chunk
        done = threading.Event()

        def appender():
            for i in range(500 * 40):  # 40 chunks: far beyond the 64 kB pipe + the 2 queued chunks
                cols.append(t=i * 0.002, a=noise[i, 0], v=noise[i, 1:])
            done.set()

        th = threading.Thread(target=appender, daemon=True)
        th.start()
        assert done.wait(60), "the appender blocked on a stalled disk"
        assert cols.n == 20000
        assert 30 <= log.dropped_chunks <= 40 - 2, log.dropped_chunks  # at most queue + writer + pipe got through
    finally:
        os.set_blocking(rd, True)
        drain = threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(rd, 1 << 16), b"")], daemon=True)
        drain.start()
        log.close()
        drain.join(10)
        os.close(rd)


def test_memory_bounded_over_a_long_synthetic_run(tmp_path):
    """400 s of 500 Hz tick rows (the deploy loop's real row layout) as fast as they can be appended: RSS
    after warm-up does not grow (the old in-memory log grew ~1 MB per second of run)."""
    fields = tick_fields()
    log = StreamLog(tmp_path / "log.mcap", {"tick": fields, "policy": policy_fields(189)}, {"tick": 500, "policy": 50})
    cols, pol = log.columns("tick"), log.columns("policy")
    row = {k: (np.full(s, 0.5) if s else 0.5) for k, s in fields.items()}
    obs = np.zeros(189)
    n, warm = 200_000, 20_000
    rss0 = None
    for i in range(n):
        row["t"] = row["sent"] = i * 0.002
        cols.append(**row)
        if i % 10 == 0:
            pol.append(t=i * 0.002, step=i // 10, obs=obs, action=row["q"], compute_ms=0.4)
        if i % 2000 == 0:
            time.sleep(0.002)  # let the writer run now and then
        if i == warm:
            rss0 = _rss_kb()
    growth_mb = (_rss_kb() - rss0) / 1024
    log.close()
    print(f"synthetic {n} rows: RSS growth after warm-up {growth_mb:.1f} MB, chunks written {log.written_chunks}, "
          f"dropped {log.dropped_chunks}, file {log.bytes_written() / 1e6:.1f} MB")
    assert growth_mb < 5.0  # the in-memory log: 200k rows x 1.85 kB = 370 MB
    d = read_log(tmp_path / "log.mcap", {"tick": ["t"]})
    assert d["rows"]["tick"] + 500 * log.dropped_chunks_by("tick") == n  # every row written or counted dropped


@pytest.fixture()
def bridge(fresh_domain):
    with launch_bridge_process(["--gt-decimation", "5"], domain=fresh_domain) as b:
        boost_process(b.proc.pid, BRIDGE_PRIORITY)
        yield b


@pytest.mark.dds
@pytest.mark.realtime
def test_sigkilled_deploy_run_leaves_a_readable_log(bridge, tmp_path):
    proc = start_cli(*sim_args(bridge.domain, tmp_path))

    def logged_rows():
        runs = list(tmp_path.glob("*/log.mcap"))
        return read_log(runs[0], {"tick": ["t"]})["rows"].get("tick", 0) if runs else 0

    seen = wait_until(lambda: (lambda n: n >= 2500 and n)(logged_rows()), 60, "5 s of logged ticks", poll=0.2, proc=proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    (run_dir,) = [p.parent for p in tmp_path.glob("*/log.mcap")]
    assert not (run_dir / "summary.json").exists()  # it really died mid-run
    d = read_log(run_dir)
    assert d["truncated"]  # no footer: the file ends with the last complete chunk (or a torn one)
    n = len(d["t"])
    assert n >= seen and n % 500 == 0  # whole 1 s chunks, at least as many as were readable before the kill
    dt = np.diff(d["sent"])
    assert np.all(dt > 0) and abs(np.median(dt) - 0.002) < 2e-4  # consecutive 2 ms ticks
    assert np.all(np.diff(d["tick"][d["new"] > 0]) > 0)  # LowState ticks in order
    states = [STATES[int(s)] for s in d["state"]]
    assert states[0] == "PASSIVE" and "STAND_UP" in states and "DAMPING" not in states
    assert d["q"].shape == (n, 29) and np.all(np.isfinite(d["q"]))
    assert [e["kind"] for e in d["events"]][:1] == ["start"]

"""Per-tick log of the deploy loop, streamed to disk as MCAP (log.mcap); summary.json helpers; plot.

Written under runs/deploy/<stamp>/:
  log.mcap      channel /deploy/tick (one message per 2 ms command tick), /deploy/policy (one per policy
                step), /deploy/events (JSON); schemas `ros2msg` + `cdr` messages, so Foxglove plots every field
  events.json   every event: state transitions, safety trips, deadline misses, notes
  summary.json  the stable keys listed in docs/deploy.md (final_state, states_visited, ticks, ...)
  joints.png    measured vs commanded joints, kp, state over time

Streaming (`StreamLog`): the control thread appends a row into a preallocated chunk buffer (CHUNK_S of
rows, a numpy structured array laid out exactly as the CDR message: 4-byte encapsulation header + float64
fields); a full chunk goes to a bounded queue (put_nowait: when the queue is full the chunk is dropped and
counted, the control thread never blocks) and a writer thread turns it into one MCAP chunk (zstd;
deploy/mcap_file.py, vectorised so that it holds the GIL for well under a millisecond), flushed to the file, so a run killed with SIGKILL leaves every chunk written before it readable (`read_log`
stops at the torn tail). Buffers are recycled through a fixed pool: memory does not grow with the run.

Why MCAP and not rerun: the `mcap` writer is pure Python (24 kB wheel; with its lz4 and zstandard wheels
6.8 MB) where rerun-sdk 0.41 is a 170 MB wheel (x86_64, measured with pip download) bundling a viewer the
robot does not need; MCAP is a chunked container whose torn tail loses only the last chunk; Foxglove, the
`mcap` CLI and ROS 2 tooling read it.
"""
from __future__ import annotations

import json
import queue
import struct
import threading
import time
from pathlib import Path

import numpy as np

from robots import g1
from robots.physics import upright_cos
from robots.run_files import json_default, stamped_dir

RUNS_DIR = Path(__file__).resolve().parent.parent / "runs" / "deploy"
LOG_FILE = "log.mcap"
CHUNK_S = 1.0  # seconds of rows per chunk (per channel): what a SIGKILL can lose at most
QUEUE_CHUNKS = 8  # chunks waiting for the writer before new ones are dropped (and counted)
CDR_HEADER = b"\x00\x01\x00\x00"  # CDR, little endian: the encapsulation header of every message
TOPICS = {"tick": "/deploy/tick", "policy": "/deploy/policy", "events": "/deploy/events"}
PREFIX = {"tick": "", "policy": "pol_"}  # read_log's key prefix per channel (as log.npz had)
EVENT_SCHEMA = {"type": "object", "properties": {"time": {"type": "number"}, "kind": {"type": "string"},
                                                 "detail": {"type": "string"}}}


def new_run_dir(root: Path | str | None = None) -> Path:
    return stamped_dir(root if root is not None else RUNS_DIR, precise=True)


class Columns:
    """Append rows of fixed-shape fields into preallocated arrays (amortised O(1), no per-tick allocation
    beyond the copy into the slot)."""

    def __init__(self, fields: dict[str, tuple], capacity: int = 4096) -> None:
        self.fields = fields
        self.n = 0
        self.cap = capacity
        self.data = {k: np.full((capacity, *shape), np.nan, dtype=np.float64) for k, shape in fields.items()}

    def append(self, **row) -> None:
        if self.n == self.cap:
            self.cap *= 2
            for k, a in self.data.items():
                b = np.full((self.cap, *a.shape[1:]), np.nan, dtype=a.dtype)
                b[: self.n] = a[: self.n]
                self.data[k] = b
        i = self.n
        for k, v in row.items():
            if v is not None:
                self.data[k][i] = v
        self.n += 1

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        return {prefix + k: a[: self.n] for k, a in self.data.items()}

    def __getitem__(self, k: str) -> np.ndarray:
        return self.data[k][: self.n]


def tick_fields() -> dict:
    """The command-tick columns (one row per 2 ms tick) and their per-row shapes."""
    n = g1.NUM_MOTORS
    return dict(t=(), lateness=(), work_ms=(), tick_ms=(), sent=(), state=(), tick=(), rx_age=(), new=(), buttons=(),
                q=(n,), dq=(n,), quat=(4,), gyro=(3,), acc=(3,), tau_est=(n,), proposed=(n,), cmd_q=(n,),
                cmd_kp=(n,), cmd_kd=(n,), est_vel=(3,), est_height=(), est_contact=(2,), est_flags=())


def policy_fields(n_obs: int) -> dict:
    """The policy-tick columns (one row per policy step, prefix `pol_` in log.npz)."""
    n = g1.NUM_MOTORS
    return dict(t=(), step=(), phase=(), obs=(n_obs,), action=(n,), target=(n,), cmd_q=(n,), est_ms=(),
                policy_ms=(), safety_ms=(), compute_ms=(), compute_cpu_ms=())


def row_dtype(fields: dict) -> np.dtype:
    """One message's bytes as a numpy record: the CDR header, then every field as little-endian float64
    (all 8-byte aligned after the header, so the record *is* the CDR encoding of `ros2msg(fields)`)."""
    formats = ["V4"] + [("<f8", s) if s else "<f8" for s in fields.values()]
    return np.dtype({"names": ["_cdr", *fields], "formats": formats})


def ros2msg(fields: dict) -> str:
    """The ROS 2 message definition of a channel (Foxglove decodes the CDR messages with it)."""
    for k, s in fields.items():
        if len(s) > 1:
            raise ValueError(f"log field {k}: only scalars and 1-D arrays are supported, got shape {s}")
    return "".join(f"float64{f'[{s[0]}]' if s else ''} {k}\n" for k, s in fields.items())


class LogFormatError(Exception):
    """A log.mcap this reader cannot decode (not a torn tail: that is `truncated`)."""


def fields_from_ros2msg(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        typ, name = line.split()
        if not typ.startswith("float64"):
            raise LogFormatError(f"log schema: unsupported field type {typ!r} (this reader knows float64 fields)")
        size = typ[len("float64"):]
        out[name] = (int(size[1:-1]),) if size else ()
    return out


def _blank(dtype: np.dtype, rows: int) -> np.ndarray:
    a = np.zeros(rows, dtype)
    for k in dtype.names[1:]:
        a[k] = np.nan
    a["_cdr"] = np.void(CDR_HEADER)
    return a


class StreamColumns:
    """`Columns.append` on a StreamLog channel: rows go into a pooled chunk buffer; a full one goes to the
    writer (never blocking). `n` counts every row appended in the run."""

    def __init__(self, log: "StreamLog", channel: str, fields: dict, rows: int) -> None:
        self.log, self.channel, self.fields, self.rows = log, channel, fields, rows
        self.n = 0
        self._take()

    def _take(self) -> None:
        self._buf, self._views = self.log._pool[self.channel].get_nowait()
        self._i = 0

    def append(self, **row) -> None:
        i, views = self._i, self._views
        for k, v in row.items():
            if v is not None:
                views[k][i] = v
        self._i = i + 1
        self.n += 1
        if self._i == self.rows:
            self.flush()

    def flush(self, block: bool = False) -> None:
        if self._i == 0:
            return
        if self.log._submit((self.channel, self._buf, self._views, self._i), block):
            self._take()
        else:  # dropped (queue full): reuse the buffer
            np.copyto(self._buf, self.log._blank[self.channel])
            self._i = 0


class StreamLog:
    """The run's log.mcap, written by a writer thread from a bounded queue of chunks (module docstring).

    `columns(name)` gives the control thread its append API per channel; `event(dict)` logs an event;
    `close()` flushes the partial chunks, drains the queue and writes the MCAP summary and footer."""

    def __init__(self, path, channels: dict[str, dict], rows: dict[str, int], queue_chunks: int = QUEUE_CHUNKS,
                 metadata: dict[str, str] | None = None) -> None:
        from deploy.mcap_file import McapFile

        self.path = Path(path)
        self._f = open(self.path, "wb")
        self._w = McapFile(self._f)
        self._w.start(library="g1-bcg deploy.log")
        self._ids, self._blank, self._pool, self._seq, self._cols = {}, {}, {}, {}, {}
        for name, fields in channels.items():
            sid = self._w.schema(f"g1_deploy/{name.capitalize()}", "ros2msg", ros2msg(fields).encode())
            self._ids[name] = self._w.channel(TOPICS.get(name, f"/deploy/{name}"), "cdr", sid)
            self._blank[name] = _blank(row_dtype(fields), rows[name])
            self._pool[name] = queue.SimpleQueue()
            for _ in range(queue_chunks + 2):  # the queue, the writer's and the control thread's: never empty
                b = self._blank[name].copy()
                self._pool[name].put((b, {k: b[k] for k in fields}))
            self._seq[name] = 0
            self._cols[name] = StreamColumns(self, name, fields, rows[name])
        sid = self._w.schema("g1_deploy/Event", "jsonschema", json.dumps(EVENT_SCHEMA).encode())
        self._ids["events"] = self._w.channel(TOPICS["events"], "json", sid)
        self._seq["events"] = 0
        self.base_ns = time.time_ns()  # log_time = wall clock at the run's t = 0
        self._w.metadata("deploy", {"base_time_ns": str(self.base_ns), **(metadata or {})})
        self._f.flush()
        self._q: queue.Queue = queue.Queue(maxsize=queue_chunks)
        self.dropped_chunks = 0
        self._dropped: dict[str, int] = {}
        self.written_chunks = 0
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="deploy-log-writer", daemon=True)
        self._thread.start()

    def columns(self, name: str) -> StreamColumns:
        return self._cols[name]

    def event(self, e: dict) -> None:
        self._submit(("events", e, None, 0), False)

    def _submit(self, item, block: bool) -> bool:
        try:
            self._q.put(item, block=block, timeout=10.0 if block else None)
            return True
        except queue.Full:
            self.dropped_chunks += 1
            self._dropped[item[0]] = self._dropped.get(item[0], 0) + 1
            return False

    def dropped_chunks_by(self, name: str) -> int:
        """Chunks of channel `name` (or events, "events") dropped because the writer was behind."""
        return self._dropped.get(name, 0)

    def bytes_written(self) -> int:
        return self._w.pos

    def close(self, timeout: float = 60.0) -> None:
        """Flush the partial chunks, drain the queue, write the MCAP summary and close the file."""
        for c in self._cols.values():
            c.flush(block=True)
        self._q.put(None, timeout=timeout)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"{self.path}: the log writer did not finish within {timeout:g} s")
        self._w.finish()
        self._f.close()

    # ------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            try:
                self._write(*item)
            except Exception as e:  # noqa: BLE001 - a broken log must not stop the robot; the summary says so
                self.error = f"{type(e).__name__}: {e}"

    def _write(self, name: str, buf, views, n: int) -> None:
        cid, seq = self._ids[name], self._seq[name]
        if name == "events":
            data = json.dumps(buf, default=json_default).encode()
            t_ns = np.array([self.base_ns + int(float(buf.get("time", 0.0)) * 1e9)], np.int64)
            self._w.chunk(cid, seq, t_ns, np.frombuffer(data, dtype=f"V{len(data)}"))
            self._seq[name] = seq + 1
            return
        try:  # numpy builds the chunk, zstd/zlib/write release the GIL: the control thread is not held up
            t_ns = self.base_ns + (np.nan_to_num(buf["t"][:n]) * 1e9).astype(np.int64)
            self._w.chunk(cid, seq, t_ns, buf[:n])  # compressed, written and flushed to the OS
            self._seq[name] = seq + n
        finally:
            np.copyto(buf, self._blank[name])
            self._pool[name].put((buf, views))
        self.written_chunks += 1


def read_log(path, fields: dict[str, list[str] | None] | None = None, stride: int = 1) -> dict:
    """Read a log.mcap (or the run folder holding one) into numpy columns: tick fields by name, policy
    fields as `pol_<name>` (log.npz's layout), plus `events`, `state_names`, `joint_names`, `chunks` and
    `truncated` (True when the file ends without its footer, e.g. a SIGKILLed run: everything up to the last
    complete chunk is returned). `fields` = {channel: [names] or None for all}, default every field of
    every channel; `stride` keeps every stride-th tick row (long runs' plots)."""
    from mcap.exceptions import McapError
    from mcap.records import Channel, Chunk, Message, Metadata, Schema
    from mcap.stream_reader import StreamReader, breakup_chunk

    path = Path(path)
    path = path / LOG_FILE if path.is_dir() else path
    schemas, chans, meta, events = {}, {}, {}, []
    parts: dict[str, dict[str, list]] = {}
    count: dict[str, int] = {}
    out: dict = {"truncated": False, "chunks": 0}

    def on_records(records) -> None:
        pending: dict[int, list] = {}
        for r in records:
            if isinstance(r, Schema):
                schemas[r.id] = r
            elif isinstance(r, Channel):
                chans[r.id] = r
            elif isinstance(r, Message):
                pending.setdefault(r.channel_id, []).append(r.data)
        for cid, datas in pending.items():
            ch = chans[cid]
            name = next((k for k, v in TOPICS.items() if v == ch.topic), ch.topic)
            if ch.message_encoding == "json":
                events.extend(json.loads(d) for d in datas)
                continue
            if ch.message_encoding != "cdr":
                continue
            all_fields = fields_from_ros2msg(schemas[ch.schema_id].data.decode())
            if fields is not None and name not in fields:
                continue
            want = (fields or {}).get(name) or list(all_fields)
            rows = np.frombuffer(b"".join(datas), row_dtype(all_fields))
            i0 = count.get(name, 0)
            count[name] = i0 + len(rows)
            s = stride if name == "tick" else 1
            if s > 1:
                rows = rows[(-i0) % s::s]
            dst = parts.setdefault(name, {k: [] for k in want})
            for k in want:
                dst[k].append(np.array(rows[k], dtype=np.float64))

    try:
        with open(path, "rb") as f:
            for rec in StreamReader(f, emit_chunks=True).records:
                if isinstance(rec, Chunk):
                    on_records(breakup_chunk(rec, validate_crc=True))
                    out["chunks"] += 1
                elif isinstance(rec, Metadata):
                    meta.update(rec.metadata)
                else:
                    on_records([rec])
    except (McapError, struct.error, ValueError, RuntimeError, EOFError) as e:
        out["truncated"] = True
        out["truncated_reason"] = f"{type(e).__name__}: {e}"
    except Exception as e:  # zstandard.ZstdError on a torn chunk (not importable without zstandard)
        if type(e).__name__ != "ZstdError":
            raise
        out["truncated"], out["truncated_reason"] = True, f"ZstdError: {e}"
    for ch in chans.values():  # every channel of the file, also those without rows (empty columns)
        name = next((k for k, v in TOPICS.items() if v == ch.topic), ch.topic)
        if ch.message_encoding != "cdr" or (fields is not None and name not in fields):
            continue
        all_fields = fields_from_ros2msg(schemas[ch.schema_id].data.decode())
        want = (fields or {}).get(name) or list(all_fields)
        got = parts.get(name, {})
        for k in want:
            lst = got.get(k, [])
            out[PREFIX.get(name, name + "_") + k] = np.concatenate(lst) if lst else np.zeros((0, *all_fields[k]))
    out["events"] = events
    out["rows"] = count
    for k in ("state_names", "joint_names"):
        if k in meta:
            out[k] = np.array(json.loads(meta[k]))
    return out


def pct(x, p) -> float | None:
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    return float(np.percentile(x, p)) if x.size else None


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, default=json_default) + "\n")


def plot_run(path: Path, ticks, state_names: list[str], joint_idx=(0, 3, 4, 6, 9, 10, 12, 15)) -> Path | None:
    """Measured (solid) vs commanded (dashed) joints, gains and state over time (`ticks`: columns by name)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # pragma: no cover - plotting is best effort
        return None
    t = ticks["t"]
    fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True,
                             gridspec_kw={"height_ratios": [3, 3, 1.2, 1]})
    for ax, sel in ((axes[0], joint_idx[:4]), (axes[1], joint_idx[4:])):
        for j in sel:
            line, = ax.plot(t, ticks["q"][:, j], lw=1, label=g1.JOINT_NAMES[j].replace("_joint", ""))
            pos = ticks["cmd_kp"][:, j] > 0
            ax.plot(t, np.where(pos, ticks["cmd_q"][:, j], np.nan), "--", lw=1, color=line.get_color())
        ax.set_ylabel("q (rad): measured -, target --")
        ax.legend(fontsize=7, ncol=4, loc="upper right")
        ax.grid(alpha=0.3)
    axes[2].plot(t, ticks["cmd_kp"][:, 3], label="kp knee")
    axes[2].plot(t, ticks["cmd_kd"][:, 3], label="kd knee")
    axes[2].legend(fontsize=7, loc="upper left")
    axes[2].set_ylabel("gains")
    with np.errstate(invalid="ignore", divide="ignore"):  # a zero or NaN quaternion: a gap in the plot
        cz = upright_cos(np.asarray(ticks["quat"], dtype=float))  # pelvis tilt from the IMU quaternion
    tw = axes[2].twinx()
    tw.plot(t, np.degrees(np.arccos(np.clip(cz, -1, 1))), color="k", lw=0.8, label="pelvis tilt")
    tw.set_ylabel("tilt (deg)")
    tw.legend(fontsize=7, loc="upper right")
    axes[3].step(t, ticks["state"], where="post")
    axes[3].set_yticks(range(len(state_names)), state_names, fontsize=7)
    axes[3].set_xlabel("time (s)")
    fig.tight_layout()
    out = path / "joints.png"
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out

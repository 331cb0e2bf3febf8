"""A minimal MCAP writer for fixed-size messages, for deploy's streamed log (deploy/log.py).

Why not `mcap.writer.Writer`: it adds every message through ~15 us of Python (a dataclass, a struct
pack per field, an index entry), ~10 ms of held GIL per second of 500 Hz ticks, which the control thread
felt (stream period error p99 0.05 -> 0.13-0.24 in an A/B of dry runs). Here a chunk's Message records
are built as one numpy record array (opcode, length, channel, sequence, log/publish time, payload) and
compressed with zstandard and checksummed with zlib, both of which release the GIL; the non-hot
records (header, schemas, channels, metadata, chunk, summary, footer) use the `mcap` package's own
record classes, so the file is what that library (and Foxglove) reads: schemas and channels in the data
section, one chunk per flush, chunk indexes, statistics and summary offsets in the summary section (no
message indexes: readers scan a chunk, which is one second of one channel here).
"""
from __future__ import annotations

import struct
import zlib
from typing import BinaryIO

import numpy as np
from mcap.data_stream import RecordBuilder
from mcap.opcode import Opcode
from mcap.records import (Channel, ChunkIndex, DataEnd, Footer, Header, Metadata, MetadataIndex, Schema,
                          Statistics, SummaryOffset)

MAGIC = b"\x89MCAP0\r\n"


_MSG_HEADER = np.dtype([("op", "u1"), ("len", "<u8"), ("ch", "<u2"), ("seq", "<u4"), ("log", "<u8"), ("pub", "<u8")])


def message_records(channel_id: int, seq0: int, t_ns: np.ndarray, payload: np.ndarray,
                    out: np.ndarray | None = None) -> np.ndarray:
    """MCAP Message records (opcode 0x05) for n same-size payloads, as an (n, 31 + size) uint8 array (its
    bytes are the records back to back). `payload`: an (n,) array whose items are the message bytes (any
    dtype; its itemsize is the message size). `out`: a preallocated array of that shape (no page faults)."""
    n, size, h = len(payload), payload.dtype.itemsize, _MSG_HEADER.itemsize
    if out is None or out.shape != (n, h + size):
        out = np.empty((n, h + size), np.uint8)
    hdr = np.empty(n, _MSG_HEADER)
    hdr["op"] = Opcode.MESSAGE
    hdr["len"] = 2 + 4 + 8 + 8 + size  # record content: channel, sequence, log time, publish time, data
    hdr["ch"] = channel_id
    hdr["seq"] = (seq0 + np.arange(n)) & 0xFFFFFFFF
    hdr["log"] = t_ns
    hdr["pub"] = t_ns
    out[:, :h] = hdr.view(np.uint8).reshape(n, h)
    out[:, h:] = np.ascontiguousarray(payload).view(np.uint8).reshape(n, size)
    return out


class McapFile:
    """start() ... schema() / channel() / metadata() ... chunk() ... finish(); the stream only needs write()
    and flush() (a pipe works)."""

    def __init__(self, stream: BinaryIO, compression_level: int = 3) -> None:
        import zstandard

        self.stream = stream
        self.pos = 0
        self._zstd = zstandard.ZstdCompressor(level=compression_level)
        self._schemas: list[Schema] = []
        self._channels: list[Channel] = []
        self._chunk_indexes: list[ChunkIndex] = []
        self._metadata_indexes: list[MetadataIndex] = []
        self._counts: dict[int, int] = {}
        self._t = [None, None]  # first, last message time
        self._scratch: dict[tuple, np.ndarray] = {}  # per message shape: the uncompressed chunk, reused
        self.chunks = 0

    def _write(self, b: bytes) -> None:
        self.stream.write(b)
        self.pos += len(b)

    def _record(self, rec) -> int:
        """Write one record; returns its length in bytes."""
        rb = RecordBuilder()
        rec.write(rb)
        b = rb.end()
        self._write(b)
        return len(b)

    def start(self, library: str, profile: str = "") -> None:
        self._write(MAGIC)
        self._record(Header(profile=profile, library=library))

    def schema(self, name: str, encoding: str, data: bytes) -> int:
        s = Schema(id=len(self._schemas) + 1, data=data, encoding=encoding, name=name)
        self._schemas.append(s)
        self._record(s)
        return s.id

    def channel(self, topic: str, message_encoding: str, schema_id: int) -> int:
        c = Channel(id=len(self._channels) + 1, topic=topic, message_encoding=message_encoding, metadata={},
                    schema_id=schema_id)
        self._channels.append(c)
        self._record(c)
        return c.id

    def metadata(self, name: str, data: dict[str, str]) -> None:
        offset = self.pos
        n = self._record(Metadata(name=name, metadata=data))
        self._metadata_indexes.append(MetadataIndex(offset=offset, length=n, name=name))

    def chunk(self, channel_id: int, seq0: int, t_ns: np.ndarray, payload: np.ndarray) -> None:
        """One chunk holding len(payload) messages of one channel (see message_records), flushed."""
        if len(payload) == 0:
            return
        key = (len(payload), payload.dtype.itemsize)
        recs = message_records(channel_id, seq0, t_ns, payload, self._scratch.get(key))
        if len(payload) > 1:  # (events are one message each: not worth keeping)
            self._scratch[key] = recs
        raw = memoryview(recs).cast("B")
        data = self._zstd.compress(raw)
        t0, t1 = int(np.min(t_ns)), int(np.max(t_ns))
        offset = self.pos
        # the Chunk record (opcode 0x06), written as header + compressed bytes (no copy of the data)
        head = struct.pack("<QQQI", t0, t1, len(raw), zlib.crc32(raw)) + struct.pack("<I", 4) + b"zstd" \
            + struct.pack("<Q", len(data))
        self._write(struct.pack("<BQ", Opcode.CHUNK, len(head) + len(data)) + head)
        self._write(data)
        self._chunk_indexes.append(ChunkIndex(
            message_start_time=t0, message_end_time=t1, chunk_start_offset=offset, chunk_length=self.pos - offset,
            message_index_offsets={}, message_index_length=0, compression="zstd", compressed_size=len(data),
            uncompressed_size=len(raw)))
        self._counts[channel_id] = self._counts.get(channel_id, 0) + len(payload)
        self._t = [t0 if self._t[0] is None else min(self._t[0], t0), t1 if self._t[1] is None else max(self._t[1], t1)]
        self.chunks += 1
        self.stream.flush()

    def finish(self) -> None:
        """Data end, the summary section (schemas, channels, statistics, chunk and metadata indexes), summary
        offsets, footer, magic."""
        self._record(DataEnd(data_section_crc=0))
        summary_start = self.pos
        offsets = []
        stats = Statistics(
            message_count=sum(self._counts.values()), schema_count=len(self._schemas),
            channel_count=len(self._channels), attachment_count=0, metadata_count=len(self._metadata_indexes),
            chunk_count=len(self._chunk_indexes), message_start_time=self._t[0] or 0,
            message_end_time=self._t[1] or 0, channel_message_counts=dict(self._counts))
        for opcode, records in ((Opcode.SCHEMA, self._schemas), (Opcode.CHANNEL, self._channels),
                                (Opcode.STATISTICS, [stats]), (Opcode.CHUNK_INDEX, self._chunk_indexes),
                                (Opcode.METADATA_INDEX, self._metadata_indexes)):
            if not records:
                continue
            start = self.pos
            for r in records:
                self._record(r)
            offsets.append(SummaryOffset(group_opcode=opcode, group_start=start, group_length=self.pos - start))
        summary_offset_start = self.pos
        for o in offsets:
            self._record(o)
        self._record(Footer(summary_start=summary_start, summary_offset_start=summary_offset_start, summary_crc=0))
        self._write(MAGIC)
        self.stream.flush()

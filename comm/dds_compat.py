"""Every use of PRIVATE cyclonedds / unitree_sdk2py APIs, in one place, pinned to the versions it
was written and tested against.

Why private APIs at all: a 500 Hz LowState/LowCmd stream through cyclonedds' Python
(de)serializer costs ~0.3-0.8 ms per message, so the wire bytes are taken and written raw
(`take_raw_payloads`, `wire_sample`); cyclonedds and the SDK leave entities to the garbage
collector, which can deadlock inside a listener thread, so they are deleted explicitly
(`delete_entity`, `close_channel`); the SDK keeps its one DDS participant in a name-mangled
class attribute (`factory_participant`).

Invariant: importing this module checks the installed distributions against `PINNED` and raises
`DDSCompatError` naming the difference and the fix (`make setup`) when they differ, so an upgrade
fails loudly at start-up instead of misbehaving in a listener thread.
"""
from __future__ import annotations

import importlib.metadata
from typing import Any, Mapping

# The versions of requirements.lock this module was written against.
PINNED: dict[str, str] = {"cyclonedds": "11.0.1", "unitree-sdk2py-dimos": "1.0.3"}


class DDSCompatError(ImportError):
    """Installed cyclonedds / unitree_sdk2py differ from the versions comm.dds_compat supports."""


def check_versions(installed: Mapping[str, str | None], pinned: Mapping[str, str] = PINNED) -> None:
    """Raise DDSCompatError when any `installed[name]` (None: not installed) differs from `pinned`.
    Pure: callers pass the versions (`installed_versions()` reads them from the environment)."""
    wrong = {name: installed.get(name) for name, want in pinned.items() if installed.get(name) != want}
    if wrong:
        found = ", ".join(f"{n} {v if v is not None else 'not installed'} (need {pinned[n]})" for n, v in wrong.items())
        pins = " ".join(f"{n}=={v}" for n, v in pinned.items())
        raise DDSCompatError(
            f"comm.dds_compat uses private APIs of exactly these DDS packages; found {found}. "
            f"Run `make setup` (installs requirements.lock) or `pip install {pins}`; to move to new "
            f"versions, re-check every function in comm/dds_compat.py and update PINNED."
        )


def installed_versions(names: tuple[str, ...] = tuple(PINNED)) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


check_versions(installed_versions())


def wire_sample(msg_type: type, payload: bytes) -> Any:
    """An instance of `msg_type` that a cyclonedds DataWriter (or unitree ChannelPublisher)
    writes as the pre-encoded XCDR1 `payload`. It has no fields: only for writing.
    (Relies on cyclonedds' writer calling `sample.serialize(use_version_2=...)`.)"""
    sample = msg_type.__new__(msg_type)

    def serialize(buffer: Any = None, endianness: Any = None, use_version_2: bool | None = None) -> bytes:
        if use_version_2:
            raise RuntimeError(f"{msg_type.__name__}: pre-encoded XCDR1 sample written by an XCDR2 writer")
        return payload

    sample.serialize = serialize
    return sample


def take_raw_payloads(reader: Any, n: int = 64) -> list[bytes]:
    """Serialized payloads of up to n valid samples taken from a cyclonedds DataReader, without
    cyclonedds' Python deserializer (~0.3 ms for a LowCmd_, ~0.5 ms for a LowState_)."""
    from cyclonedds._clayer import ddspy_take
    from cyclonedds.core import InstanceState, SampleState, ViewState

    if reader is None:  # a listener callback racing the reader's deletion: cyclonedds found no entity for it
        return []
    ret = ddspy_take(reader._ref, SampleState.Any | ViewState.Any | InstanceState.Any, n)
    if isinstance(ret, int):
        return []
    return [data for data, info in ret if info.valid_data]


def is_valid_sample(sample: Any) -> bool:
    """False for the placeholder cyclonedds returns for an invalid (state-only) sample."""
    from cyclonedds.internal import InvalidSample

    return not isinstance(sample, InvalidSample)


def delete_entity(entity: Any) -> None:
    """Delete a cyclonedds entity (reader, writer, topic) now, safely.

    Its listener is detached first: that call waits (GIL released) until a callback in flight
    has returned. Deleting a reader while its listener runs can otherwise deadlock: cyclonedds'
    callback holds a temporary reference to the Python reader, so the reader's last reference
    can drop, and dds_delete run, inside the callback's own thread. Same for the garbage
    collector running in a listener thread: delete explicitly, never leave it to the GC."""
    from cyclonedds.core import Entity

    ref = getattr(entity, "_ref", None)
    if ref is None or Entity._entities.get(ref) is not entity:
        return
    if getattr(entity, "_listener", None) is not None:
        entity._set_listener(ref, None)  # the C listener first; the Python one stays alive till after
    del Entity._entities[ref]
    entity._delete(ref)


def close_channel(channel: Any) -> None:
    """Close a unitree_sdk2py ChannelPublisher/ChannelSubscriber: reader/writer and Topic deleted
    now with `delete_entity` (the SDK's Close() drops the reader with its listener possibly
    running, and leaves the Topic to the garbage collector)."""
    inner = getattr(channel, "_ChannelPublisher__channel", None) or getattr(channel, "_ChannelSubscriber__channel", None)
    if inner is not None:
        reader = getattr(getattr(inner, "_Channel__reader", None), "_Reader__reader", None)
        writer = getattr(getattr(inner, "_Channel__writer", None), "_Writer__writer", None)
        for e in (reader, writer):
            if e is not None:
                delete_entity(e)
    channel.Close()
    topic = getattr(inner, "_Channel__topic", None)
    if topic is not None:
        delete_entity(topic)


def factory_participant() -> Any:
    """unitree_sdk2py's ChannelFactory DomainParticipant, or None before it was initialised."""
    try:
        from unitree_sdk2py.core.channel import ChannelFactory

        return getattr(ChannelFactory, "_ChannelFactory__participant", None)
    except Exception:  # pragma: no cover - SDK internals changed (the version check should catch it)
        return None

"""DDS set-up for the robot's protocol: domains, interfaces, the process's one participant.

`init_dds` initialises unitree_sdk2py's process-wide ChannelFactory once per process and fails
with a `DDSInitError` that says how to fix it (interface list, domain range, one domain per
process). Importing this module has no side effects beyond comm.dds_compat's version check.
"""
from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

from comm import dds_compat

ROBOT_DOMAIN = 0  # real G1: domain 0 on the ethernet interface wired to 192.168.123.x
SIM_DOMAIN = 1  # simulation convention: domain 1 on loopback
SIM_INTERFACE = "lo"
MAX_DOMAIN_ID = 232  # cyclonedds' default port mapping (7400 + 250 d + ...) must stay < 65536
IFF_MULTICAST = 0x1000  # <linux/if.h>


class DDSInitError(RuntimeError):
    """DDS could not be set up as asked; the message says how to fix it."""


_dds_lock = threading.Lock()
_dds_initialized: tuple[int, str | None] | None = None


def available_interfaces() -> list[str]:
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:  # pragma: no cover - platform without if_nameindex
        return []


def interface_multicast(name: str) -> bool | None:
    """Whether the interface has the MULTICAST flag (None where that cannot be read)."""
    try:
        return bool(int(Path(f"/sys/class/net/{name}/flags").read_text(), 16) & IFF_MULTICAST)
    except (OSError, ValueError):
        return None


def multicast_note(interface: str) -> str | None:
    """A note for the user when `interface` lacks MULTICAST, else None.

    Measured here (cyclonedds 11, unitree's config): discovery still works between processes on
    this host through cyclonedds' unicast fallback to localhost peers, limited to the ~10
    participant indices it probes; the robust fix is enabling multicast on the interface.
    """
    if interface_multicast(interface) is False:
        return (
            f"network interface {interface!r} is not multicast-capable; cyclonedds falls back to "
            f"unicast discovery on this host. If DDS peers do not see each other run "
            f"`sudo ip link set {interface} multicast on` (or `make lo-multicast` as root)."
        )
    return None


def check_interface(interface: str | None) -> None:
    """Raise DDSInitError naming the available interfaces when `interface` does not exist."""
    if interface is None:
        return
    names = available_interfaces()
    if names and interface not in names:
        hint = "use --interface lo for the sim bridge" if "lo" in names else ""
        raise DDSInitError(
            f"network interface {interface!r} does not exist; available: {', '.join(names)}"
            + (f" ({hint}; the real G1 is on the interface wired to 192.168.123.x)" if hint else "")
        )


def _factory_domain() -> int | None:
    """Domain id of unitree_sdk2py's ChannelFactory participant, if it was initialised."""
    participant = dds_compat.factory_participant()
    return None if participant is None else int(participant.domain_id)


def dds_participant() -> Any:
    """The process's DDS participant: unitree_sdk2py's ChannelFactory participant (after
    `init_dds`). Put extra cyclonedds readers/writers on it rather than on a second
    DomainParticipant: one participant per process is what the robot's clients use, and a second
    one in the same process was seen (loaded machine, loopback) not to discover its peers."""
    participant = dds_compat.factory_participant()
    if participant is None:
        raise DDSInitError("DDS is not initialised in this process: call comm.dds.init_dds first")
    return participant


def init_dds(domain: int = SIM_DOMAIN, interface: str | None = SIM_INTERFACE) -> None:
    """Initialise unitree_sdk2py's DDS ChannelFactory once per process, with clear errors.

    The factory is a process-wide singleton: a second call with the same arguments is a no-op,
    a call with a different domain or interface raises (the SDK would silently keep the first).
    """
    global _dds_initialized
    if not isinstance(domain, int) or not 0 <= domain <= MAX_DOMAIN_ID:
        raise DDSInitError(f"DDS domain must be an integer in 0..{MAX_DOMAIN_ID}, got {domain!r}")
    with _dds_lock:
        if _dds_initialized is not None:
            if _dds_initialized != (domain, interface):
                raise DDSInitError(
                    f"DDS is already initialised in this process on domain {_dds_initialized[0]} "
                    f"interface {_dds_initialized[1]!r}; unitree_sdk2py allows one per process, so "
                    f"domain {domain} interface {interface!r} cannot be used here (run it in another process)"
                )
            return
        existing = _factory_domain()
        if existing is not None:
            if existing != domain:
                raise DDSInitError(
                    f"unitree_sdk2py's ChannelFactory was already initialised on domain {existing}; "
                    f"cannot switch this process to domain {domain}"
                )
            _dds_initialized = (domain, interface)
            return
        check_interface(interface)
        from unitree_sdk2py.core.channel import ChannelFactoryInitialize

        try:
            ChannelFactoryInitialize(domain, interface)
        except Exception as e:
            raise DDSInitError(
                f"DDS initialisation failed on domain {domain} interface {interface!r}: {e}. "
                f"Check the interface name (available: {', '.join(available_interfaces())}) and "
                "that cyclonedds is installed (`make setup`)."
            ) from e
        _dds_initialized = (domain, interface)


def dds_initialized() -> tuple[int, str | None] | None:
    """(domain, interface) this process initialised through `init_dds`, or None."""
    return _dds_initialized

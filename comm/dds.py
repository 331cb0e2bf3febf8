"""DDS set-up for the robot's protocol: domains, interfaces, the process's one participant.

`init_dds` initialises unitree_sdk2py's process-wide ChannelFactory once per process and fails
with a `DDSInitError` that says how to fix it (interface list, domain range, one domain per
process). Importing this module has no side effects beyond comm.dds_compat's version check.
"""
from __future__ import annotations

import ipaddress
import socket
import threading
from pathlib import Path
from typing import Any

from comm import dds_compat

ROBOT_DOMAIN = 0  # real G1: domain 0 on the ethernet interface wired to 192.168.123.x
ROBOT_NETWORK = ipaddress.IPv4Network("192.168.123.0/24")  # the G1's internal network (its PCs and the user's)
ROBOT_IP = ipaddress.IPv4Address("192.168.123.161")  # the G1's locomotion computer: LowState / LowCmd
SIM_DOMAIN = 1  # simulation convention: domain 1 on loopback
SIM_INTERFACE = "lo"
MAX_DOMAIN_ID = 232  # cyclonedds' default port mapping (7400 + 250 d + ...) must stay < 65536
IFF_UP, IFF_MULTICAST = 0x1, 0x1000  # <linux/if.h>


class DDSInitError(RuntimeError):
    """DDS could not be set up as asked; the message says how to fix it."""


_dds_lock = threading.Lock()
_dds_initialized: tuple[int, str | None] | None = None


def available_interfaces() -> list[str]:
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:  # pragma: no cover - platform without if_nameindex
        return []


def _interface_flag(name: str, flag: int) -> bool | None:
    try:
        return bool(int(Path(f"/sys/class/net/{name}/flags").read_text(), 16) & flag)
    except (OSError, ValueError):
        return None


def interface_multicast(name: str) -> bool | None:
    """Whether the interface has the MULTICAST flag (None where that cannot be read)."""
    return _interface_flag(name, IFF_MULTICAST)


def interface_link_up(name: str) -> bool | None:
    """Whether the interface is up with a carrier (a cable, a peer), None where that cannot be read."""
    up = _interface_flag(name, IFF_UP)
    if up is None:
        return None
    try:  # reading `carrier` of an interface that is down fails (EINVAL)
        return up and Path(f"/sys/class/net/{name}/carrier").read_text().strip() == "1"
    except OSError:
        return False


def interface_ipv4(name: str) -> list[ipaddress.IPv4Interface]:
    """The interface's IPv4 addresses with their prefixes (psutil: every address, not only the primary)."""
    import psutil

    return [ipaddress.IPv4Interface(f"{a.address}/{a.netmask}") for a in psutil.net_if_addrs().get(name, ())
            if a.family == socket.AF_INET and a.netmask]


def robot_interfaces() -> list[str]:
    """The interfaces here with an address on the robot's network."""
    import psutil

    return sorted(n for n in psutil.net_if_addrs() if any(a.ip in ROBOT_NETWORK for a in interface_ipv4(n)))


def check_robot_interface(interface: str) -> None:
    """Raise DDSInitError with the fix unless `interface` can reach the G1: it exists, is up with a
    carrier, has an address on ROBOT_NETWORK other than the robot's own, and is multicast-capable
    (DDS discovery with the robot's computer uses multicast)."""
    check_interface(interface)
    if interface_link_up(interface) is False:
        raise DDSInitError(f"network interface {interface!r} is down or has no link (no carrier): check the cable "
                           f"to the robot and the switch, and `sudo ip link set {interface} up`")
    addrs = interface_ipv4(interface)
    mine = [a for a in addrs if a.ip in ROBOT_NETWORK]
    if not mine:
        others = [n for n in robot_interfaces() if n != interface]
        raise DDSInitError(
            f"network interface {interface!r} has no address on the robot's network {ROBOT_NETWORK} (the G1 is "
            f"{ROBOT_IP}); its IPv4 addresses: {', '.join(map(str, addrs)) or 'none'}. "
            + (f"Interfaces here on that network: {', '.join(others)}. " if others else "")
            + f"Use the interface wired to the robot, or give it an address: "
              f"`sudo ip addr add 192.168.123.222/24 dev {interface}`")
    if all(a.ip == ROBOT_IP for a in mine):
        raise DDSInitError(f"network interface {interface!r} has the robot's own address {ROBOT_IP}: give this "
                           f"computer another 192.168.123.x address (e.g. 192.168.123.222/24)")
    if interface_multicast(interface) is False:
        raise DDSInitError(f"network interface {interface!r} is not multicast-capable, and DDS discovery with the "
                           f"robot uses multicast: `sudo ip link set {interface} multicast on`")


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

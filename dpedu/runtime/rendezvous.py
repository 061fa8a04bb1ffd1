"""Where ranks meet: the address and port of the rendezvous (``MASTER_ADDR``/``MASTER_PORT``).

Rank 0 listens there (a TCP key-value store); the other ranks connect, learn each other's
addresses, and the process group is made. ``torchrun`` and ``dpedu.launch`` both start that way.

Used by ``dpedu.launch`` and in lessons 03, 09 and 10 (torchrun, mpirun from a cell).
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, for a rendezvous that will bind it.

    The port is released before the rendezvous binds it, so another program could take it first:
    ``dpedu.launch`` then tries again on a new port. On a real cluster, agree on a fixed port instead.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_interface() -> str | None:
    """The loopback interface's name ("lo" on Linux, "lo0" on macOS), where the OS can list them.

    Ranks that all run on this machine should talk over it: set ``GLOO_SOCKET_IFNAME`` to it, or gloo
    looks up the host's name, which fails on machines (many Macs) whose name does not resolve.
    Returns None where Python cannot list the interfaces or none is named ``lo...``: then leave
    ``GLOO_SOCKET_IFNAME`` unset (a None value in an environment makes ``subprocess.Popen`` raise TypeError),
    as ``on_loopback`` does.
    """
    try:
        return next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)
    except (AttributeError, OSError):
        return None


def on_loopback() -> dict[str, str]:
    """The environment that makes gloo ranks all on this machine talk over loopback: ``GLOO_SOCKET_IFNAME``
    set to ``loopback_interface()``, or nothing where there is none to name."""
    interface = loopback_interface()
    return {"GLOO_SOCKET_IFNAME": interface} if interface else {}

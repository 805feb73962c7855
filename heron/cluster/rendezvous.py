"""Where the torch.distributed groups between actors listen (trainer ranks' data-parallel
group, the weight-broadcast group): on the node's Ray address, and nowhere else.

A ``TCPStore`` server binds every interface by default, whatever host it is given, and gloo
binds the address the hostname resolves to. On a local Ray (node address 127.0.0.1, see
``heron.cluster.ray_session``) both must stay on loopback, so:
- ``open_listener`` (on the store's rank 0) binds a listening socket to the node address and
  keeps it open until ``make_store`` hands it to the ``TCPStore`` (``master_listen_fd``): no
  other address is ever bound, and no other process can take the port in between;
- ``pin_gloo_to_loopback`` points gloo at the loopback interface (``GLOO_SOCKET_IFNAME``)
  when the node address is loopback. On a cluster gloo's own choice is kept (set
  ``GLOO_SOCKET_IFNAME`` on the nodes to choose).
Both run inside the actors; listeners are per process, keyed by port.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from datetime import timedelta

_LISTENERS: dict[int, socket.socket] = {}


def node_address() -> str:
    import ray

    return ray.util.get_node_ip_address()


def open_listener() -> tuple[str, int]:
    """A listening socket on this node's Ray address and a free port; returns (address, port)."""
    host = node_address()
    listener = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    port = listener.getsockname()[1]
    _LISTENERS[port] = listener
    return host, port


def make_store(host: str, port: int, rank: int, world_size: int, timeout_s: float):
    """The group's ``TCPStore``: rank 0 serves it on the socket ``open_listener`` bound."""
    import torch.distributed as dist

    listener = _LISTENERS.pop(port, None) if rank == 0 else None
    if rank == 0 and listener is None:
        raise RuntimeError(f"rank 0 has no listener on port {port}: call open_listener in the same process first")
    return dist.TCPStore(
        host, port, world_size, is_master=rank == 0, timeout=timedelta(seconds=timeout_s),
        master_listen_fd=listener.detach() if listener is not None else None,  # the store owns the fd now
    )


def pin_gloo_to_loopback() -> None:
    """On a loopback node, gloo's sockets go on the loopback interface (unless already set)."""
    if "GLOO_SOCKET_IFNAME" in os.environ or not ipaddress.ip_address(node_address()).is_loopback:
        return
    os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()


def loopback_interface() -> str:
    """Name of the interface holding 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS)."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addresses):
            return name
    return "lo"

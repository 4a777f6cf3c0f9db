"""A pytest fixture that forbids network access beyond the loopback interface.

Import it into a conftest to make it autouse for a whole suite::

    from tests._network_guard import no_external_network  # noqa: F401  (autouse fixture)

Connections to 127.0.0.0/8, ::1 and Unix sockets (local test servers, DDP rendezvous) stay
allowed; anything else fails like an offline machine (an ``OSError``) *and* fails the test at
teardown, so code that swallows network errors cannot hide the attempt.
"""

from __future__ import annotations

import ipaddress
import socket

import pytest

_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "", None}


class ExternalNetworkAccess(OSError):
    """Raised instead of connecting anywhere but the loopback interface."""


def _is_local(host) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _is_ip(host) -> bool:
    try:
        ipaddress.ip_address(str(host.decode() if isinstance(host, bytes) else host).split("%", 1)[0])
        return True
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_external_network(monkeypatch):
    attempts = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(sock, address):
        if sock.family == getattr(socket, "AF_UNIX", None):
            return
        host = address[0] if isinstance(address, tuple) else address
        if not _is_local(host):
            attempts.append(f"connect to {address!r}")
            raise ExternalNetworkAccess(f"network access in a test: connect to {address!r} (only loopback allowed)")

    def connect(sock, address):
        check(sock, address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        check(sock, address)
        return real_connect_ex(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if not _is_local(host) and not _is_ip(host):  # numeric addresses need no lookup; connect() checks them
            attempts.append(f"DNS lookup of {host!r}")
            raise socket.gaierror(socket.EAI_NONAME, f"network access in a test: DNS lookup of {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts
    if attempts:
        pytest.fail(f"the test tried to reach the network: {attempts}", pytrace=False)

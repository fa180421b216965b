"""The launcher's port choice: a run's two stores (the data plane's and the trainer world's)
get distinct free ports. One free port at a time could hand out the same port twice (seen in
CI: the trainer world's store failed with EADDRINUSE)."""

import socket

from splitserve.launch import free_ports


def test_free_ports_are_distinct_and_free():
    for _ in range(50):
        ports = free_ports(2)
        assert len(set(ports)) == 2
    ports = free_ports(8)
    assert len(set(ports)) == 8
    socks = [socket.socket() for _ in ports]
    try:
        for s, port in zip(socks, ports, strict=True):
            s.bind(("127.0.0.1", port))  # still free once returned
    finally:
        for s in socks:
            s.close()

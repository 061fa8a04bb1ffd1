"""loopback_interface: the loopback interface's name, or None where the OS cannot say; on_loopback: the variable
that keeps gloo on it, left out where there is none."""

import socket

import pytest

from dpedu.runtime import rendezvous
from dpedu.runtime.rendezvous import loopback_interface, on_loopback


def test_names_the_loopback_interface_where_the_os_lists_interfaces(monkeypatch):
    monkeypatch.setattr(socket, "if_nameindex", lambda: [(1, "lo0"), (2, "en0")])
    assert loopback_interface() == "lo0"
    monkeypatch.setattr(socket, "if_nameindex", lambda: [(1, "eth0"), (2, "lo")])
    assert loopback_interface() == "lo"


@pytest.mark.parametrize("listing", [
    lambda: [(1, "eth0")],  # no loopback among them
    lambda: (_ for _ in ()).throw(OSError("no interfaces")),  # the OS refuses to list them
])
def test_none_where_no_loopback_interface_is_found(monkeypatch, listing):
    monkeypatch.setattr(socket, "if_nameindex", listing)
    assert loopback_interface() is None


def test_none_where_python_cannot_list_interfaces(monkeypatch):
    monkeypatch.delattr(socket, "if_nameindex")  # as on platforms without it
    assert loopback_interface() is None
    assert on_loopback() == {}  # the variable left out, never set to None


def test_this_machine_has_one():
    assert loopback_interface() is not None
    assert on_loopback() == {"GLOO_SOCKET_IFNAME": loopback_interface()}


def test_where_none_is_found_on_loopback_leaves_the_variable_out(monkeypatch):
    # a None in an environment makes Popen raise: the ranks' environment must hold strings only
    monkeypatch.setattr(rendezvous, "loopback_interface", lambda: None)
    assert on_loopback() == {}

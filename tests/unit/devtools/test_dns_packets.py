"""The DNS client of `devtools.dns`: the query it sends and how it reads answers."""

from __future__ import annotations

import socket
import struct

import pytest

from distributary.devtools.dns import DNSError, answers, query_packet


def answer_packet(ident: int, addresses: list[str], *, code: int = 0) -> bytes:
    """What a server answers to `query_packet("web.svc", ident)`: the question, then one A
    record per address, each naming the question by a compression pointer."""
    question = query_packet("web.svc", ident)[12:]
    header = struct.pack(">HHHHHH", ident, 0x8180 | code, 1, len(addresses), 0, 0)
    records = b"".join(
        b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(a) for a in addresses
    )
    return header + question + records


def test_a_query_asks_recursively_for_the_names_a_records() -> None:
    packet = query_packet("web.dns-test.svc.cluster.local.", 0x1234)
    assert packet[:12] == struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    assert packet[12:] == b"\x03web\x08dns-test\x03svc\x07cluster\x05local\x00\x00\x01\x00\x01"


def test_every_address_of_the_answer_is_read() -> None:
    assert answers(answer_packet(7, ["10.0.0.12", "10.0.0.13"]), 7) == ["10.0.0.12", "10.0.0.13"]
    assert answers(answer_packet(7, []), 7) == []


@pytest.mark.parametrize(
    ("packet", "said"),
    [
        (answer_packet(7, [], code=3), "NXDOMAIN"),
        (answer_packet(7, [], code=5), "response code 5"),
        (answer_packet(8, ["10.0.0.1"]), "another query"),
        (b"\x00\x07", "shorter than its header"),
    ],
)
def test_what_is_no_answer_is_said(packet: bytes, said: str) -> None:
    with pytest.raises(DNSError, match=said):
        answers(packet, 7)

"""Endpoints on the command line: good ones pass as given, bad ones give one clear line."""

from __future__ import annotations

import pytest
from commscope.model.errors import ConfigError
from commscope.service.endpoints import endpoint


@pytest.mark.parametrize(
    "text",
    [
        "tcp://127.0.0.1:5555",
        "tcp://127.0.0.1:1",
        "tcp://[::1]:65535",
        "tcp://*:5555",
        "ipc:///run/a",
    ],
)
def test_usable_endpoints_pass_unchanged(text: str) -> None:
    assert endpoint("--aggregator", text) == text


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("127.0.0.1:5555", "not an endpoint"),
        ("tcp://127.0.0.1", "not an endpoint"),
        ("udp://127.0.0.1:5555", "not an endpoint"),
        ("tcp://127.0.0.1:0", "port '0' is not a number in 1..65535"),
        ("tcp://127.0.0.1:65536", "port '65536' is not a number in 1..65535"),
        ("tcp://127.0.0.1:http", "port 'http' is not a number"),
        ("tcp://127.0.0.1:", "port '' is not a number"),
        ("ipc://", "not an endpoint"),
    ],
)
def test_a_bad_endpoint_names_the_flag_and_the_fault(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        endpoint("--aggregator", text)
    assert str(raised.value).startswith(f"--aggregator {text!r}: ")
    assert says in str(raised.value)

"""The network link's peak from the NICs the traces name (`pipeline/nics.py`)."""

from __future__ import annotations

import pytest
from commscope.pipeline import hosts
from commscope.pipeline.nics import nic_peak

CX6, CX7, CX8, BF3 = "15b3:101b", "15b3:1021", "15b3:1023", "15b3:a2dc"
X710 = "8086:1572"  # an Intel Ethernet port: not in the table


@pytest.mark.parametrize(
    ("named", "peak", "source"),
    [
        ([[CX7], [CX7]], 50e9, "ConnectX-7 table value 400 Gb/s, one port per rank: assumed"),
        ([[CX6]], 25e9, "ConnectX-6 table value 200 Gb/s, one port per rank: assumed"),
        ([[CX8, X710]], 100e9, "ConnectX-8 table value 800 Gb/s, one port per rank: assumed"),
        # the same rate from two models
        (
            [[BF3], [CX7]],
            50e9,
            "BlueField-3, ConnectX-7 table value 400 Gb/s, one port per rank: assumed",
        ),
        ([[], []], None, hosts.NO_NIC),
        ([[X710]], None, "no NIC named (8086:1572) is in the table: give --net-peak"),
        (
            [[CX6], [CX7]],
            None,
            "NICs of several rates named (ConnectX-6 200 Gb/s, ConnectX-7 "
            "400 Gb/s): give --net-peak",
        ),
    ],
)
def test_the_peak_of_the_named_nics(
    named: list[list[str]], peak: float | None, source: str
) -> None:
    assert nic_peak(named) == (peak, source)

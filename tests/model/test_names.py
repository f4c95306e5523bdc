"""What file names say (`model/names.py`): the host in `tensorboard_trace_handler`'s names."""

from __future__ import annotations

import pytest
from commscope.model.names import host_in_name


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("node-a_4100.1700000000123456789.pt.trace.json", "node-a"),
        ("node-a_4100.1700000000123456789.pt.trace.json.gz", "node-a"),
        (
            "ip-10-0-0-1.ec2.internal_77.1700000000123456789.pt.trace.json",
            "ip-10-0-0-1.ec2.internal",
        ),
        ("my_host_1.1700000000123456789.pt.trace.json", "my_host"),  # the pid is the last part
        ("rank0_trace.json", None),  # TorchTitan's: no host
        ("rank0.1700000000123456789.pt.trace.json", None),  # a worker name with no pid
        ("worker0_step_12.1694128201545.pt.trace.json", None),  # rank-numbered, not a host
        ("rank-3_4100.1700000000123456789.pt.trace.json", None),
        ("17_4100.1700000000123456789.pt.trace.json", None),  # digits alone: a rank or a host?
        ("no host_4100.1700000000123456789.pt.trace.json", None),  # not a host name
        ("-x_4100.1700000000123456789.pt.trace.json", None),
        ("h" * 257 + "_1.2.pt.trace.json", None),  # longer than a label
        ("node-a_4100.pt.trace.json", None),  # no time
        ("node-a_4100.1700000000123456789.json", None),
    ],
)
def test_the_host_in_a_tensorboard_trace_handler_name(name: str, host: str | None) -> None:
    assert host_in_name(name) == host

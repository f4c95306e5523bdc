"""The intra- vs inter-node section in the text report and on the HTML page (`linktext`,
`linkhtml`): hosts grouped with their sources, each link's peak with where it came from, the
per-collective rows, and n/a with its reason."""

from __future__ import annotations

from commscope.exporters import html
from commscope.exporters.linkhtml import tables
from commscope.exporters.linktext import link_lines
from commscope.model.schema import AlphaBeta, Link, LinkCollective, Links, Report

FIT = AlphaBeta(instances=3, sizes=3, alpha_s=10e-6, beta_Bps=50e9, r2=0.999)
ROW = LinkCollective(instances=3, sized=3, bus_bytes=126e6, busbw_Bps=49.4e9, peak_ratio=0.494,
                     fit=FIT)  # fmt: skip


def links(ranks: int = 4, per_host: int = 2) -> Links:
    return Links(
        hosts={str(r): f"node{r // per_host}" for r in range(ranks)},
        host_sources=dict.fromkeys(map(str, range(ranks)), "--hosts"),
        groups={"0": "inter_node", "1": "intra_node", "2": "unknown"},
        intra_node=Link(peak_Bps=450e9, peak_source="H100 table value", groups=["1"]),
        inter_node=Link(
            peak_Bps=100e9, peak_source="--net-peak", groups=["0"], collectives={"AllReduce": ROW}
        ),
        unknown_instances=5,
    )


def test_hosts_groups_and_rows_with_their_units_and_sources() -> None:
    lines = list(link_lines(Report(links=links())))
    assert "Hosts: 2 (--hosts: 4 ranks)" in lines
    assert "  node0: ranks 0-1" in lines and "  node1: ranks 2-3" in lines
    assert "Process groups: 1 intra-node, 1 inter-node, 1 unknown (5 instances)" in lines
    assert "Intra-node: peak 450 GB/s per direction (H100 table value)" in lines
    assert "Inter-node: peak 100 GB/s per direction (--net-peak)" in lines
    (row,) = [line for line in lines if line.startswith("  AllReduce")]
    assert row.split() == ["AllReduce", "3", "3", "126", "MB", "49.4", "GB/s", "49.40%",
                           "10.0", "µs", "50.0", "GB/s", "0.999"]  # fmt: skip


def test_many_hosts_show_the_first_and_how_many_more() -> None:
    lines = list(link_lines(Report(links=links(ranks=40, per_host=2))))
    assert "Hosts: 20 (--hosts: 40 ranks)" in lines
    assert "  … and 12 more hosts (every rank in the JSON)" in lines


def test_without_hosts_or_the_section_the_reason_is_said() -> None:
    unknown = Links(na_reason="no rank's host is known (Kineto traces record none): give --hosts")
    lines = list(link_lines(Report(links=unknown)))
    assert f"Hosts: unknown ({unknown.na_reason})" in lines
    assert list(link_lines(Report())) == [
        "n/a (this report was made without the intra- vs inter-node split)"
    ]


def test_the_page_has_a_table_per_link_with_the_text_reports_numbers() -> None:
    page = "\n".join(tables(Report(links=links())))
    assert "<b>Inter-node</b>: peak 100 GB/s (--net-peak)" in page
    assert "<td>49.4 GB/s</td><td>49.40%</td>" in page
    assert "2 hosts over 4 ranks" in page
    assert "Intra- vs inter-node" in html.render(Report(links=links()))

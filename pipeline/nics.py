"""The network link's peak where a trace names the NIC (pure: PCI ids in, a peak out).

A trace names its NICs by PCI id (`TraceMeta.nics`: Nsight Systems' TARGET_INFO_NIC_INFO; NCCL
Inspector's metadata and Kineto traces name none). Each id in `_NICS` gives its model and the
model's fastest port rate (an adapter can be sold with slower ports: the figure is an
assumption, said so), taken as one port per rank (one NIC per GPU, as rail-optimised clusters
are built). The run's peak is that rate when every NIC of the table the traces name has one
rate; else none, and the reason says what was named. `--net-peak` wins over all of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from commscope.pipeline.hosts import NET_PEAK_FLAG, NO_NIC

# PCI id (vendor:device, as `lspci -n` prints it) -> (model, its fastest port in Gb/s).
# Ids: the PCI ID Repository (https://pci-ids.ucw.cz/read/PC/15b3), as
# k8snetworkplumbingwg/sriov-network-operator's supported-NIC list repeats them.
# Rates: NVIDIA's product documentation of each adapter.
_NICS: Final[dict[str, tuple[str, int]]] = {
    # EDR InfiniBand / 100GbE (docs.nvidia.com/networking/display/ConnectX5VPI)
    "15b3:1017": ("ConnectX-5", 100),
    "15b3:1019": ("ConnectX-5 Ex", 100),
    # HDR InfiniBand / 200GbE (docs.nvidia.com/networking/display/ConnectX6VPI)
    "15b3:101b": ("ConnectX-6", 200),
    # one 200GbE port or two of 100 (nvidia.com ConnectX-6 Dx datasheet)
    "15b3:101d": ("ConnectX-6 Dx", 200),
    # NDR InfiniBand / 400GbE, single-port OSFP (docs.nvidia.com/networking/display/ConnectX7VPI)
    "15b3:1021": ("ConnectX-7", 400),
    # XDR InfiniBand 800 Gb/s (docs.nvidia.com/networking/display/connectx8supernic)
    "15b3:1023": ("ConnectX-8", 800),
    # its integrated ConnectX-7: 400 Gb/s (docs.nvidia.com/networking/display/bf3dpu)
    "15b3:a2dc": ("BlueField-3", 400),
}
# Not in the table: AWS EFA (vendor 1d0f), whose device id does not say its rate (100 Gb/s
# per device on p4d and p5, 200 on p5en: docs.aws.amazon.com/ec2 "Elastic Fabric Adapter").


def net_peak(given_Bps: float | None, named: Iterable[Iterable[str]]) -> tuple[float | None, str]:
    """The network link's peak and its source: `given_Bps` (--net-peak) when given, else
    `nic_peak` of the NICs the traces name."""
    return (given_Bps, NET_PEAK_FLAG) if given_Bps is not None else nic_peak(named)


def nic_peak(named: Iterable[Iterable[str]]) -> tuple[float | None, str]:
    """(bytes/s per direction, its source) from the NICs the traces name (`TraceMeta.nics`
    of each file), or (None, why not)."""
    ids = sorted({nic for nics in named for nic in nics})
    known = sorted({_NICS[nic] for nic in ids if nic in _NICS})
    if not ids:
        return None, NO_NIC
    if not known:
        return None, f"no NIC named ({', '.join(ids[:4])}) is in the table: give {NET_PEAK_FLAG}"
    if len({gbps for _, gbps in known}) > 1:
        models = ", ".join(f"{model} {gbps} Gb/s" for model, gbps in known)
        return None, f"NICs of several rates named ({models}): give {NET_PEAK_FLAG}"
    models = ", ".join(model for model, _ in known)
    gbps = known[0][1]
    return gbps * 1e9 / 8, f"{models} table value {gbps} Gb/s, one port per rank: assumed"

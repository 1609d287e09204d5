"""The link between two GPUs: how long one stage's hand-off (or one tensor-parallel all-reduce) takes to cross it.

A link is a payload bandwidth one way and a fixed cost per transfer:

* **PCIe, from its name** (`pcie1x4`, `pcie4x16`: generation 1-5, width x1/x2/x4/x8/x16). A lane's coded rate is the
  spec's transfer rate times its line code's payload share: 2.5 and 5 GT/s with 8b/10b for generations 1 and 2, 8,
  16 and 32 GT/s with 128b/130b for 3, 4 and 5 (0.25, 0.5, 0.985, 1.97 and 3.94 GB/s a lane). Of that, a transfer's
  payload gets `PAYLOAD_EFFICIENCY` (an assumption: each transaction layer packet carries at most 256 payload bytes
  behind about 24 bytes of header, sequence number, CRC and framing, and flow-control and ACK packets share the
  lanes; 85% is the share assumed, not measured).
* **NVLink, from a card's spec sheet** (`nvlink`): links x GB/s per link one way, the same payload share assumed.
* **Measured** (`measured`, `--link-gbps`): what a benchmark between the two GPUs read (nccl-tests' `sendrecv_perf`
  bus bandwidth at the hand-off's size, or a `torch.distributed` send/recv timed); taken as the payload rate itself.

The fixed cost of a transfer (`latency_us`, default `HANDOFF_LATENCY_US`) is an assumption too: the order of a small
NCCL send/recv between two GPUs in nccl-tests' small-message results. vLLM's hand-off also sends its metadata over the
CPU process group first, and GPUs without peer-to-peer access (consumer and mining cards, as a rule) stage every
transfer through host memory: pass a measured `--link-latency-us` where that matters. Under host staging the two
copies pipeline in NCCL's chunks, so the bandwidth stays the slower link's.

Pure arithmetic: nothing here prints or reads the environment.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from .plan import PlanError

#: PCIe generation -> (transfer rate GT/s a lane, payload bits, coded bits of its line code): the PCIe base specs
PCIE_GENERATIONS: dict[int, tuple[float, int, int]] = {
    1: (2.5, 8, 10),  # PCIe 1.x: 8b/10b
    2: (5.0, 8, 10),  # PCIe 2.x: 8b/10b
    3: (8.0, 128, 130),  # PCIe 3.x onwards: 128b/130b
    4: (16.0, 128, 130),
    5: (32.0, 128, 130),
}
#: the link widths cards and slots negotiate (x12 and x32 are in the spec but not on GPUs)
PCIE_WIDTHS = (1, 2, 4, 8, 16)
#: the share of a link's coded rate a large transfer's payload gets (an assumption: the module docstring)
PAYLOAD_EFFICIENCY = 0.85
#: the fixed cost of one hand-off or collective, microseconds (an assumption: the module docstring)
HANDOFF_LATENCY_US = 15.0

_PCIE = re.compile(r"pcie(\d+)x(\d+)")
_PCIE_HINT = (
    "write pcieGxW: generation 1-5, width 1, 2, 4, 8 or 16, e.g. pcie2x4 (a CMP 170HX box), pcie4x16 (an A100 PCIe "
    "card); or pass what a benchmark measured with --link-gbps"
)


class LinkError(PlanError):
    """A link the model cannot use: a malformed name, a bandwidth or latency that is not a positive number."""


@dataclass(frozen=True)
class Link:
    """A link between two GPUs as the step model sees it."""

    name: str  # "pcie1x4", "nvlink 12 x 25 GB/s", "measured"
    gbps: float  # payload bandwidth one way, GB/s (10^9 bytes a second)
    latency_us: float  # fixed cost of one transfer
    source: str  # where `gbps` comes from, for the report

    def transfer_ms(self, nbytes: float) -> float:
        """One transfer of `nbytes` one way: the fixed cost plus the bytes at the payload rate."""
        return self.latency_us / 1e3 + nbytes / (self.gbps * 1e9) * 1e3

    def all_reduce_ms(self, nbytes: float, ranks: int) -> float:
        """A ring all-reduce of `nbytes` over `ranks` GPUs on this link: each GPU sends and receives 2(n-1)/n of the
        bytes, and the collective costs one fixed latency (small all-reduces are latency-bound; the ring's hops are
        inside it). Zero for one rank."""
        if ranks <= 1:
            return 0.0
        return self.latency_us / 1e3 + 2 * (ranks - 1) / ranks * nbytes / (self.gbps * 1e9) * 1e3

    def with_latency(self, latency_us: float | None) -> Link:
        """The same link with another fixed cost per transfer (None: unchanged)."""
        if latency_us is None:
            return self
        return replace(self, latency_us=_latency(latency_us))

    def describe(self) -> str:
        return f"{self.name} ({self.source}; {self.latency_us:g} us a transfer)"

    def to_json(self) -> dict:
        return {"name": self.name, "gbps": self.gbps, "latency_us": self.latency_us, "source": self.source}


def lane_gbps(generation: int) -> float:
    """A PCIe lane's coded data rate one way, GB/s: transfer rate x payload bits / coded bits / 8."""
    rate, payload, coded = PCIE_GENERATIONS[generation]
    return rate * payload / coded / 8


def pcie(spec: str, latency_us: float | None = None) -> Link:
    """The link `spec` names (`pcie1x4`, `pcie4x16`, case-insensitive), at `PAYLOAD_EFFICIENCY` of its coded rate."""
    m = _PCIE.fullmatch(spec.strip().lower())
    if not m:
        raise LinkError(f"--link {spec!r} is not a PCIe link name", key="--link", hint=_PCIE_HINT)
    gen, width = int(m.group(1)), int(m.group(2))
    if gen not in PCIE_GENERATIONS:
        raise LinkError(
            f"--link {spec!r}: PCIe generation {gen} is not one of {min(PCIE_GENERATIONS)}-{max(PCIE_GENERATIONS)}",
            key="--link",
            hint=_PCIE_HINT,
        )
    if width not in PCIE_WIDTHS:
        raise LinkError(
            f"--link {spec!r}: width x{width} is not a PCIe link width ({', '.join(f'x{w}' for w in PCIE_WIDTHS)})",
            key="--link",
            hint=_PCIE_HINT,
        )
    rate, payload, coded = PCIE_GENERATIONS[gen]
    coded_gbps = lane_gbps(gen) * width
    return Link(
        f"pcie{gen}x{width}",
        coded_gbps * PAYLOAD_EFFICIENCY,
        _latency(HANDOFF_LATENCY_US if latency_us is None else latency_us),
        f"PCIe gen {gen} x{width}: {rate:g} GT/s x {width} lanes, {payload}b/{coded}b = {coded_gbps:.3g} GB/s coded, "
        f"{PAYLOAD_EFFICIENCY:.0%} of it payload (assumed)",
    )


def nvlink(links: int, link_gbps: float, latency_us: float | None = None) -> Link:
    """A card's NVLink from its spec sheet: `links` links of `link_gbps` GB/s one way each, at the payload share."""
    total = links * link_gbps
    return Link(
        f"nvlink {links} x {link_gbps:g} GB/s",
        total * PAYLOAD_EFFICIENCY,
        _latency(HANDOFF_LATENCY_US if latency_us is None else latency_us),
        f"NVLink: {links} links x {link_gbps:g} GB/s one way = {total:g} GB/s, {PAYLOAD_EFFICIENCY:.0%} of it payload "
        "(assumed)",
    )


def measured(gbps: float, latency_us: float | None = None) -> Link:
    """A link whose payload bandwidth one way a benchmark measured (`--link-gbps`)."""
    if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not math.isfinite(gbps) or gbps <= 0:
        raise LinkError(
            f"--link-gbps is {gbps!r}; it must be a positive number of GB/s",
            key="--link-gbps",
            hint="pass the payload bandwidth one way a benchmark read between two of the GPUs, e.g. 0.8",
        )
    return Link(
        f"measured {gbps:g} GB/s",
        float(gbps),
        _latency(HANDOFF_LATENCY_US if latency_us is None else latency_us),
        f"{gbps:g} GB/s one way, measured (--link-gbps)",
    )


def _latency(us: float) -> float:
    if isinstance(us, bool) or not isinstance(us, (int, float)) or not math.isfinite(us) or us < 0:
        raise LinkError(
            f"--link-latency-us is {us!r}; it must be a number of microseconds >= 0",
            key="--link-latency-us",
            hint=f"leave it out for the assumed {HANDOFF_LATENCY_US:g} us, or pass a measured small-message latency",
        )
    return float(us)

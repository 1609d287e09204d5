"""The GPUs the step model and the projection know by name: spec-sheet memory bandwidth, memory and the link between
two of them (`vllm-compose pp-plan --card`, `benchmarks/projection.py --card`).

Every figure is a public spec-sheet number, not a measurement; `Card.uncertain` says what is not settled. A card's
HBM bandwidth is the peak: the step model reads weights at it (or at a share of it) and so gives a lower bound on a
step's time; a measured `--layer-ms` replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import link as links
from .plan import PlanError


@dataclass(frozen=True)
class Card:
    """A GPU as the step model sees it."""

    name: str
    hbm_gbs: float  # peak memory bandwidth, GB/s (10^9 bytes)
    memory_gb: float  # memory on the card, GB as the spec sheet gives it
    link: links.Link  # what two of these cards talk over in a multi-GPU box (hand-offs, all-reduces)
    source: str
    uncertain: str = ""  # what in these figures is not settled ("" when nothing)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "hbm_gbs": self.hbm_gbs,
            "memory_gb": self.memory_gb,
            "link": self.link.to_json(),
            "source": self.source,
            "uncertain": self.uncertain,
        }


#: the cards of the published numbers (docs/benchmarks.md): NVIDIA's A100 and A800 datasheets, NVIDIA's CMP listing
CARDS: dict[str, Card] = {
    c.name: c
    for c in (
        Card(
            "A100-SXM4-80GB",
            2039.0,
            80.0,
            links.nvlink(12, 25.0),
            "NVIDIA A100 datasheet: 80GB SXM4, HBM2e 2,039 GB/s, NVLink 3 at 600 GB/s both ways (12 links)",
        ),
        Card(
            "A100-PCIe-80GB",
            1935.0,
            80.0,
            links.pcie("pcie4x16"),
            "NVIDIA A100 datasheet: 80GB PCIe, HBM2e 1,935 GB/s, PCIe 4.0 x16 (an NVLink bridge joins pairs only)",
        ),
        Card(
            "A800-SXM4-80GB",
            2039.0,
            80.0,
            links.nvlink(8, 25.0),
            "NVIDIA A800 datasheet: 80GB SXM4, HBM2e 2,039 GB/s, NVLink at 400 GB/s both ways (8 links)",
            "the form factor of the published A800 numbers is not stated",
        ),
        Card(
            "CMP-170HX",
            1493.0,
            8.0,
            links.pcie("pcie1x16"),
            "NVIDIA CMP 170HX listing: 8 GB HBM2e, 1,493 GB/s; PCIe Gen1 x16, the card's own link capability as 170HX "
            "owners read it with lspci (2.5 GT/s, x16)",
            "the link is what the card advertises; boxes train it narrower (x8 on bifurcated slots; the community's "
            "8-card PP8 box runs PCIe Gen2 x4 after a link patch): pass --link for yours; 8 GB a card (64 GB for 8) cannot hold "
            "GLM-5.x's weights, so the published 170HX setups differ from the card as listed; its reported compute "
            "limits are not modelled (bandwidth only)",
        ),
    )
}


def card(name: str) -> Card:
    """The card named `name` (case-insensitive), or a `PlanError` listing the known ones."""
    for key, c in CARDS.items():
        if key.lower() == name.strip().lower():
            return c
    raise PlanError(
        f"--card {name!r} is not a card the step model knows",
        key="--card",
        hint=f"pass one of {', '.join(CARDS)}, or describe yours with --layer-ms and --link / --link-gbps",
    )

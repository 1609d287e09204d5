"""The audit: where every hunk of an applied patch sequence landed, and whether that is where it belongs.

It works on the stock and patched trees alone, whatever applied the patches, and shares no code with the placement
engine, so it can catch the engine's own mistakes (tests/tool/test_layering.py holds it to that: nothing it imports,
directly or through another module, reaches `placement` or `scope`). Three modules, each the spec of its part:

1. `align`: the stock and patched texts of a file aligned line by line, and each hunk's change groups looked up in
   that alignment (where the hunk *landed*);
2. `anchors`: what a hunk's own lines say about where it belongs, on parso's tokens (its container, siblings and
   def chain by identity);
3. `landings`: the two compared, hunk by hunk, into an `AuditReport` (`audit(stock, patched, patches)`).
"""

from __future__ import annotations

from ..verdicts import AuditVerdict
from .landings import BAD_VERDICTS, AuditHunk, AuditReport, audit

__all__ = ["BAD_VERDICTS", "AuditHunk", "AuditReport", "AuditVerdict", "audit"]

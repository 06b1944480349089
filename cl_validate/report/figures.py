"""The figure a table cell shows for a cost check, the same on the console and in Markdown:
bytes the transforms move with their share of the traffic, kernels left to dlight's Fallback,
the transforms' share of kernel time — each with its budget where one applies."""

from __future__ import annotations

from cl_validate.analysis.model import bytes_text, share_text
from cl_validate.checks.cost import BYTES, FALLBACK_KERNELS, TIME_SHARE
from cl_validate.checks.verdict import Measured


def cost_figure(check: str, m: Measured, sep: str = "/") -> str | None:
    """``1.20 MB 0.6%``, ``1.20 MB 0.6% / 0.60 MB``, ``2 / 3``, ``0.02% / 5.00%``; None for
    another check or when nothing was measured."""
    if check == BYTES and m.transform_bytes is not None:
        share = f" {share_text(m.transform_bytes / m.traffic)}" if m.traffic else ""
        limit = f"{sep}{bytes_text(int(m.budget))}" if m.budget is not None else ""
        return f"{bytes_text(m.transform_bytes)}{share}{limit}"
    if check == FALLBACK_KERNELS and m.fallback_kernels is not None:
        return f"{m.fallback_kernels}" + (f"{sep}{m.budget:g}" if m.budget is not None else "")
    if check == TIME_SHARE and m.time_share is not None:
        return share_text(m.time_share) + (f"{sep}{share_text(m.budget)}"
                                           if m.budget is not None else "")
    return None

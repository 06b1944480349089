"""Why a runtime layout transform is there: the reasons attribution gives, and the next step.

Plain data, no TVM: an `Attribution` travels inside the kernel list from the case process that
compiled a case to the parent that judges and reports it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass


class Reason(enum.Enum):
    """Where a transform comes from; the value is how reports say it."""

    INPUT_BOUNDARY = "graph input boundary"
    OUTPUT_BOUNDARY = "graph output boundary"
    OWN_PERMUTE = "the model's own permute"
    IMPORTED = "a permute inserted to convert another op"
    FOLDED = "the model's permute folded with one inserted to convert another op"
    NO_LAYOUT_RULE = "op without a layout rule"
    DECLINED = "kept by a pass that declined to remove it"
    KEPT_LAYOUT = "kept in a layout TVM lowers"
    PINNED = "layout pinned by [layout_overrides]"
    WEIGHT = "unfolded weight"
    UNTRACED = "left by the layout conversion, cause not traced"

    @property
    def next_step(self) -> str:
        """What to do about a transform of this kind (``{op}``: the op that forced it)."""
        return _NEXT_STEP[self]


_NEXT_STEP = {
    Reason.INPUT_BOUNDARY: "declare the input layout = \"NHWC\" if callers can pass "
                           "channels-last data",
    Reason.OUTPUT_BOUNDARY: "declare [[outputs]] layout = \"NHWC\" if callers accept "
                            "channels-last data",
    Reason.OWN_PERMUTE: "the model permutes the tensor itself: remove the permute from the "
                        "model or let a cleanup pass cancel it against ConvertLayout's",
    Reason.IMPORTED: "inserted to convert {op} (by TVM's importer, or by the cl_validate pass "
                     "named): a conversion that needs none, or a pass that cancels it against "
                     "its neighbours, removes it",
    Reason.FOLDED: "what is left of the model's permute and one inserted to convert {op}: look "
                   "at both (cl-validate show CASE --stage cleanup)",
    Reason.DECLINED: "{op} could read or write it inside a kernel but declined, as the reason "
                     "says (the program would be slower, or it cannot prove it exact): "
                     "budget it, or change the model so the pass need not decline",
    Reason.NO_LAYOUT_RULE: "give {op} a layout rule (or a cl_validate pass that carries the "
                           "layout through it) so it runs in NHWC",
    Reason.KEPT_LAYOUT: "TVM cannot lower {op} in the desired layout, so it stays in the one "
                        "it was imported in: budget the transforms at its borders (or lower it "
                        "in NHWC in a pipeline of your own)",
    Reason.UNTRACED: "look at the IR around it: cl-validate show CASE --stage cleanup",
    Reason.WEIGHT: "a weight transform did not fold: bind the weights as constants before "
                   "folding (the fold_params stage)",
    Reason.PINNED: "expected: the case keeps this module in another layout; budget the "
                   "transforms at its borders",
}


@dataclass(frozen=True)
class Attribution:
    """One transform's reason, the Relax op that forced it, and its PyTorch source (for
    `Reason.DECLINED`: the pass that declined, and `why`)."""

    reason: Reason
    relax_op: str | None = None  # the Relax op that forced the transform
    source: str | None = None  # PyTorch source: "layer1.0.conv1 (conv2d)"
    why: str | None = None  # why the pass declined (`Reason.DECLINED`)

    def to_json(self) -> str:
        """The form carried through TVM (a span's source name, then a PrimFunc attribute)."""
        return json.dumps({"reason": self.reason.name, "op": self.relax_op,
                           "source": self.source, "why": self.why})

    @staticmethod
    def from_json(text: str) -> Attribution | None:
        try:
            d = json.loads(text)
            return Attribution(Reason[d["reason"]], d.get("op"), d.get("source"), d.get("why"))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        parts = [self.reason.value]
        if self.relax_op and self.reason is Reason.DECLINED:
            parts[0] = f"kept by {self.relax_op}, which declined it" + (
                f": {self.why}" if self.why else "")
        elif self.relax_op and self.reason is Reason.NO_LAYOUT_RULE:
            parts[0] = f"{self.relax_op} has no layout rule"
        elif self.relax_op and self.reason is Reason.KEPT_LAYOUT:
            parts[0] = f"{self.relax_op} kept in a layout TVM lowers"
        elif self.relax_op and self.reason is Reason.IMPORTED:
            parts[0] = f"a permute inserted to convert {self.relax_op}"
        elif self.relax_op and self.reason is Reason.FOLDED:
            parts[0] = f"the model's permute folded with one inserted to convert {self.relax_op}"
        if self.source:
            parts.append(f"from {self.source}")
        return ", ".join(parts)

    def next_step(self) -> str:
        return self.reason.next_step.format(op=self.relax_op or "the op")

"""A user pipeline that forgets to bind the weights: weight transforms survive to run time.

It exists to prove the `layout_transforms` check catches an unfolded weight transform (the
failure mode from the TVM forum thread on weight layout_transform calls).
"""

from __future__ import annotations

from tvm import relax

from cl_validate.compile.pipeline import PipelineContext, Stage, standard_stages


def nhwc_unbound(ctx: PipelineContext) -> list[Stage]:
    stages = standard_stages(ctx, layout=[Stage(
        "convert_layout", relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]}))])
    return [s for s in stages if s.name != "fold_params"]

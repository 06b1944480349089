"""extra_layout_rules: ConvertLayout keeps clip in NHWC while the rule is lent, and the op
registry is as before afterwards."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import Op
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes import RULELESS_UNARY_OPS, extra_layout_rules
from cl_validate.ir import count_permutes

NHWC = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


@I.ir_module
class ConvClipConv:
    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32"), w1: R.Tensor((8, 3, 3, 3), "float32"),
             w2: R.Tensor((8, 8, 3, 3), "float32")) -> R.Tensor((1, 8, 8, 8), "float32"):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            a = R.nn.conv2d(x, w1, padding=[1, 1, 1, 1])
            b = R.clip(a, 0, 6)
            gv = R.nn.conv2d(b, w2, padding=[1, 1, 1, 1])
            R.output(gv)
        return gv


def test_clip_gets_a_rule_only_inside_the_with() -> None:
    assert Op.get("relax.clip").get_attr("FRelaxInferLayout") is None
    without = relax.transform.ConvertLayout(NHWC)(ConvClipConv)
    with extra_layout_rules() as added:
        assert "relax.clip" in added
        converted = relax.transform.ConvertLayout(NHWC)(ConvClipConv)
    assert Op.get("relax.clip").get_attr("FRelaxInferLayout") is None
    # Input and output boundary only; without the rule, a transpose pair wraps the clip.
    assert count_permutes(converted) == 2
    assert count_permutes(without) == 4


def test_ops_with_a_rule_keep_their_own() -> None:
    relu_rule = Op.get("relax.nn.relu").get_attr("FRelaxInferLayout")
    with extra_layout_rules([*RULELESS_UNARY_OPS, "relax.nn.relu"]) as added:
        assert "relax.nn.relu" not in added
    assert Op.get("relax.nn.relu").get_attr("FRelaxInferLayout").same_as(relu_rule)


def test_python_can_build_a_layout_rules_result() -> None:
    """What the module docstring says: tvm-ffi reflection constructs InferLayoutOutput."""
    from tvm.s_tir.data_layout import slayout

    d = tvm.ir.make_node("relax.transform.LayoutDecision", layout=slayout("NHWC"),
                         is_unknown_dim=False)
    out = tvm.ir.make_node("relax.transform.InferLayoutOutput", input_layouts=[d],
                           output_layouts=[d], new_attrs=None, new_args={})
    assert str(out.output_layouts[0].layout.name) == "NHWC"

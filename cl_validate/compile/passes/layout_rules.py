"""Layout rules for rule-less unary ops, lent to ConvertLayout for the duration of a ``with``.

TVM 0.27 does call a Python function registered as ``FRelaxInferLayout`` (checked: ConvertLayout
calls it with the call, the desired layouts and the layout map). Its result types have no
Python class or registered constructor, but tvm-ffi's reflection builds any object from its
fields (checked in 0.27 with apache-tvm-ffi 0.1.15)::

    d = tvm.ir.make_node("relax.transform.LayoutDecision",
                         layout=tvm.s_tir.data_layout.slayout("NHWC"), is_unknown_dim=False)
    tvm.ir.make_node("relax.transform.InferLayoutOutput", input_layouts=[d],
                     output_layouts=[d], new_attrs=None, new_args={})

So a rule written in Python is possible; we still carry layouts through rule-less ops with our
own passes (SinkPermutes and friends), which see the whole graph and only rewrite where that
lowers the transform count, whereas a rule decides one call at a time and changes every
pipeline in the process while it is registered. Here we only lend an existing C++ rule to
unary elementwise ops, where it is exactly right: ``relax.nn.relu``'s rule
(InferLayoutUnaryEwise) says "output in the input's layout", which holds for ``relax.clip``
too (its bounds are PrimValues, not tensors, and the rule rewrites only tensor arguments).

This fixes the cause rather than the symptom, but it has to be in place *before* ConvertLayout
runs, and op attributes are process-global, hence a context manager that removes what it added::

    with extra_layout_rules():
        mod = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)

``SinkPermutes`` reaches the same IR after the fact, so the cleanup passes do not depend on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from tvm.ir import Op

RULE_KEY = "FRelaxInferLayout"
#: Unary elementwise ops TVM 0.27 ships without a layout rule (ReLU6/Hardtanh/Hardswish/
#: Hardsigmoid import as clip; LeakyReLU as nn.leakyrelu; nn.softplus when not decomposed).
RULELESS_UNARY_OPS = ("relax.clip", "relax.nn.leakyrelu", "relax.nn.softplus")
_UNARY_RULE_DONOR = "relax.nn.relu"


@contextmanager
def extra_layout_rules(ops: Iterable[str] = RULELESS_UNARY_OPS) -> Iterator[list[str]]:
    """Give each op in ``ops`` that has no layout rule the unary elementwise rule; yields the
    names actually given one, and takes exactly those away again on exit. An op that has a
    rule (a later TVM, or another caller) keeps its own."""
    rule = Op.get(_UNARY_RULE_DONOR).get_attr(RULE_KEY)
    added: list[str] = []
    try:
        for name in ops:
            op = Op.get(name)
            if op.get_attr(RULE_KEY) is None:
                op.set_attr(RULE_KEY, rule)
                added.append(name)
        yield added
    finally:
        for name in added:
            Op.get(name).reset_attr(RULE_KEY)


__all__ = ["RULELESS_UNARY_OPS", "extra_layout_rules"]

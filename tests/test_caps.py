"""No compile step stops short in silence (issue #38, item 5).

- SinkPermutes runs at most `MAX_ROUNDS` rounds. A graph that needs more rounds than the cap
  gets a note, which the compile collects per stage (`Compiled.capped`), the measurement
  carries, and the compile and layout_transforms verdicts show; run on its own, outside a
  compile, the pass warns.
- The attribution's walk up to what decided a transform's layout has no step limit (it only
  goes to earlier bindings): a cause 100 ops away is found, where the old 64-step cap left
  the transform "untraced".
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import tvm
from tvm import relax
from tvm.relax import op as R
from tvm.script import ir as I
from tvm.script import relax as RS

import cl_validate.compile.passes.sink_rounds as sink
from cl_validate.checks.judge import judge
from cl_validate.checks.verdict import Status
from cl_validate.compile.attribution import annotate_transforms, has_layout_rule
from cl_validate.compile.context import Stage
from cl_validate.compile.passes import SinkPermutes
from cl_validate.compile.passes._util import PassNoteWarning, canonicalize, collect_notes
from cl_validate.compile.program import Compiled, _run_stages
from cl_validate.ir import bindings, op_name
from cl_validate.measurements.attribution import Attribution, Reason
from cl_validate.measurements.kernel_list import Kernel, KernelList
from cl_validate.measurements.measurement import Measurement
from cl_validate.spec import load_case
from tests.conftest import MINIMAL

T = RS.Tensor((1, 4, 4, 4), "float32")


@I.ir_module
class TwoRounds:
    """A graph SinkPermutes needs two rounds for: the first round's region leaves the
    permute (``lv`` after it) that seeds the second's."""

    @RS.function
    def main(x: T):
        with RS.dataflow():
            lv = RS.permute_dims(x, axes=[0, 2, 1, 3])
            lv1 = RS.add(lv, lv)
            lv2 = RS.permute_dims(lv1, axes=[0, 1, 3, 2])
            lv3 = RS.add(lv2, x)
            lv4 = RS.permute_dims(lv3, axes=[0, 2, 3, 1])
            lv5 = RS.negative(lv4)
            lv6 = RS.add(lv5, lv4)
            lv7 = RS.permute_dims(lv6, axes=[0, 1, 3, 2])
            gv = (lv7, lv3)
            RS.output(gv)
        return gv


def _transposes(mod: tvm.IRModule) -> int:
    return sink.runtime_cost(mod["main"])[0]


def test_the_graph_needs_two_rounds():
    """The premise: each round of SinkPermutes removes one transpose here (4 -> 3 -> 2), so a
    cap of one round stops with a transpose left that the pass would remove."""
    start = sink.fold_permutes(canonicalize(TwoRounds["main"]))
    one = sink.sink_permutes_once(start)
    two = sink.sink_permutes_once(one)
    assert [sink.runtime_cost(f)[0] for f in (start, one, two)] == [4, 3, 2]
    with collect_notes() as notes:
        assert _transposes(SinkPermutes()(TwoRounds)) == 2
    assert notes == []  # under the real cap: nothing to say


def test_sink_permutes_notes_stopping_at_its_cap(monkeypatch):
    monkeypatch.setattr(sink, "MAX_ROUNDS", 1)
    with collect_notes() as notes:
        capped = SinkPermutes()(TwoRounds)
    assert _transposes(capped) == 3  # stopped after one round: one transpose more
    assert notes == [
        "SinkPermutes stopped at its cap of 1 rounds with run-time transforms still going "
        "down (3 transposes -> 2 transposes in the next round): more transforms may remain "
        "than the pass would leave"]


def test_a_cap_reached_at_the_fixpoint_is_not_noted(monkeypatch):
    """Two rounds are all the graph needs: a cap of two stops nothing."""
    monkeypatch.setattr(sink, "MAX_ROUNDS", 2)
    with collect_notes() as notes:
        assert _transposes(SinkPermutes()(TwoRounds)) == 2
    assert notes == []


def test_outside_a_compile_the_cap_warns(monkeypatch):
    monkeypatch.setattr(sink, "MAX_ROUNDS", 1)
    with pytest.warns(PassNoteWarning, match="SinkPermutes stopped at its cap of 1 rounds"):
        SinkPermutes()(TwoRounds)


def test_the_compile_collects_the_note_by_stage(monkeypatch):
    """The pipeline runner collects what the passes of each stage note, through a
    Sequential of TVM passes as the ``cleanup`` stage is; a stage run again starts over."""
    monkeypatch.setattr(sink, "MAX_ROUNDS", 1)
    front = SimpleNamespace(mod=TwoRounds, import_seconds=0.0)

    def pipeline(_ctx):
        return [Stage("cleanup", tvm.transform.Sequential([SinkPermutes()]))]

    compiled = Compiled("llvm")
    for _ in range(2):  # compile_case runs the stages again to keep a layout TVM lowers
        mod = _run_stages(compiled, front, pipeline, None)
        assert _transposes(mod) == 3
        assert len(compiled.capped) == 1
        assert compiled.capped[0].startswith("cleanup: SinkPermutes stopped at its cap of 1")


def test_the_verdicts_say_a_pass_stopped_at_its_cap(write_case):
    case = load_case(write_case(MINIMAL))
    note = ("cleanup: SinkPermutes stopped at its cap of 8 rounds with run-time transforms "
            "still going down (3 transposes -> 2 transposes in the next round)")
    kernels = KernelList([Kernel(0, "fused_conv2d_relu", ("conv2d", "relu"))])
    m = Measurement("llvm", kernels=kernels, compile_seconds=0.5, seconds=1.0, capped=[note])
    result = judge(case, m)
    compiled = result.check("compile")
    assert compiled.status is Status.PASSED
    assert compiled.message.endswith(f"; {note}")
    assert f"note: {note}" in result.check("layout_transforms").body


def _chain(n: int) -> tvm.IRModule:
    """``x`` (an NCHW input) through `n` ReLUs (which follow their input's layout), then a
    transpose to NHWC and one more op, the transform between them in the middle of main."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for _ in range(n):
                v = bb.emit(R.nn.relu(v))
            t = bb.emit(R.permute_dims(v, [0, 2, 3, 1]))
            gv = bb.emit_output(R.nn.relu(t))
        bb.emit_func_output(gv)
    return bb.get()


def _attribution(mod: tvm.IRModule) -> Attribution:
    (call,) = [b.value for b in bindings(mod["main"])
               if op_name(b.value) == "relax.permute_dims"]
    found = Attribution.from_json(str(call.span.source_name.name))
    assert found is not None
    return found


@pytest.mark.parametrize("ops", [3, 100])
def test_attribution_walks_as_far_as_the_cause(ops):
    """The transform follows the input's layout through every ReLU, however many: the input
    is the cause (with the old 64-step cap, 100 ReLUs read "untraced")."""
    assert has_layout_rule("relax.nn.relu")  # the premise: ReLU follows its input's layout
    att = _attribution(annotate_transforms(_chain(ops), {}))
    assert (att.reason, att.source) == (Reason.INPUT_BOUNDARY, "input 'x'")

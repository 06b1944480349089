"""Quantized networks as PT2E makes them: modules torch.export made are taken as they are (they
refuse ``eval()``), the layout is carried through QDQ chains to the floor, and a model's own
exception is the model's error, not the tool's."""

from __future__ import annotations

import pytest

from cl_validate.checks.compile import CaseKind
from cl_validate.checks.verdict import Status
from cl_validate.compile.factory import build_model
from cl_validate.measurements.attribution import Reason
from cl_validate.measurements.measurement import Measurement
from cl_validate.session.case_session import CaseSession
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions

CASE = """
model = "quant_models:{model}"
targets = ["llvm"]
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
layout = "{layout}"
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
layout_transforms = {budget}
[tolerance]
rtol = 0.0
atol = 1e-4
"""


def _case(write_case, model: str, layout: str = "NCHW", budget: int = 1):
    return load_case(write_case(CASE.format(model=model, layout=layout, budget=budget)))


@pytest.mark.parametrize("model", ["exported_module", "exported_program"])
def test_a_module_torch_export_made_is_taken_as_it_is(write_case, model):
    import torch

    with pytest.raises(NotImplementedError):  # what the tool must not call
        torch.export.export(torch.nn.ReLU(), (torch.ones(1),)).module().eval()
    built = build_model(_case(write_case, model))
    assert isinstance(built, torch.fx.GraphModule)


def test_a_broken_eval_is_the_models_error_with_its_first_line(write_case):
    case = _case(write_case, "broken_eval")
    got: list[Measurement] = []
    CaseSession(case, RunOptions(isolate=False)).start(lambda m, k, c: got.append(m))
    (m,) = got
    assert m.error is not None and m.error.kind == CaseKind.MODEL_ERROR
    msg = m.error.message
    assert msg.startswith(f"{case.path.name}:1: ") or f"{case.path.name}:1: " in msg
    assert "RuntimeError: this model cannot leave training mode" in msg
    assert "quant_models.py:" in msg and "(hint:" in msg and "second line" not in msg
    assert "Traceback" in m.error.detail


@pytest.mark.compile
@pytest.mark.parametrize(("layout", "floor"), [("NCHW", 1), ("NHWC", 0)])
def test_pt2e_network_reaches_the_layout_floor(write_case, layout, floor):
    """convert_pt2e's model as it is: QDQ around every conv, the residual add, the concat and
    the pools, per-channel int8 weights; NHWC is carried through every QDQ chain and the
    int8 weights' layout change folds."""
    pytest.importorskip("torchao")
    case = _case(write_case, "pt2e_block", layout, floor)
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    for check in ("compile", "layout", "layout_transforms", "numerics"):
        assert result.check(check).status is Status.PASSED, result.check(check).message
    assert result.kernels is not None
    assert not result.kernels.weight_transforms
    names = " ".join(k.name for k in result.kernels)
    assert "quantize" in names and "conv2d" in names


@pytest.mark.compile
def test_a_quantized_flatten_into_a_linear_folds_into_its_weight(write_case):
    """A quantized VGG-style head: PT2E's max pool (values and unused indices) and the QDQ
    pairs between the pools, the flatten and the Linear kept the pools in NCHW behind a
    transpose of the feature map. The pools run in NHWC and the flatten's transpose goes
    into the Linear's weight rows, as in the float model: the input's transform is all that
    is left, and the Linear still computes in integers."""
    pytest.importorskip("torchao")
    case = _case(write_case, "flatten_head", "NCHW", 1)
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    for check in ("compile", "layout", "layout_transforms", "numerics"):
        assert result.check(check).status is Status.PASSED, result.check(check).message
    products = result.check("float_qdq_products").figures
    assert (products.float_products, products.integer_products) == (0, 3), products


@pytest.mark.compile
def test_a_channel_shuffle_after_a_quantized_concat_costs_what_the_float_one_does(write_case):
    """PT2E's pair on the concat's output stood between the concat and the shuffle's
    reshape → transpose → reshape: the shuffle stayed a transpose of its own (the float
    ShuffleNetV2 has none: the concat writes its parts interleaved). The pair moved after
    the shuffle, only the input's transform is left, every product still in integers."""
    pytest.importorskip("torchao")
    case = _case(write_case, "shuffle_unit", "NCHW", 1)
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    assert result.kernels is not None
    for check in ("compile", "layout", "layout_transforms", "numerics"):
        assert result.check(check).status is Status.PASSED, (
            result.check(check).message, result.kernels.render())
    products = result.check("float_qdq_products").figures
    assert products.float_products == 0 and products.integer_products == 7, products


@pytest.mark.compile
def test_a_quantize_after_a_view_is_not_named_as_the_cause(write_case):
    """The quantize after an involution's view back to channels follows the layout of the
    region it quantizes: the transform after it is there for the view (no layout rule), as
    in the float model, not "relax.quantize has no layout rule" (our passes carry layouts
    through a quantize)."""
    pytest.importorskip("torchao")
    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.inputs import make_inputs, torch_inputs

    case = _case(write_case, "involution_block", "NCHW", 20)
    front = export_and_import(build_model(case), case, torch_inputs(case, make_inputs(case)))
    kernels = read_kernel_list(compile_case(front, case, "llvm", build=False))
    named = [t.attribution.relax_op for t in kernels.runtime_transforms
             if t.attribution.reason is Reason.NO_LAYOUT_RULE]
    assert named and not {"relax.quantize", "relax.dequantize"} & set(named), kernels.render()


@pytest.mark.compile
def test_the_input_transposed_after_its_slices_and_quantize_is_the_inputs(write_case):
    """YOLOv5's Focus quantized: the input's transpose lands after the slices, the concat
    and the quantize. It is there because the input is NCHW, not for a rule quantize lacks
    (the attribution stopped at the concat's parts and blamed quantize)."""
    pytest.importorskip("torchao")
    case = _case(write_case, "focus_stem", "NCHW", 1)
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    assert result.kernels is not None
    reasons = [t.attribution.reason for t in result.kernels.runtime_transforms]
    assert reasons == [Reason.INPUT_BOUNDARY], result.kernels.render()


def test_the_float64_reference_runs_the_same_qdq_graph_in_float64(write_case):
    """quantized_decomposed refuses float64 input; the reference computes the codes from the
    float64 values instead, and lands on eager float32's grid (the same graph)."""
    pytest.importorskip("torchao")
    import numpy as np
    import quant_models
    import torch

    from cl_validate.session.execute import float64_model, run_torch, run_torch64

    torch.manual_seed(0)
    model, x = quant_models.pt2e_block(), torch.randn(quant_models.SHAPE)
    model64 = float64_model(model)
    with pytest.raises(Exception, match="float32"):
        model64(x.double())
    (out64,) = run_torch64(model64, [x])
    (out32,) = run_torch(model, [x])
    assert out64.dtype == np.float64
    np.testing.assert_allclose(out64, out32, rtol=0, atol=1e-6)


def _export(model):
    import quant_models
    import torch

    return torch.export.export(model, (torch.randn(quant_models.SHAPE),))


def test_each_output_has_the_step_of_the_last_quantize_before_it(write_case):  # data path
    """The step is read off the QDQ graph: the output's own dequantize (through a reshape,
    which keeps the grid), else the nearest one before float ops (propagated); a float model
    has none."""
    pytest.importorskip("torchao")
    import quant_models
    import torch

    from cl_validate.compile.quant_steps import output_steps

    torch.manual_seed(0)
    ep = _export(quant_models.pt2e_block())
    last = [n for n in ep.graph.nodes if "dequantize_per_tensor" in str(n.target)][-1]
    (step,) = output_steps(ep)
    assert step is not None and step.on_grid and step.after == ("flatten",)
    assert step.scale == pytest.approx(float(last.args[1]))
    torch.manual_seed(0)
    (head,) = output_steps(_export(quant_models.pt2e_float_head()))
    assert head is not None and not head.on_grid
    assert head.scale == step.scale and head.after == ("flatten", "mul", "add")
    assert "the last quantize before it, through flatten, mul, add" in head.describe()
    assert output_steps(_export(quant_models.Block().eval())) == [None]


STEPS_CASE = """
model = "quant_models:pt2e_block"
targets = ["llvm"]
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
[tolerance]
reference = "float64"
steps = 1
"""


def _judge(case, m):
    from cl_validate.checks.numerics import Numerics
    from cl_validate.checks.registry import Judging

    return Numerics().judge(Judging(case, m))


def test_numerics_count_a_quantized_error_in_steps(write_case):
    """One rounding flip is one step and passes ``steps = 1``; two steps fail, and the
    verdict, the figure and the failure say it in steps; an output with no step cannot be
    judged so (an error at the ``steps`` line, not a pass)."""
    import numpy as np

    from cl_validate.measurements.measurement import Sample
    from cl_validate.measurements.quant_steps import OutputStep

    case = load_case(write_case(STEPS_CASE))
    step = OutputStep(0.25, True, ("flatten",))
    ref = np.arange(8, dtype=np.float64).reshape(1, 8) * 0.25
    eager = ref.astype(np.float32)
    m = Measurement("llvm", model_outputs=1, output_steps=[step])
    flip = eager.copy()
    flip[0, 3] += 0.25
    m.samples = [Sample("", [flip], [eager], [ref])]
    passed = _judge(case, m)
    assert passed.status is Status.PASSED, passed.message
    assert passed.message.startswith("1 step off float64 (allowed 1 step; output 0: step 0.25")
    assert numerics_cell(passed) == "1 step"
    two = flip.copy()
    two[0, 5] -= 0.5
    m.samples = [Sample("", [two], [eager], [ref])]
    failed = _judge(case, m)
    assert failed.status is Status.FAILED and str(failed.kind) == "NumericsMismatch"
    assert "output 0: 2 steps off float64 (allowed 1 step" in failed.message
    assert failed.line == 6 and numerics_cell(failed) == "2 steps"
    m.samples = [Sample("", [eager], [eager], [ref])]
    assert numerics_cell(_judge(case, m)) == "0 steps"
    m.output_steps = [None]
    err = _judge(case, m)
    assert err.status is Status.ERROR and str(err.kind) == "NoQuantizationStep"
    assert "output 0 has no quantization step" in err.message and err.line == 6


def numerics_cell(result):  # the check's figure as a table shows it
    from cl_validate.checks.registry import get

    return get("numerics").cell(result)


QDQ_CASE = """
model = "quant_models:pt2e_block"
targets = ["llvm", "cuda"]
integer_compute = {integer}
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
layout = "NHWC"
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
layout_transforms = 0
float_qdq_products = {budget}
[tolerance]
reference = "float64"
steps = 1
"""


@pytest.mark.compile
def test_quantized_convs_left_in_float_are_counted_by_the_budget(write_case):
    """With ``integer_compute = false`` TVM 0.27 runs each of the block's three quantized
    convs as a float conv between QDQ kernels (quantize and dequantize fused into one kernel,
    float32 in and out), on llvm and (static) cuda alike; the budget counts them, and a budget
    below fails. The numerics are within one step."""
    pytest.importorskip("torchao")
    case = load_case(write_case(QDQ_CASE.format(budget=2, integer="false")))
    results = judge_in_process([case], RunOptions(isolate=False))
    assert {r.target for r in results} == {"llvm", "cuda"}
    for r in results:
        check = r.check("float_qdq_products")
        assert check.status is Status.FAILED, check.message
        assert check.message.startswith(f"float_qdq_products 3 > budget 2 ({r.target})")
        assert "3 in float between QDQ ops (3 conv2d), 0 in integers" in check.body, check.body
        assert check.line == 12
    llvm = next(r for r in results if r.target == "llvm")
    numerics = llvm.check("numerics")
    assert numerics.status is Status.PASSED, numerics.message
    assert "step" in numerics.message and "off float64" in numerics.message
    assert numerics_cell(numerics).endswith(("step", "steps"))


def test_a_quantized_error_is_said_in_steps_under_any_rule():
    import numpy as np

    from cl_validate.measurements.error_stats import compare
    from cl_validate.measurements.quant_steps import OutputStep
    from cl_validate.spec import Tolerance

    ref = np.zeros((1, 4), np.float32)
    got = ref.copy()
    got[0, 1] = 0.5
    stats = compare(got, ref, Tolerance(0.0, 1e-3), step=OutputStep(0.25, False, ("add",)))
    assert not stats and "max 2 steps of its quantization" in stats.summary()
    assert "steps=2 (step 0.25 (the last quantize before it, through add))" in stats.detail()


def test_a_steps_failure_eager_float32_has_too_blames_no_compiler_stage(write_case):
    """(#44.5) A steps failure that is the quantized graph's own float32 sensitivity (eager
    float32 as far off float64 as TVM) read "first break after import", as if TVM's import
    were wrong. The message shows eager float32's own error in steps beside TVM's and, when
    eager float32 fails the allowance too, names a tolerance, not a stage; a failure of
    TVM's alone still names the stage."""
    import numpy as np

    from cl_validate.checks.numerics import check_numerics
    from cl_validate.measurements.bisection import Bisection
    from cl_validate.measurements.error_stats import compare
    from cl_validate.measurements.quant_steps import OutputStep
    from cl_validate.spec import Tolerance
    from tests.conftest import tiny_case

    case = load_case(write_case(tiny_case()))
    tol = Tolerance(0.0, 0.0, reference="float64", steps=1)
    step = OutputStep(0.25, False, ("add",))
    ref64 = np.zeros((1, 8))
    eager = ref64.astype(np.float32)
    eager[0, 3] = 0.75  # three steps off float64 itself: a flip that cascaded
    tvm_out = eager.copy()
    tvm_out[0, 3] = 1.0  # four
    stats = compare(tvm_out, eager, tol, reference64=ref64, step=step)
    assert not stats and stats.sensitive
    assert "eager float32 is 3 steps off float64 itself" in stats.summary(), stats.summary()
    verdict = check_numerics(case, "llvm", [stats], Bisection("llvm", "", ()))
    assert "the quantized graph itself is that sensitive" in verdict.message, verdict.message
    assert "steps = 4" in verdict.message and "no stage" not in verdict.message
    own = compare(tvm_out, ref64.astype(np.float32), tol, reference64=ref64, step=step)
    assert not own and not own.sensitive  # eager is exact here: TVM's own error
    assert "eager float32 is 0 steps off float64 itself" in own.summary(), own.summary()


def test_a_steps_failure_eager_float32_has_on_another_draw_blames_no_compiler_stage(
        write_case):
    """(#44.5) A deep quantized transformer (PiT) failed by 900 steps with "first break
    after import", eager float32 within 0.004 steps on the case's draw: one activation on a
    quantize's rounding boundary took the neighbouring code in TVM, and the layers after
    amplified it; on another draw eager float32 itself is 300 steps off. Eager float32's
    error on further draws (`eager_elsewhere`) makes the verdict say so; without it, or
    with eager float32 within the steps there too, the stage is named as before."""
    import numpy as np

    from cl_validate.checks.numerics import check_numerics
    from cl_validate.measurements.bisection import Bisection
    from cl_validate.measurements.error_stats import compare
    from cl_validate.measurements.quant_steps import OutputStep
    from cl_validate.spec import Tolerance
    from tests.conftest import tiny_case

    case = load_case(write_case(tiny_case()))
    tol = Tolerance(0.0, 0.0, reference="float64", steps=1)
    step = OutputStep(0.25, False, ("add",))
    ref64 = np.zeros((1, 8))
    tvm_out = ref64.astype(np.float32)
    tvm_out[0, 3] = 1.0  # four steps: a flipped code, amplified
    stats = compare(tvm_out, ref64.astype(np.float32), tol, reference64=ref64, step=step)
    assert not stats and not stats.sensitive  # eager is exact on this draw
    bisection = Bisection("llvm", "", ())
    verdict = check_numerics(case, "llvm", [stats], bisection, [(7, 0.75)])
    assert "3 steps off float64 on another input draw (seed 7)" in verdict.message, \
        verdict.message
    assert "not a compiler stage" in verdict.message and "steps = 5" in verdict.message
    for elsewhere in ([], [(7, 0.2)]):  # unknown, or within a step: TVM's own error
        plain = check_numerics(case, "llvm", [stats], bisection, elsewhere)
        assert "another input draw" not in plain.message, plain.message


def test_eager_float32_runs_on_more_draws_only_for_a_steps_failure_it_does_not_explain(
        write_case):
    """The draws run only where a steps failure had eager float32 within the steps on its
    own draw; per output, the largest error and its seed. Where the failure was the graph's
    own on the case's draw, or nothing failed, nothing more runs."""
    import numpy as np

    from cl_validate.measurements.measurement import Sample
    from cl_validate.measurements.quant_steps import OutputStep
    from cl_validate.session.draw_sensitivity import DRAWS, eager_elsewhere
    from tests.conftest import tiny_case

    case = load_case(write_case(tiny_case(tolerance=None) +
                                '[tolerance]\nreference = "float64"\nsteps = 1\n'))
    step = OutputStep(0.25, False, ("add",))
    ref64 = [np.zeros((1, 8))]
    seeds: list[int] = []

    def draw(arrays):  # eager float32 one step and a half off on the third draw
        seeds.append(int(abs(arrays[0]).sum() * 1e6))
        return [np.full((1, 8), 0.375 if len(seeds) == 3 else 0.0, np.float32)]

    def measured(tvm_value: float, eager_value: float) -> Measurement:
        out = np.full((1, 8), tvm_value, np.float32)
        eager = np.full((1, 8), eager_value, np.float32)
        return Measurement("llvm", output_steps=[step],
                           samples=[Sample("", [out], [eager], ref64)])

    found = eager_elsewhere(case, measured(1.0, 0.0), draw, lambda a: ref64)
    assert len(seeds) == DRAWS and len(set(seeds)) == DRAWS  # each draw its own input
    assert found == [(case.seed + case.seeds + 3, 0.375)], found
    seeds.clear()
    assert eager_elsewhere(case, measured(1.0, 0.75), draw, lambda a: ref64) == []
    assert eager_elsewhere(case, measured(0.0, 0.0), draw, lambda a: ref64) == []
    assert seeds == []


def test_the_draws_run_in_a_process_forked_after_pytorchs_threads_started():
    """A target's process is forked from the case process after PyTorch ran there on
    several threads: a parallel op in the child waited forever on threads the fork did not
    copy (a quantized PiT hung until the run's timeout). The draws run on one thread."""
    import os
    import signal
    import subprocess
    import sys

    code = """
import os, torch
from cl_validate.session.draw_sensitivity import one_thread
torch.set_num_threads(2)
torch.round(torch.rand(1 << 22))  # OpenMP's threads start in this process
pid = os.fork()
if pid == 0:
    with one_thread():
        torch.round(torch.rand(1 << 22))
    os._exit(0)
os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the hung child too
        proc.communicate()
        pytest.fail("the forked process hung in a parallel PyTorch op")
    assert proc.returncode == 0, err.decode()[-2000:]


def test_quantize_computes_pytorchs_codes_where_division_would_round_otherwise():
    """TVM's quantize divides by the scale; PyTorch multiplies by its float32 reciprocal.
    Where the two round apart, the compiled program must give PyTorch's code: a flipped
    code early in a deep network spreads to many outputs."""
    import numpy as np
    import torch
    import tvm
    from torch.ao.quantization.fx import _decomposed  # noqa: F401 - registers the ops
    from tvm import relax

    from cl_validate.compile.legalize import quantize_as_pytorch

    scale = np.float32(0.0235)
    # values next to the rounding boundaries (k + 0.5) * scale, a few ulps either side
    near = np.array([(k + 0.5) * np.float64(scale) for k in range(-120, 120)], np.float32)
    x = np.concatenate([near + np.float32(d) * np.spacing(near) for d in range(-3, 4)])
    recip = np.float32(1.0 / np.float64(scale))
    apart = x[np.round(x / scale) != np.round(x * recip)][:64]
    assert apart.size > 0  # the two formulas do disagree on such inputs
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType((apart.size,), "float32"))
    with bb.function("main", [xv]):
        out = bb.emit(relax.op.quantize(xv, relax.const(np.array(scale)),
                                        relax.const(np.array(0, "int8")), axis=-1,
                                        out_dtype="int8"))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(quantize_as_pytorch(bb.get()))
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(apart)).numpy()
    want = torch.ops.quantized_decomposed.quantize_per_tensor(
        torch.from_numpy(apart), float(scale), 0, -128, 127, torch.int8).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.compile
def test_dynamic_quantization_imports_and_its_run_time_scale_is_named(write_case):
    """(#44.4) ``is_dynamic=True`` exports ``choose_qparams.tensor`` and the ``.tensor``
    forms of quantize/dequantize, which had no converter ("no converter for
    choose_qparams.tensor, ..."). Now imported, compiled, within the tolerance of PyTorch's
    own dynamic quantization, and the product whose scale is computed at run time is left in
    float and named."""
    case = _case(write_case, "dynamic_classifier")
    (result,) = judge_in_process([case], RunOptions())
    verdicts = {c.check: c for c in result.checks}
    assert verdicts["compile"].status is Status.PASSED, verdicts["compile"].message
    assert verdicts["numerics"].status is Status.PASSED, verdicts["numerics"].message
    left = CaseSession(case).compiled("llvm", build=False).float_left
    assert left and all("computed at run time" in line for line in left), left
    # (#44.1) its Linear, left in float, is a quantized product the budget counts: the
    # convolution-only count said 0 float here
    products = verdicts["float_qdq_products"]
    assert "1 in float between QDQ ops (1 matmul)" in products.body, products.body
    assert "computed at run time" in products.body, products.body


def test_choose_qparams_is_pytorchs_to_the_bit():
    """The run-time scale and zero point against PyTorch's own op, ties included (PyTorch
    rounds half to even; TVM's round goes half away from zero)."""
    import numpy as np
    import torch
    import torchao.quantization.pt2e  # noqa: F401 - registers quantized_decomposed ops
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    class Choose(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.ops.quantized_decomposed.choose_qparams.tensor(
                x, -128, 127, torch.finfo(torch.float32).eps, torch.int8)

    # lo = -2.5 with hi = 0 gives lo / scale = -127.5: a tie, which PyTorch rounds to -128
    draws = [torch.randn(64), torch.tensor([-2.5, 0.0]), torch.tensor([0.3, 1.7]),
             torch.tensor([-0.5, 2.0])]
    for x in draws:
        ep = torch.export.export(Choose(), (x,))
        mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
        vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                                  tvm.cpu())
        scale, zp = vm["main"](tvm.runtime.tensor(x.numpy()))
        want_scale, want_zp = Choose()(x)
        np.testing.assert_array_equal(scale.numpy(), want_scale.float().numpy())
        np.testing.assert_array_equal(zp.numpy(), want_zp.numpy().astype(np.int32))


def test_the_steps_rule_fails_a_program_with_its_quantization_removed(monkeypatch):
    """(#44.5) Under the X86 and Arm quantizers the last Linear's output is not quantized
    again; its step was the Linear's input step, so the float model itself (every quantize
    dropped) came within a fraction of a step of the quantized one and passed ``steps = 1``.
    That output's grid is the accumulator's, activation step x weight step: the float model is
    now many steps off, as a program that lost its quantization should be."""
    import copy
    from pathlib import Path

    import torch

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "data"))
    import quant_models
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from cl_validate.compile.quant_steps import output_steps

    torch.manual_seed(0)
    model = quant_models.Classifier().eval()
    x = torch.randn(quant_models.SHAPE)
    prepared = prepare_pt2e(torch.export.export(copy.deepcopy(model), (x,)).module(),
                            quant_models._x86_quantizer())
    with torch.no_grad():
        for _ in range(3):
            prepared(torch.randn(quant_models.SHAPE))
        quantized = convert_pt2e(prepared)
        want, dropped = quantized(x), model(x)
    (step,) = output_steps(torch.export.export(quantized, (x,)).run_decompositions())
    assert step is not None and not step.on_grid and step.after[0] == "addmm", step
    assert float((dropped - want).abs().max()) / step.scale > 10, step.describe()


def test_a_steps_failure_through_a_top_k_says_it_picks_by_value(write_case):
    """(#42) A quantized detector's decode (CenterNet: two `topk`s of quantized scores) failed
    by 2100 steps with "first break after import": scores on one quantize's grid tie, and TVM
    and PyTorch pick or order tied items differently, which moves whole items. An output whose
    step path passes through a selecting op says so and points at `selection`; with
    `selection` declared, or no such op on the path, the verdict is as before."""
    import numpy as np

    from cl_validate.checks.numerics import check_numerics
    from cl_validate.measurements.bisection import Bisection
    from cl_validate.measurements.error_stats import compare
    from cl_validate.measurements.quant_steps import OutputStep
    from cl_validate.spec import Tolerance
    from tests.conftest import tiny_case

    tol = Tolerance(0.0, 0.0, reference="float64", steps=1)
    ref64 = np.zeros((1, 8))
    tvm_out = ref64.astype(np.float32)
    tvm_out[0, 3] = 2.0  # eight steps: another item in that place
    bisection = Bisection("llvm", "", ())
    plain = load_case(write_case(tiny_case()))
    for after, said in ((("mul", "view", "topk", "getitem"), True), (("add", "relu"), False)):
        stats = compare(tvm_out, ref64.astype(np.float32), tol, reference64=ref64,
                        step=OutputStep(0.25, False, after))
        verdict = check_numerics(plain, "llvm", [stats], bisection)
        assert ("passes through topk" in verdict.message) is said, verdict.message
        assert ("selection = { axis" in verdict.message) is said, verdict.message
    declared = load_case(write_case(tiny_case(extra="[[outputs]]\nselection = { axis = 1 }")))
    stats = compare(tvm_out, ref64.astype(np.float32), tol, reference64=ref64,
                    step=OutputStep(0.25, False, ("topk",)))
    assert "passes through" not in check_numerics(declared, "llvm", [stats], bisection).message

"""The cuda schedule report: which dlight rule scheduled each GPU kernel, read at compile time
on a machine without a GPU, and the ``fallback_kernels`` budget on the kernels left to the
generic Fallback rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from cl_validate.checks.verdict import Status
from cl_validate.errors import ExitCode
from cl_validate.measurements.kernel_list import FALLBACK
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.budgets import plan, rewrite
from cl_validate.spec.options import RunOptions
from tests.conftest import run_cli, tiny_case

ROOT = Path(__file__).parents[1]
RULES = {"Matmul", "GEMV", "Reduction", "GeneralReduction", FALLBACK}
CLASSIFIER = tiny_case(1, model="tiny_models:classifier", targets=("llvm", "cuda"))


@pytest.mark.compile
def test_our_observed_schedule_is_exactly_tvms_and_names_the_rule_of_every_kernel(
        write_case):
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight as dl

    from cl_validate.compile.factory import build_model
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.compile.schedule import schedule_gpu
    from cl_validate.compile.tvm_targets import make_target
    from cl_validate.ir import SCHEDULE_ATTR
    from cl_validate.session.inputs import make_inputs, torch_inputs

    case = load_case(write_case(CLASSIFIER))
    front = export_and_import(build_model(case), case, torch_inputs(case, make_inputs(case)))
    fused = compile_case(front, case, "cuda", build=False).stage("fuse").mod
    target = make_target(case.target_def("cuda"))
    ours = schedule_gpu(relax.transform.FuseTIR()(fused), target)
    with target:
        theirs = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                         dl.gpu.GeneralReduction(), dl.gpu.Fallback())(
            relax.transform.FuseTIR()(fused))
    rules = {gv.name_hint: str(f.attrs[SCHEDULE_ATTR]) for gv, f in ours.functions_items()
             if isinstance(f, tvm.tirx.PrimFunc)}
    untagged = tvm.IRModule({gv: f.without_attr(SCHEDULE_ATTR) if gv.name_hint in rules else f
                             for gv, f in ours.functions_items()})
    tvm.ir.assert_structural_equal(untagged, theirs)  # the tag is all the observer adds
    assert set(rules.values()) <= RULES and rules, rules
    assert rules["transpose"] == FALLBACK and rules["mean"] == "Reduction"


@pytest.mark.compile
def test_every_cuda_kernel_has_its_rule_and_llvm_kernels_have_none(write_case):
    results = judge_in_process([load_case(write_case(CLASSIFIER))],
                             RunOptions(isolate=False, static_only=True))
    by_target = {r.target: r for r in results}
    llvm, cuda = by_target["llvm"].kernels, by_target["cuda"].kernels
    assert llvm is not None and cuda is not None
    assert all(k.schedule is None for k in llvm) and not llvm.schedule_counts()
    assert all(k.schedule in RULES for k in cuda), [k.schedule for k in cuda]
    assert sum(cuda.schedule_counts().values()) == len(cuda)
    assert by_target["llvm"].check("fallback_kernels").status is Status.SKIPPED
    c = by_target["cuda"].check("fallback_kernels")
    assert c.status is Status.SKIPPED and c.message == (
        f"no fallback_kernels budget declared (1 of {len(cuda)} kernels left to dlight's "
        "Fallback)")
    assert "left to Fallback (1):\n    0  transpose" in c.body


@pytest.mark.compile
def test_a_fallback_budget_catches_a_gpu_regression_on_a_cpu_runner(write_case):
    text = CLASSIFIER + "\n[targets_override.cuda]\nbudget = { fallback_kernels = 0 }\n"
    path = write_case(text)
    got = run_cli(["run", str(path), "--target", "cuda", "--no-isolation", "--no-cache"])
    assert got.code == ExitCode.CHECK_FAILED
    assert ("FAILED case [cuda] fallback_kernels: fallback_kernels 1 > budget 0 (cuda) — next: "
            "a kernel no specific dlight rule matched") in got.out
    assert "fallback_kernels 1 > budget 0 (cuda)" in got.out and ":19)" in got.out  # its line
    assert "kernels per dlight rule: " in got.out  # the cuda kernel list's summary


def test_tighten_writes_a_fallback_budget_only_where_dlight_schedules(tmp_path):
    """llvm measures no fallback kernels (dlight schedules GPU targets only): a budget
    declared at case level is tightened to cuda's figure, with no pin for llvm."""
    path = tmp_path / "c.toml"
    path.write_text(tiny_case(1, targets=None).replace(
        "layout_transforms = 1", "layout_transforms = 1\nfallback_kernels = 5"))
    case = load_case(path)
    counts = {"layout_transforms": 1, "kernels": 4}
    p = plan(case, {None: {"llvm": counts, "cuda": {**counts, "fallback_kernels": 2}}},
             allow_increase=False, reason="")
    new = rewrite(path.read_text(), p)
    assert "fallback_kernels = 2\n" in new and "targets_override" not in new
    assert p.effective == ["cuda  fallback_kernels 5 -> 2 (lowered)"]


@pytest.mark.compile
def test_the_cuda_report_of_a_bundled_case_names_the_rule_of_every_kernel():
    got = run_cli(["show", str(ROOT / "model_cases" / "forum_conv.toml"), "--target",
                   "cuda"])
    assert got.code == ExitCode.OK, got.err
    lines = got.out.split("marks a transform\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert lines and all(any(f"  {rule}" in line for rule in RULES) for line in lines), lines
    assert "kernels per dlight rule: " in got.out


@pytest.mark.compile
def test_no_kernel_is_scheduled_to_leave_part_of_its_output_unwritten(write_case):
    """dlight's Reduction rule binds a fused pool + pad to the pool's spatial loops: the pad's
    border is never written, and on a GPU the kernel returns whatever memory held (the bundled
    ``pools`` case on an H200: RMSE 0.77 on cuda, llvm right). The rule's schedule is refused
    for one that writes the whole output, and every kernel of the program writes its whole
    output."""
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight as dl

    from cl_validate.compile.schedule import unwritten
    from cl_validate.ir import SCHEDULE_ATTR
    from cl_validate.session.case_session import CaseSession

    case = load_case(write_case(tiny_case(model="tiny_models:pad_after_pool",
                                          targets=("cuda",))))
    compiled = CaseSession(case).compiled("cuda", build=False)
    kernels = {gv.name_hint: f for gv, f in compiled.final.functions_items()
               if isinstance(f, tvm.tirx.PrimFunc)}
    (pool,) = [name for name in kernels if "avg_pool2d" in name and "pad" in name]
    # what dlight's own Reduction rule makes of it: the padded border left unwritten
    plain = relax.transform.FuseTIR()(compiled.stage("fuse").mod)[pool]
    with compiled.target:
        theirs = dl.gpu.Reduction().apply(plain.with_attr("global_symbol", "main"),
                                          compiled.target, False)
    assert theirs is not None and "at most" in (unwritten(theirs.mod["main"]) or "")
    assert str(kernels[pool].attrs[SCHEDULE_ATTR]) != "Reduction"
    assert {name: unwritten(f) for name, f in kernels.items()} == dict.fromkeys(kernels)
    tvm.compile(compiled.final, target=compiled.target)  # and it builds


@pytest.mark.compile
def test_single_query_attention_builds_for_cuda_where_a_rule_crashes_on_its_shape():
    """One query row (a decoder's step over its cache) with a head dimension of 2, lowered as
    two products and a softmax (the GPU's form where the tiled kernel does not fit): dlight's
    GEMV rule fails its own assertion on a kernel of it (``'FloorDiv' object has no attribute
    'value'``), which stopped the whole cuda build. A rule that crashes is a rule that
    declines: the next one schedules the kernel, and the program builds."""
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight as dl

    from cl_validate.compile.attention import attention_legalizations
    from cl_validate.compile.schedule import schedule_gpu
    from cl_validate.compile.tvm_targets import make_target
    from cl_validate.ir import SCHEDULE_ATTR
    from cl_validate.spec.targets import BUILTIN

    bb = relax.BlockBuilder()
    q, k, v = (relax.Var(n, relax.TensorType(s, "float32")) for n, s in
               (("q", (1, 1, 4, 2)), ("k", (1, 6, 4, 2)), ("v", (1, 6, 4, 2))))
    with bb.function("main", [q, k, v]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.attention(q, k, v)))
        bb.emit_func_output(out)
    target = make_target(BUILTIN["cuda"])
    with target:
        legal = relax.transform.LegalizeOps(
            customize_legalize_map=attention_legalizations(tiled=False))(bb.get())
    fused = relax.transform.FuseTIR()(relax.transform.FuseOps()(legal))
    crashed = []
    with target:
        for gv, f in fused.functions_items():
            if isinstance(f, tvm.tirx.PrimFunc):
                try:
                    dl.gpu.GEMV().apply(f.with_attr("global_symbol", "main"), target, False)
                except AttributeError:
                    crashed.append(gv.name_hint)
    assert crashed  # TVM's own rule, on this shape
    scheduled = schedule_gpu(fused, target)
    rules = {gv.name_hint: str(f.attrs[SCHEDULE_ATTR])
             for gv, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert {rules[name] for name in crashed} <= RULES - {"GEMV"}, rules
    tvm.compile(scheduled, target=target)

"""The front end, shared by every target of a case: torch.export, then the Relax import.

Weights stay parameters of ``main`` (beyond ``num_input``) until the ``fold_params`` stage
binds them, so the layout stages see weight permutes as what they are. The importer's map from
FX nodes to Relax bindings is kept: it is how each transform is traced back to the PyTorch
module and op that produced it (`cl_validate.compile.attribution`).
"""

from __future__ import annotations

import ast
import functools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

from cl_validate.compile.assertions import asserts_last
from cl_validate.compile.complex_pairs import (
    UnsupportedComplexOps,
    complex_aware,
    has_complex,
    store_complex_constants,
    unsupported_complex_ops,
)
from cl_validate.compile.converters import custom_convert_map
from cl_validate.compile.decompositions import decompositions
from cl_validate.compile.import_sources import (
    code_line,
    mark_import_permutes,
    ops_by_binding,
    sources_by_binding,
)
from cl_validate.compile.model_outputs import named_outputs
from cl_validate.compile.quant_steps import output_steps
from cl_validate.errors import CaseFileError, ClValidateError, CompileStageError
from cl_validate.ir import bindings, replace_function, shape_exprs, weight_params
from cl_validate.measurements.quant_steps import OutputStep
from cl_validate.paths import display_path
from cl_validate.spec import CaseSpec


@dataclass
class Frontend:
    """The target-independent part: the exported program and the imported Relax module."""

    exported: torch.export.ExportedProgram
    mod: tvm.IRModule  # weights as parameters of main beyond num_input
    params: dict[str, Any]
    export_seconds: float
    import_seconds: float
    sources: dict[str, str] = field(default_factory=dict)  # binding name → PyTorch source

    @functools.cached_property
    def output_steps(self) -> list[OutputStep | None]:
        """Each output's quantization step, off the exported QDQ graph (None: a float
        output)."""
        return output_steps(self.exported)



#: The attribute the channels-last wrapper keeps the model under (its nn.Module path prefix).
WRAPPED = "inner"


def channels_last_wrapper(model: torch.nn.Module, case: CaseSpec,
                          flatten_outputs: bool = False) -> torch.nn.Module:
    """Wrap `model` so the exported program takes/returns NHWC where the case says so, and
    (`flatten_outputs`) returns its outputs as the flat tuple numerics compares
    (`named_outputs`: a dict's, a dataclass's, None left out).

    Exactly the declared inputs and outputs are permuted; nothing is inferred. The permutes
    added here are what ConvertLayout's boundary transforms cancel against.
    """
    in_nhwc = [i.layout == "NHWC" for i in case.inputs]
    count = max(len(case.outputs), len(case.output_names))
    out_nhwc = [case.output_layout(i) == "NHWC" for i in range(count)]
    if not any(in_nhwc) and not any(out_nhwc) and not flatten_outputs:
        return model

    class ChannelsLastIO(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner  # nn.Module path prefix WRAPPED

        def forward(self, *args: torch.Tensor) -> Any:
            # contiguous(): the model sees the NCHW tensor it was written for, so a
            # ``x.view(n, -1)`` of a C×H×W map works (a permuted view's strides refuse it);
            # the importer drops the copy.
            args = tuple(a.permute(0, 3, 1, 2).contiguous() if nhwc else a
                         for a, nhwc in zip(args, in_nhwc, strict=True))
            out = self.inner(*args)
            single = isinstance(out, torch.Tensor)
            outs = [out] if single else [t for _, t in named_outputs(out)]
            for i, nhwc in enumerate(out_nhwc):
                if nhwc and i < len(outs):
                    outs[i] = outs[i].permute(0, 2, 3, 1)
            return outs[0] if single else tuple(outs)

    wrapper = ChannelsLastIO(model)
    # Not eval(): it would recurse into the model, and a model torch.export made refuses
    # mode changes. The wrapper's own flag is all there is to set; the model's is its own.
    wrapper.training = False
    return wrapper


def export_and_import(model: torch.nn.Module, case: CaseSpec,
                      example_inputs: Sequence[torch.Tensor],
                      flatten_outputs: bool = False) -> Frontend:
    """torch.export the (wrapped) model and import it into Relax with weights as params
    (`channels_last_wrapper`)."""
    wrapped = channels_last_wrapper(model, case, flatten_outputs)
    args = tuple(
        x.permute(0, 2, 3, 1).contiguous() if spec.layout == "NHWC" else x
        for x, spec in zip(example_inputs, case.inputs, strict=True)
    )
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            exported = torch.export.export(wrapped, args,
                                           dynamic_shapes=dynamic_shapes(case) or None)
    except Exception as exc:
        if case.dynamic and _is_constraint_violation(exc):
            raise _cannot_be_dynamic(case, exc) from None
        raise CompileStageError("export", exc) from exc
    t1 = time.perf_counter()
    program = None
    try:
        # The importer itself (not the from_exported_program wrapper), to keep its map from
        # FX nodes to Relax bindings: that is how transforms are traced back to PyTorch code.
        importer = ExportedProgramImporter()
        program = exported.run_decompositions(decompositions())
        mod = importer.from_exported_program(program, True, True, False,
                                             _convert_map(program, case))
        sources = sources_by_binding(mod, importer.env)
        # The wrapper's permutes are ours, not the model's: only the wrapped model's ops
        # have an nn.Module path under "inner".
        ours = {name for name, src in sources.items()
                if wrapped is not model and src.split(" (")[0].split(".")[0] != WRAPPED}
        mod, params = relax.frontend.detach_params(
            mark_import_permutes(mod, sources, ops_by_binding(mod, importer.env), ours))
        mod = _name_symbolic_dims(mod, case)
        mod = asserts_last(_read_tuple_fields(mod))
    except ClValidateError:
        raise
    except Exception as exc:
        raise CompileStageError("import", exc, _unsupported_ops_summary(exc, program)) from exc
    t2 = time.perf_counter()
    named = {p.name: v for p, v in zip(weight_params(mod["main"]), params.get("main", []),
                                         strict=True)}
    return Frontend(exported, mod, named, t1 - t0, t2 - t1, sources)


@mutator
class _TupleFields(PyExprMutator):  # type: ignore[misc]
    """``v = t[i]`` of a tuple ``t`` the function builds itself: ``v`` is that field."""

    def __init__(self, tuples: dict[relax.Var, relax.Tuple]) -> None:
        super().__init__()
        self.tuples = tuples

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        tup = self.tuples.get(value.tuple_value) if isinstance(value, relax.TupleGetItem) else None
        field = None if tup is None else tup.fields[value.index]
        if isinstance(binding.var, relax.DataflowVar) and isinstance(field, relax.Var):
            self.set_var_remap(binding.var, self.visit_expr(field))
            return
        super().visit_var_binding_(binding)


def _read_tuple_fields(mod: tvm.IRModule) -> tvm.IRModule:
    """A tuple the importer builds and indexes at once (max_pool2d's values and unused
    indices) read as its field, and what then nothing reads dropped: the layout passes see
    the pool's reader read the pool. Every other binding keeps its name (the sources of the
    model's code are found by them)."""
    func = mod["main"]
    tuples = {b.var: b.value for b in bindings(func)
              if isinstance(b, relax.VarBinding) and isinstance(b.value, relax.Tuple)}
    if not tuples:
        return mod
    new = relax.analysis.remove_all_unused(_TupleFields(tuples).visit_expr(func))
    return replace_function(mod, "main", new)


def _convert_map(program: torch.export.ExportedProgram, case: CaseSpec) -> dict[str, Any]:
    """Our converters; for a program with complex tensors, the pairs' too (its complex
    constants stored as pairs first; its FFTs channels-last where the case's convolutions
    are), or an error naming the complex ops they lack."""
    if not has_complex(program.graph):
        return custom_convert_map()
    missing = unsupported_complex_ops(program.graph)
    if missing:
        raise UnsupportedComplexOps(missing)
    store_complex_constants(program)
    conv = case.layout.get("relax.nn.conv2d") or ("",)
    return complex_aware(custom_convert_map(), channels_last=conv[0] == "NHWC")


def dynamic_shapes(case: CaseSpec) -> tuple[dict[int, Any] | None, ...] | None:
    """torch.export's ``dynamic_shapes`` for the case's [dynamic] dimensions: per argument of
    the exported program, axis → one ``Dim`` per name (shared where inputs share a name); an
    input taken channels-last has its PyTorch axes moved as the wrapper permutes them."""
    if not case.dynamic:
        return None
    dims = {name: torch.export.Dim(name, min=d.min, max=d.max)
            for name, d in case.dynamic.items()}
    specs: list[dict[int, Any] | None] = []
    for spec in case.inputs:
        order = _NHWC if spec.layout == "NHWC" else tuple(range(len(spec.shape)))
        axes = {order.index(axis): dims[d] for axis, d in enumerate(spec.shape)
                if isinstance(d, str)}
        specs.append(axes or None)
    return tuple(specs)


def _name_symbolic_dims(mod: tvm.IRModule, case: CaseSpec) -> tvm.IRModule:
    """Give each symbolic extent the case's name for it: torch.export calls the batch
    ``s77``, the case file and every kernel list ``batch``."""
    if not case.dynamic:
        return mod
    main = mod["main"]
    renames: dict[Any, Any] = {}
    for param, spec in zip(main.params, case.inputs, strict=False):
        order = _NHWC if spec.layout == "NHWC" else tuple(range(len(spec.shape)))
        declared_order = [spec.shape[axis] for axis in order]
        for extent, declared in zip(shape_exprs(param) or [], declared_order, strict=False):
            if (isinstance(declared, str) and isinstance(extent, tvm.tirx.Var)
                    and extent not in renames and extent.name != declared):
                renames[extent] = tvm.tirx.Var(declared, extent.ty)
    if renames:
        mod["main"] = main.bind_symbolic_vars(renames)
    return mod


_NHWC = (0, 2, 3, 1)  # the PyTorch (NCHW) axis each axis of a channels-last input holds


def _is_constraint_violation(exc: BaseException) -> bool:
    """torch.export refused a dynamic dimension (the model pins or guards its size)."""
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e}
    return bool(names & {"UserError", "ConstraintViolationError"}) or \
        "Constraints violated" in str(exc)


def _cannot_be_dynamic(case: CaseSpec, exc: BaseException) -> CaseFileError:
    """torch.export's refusal as a case-file error at the [dynamic] line: the case declares a
    dimension dynamic that the model's code does not let vary."""
    text = str(exc)
    named = [n for n in case.dynamic if f"({n})" in text or f" {n} " in text] or \
        list(case.dynamic)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    why = next((ln.removeprefix("- ") for ln in lines if ln.startswith("- ")),
               lines[0] if lines else type(exc).__name__)
    fixed = re.search(r"specialized it to be a constant \((\d+)\)", why)
    if fixed:
        why = f"the model's code fixes it to {fixed.group(1)}"
    return CaseFileError(
        f"the model cannot be exported with {', '.join(repr(n) for n in named)} dynamic: "
        f"{why[:200]}", file=display_path(case.path), line=case.line_of("dynamic", named[0]),
        hint="find the reshape or check that fixes the size, or declare the sizes you need "
        "as [[variants]] instead")


def _unsupported_ops_summary(exc: BaseException, program: Any = None) -> str | None:
    """TVM's importer asserts ``Unsupported function types [...]`` listing the ops it has no
    converter for, in set order (it varies between runs). Sorted, the verdict reads the same
    every time, says where the model calls each (the first call's line, from the exported
    `program`'s stack traces), and what to do."""
    if isinstance(exc, UnsupportedComplexOps):  # complex tensors: imported as pairs of reals
        return (f"Unsupported function types: no converter for {', '.join(sorted(exc.ops))} "
                "on complex tensors (hint: complex tensors are imported as pairs of reals, "
                "which view_as_complex/view_as_real, complex, polar, products, sums, views, "
                "abs, angle and the FFTs compute; express the model without "
                f"{'it' if len(exc.ops) == 1 else 'them'}, "
                "or add it to cl_validate/compile/complex_pairs.py)")
    text = str(exc).strip()
    prefix = "Unsupported function types "
    if not isinstance(exc, AssertionError) or not text.startswith(prefix):
        return None
    try:
        ops = sorted(str(op) for op in ast.literal_eval(text[len(prefix):].splitlines()[0]))
    except (ValueError, SyntaxError, TypeError):
        return None
    lines = _call_lines(program, ops)
    named = ", ".join(f"{op} ({lines[op]})" if op in lines else op for op in ops)
    return (f"Unsupported function types: TVM's PyTorch importer has no converter for "
            f"{named} (hint: express the model without "
            f"{'it' if len(ops) == 1 else 'them'}, or add a converter to "
            "cl_validate/compile/converters.py)")


def _call_lines(program: Any, ops: Sequence[str]) -> dict[str, str]:
    """Op name (as the importer lists it: ``sort.stable``) → ``file.py:LINE`` of the model's
    first call of it in the exported `program`, where its stack trace says."""
    found: dict[str, str] = {}
    graph = getattr(getattr(program, "graph_module", None), "graph", None)
    for node in getattr(graph, "nodes", ()):
        name = getattr(node.target, "__name__", "") if node.op == "call_function" else ""
        if name in ops and name not in found:
            where = code_line(node.meta.get("stack_trace"))
            if where:
                found[name] = where
    return found

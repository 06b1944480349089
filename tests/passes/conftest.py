"""Fixtures for the layout cleanup pass tests: the real torch.export -> Relax -> ConvertLayout
front end, a count of run-time permutes, and an llvm build to compare numerics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

NHWC = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


@dataclass
class Imported:
    """A torch model after import and ConvertLayout, weights still parameters of ``main``."""

    converted: Any  # tvm.IRModule after ConvertLayout
    params: list[Any]  # tvm.runtime.Tensor per weight parameter, in order
    example: np.ndarray

    def bound(self, mod: Any) -> Any:
        """``mod`` with the weights bound as constants (as a pipeline does after layout)."""
        from tvm import relax

        names = [p.name for p in mod["main"].params[1:]]
        return relax.transform.BindParams("main", dict(zip(names, self.params, strict=True)))(
            mod)


@pytest.fixture(scope="session")
def import_nhwc() -> Callable[..., Imported]:
    """Export a torch module, import it keeping weights as inputs, convert conv2d to NHWC."""

    def run(model: Any, shape: tuple[int, ...] = (1, 3, 16, 16)) -> Imported:
        import torch
        from tvm import relax
        from tvm.relax.frontend.torch import from_exported_program

        torch.manual_seed(0)
        example = torch.randn(*shape)
        with torch.no_grad():
            exported = torch.export.export(model.eval(), (example,))
        mod = from_exported_program(exported, keep_params_as_input=True,
                                    unwrap_unit_return_tuple=True)
        mod, params = relax.frontend.detach_params(mod)
        converted = relax.transform.ConvertLayout(NHWC)(mod)
        return Imported(converted, list(params.get("main", [])), example.numpy())

    return run


@pytest.fixture(scope="session")
def run_llvm() -> Callable[..., list[np.ndarray]]:
    """Legalize, build for llvm and run ``main`` (inputs first, then any weights)."""

    def run(mod: Any, *args: Any) -> list[np.ndarray]:
        import tvm
        from tvm import relax

        ex = tvm.compile(relax.transform.LegalizeOps()(mod),
                         target=tvm.target.Target({"kind": "llvm"}))
        vm = relax.VirtualMachine(ex, tvm.cpu())
        inputs = [tvm.runtime.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        out = vm["main"](*inputs)
        outs = list(out) if not hasattr(out, "numpy") else [out]
        return [o.numpy() for o in outs]

    return run


@pytest.fixture(scope="session")
def run_llvm_pair() -> Callable[..., tuple[list[np.ndarray], list[np.ndarray]]]:
    """`run_llvm` for the ``main`` of two modules (a pass's input and output) on the same
    arguments, built as one module: one build instead of two."""

    def run(before: Any, after: Any, *args: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
        import tvm
        from tvm import relax

        both = tvm.IRModule({name: m["main"].with_attr("global_symbol", name)
                             for name, m in (("before", before), ("after", after))})
        ex = tvm.compile(relax.transform.LegalizeOps()(both),
                         target=tvm.target.Target({"kind": "llvm"}))
        vm = relax.VirtualMachine(ex, tvm.cpu())
        inputs = [tvm.runtime.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        results = []
        for name in ("before", "after"):
            out = vm[name](*inputs)
            results.append([o.numpy() for o in (list(out) if not hasattr(out, "numpy")
                                                 else [out])])
        return results[0], results[1]

    return run


def kernels_and_output(mod: Any, args: list[np.ndarray]) -> tuple[int, np.ndarray]:
    """`mod` legalized, fused and built for llvm: how many kernels it has, and its output on
    `args` (for the legalization-time rewrites: one kernel fewer, the same output)."""
    import tvm
    from tvm import relax

    llvm = tvm.target.Target({"kind": "llvm"})
    with llvm:
        mod = relax.transform.LegalizeOps()(mod)
        mod = relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
        mod = relax.transform.FuseTIR()(mod)
    kernels = sum(isinstance(f, tvm.tirx.PrimFunc) for f in mod.functions.values())
    vm = relax.VirtualMachine(tvm.compile(mod, llvm), tvm.cpu())
    return kernels, vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


def compile_nhwc_case(tmp_path: Any, model: Any, shape: tuple[int, ...], rtol: float,
                      atol: float) -> Any:
    """`model` as a case with channels-last input and NHWC convolutions, through the whole
    `nhwc` pipeline for llvm: its output checked against PyTorch's, its kernel list returned."""
    return compile_nhwc(tmp_path, model, shape, rtol, atol)[1]


def compile_nhwc(tmp_path: Any, model: Any, shape: tuple[int, ...], rtol: float, atol: float,
                 input_layout: str | None = "NHWC") -> tuple[Any, Any]:
    """`compile_nhwc_case` with the input in `input_layout` (None: not an image): (the
    compiled program with its stages, its kernel list)."""
    import torch
    import tvm

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / "c.toml"
    path.write_text(f'model = "x:y"\n[[inputs]]\nname = "x"\nshape = {list(shape)}\n'
                    + (f'layout = "{input_layout}"\n' if input_layout else "")
                    + '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    torch.manual_seed(0)
    net = model().eval()
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    compiled = compile_case(export_and_import(net, case, tensors), case, "llvm")
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu())
    np.testing.assert_allclose(got[0], run_torch(net, tensors)[0], rtol=rtol, atol=atol)
    return compiled, read_kernel_list(compiled)

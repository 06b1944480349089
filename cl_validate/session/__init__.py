"""One case on its way through the compiler, in the process that runs the model's code.

``case_session`` (`CaseSession`: model → export → each target's compile → run, everything
computed once) · ``execute`` and ``inputs`` (seeded inputs, PyTorch's and TVM's outputs) ·
``first_break`` (which pipeline stage broke the numerics) · ``kernel_timer`` (``--profile``)
· ``remote`` (numerics on a device behind an RPC tracker) · ``worker`` (the loop of a worker
process). Imports torch and TVM.
"""

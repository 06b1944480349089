"""One case on its way through the compiler, in the process that runs the model's code.

``case_session`` (`CaseSession`: model → export → each target's compile → run, everything
computed once) · ``execute`` and ``inputs`` (seeded inputs, PyTorch's and TVM's outputs) ·
``first_break`` (which pipeline stage broke the numerics) · ``kernel_timer`` (``--profile``)
· ``remote`` (numerics on a device behind an RPC tracker) · ``zygote`` (forks a fresh
process per case) · ``case_process`` (a case's process and its target processes) ·
``file_record`` (the files a case reads) · ``in_process`` (measuring in this process).
Imports torch and TVM.
"""

"""The compile layer: a case's model through torch.export, Relax and the layout stages to a
built program, keeping the IR after every stage.

``factory`` (build the seeded model) → ``frontend`` (export, import, ``converters``,
source map) → ``pipeline`` (named stage lists: ConvertLayout, our ``passes/``,
``fold``, ``legalize``, fusion) → ``build`` (run a pipeline, build the executable);
``attribution`` writes each transform's source and reason into the IR; ``target`` names
TVM targets and devices.

Importing this package imports nothing heavy; its modules import torch and TVM (all but
``reasons``, the plain data a kernel list carries to the parent process).
"""

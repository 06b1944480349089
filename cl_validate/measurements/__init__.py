"""What a case × target measured, as plain data: the fused kernel list and its transforms
(``kernel_list``), why each transform is there (``attribution``), kernel times (``profile``),
how far TVM is from PyTorch (``error_stats``) and which stage broke it (``bisection``), all
in one `Measurement` (``measurement``); how it travels from a case process (``messages``) and how it
is kept between runs (``cache``, keyed by ``sources``).

Never imports torch or TVM: a case process builds these, the parent of a run reads them.
"""

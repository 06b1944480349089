"""Read a compiled case: the fused kernel list and its transforms (``kernels``), the count
after every stage (``stages``), op layouts (``layouts``); ``model`` holds the results as plain
data that travels to the parent process without TVM."""

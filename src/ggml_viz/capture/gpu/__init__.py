"""The GPU's own clock: the GPU timer in C (CUPTI loaded at run time, its trace windows, the graph
read at the compute call) and, in Python, its records mapped to nodes and into the run's tables."""

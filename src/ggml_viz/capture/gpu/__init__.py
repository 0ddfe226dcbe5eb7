"""The GPU's own clock: the GPU timer in C (CUPTI loaded at run time on CUDA, ggml-viz's Vulkan layer
on Vulkan, its trace windows, the graph read at the compute call) and, in Python, its records
mapped to nodes and into the run's tables, and the environment that puts the layer into a process."""

"""Capture: recording what ggml computes, by the path that fits the program.

- `llama_cpp_python/`: a Python program's llama-cpp-python contexts, attached in its own process;
- `preload/`: any program that loads ggml's shared libraries (llama.cpp's and whisper.cpp's
  programs, other bindings), through the preload library and its spool;
- `core/`: what every path shares: ggml's ABI, the C recorder, graphs decoded into the run;
- `gpu/`: the GPU's own clock (CUPTI on CUDA, a Vulkan layer on Vulkan), its records mapped to nodes.

`settings.py` says what to record, for every path. Capture writes only through runformat and
never imports analysis, export, the viewer or the commands.
"""

"""Python programs on llama-cpp-python, recorded in their own process: its functions wrapped to
attach a recorder (C, or its Python twin) to each new context, and the start-up hook that does it
without a code change (GGML_VIZ_OUTPUT)."""

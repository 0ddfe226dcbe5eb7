"""The run format, the bottom layer: a run directory written while recording (writer, streams,
journal, manifest) and read back (stored tables, the Run with joined tables, SQL views); imports
nothing of ggml-viz but the foundation modules. docs/run-format.md describes the files."""

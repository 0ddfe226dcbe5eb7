"""Model files: where the default model lies, whether a path is a GGUF file, and the exact
byte layout of a GGUF file or of a whisper.cpp model in ggml's legacy format."""

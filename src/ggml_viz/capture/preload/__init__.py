"""Any program that loads ggml's shared libraries (llama-server, whisper-cli, other bindings),
recorded by the preload library (C, LD_PRELOAD) into a spool that the collector writes into the
run; ggml's RPC protocol followed on the wire. A native program is one that is not Python."""

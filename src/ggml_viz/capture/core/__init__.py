"""What every recording path shares: ggml's ABI, the graphs a recorder hands over (the C recorder
and its Python extension live here too), their decoding into the run's tables, node times from
ticks, and the Recording that writes a run."""

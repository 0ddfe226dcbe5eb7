"""memory_read.c: `ggml-viz limits`' read kernel (the CPU's memory read bandwidth)."""

def read_pass(address: int, size: int, threads: int) -> tuple[int, int]:
    """One timed read of [address, address + size) by `threads` threads: (nanoseconds, the sum of
    its 64-bit words, wrapping)."""

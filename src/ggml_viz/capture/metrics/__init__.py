"""Live metrics of a recording (`ggml-viz run --metrics HOST:PORT`): what a Prometheus scrapes while
the program runs, read from the decode calls and graphs as the collector takes them."""

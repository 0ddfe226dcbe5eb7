"""The server side of the page's views (static/js/views/), one module per view, each computing its
answers from the run context (ui/context.py) and the GPU side (ui/gpu.py)."""

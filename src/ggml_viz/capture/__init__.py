"""Capture: attaching to llama.cpp and recording what it computes.

Never imports analysis or the UI; writes only through runformat.
"""

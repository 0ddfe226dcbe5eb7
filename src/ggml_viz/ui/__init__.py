"""The web viewer: a local server (app, security, server) answering each view's questions from a
run (one module per view over a shared run context), and the page it serves (static/)."""

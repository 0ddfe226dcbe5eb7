"""Where the viewer listens unless told otherwise (a settings file or the command line may say)."""

DEFAULT_PORT = 8765  # taken: the viewer falls back to a free port (only for this default)
DEFAULT_HOST = "127.0.0.1"

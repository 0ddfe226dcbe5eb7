from .commands import entry_point

entry_point()

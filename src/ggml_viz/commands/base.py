from __future__ import annotations

import argparse


class Command:
    """Base of every subcommand."""

    name = ""

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError

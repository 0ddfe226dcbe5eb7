"""Pieces several commands share: argument types and options, the effective settings, the viewer's start.

Building the parser imports this module for every command, so it imports nothing heavy
(rich, pandas, the reader) at the top: each function imports what it needs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import CommandError
from ..capture.settings import CAPTURE_SETTINGS, Setting

if TYPE_CHECKING:
    from ..ui.server import Viewer
    from .config_file import Configuration


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


MODEL_HELP = "a GGUF file, or a Hugging Face model by name: org/repo[:QUANT|:FILE]"


def add_model_arguments(parser: argparse.ArgumentParser, *, positional: bool = False, default: str = "") -> None:
    """The model option (-m, or a positional argument) and --download, for a model given by path or name."""
    help_text = f"{MODEL_HELP} (default: {default})" if default else MODEL_HELP
    if positional:
        parser.add_argument("model", help=help_text)
    else:
        parser.add_argument("-m", "--model", help=help_text)
    parser.add_argument(
        "--download",
        action="store_true",
        help="a model named org/repo that is not in the Hugging Face cache is downloaded (HF_HOME, HF_ENDPOINT)",
    )


def add_capture_arguments(parser: argparse.ArgumentParser) -> None:
    """What to record: the options `record` and `run` share, one per row of CAPTURE_SETTINGS."""
    group = parser.add_argument_group("what to record")
    for setting in CAPTURE_SETTINGS:
        group.add_argument(setting.flag, **_argument_keywords(setting))


def _argument_keywords(setting: Setting) -> dict[str, Any]:
    keywords: dict[str, Any] = {"help": setting.help}
    if setting.kind == "choice":
        # no default here: None is "not given", so a file's value holds; old names of choices are read too
        keywords["choices"] = setting.accepted
        keywords["metavar"] = "{" + ",".join(setting.choices) + "}"
    else:
        keywords["metavar"] = setting.metavar
    if setting.kind == "count":
        keywords["type"] = positive_int
    elif setting.kind == "number":
        keywords["type"] = int
    if setting.repeatable:
        keywords["action"] = "append"
    return keywords


def add_view_arguments(parser: argparse.ArgumentParser, browser: bool = True) -> None:
    """Where the web viewer listens: the options `view` and `record --view` share."""
    group = parser.add_argument_group("the web viewer")
    group.add_argument("--port", type=int, default=None, help="port (default: 8765, or a free one if taken)")
    group.add_argument(
        "--host", default=None, help="address to listen on (default 127.0.0.1; another one is reachable by others)"
    )
    if browser:
        group.add_argument("--no-browser", action="store_true", help="print the URL, do not open a browser")


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="settings file (default: ggml-viz.toml, or pyproject.toml's [tool.ggml-viz], in this folder or above)",
    )


def command_line_settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the command line sets, by the keys of a settings file (None: not given)."""
    cli = {setting.key: getattr(args, setting.key, None) for setting in CAPTURE_SETTINGS}
    cli.update({"viewer.port": getattr(args, "port", None), "viewer.host": getattr(args, "host", None) or None})
    return cli


def configuration(args: argparse.Namespace) -> Configuration:
    """The command's effective settings: its options, else GGML_VIZ_* variables, else the settings file."""
    from .config_file import load_configuration

    return load_configuration(command_line_settings(args), getattr(args, "config", None))


def default_output_path(config: Configuration) -> Path:
    """Where a run goes when no -o is given: run-DATE.ggmlviz in the settings' output_dir."""
    return config.output_dir / dt.datetime.now().strftime("run-%Y%m%d-%H%M%S.ggmlviz")


def start_viewer(path: Path, args: argparse.Namespace, config: Configuration, *, live: bool) -> Viewer:
    """Bind the viewer for `path`, say where it is, open the browser (unless --no-browser)."""
    from ..ui.server import make_viewer, open_browser, remote_warning

    host, port, host_chosen = config.view_address
    if not 0 <= port <= 65535:
        raise CommandError(f"--port {port} is not a port number (0-65535)")
    viewer = make_viewer(path, host=host, port=port, live=live, allow_remote=host_chosen)
    warning = remote_warning(host)
    if warning:
        print(warning, file=sys.stderr)
    print(f"ggml-viz viewer: {viewer.url}", flush=True)
    if not args.no_browser:
        open_browser(viewer.url)
    return viewer

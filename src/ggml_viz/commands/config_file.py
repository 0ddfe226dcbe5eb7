"""Settings in a file, and where each effective setting comes from.

A project's `ggml-viz.toml` (or the `[tool.ggml-viz]` table of its `pyproject.toml`), found from
the working directory up, or the file `--config` names, holds the capture settings under the
names of their rows in CAPTURE_SETTINGS, `output_dir`, and a `[viewer]` table (`port`, `host`).
A command's effective settings take each value from the command line, else the environment
(GGML_VIZ_*; GGML_VIZ_OUTPUT_DIR, GGML_VIZ_VIEWER_PORT and GGML_VIZ_VIEWER_HOST for the keys that
are not capture settings), else the file, else the default; `ggml-viz config` shows which.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

from .._errors import CaptureError, CommandError
from ..capture.settings import (
    CAPTURE_SETTINGS,
    CaptureSettings,
    Setting,
    environment_from_options,
    settings_from_options,
)
from ..ui.defaults import DEFAULT_HOST, DEFAULT_PORT

CONFIG_FILE = "ggml-viz.toml"
PYPROJECT_FILE = "pyproject.toml"
PYPROJECT_TABLE = ("tool", "ggml-viz")
COMMAND_LINE = "command line"
DEFAULT = "default"


class ConfigFileError(CommandError):
    """A settings file that cannot be used: the one line names the file, the line and the key."""


# The keys of the file that are not capture settings: name -> (check, default, what is accepted).
def _check_port(value: Any) -> int | None:
    return value if _is_int(value) and 0 <= value <= 65535 else None


def _check_text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


OTHER_KEYS: dict[str, tuple[Callable[[Any], Any], Any, str]] = {
    "output_dir": (_check_text, ".", "a folder (text), relative to the file's folder"),
    "viewer.port": (_check_port, DEFAULT_PORT, "a port number (0-65535)"),
    "viewer.host": (_check_text, DEFAULT_HOST, "an address to listen on (text)"),
}
# Their variables: the environment ranks between the command line and the file for them too.
OTHER_VARIABLES = {
    "output_dir": "GGML_VIZ_OUTPUT_DIR",  # relative to the working directory
    "viewer.port": "GGML_VIZ_VIEWER_PORT",
    "viewer.host": "GGML_VIZ_VIEWER_HOST",
}
_CAPTURE = {setting.key: setting for setting in CAPTURE_SETTINGS}
FILE_KEYS = (*_CAPTURE, *OTHER_KEYS)  # in the order `ggml-viz config` shows them


@dataclass(frozen=True)
class ConfigFile:
    """A settings file, read and checked: its values by flat key ("detail", "viewer.port")."""

    path: Path
    values: dict[str, Any]
    lines: dict[str, int | None]  # the line each key is on

    def source(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{self.path.name}:{line}" if line else self.path.name


@dataclass(frozen=True)
class Value:
    value: Any
    source: str  # COMMAND_LINE, "environment GGML_VIZ_X", "ggml-viz.toml:3" or DEFAULT


@dataclass(frozen=True)
class Configuration:
    """The effective settings of a command, each with where it came from."""

    file: ConfigFile | None
    values: dict[str, Value]  # every key of FILE_KEYS

    def capture_options(self) -> dict[str, Any]:
        """The capture settings that are not defaults, as keyword arguments of ggml_viz.record."""
        return {key: self.values[key].value for key in _CAPTURE if self.values[key].source != DEFAULT}

    def capture_environment(self) -> dict[str, str]:
        """The same as GGML_VIZ_* variables (for a program run under `run`)."""
        return environment_from_options(self.capture_options())

    def capture_settings(self) -> CaptureSettings:
        return settings_from_options(self.capture_options())

    @property
    def output_dir(self) -> Path:
        """Where a run goes when no -o is given: the file's `output_dir`, else the working directory."""
        return Path(self.values["output_dir"].value)

    @property
    def view_address(self) -> tuple[str, int, bool]:
        """The viewer's host, port, and whether the host was chosen (another one may be reachable by others)."""
        host = self.values["viewer.host"]
        return host.value, self.values["viewer.port"].value, host.source != DEFAULT

    def as_json(self) -> str:
        shown = {key: {"value": _plain(v.value), "source": v.source} for key, v in self.values.items()}
        return json.dumps({"file": str(self.file.path) if self.file else None, "settings": shown}, indent=2)


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


# Finding and reading the file.


def find_config_file(start: Path | None = None, home: Path | None = None) -> Path | None:
    """The nearest ggml-viz.toml, or pyproject.toml holding [tool.ggml-viz], from `start` up to
    the home folder (or the root); in one folder, ggml-viz.toml comes first."""
    start = Path(os.path.abspath(start or Path.cwd()))  # abspath: "a/.." is not below "a"
    home = Path(os.path.abspath(home or Path.home()))
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder / CONFIG_FILE
        pyproject = folder / PYPROJECT_FILE
        if pyproject.is_file() and _has_tool_table(pyproject):
            return pyproject
        if folder == home:
            break
    return None


def _has_tool_table(pyproject: Path) -> bool:
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # a broken pyproject.toml of some other project is not ours to refuse
    return isinstance(document.get("tool"), dict) and PYPROJECT_TABLE[1] in document["tool"]


def load_config_file(path: Path) -> ConfigFile:
    """Read and check a settings file (its [tool.ggml-viz] table if it is a pyproject.toml)."""
    if not path.is_file():
        raise ConfigFileError(f"settings file {path} does not exist" if not path.exists() else f"{path} is not a file")
    try:
        text = path.read_text(encoding="utf-8")
        document = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigFileError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigFileError(f"{path}: not valid TOML: {error}") from None
    prefix: tuple[str, ...] = ()
    if path.name == PYPROJECT_FILE:
        prefix = PYPROJECT_TABLE
        document = document.get("tool", {}).get(PYPROJECT_TABLE[1])
        if not isinstance(document, dict):
            raise ConfigFileError(f"{path} has no [{'.'.join(PYPROJECT_TABLE)}] table")
    positions = key_lines(text)

    def line_of(key: str) -> int | None:
        parts = prefix + tuple(key.split("."))
        while parts:  # a key in an inline table: the line of the table
            if parts in positions:
                return positions[parts]
            parts = parts[:-1]
        return None

    values: dict[str, Any] = {}
    for key, value in _flat_items(document):
        where = f"{path} line {line_of(key)}" if line_of(key) else str(path)
        values[key] = _checked(key, value, where, path.parent)
    return ConfigFile(path, values, {key: line_of(key) for key in values})


def _flat_items(document: dict[str, Any]) -> list[tuple[str, Any]]:
    """("viewer.port", 8080) for the [viewer] table's keys, ("detail", "graph") for the others."""
    items: list[tuple[str, Any]] = []
    for key, value in document.items():
        if isinstance(value, dict) and any(name.startswith(key + ".") for name in OTHER_KEYS):
            items += [(f"{key}.{inner}", inner_value) for inner, inner_value in value.items()]
        else:
            items.append((key, value))
    return items


def _checked(key: str, value: Any, where: str, folder: Path) -> Any:
    """The file's value as the command line would give it; one error naming where it is otherwise."""
    if key in OTHER_KEYS:
        check, _, accepted = OTHER_KEYS[key]
        if check(value) is None:
            raise ConfigFileError(f"{where}: {key} = {_toml(value)}: {key} takes {accepted}")
        return folder / Path(value).expanduser() if key == "output_dir" else value
    setting = _CAPTURE.get(key)
    if setting is None:
        valid = [name for name in FILE_KEYS if "." not in key or name.startswith(key.split(".")[0] + ".")]
        close = difflib.get_close_matches(key, valid, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(valid)}"
        raise ConfigFileError(f"{where}: unknown key {key!r}; {hint}")
    option = _as_option(setting, value)
    if option is None:
        raise ConfigFileError(f"{where}: {key} = {_toml(value)}: {key} takes {_accepted(setting)}")
    try:
        settings_from_options({key: option})
    except CaptureError as error:
        raise ConfigFileError(f"{where}: {key} = {_toml(value)}: {error}") from None
    return option


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_option(setting: Setting, value: Any) -> Any:
    """A TOML value as the setting's keyword argument (None: not a value of its kind)."""
    if setting.kind == "choice":
        return value if isinstance(value, str) else None
    if setting.kind in ("count", "number"):
        return value if _is_int(value) else None
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) or _is_int(item) for item in value):
        return ",".join(str(item) for item in value)  # layers = [0, 29] as well as ["0-3", "none"]
    return None


def _accepted(setting: Setting) -> str:
    return {
        "choice": f"one of {', '.join(setting.choices)} (text)",
        "count": "a whole number, 1 or more",
        "number": "a whole number",
        "list": "comma-separated text or a list",
    }[setting.kind]


def _toml(value: Any) -> str:
    """A value as it is written in TOML (near enough for a message)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)


# Where each key is: tomllib gives no positions, so the text is scanned for key lines and
# table headers (multi-line strings and arrays are skipped over).

_KEY_PART = r'(?:[A-Za-z0-9_-]+|"[^"]*"|\'[^\']*\')'
_DOTTED = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_HEADER = re.compile(rf"^\[\[?\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_KEY_LINE = re.compile(rf"^({_DOTTED})\s*=")
_TRIPLE = re.compile(r'""".*?"""|\'\'\'.*?\'\'\'')
_SINGLE = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'')


def _key_path(dotted: str) -> tuple[str, ...]:
    return tuple(a or b or c for a, b, c in re.findall(r'"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', dotted))


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The 1-based line of each key path (and table header), at its first occurrence."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    closing: str | None = None  # the quotes that end an open multi-line string
    depth = 0  # open brackets and braces of a multi-line array or inline table
    for number, line in enumerate(text.splitlines(), start=1):
        if closing is not None:
            if closing not in line:
                continue
            line, closing = line[line.index(closing) + 3 :], None
        elif depth == 0:
            header, key = _HEADER.match(line.strip()), _KEY_LINE.match(line.strip())
            if header:
                table = _key_path(header.group(1))
                lines.setdefault(table, number)
                continue
            if key:
                path = table + _key_path(key.group(1))
                for end in range(len(table) + 1, len(path) + 1):
                    lines.setdefault(path[:end], number)
        code = _TRIPLE.sub('""', line)
        opening = [code.index(quotes) for quotes in ('"""', "'''") if quotes in code]
        if opening:
            closing, code = code[min(opening) : min(opening) + 3], code[: min(opening)]
        code = _SINGLE.sub('""', code).split("#", 1)[0]
        depth = max(0, depth + code.count("[") + code.count("{") - code.count("]") - code.count("}"))
    return lines


# The effective settings.


def resolve(cli: Mapping[str, Any], env: Mapping[str, str], file: ConfigFile | None) -> Configuration:
    """Each key's value from the command line (`cli`, None: not given), else the environment,
    else the file, else the default; the capture settings checked as a whole."""
    values: dict[str, Value] = {}
    for key in FILE_KEYS:
        setting = _CAPTURE.get(key)
        if cli.get(key) is not None:
            values[key] = Value(cli[key], COMMAND_LINE)
        elif setting is not None and env.get(setting.env, "").strip():
            values[key] = Value(_from_environment(setting, env[setting.env]), f"environment {setting.env}")
        elif setting is None and env.get(OTHER_VARIABLES[key], "").strip():
            variable = OTHER_VARIABLES[key]
            values[key] = Value(_other_from_environment(key, variable, env[variable]), f"environment {variable}")
        elif file is not None and key in file.values:
            values[key] = Value(file.values[key], file.source(key))
        else:
            values[key] = Value(_default(key), DEFAULT)
    configuration = Configuration(file, values)
    try:
        configuration.capture_settings()
    except CaptureError as error:
        raise CommandError(str(error)) from None
    return configuration


def _from_environment(setting: Setting, text: str) -> Any:
    try:
        value = setting.from_text(text)
        settings_from_options({setting.key: value})
    except CaptureError as error:
        message = str(error)
        raise CommandError(message if setting.env in message else f"{setting.env}={text!r}: {message}") from None
    return value


def _other_from_environment(key: str, variable: str, text: str) -> Any:
    """output_dir, viewer.port or viewer.host from its variable; one error naming it otherwise."""
    check, _, accepted = OTHER_KEYS[key]
    value: Any = text.strip()
    if key == "viewer.port":
        value = int(value) if value.isdigit() else None
    if value is None or check(value) is None:
        raise CommandError(f"{variable}={text!r}: {key} takes {accepted.split(',')[0]}")
    return Path(os.path.abspath(Path(value).expanduser())) if key == "output_dir" else value


def _default(key: str) -> Any:
    """The value a key has when nothing sets it (None: no bound, every node, ...)."""
    if key in OTHER_KEYS:
        return OTHER_KEYS[key][1]
    setting, defaults = _CAPTURE[key], CaptureSettings()
    if setting.default is not None:
        return setting.default
    for holder in (defaults, defaults.values):  # gpu_window's 4, capture_bytes's 64 MiB
        if isinstance(getattr(holder, key, None), int):
            return getattr(holder, key)
    return None


def load_configuration(
    cli: Mapping[str, Any], config: str | None, env: Mapping[str, str] | None = None, start: Path | None = None
) -> Configuration:
    """The effective settings of a command: `config` is --config's file, else one is looked for from `start`."""
    path = Path(config) if config else find_config_file(start)
    return resolve(cli, os.environ if env is None else env, load_config_file(path) if path else None)

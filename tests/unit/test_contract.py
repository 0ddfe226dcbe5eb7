"""The contract between capture's C and its Python (capture/contract/): one declaration of every
record, number and setting both sides use, the C header written from it, and a build from other
declarations refused, at compile time or at import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.capture import c_header, contract
from ggml_viz.capture.contract import constants, records
from ggml_viz.capture.settings import preload_environment_names

SRC = Path(ggml_viz.__file__).parent.parent


def _compiler() -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    return compiler


def _compile_header(folder: Path) -> subprocess.CompletedProcess:
    """A translation unit of the header alone, checked by the C compiler (its _Static_asserts)."""
    source = folder / "contract_check.c"
    source.write_text('#include "ggml_viz_contract.h"\nint main(void) { return 0; }\n')
    return subprocess.run(
        [_compiler(), "-fsyntax-only", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{folder}", str(source)],
        capture_output=True,
        text=True,
    )


def _package_copy(tmp_path: Path) -> Path:
    """A copy of the ggml_viz package (its Python only), to change a declaration in."""
    copy = tmp_path / "src"
    shutil.copytree(SRC / "ggml_viz", copy / "ggml_viz", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return copy


def test_every_record_reads_with_the_layout_it_declares():
    for record in records.RECORDS:
        dtype = record.dtype
        # THEN numpy reads it packed, each field where the declaration puts it
        assert dtype.itemsize == record.size, record.c_name
        assert {name: dtype.fields[name][1] for name in dtype.names} == record.offsets(), record.c_name


def test_the_c_compiler_lays_out_every_record_as_declared(tmp_path):
    # GIVEN the header the build writes
    header = c_header.write_header(tmp_path)
    text = header.read_text()
    # THEN it declares every record, with a check of each field's offset, and every number
    for record in records.RECORDS:
        assert f"}} {record.c_name};" in text
        assert text.count(f"offsetof({record.c_name}, ") == len(record.fields)
    for name, value in constants.c_constants().items():
        assert f"enum {{ {name} = {value} }};" in text
    assert f'#define CONTRACT_DIGEST "{contract.digest()}"' in text
    # AND this machine's C compiler agrees with every check (warnings as errors)
    compiled = _compile_header(tmp_path)
    assert compiled.returncode == 0, compiled.stderr


def test_a_declaration_the_c_would_lay_out_otherwise_fails_the_build(tmp_path):
    # GIVEN a copy of the tree whose RoutingRecord puts its 8-byte offset before its 4-byte reserved
    # field: packed as declared the offset is at byte 20, but a C compiler aligns it to 24
    copy = _package_copy(tmp_path)
    declaration = copy / "ggml_viz" / "capture" / "contract" / "records.py"
    text = declaration.read_text()
    swapped = text.replace(
        '        Field("reserved", "u4"),\n        Field("offset", "u8"),\n',
        '        Field("offset", "u8"),\n        Field("reserved", "u4"),\n',
    )
    assert swapped != text
    declaration.write_text(swapped)
    # WHEN its header is written and compiled
    folder = tmp_path / "header"
    subprocess.run(
        [sys.executable, "-m", "ggml_viz.capture.c_header", str(folder)],
        check=True,
        env={**os.environ, "PYTHONPATH": str(copy)},
        capture_output=True,
    )
    compiled = _compile_header(folder)
    # THEN the build fails, saying which record and which field
    assert compiled.returncode != 0
    assert "RoutingRecord: 32 bytes by the contract" in compiled.stderr
    assert "RoutingRecord.offset: at 20 by the contract" in compiled.stderr


def test_an_extension_built_from_other_declarations_is_refused_at_import(tmp_path):
    built = pytest.importorskip("ggml_viz.capture.core._recorder", reason="the C recorder's extension is not built")
    # GIVEN this install's extension beside a copy of the Python whose BufferRecord swaps two
    # fields of the same size (the records' sizes alone would not tell)
    copy = _package_copy(tmp_path)
    shutil.copy(built.__file__, copy / "ggml_viz" / "capture" / "core")
    probe = (
        "from ggml_viz.capture.core.extension import IMPORT_ERROR, extension; print(extension is None, IMPORT_ERROR)"
    )

    def imported() -> str:
        env = {**os.environ, "PYTHONPATH": str(copy)}
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout

    # (the copy as it is loads the extension)
    assert imported().startswith("False None")
    declaration = copy / "ggml_viz" / "capture" / "contract" / "records.py"
    text = declaration.read_text()
    swapped = text.replace('Field("size", "u8"), Field("base", "u8"),', 'Field("base", "u8"), Field("size", "u8"),')
    assert swapped != text
    declaration.write_text(swapped)
    # WHEN it is imported THEN the extension is refused, and why is said
    answer = imported()
    assert answer.startswith("True ")
    assert "built from other record layouts" in answer


def test_the_named_records_fields_are_the_extensions():
    built = pytest.importorskip("ggml_viz.capture.core._recorder", reason="the C recorder's extension is not built")
    # THEN the extension's struct sequences have the fields the contract declares, in its order
    for named in records.NAMED_RECORDS:
        assert getattr(built, named.__name__).n_fields == len(named._fields)
        assert tuple(getattr(built, named.__name__).__match_args__) == named._fields


def test_the_preload_library_carries_the_contract_and_the_settings_it_reads():
    import ctypes

    from ggml_viz.capture.preload.library import preload_path

    path = preload_path()
    if not path.exists():
        pytest.skip("the preload library is not built")
    library = ctypes.CDLL(str(path))

    def text(symbol: str) -> str:
        return ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(library, symbol))).decode()

    assert text("ggml_viz_contract_digest") == contract.digest()
    assert tuple(text("ggml_viz_preload_settings").split(",")) == preload_environment_names()

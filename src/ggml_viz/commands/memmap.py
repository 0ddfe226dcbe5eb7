from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import CommandError
from .base import Command
from .common import add_model_arguments
from .render import format_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from ..modelfile.layout import ModelLayout

CSV_COLUMNS = ("name", "type", "ne0", "ne1", "ne2", "ne3", "n_elements", "start", "end", "bytes",
               "padding_after", "layer", "category", "bits_per_weight")  # fmt: skip


class MemmapCommand(Command):
    """Show the exact byte layout of a model file: every tensor's file range, every region.

    Reads GGUF and whisper.cpp's legacy ggml format (ggml-tiny.en.bin, ...). The map covers
    every byte of the file once (GGUF: header, metadata, tensor infos, alignment padding,
    tensors; legacy: header, mel filters, vocabulary, each tensor's header and data) and is
    checked: no overlaps, no gap but alignment padding. The file is validated first; a
    malformed one gets one error naming what is wrong.

    example:
      ggml-viz memmap model.gguf
      ggml-viz memmap ggml-tiny.en.bin
      ggml-viz memmap model.gguf --csv -o tensors.csv
      ggml-viz memmap Qwen/Qwen3-0.6B-GGUF:Q8_0       # from the Hugging Face cache
      ggml-viz memmap model.gguf --json | jq '.summary.category'
    """

    name = "memmap"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        add_model_arguments(parser, positional=True)
        output = parser.add_mutually_exclusive_group()
        output.add_argument("--json", action="store_true", help="the whole map as JSON")
        output.add_argument("--csv", action="store_true", help="one CSV row per tensor")
        parser.add_argument("-o", "--output", help="write to this file instead of standard output")

    def run(self, args: argparse.Namespace) -> int:
        from rich.console import Console

        from ..modelfile.layout import read_layout
        from ..modelfile.locate import find_model_file

        layout = read_layout(find_model_file(args.model, download=args.download).path)
        if args.json:
            text = json.dumps(layout.to_json(), indent=2, default=str)
        elif args.csv:
            text = _csv(layout)
        else:
            if args.output:
                raise CommandError("-o needs --json or --csv")
            _render(layout, Console())
            return 1 if layout.problems else 0
        if args.output:
            try:
                Path(args.output).write_text(text)
            except OSError as error:
                raise CommandError(f"cannot write {args.output}: {error.strerror or error}", exit_code=1) from None
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 1 if layout.problems else 0


# Regions listed one by one; the others (one or two per tensor) are summed by kind.
_SINGLE_REGIONS = ("header", "metadata", "tensor_infos", "mel_filters", "vocabulary", "trailing", "unexplained")


def _csv(layout: ModelLayout) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for t in layout.tensors:
        shape = [*t.shape, 1, 1, 1][:4]
        writer.writerow(
            [
                t.name,
                t.type,
                *shape,
                t.n_elements,
                t.start,
                t.end,
                t.nbytes,
                t.padding_after,
                t.layer if t.layer >= 0 else "",
                t.category,
                f"{t.bits_per_weight:.3f}",
            ]
        )
    return buffer.getvalue()


def _render(layout: ModelLayout, console: Console) -> None:
    from rich.table import Table

    if layout.format == "gguf":
        file_format = f"GGUF v{layout.version}  alignment {layout.alignment}"
        tensors_from = f"data from byte {layout.data_offset:,}"
    else:
        file_format = f"legacy ggml ({layout.metadata.get('general.architecture')}, unaligned)"
        tensors_from = f"tensor records from byte {layout.data_offset:,}"
    console.print(
        f"[bold]{layout.path}[/]  {format_bytes(layout.file_size)} ({layout.file_size:,} bytes)  {file_format}"
        f"  {len(layout.tensors)} tensors  {tensors_from}"
    )
    regions = Table("region", "start", "end", "bytes", title="regions", title_justify="left")
    kinds: dict[str, list[int]] = {}
    for region in layout.regions:
        kinds.setdefault(region.kind, []).append(region.nbytes)
    for region in layout.regions:
        if region.kind in _SINGLE_REGIONS:
            regions.add_row(region.kind, f"{region.start:,}", f"{region.end:,}", f"{region.nbytes:,}")
    for kind in ("tensor_header", "tensor", "padding"):
        if kind in kinds:
            regions.add_row(f"{kind} ×{len(kinds[kind])}", "", "", f"{sum(kinds[kind]):,}")
    console.print(regions)
    for by in ("category", "type", "layer"):
        table = Table(by, "tensors", "bytes", "share", "bits/weight", title=f"by {by}", title_justify="left")
        rows = layout.summary(by)
        for row in (
            rows if by != "layer" else sorted(rows, key=lambda r: (r["layer"] == "none", str(r["layer"]).zfill(4)))
        ):
            table.add_row(
                str(row[by]),
                str(row["tensors"]),
                format_bytes(row["bytes"]),
                f"{row['share']:.1%}",
                f"{row['bits_per_weight']:.2f}",
            )
        console.print(table)
    if layout.problems:
        console.print("[red]problems:[/]")
        for problem in layout.problems:
            console.print(f"  {problem}", markup=False)
    else:
        gaps = "the only gaps are alignment padding" if layout.alignment > 1 else "no gaps"
        console.print(f"checked: every byte belongs to one region; {gaps}")

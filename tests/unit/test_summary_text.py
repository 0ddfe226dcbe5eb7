"""The terminal summary prints texts a person reads: a day of a server generates megabytes of text,
of which the summary shows the start and the end, counting what it left out; the run and
`summary --json` keep it whole."""

from __future__ import annotations

import contextlib
import io
import json

from ggml_viz.commands import main
from ggml_viz.commands.render import TEXT_SHOWN, readable
from ggml_viz.runformat.manifest import write_manifest
from ggml_viz.runformat.schema import MANIFEST_FILE
from ggml_viz.runformat.synthetic import write_synthetic_run


def summary_output(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["summary", *argv]) == 0
    return out.getvalue()


def test_a_long_generation_is_cut_to_its_start_and_end_in_the_terminal_and_kept_whole_in_json(tmp_path, monkeypatch):
    # GIVEN a run whose program generated 200,000 characters over 4,000 lines after a long prompt
    run = write_synthetic_run(tmp_path / "long.ggmlviz", graphs=4, layers=2)
    generated = "".join(f"line {i}: the model went on and on\n" for i in range(4000))
    prompt = "Tell me everything. " * 500
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    manifest["generation"] = {"prompt": prompt, "generated_text": generated}
    write_manifest(run, manifest)
    # WHEN it is summarized in a terminal wide enough for each line (so the lines can be told apart)
    monkeypatch.setenv("COLUMNS", "2000")
    text = summary_output(str(run))
    # THEN the generated text's start and end are there, with how much was left out between them
    lines = text.splitlines()
    said = next(line for line in lines if line.startswith("generated: "))
    assert "'line 0: the model" in said and "on and on\\n'" in said
    assert f"[{len(generated) - TEXT_SHOWN:,} characters left out]" in said
    assert f"[{len(prompt) - TEXT_SHOWN:,} characters left out]" in next(
        li for li in lines if li.startswith("prompt: ")
    )
    # AND the summary stays a page: the texts take a few lines, not thousands
    assert len(text) < 20_000 and len(lines) < 200
    # AND `summary --json` has both texts whole
    whole = json.loads(summary_output(str(run), "--json"))
    assert whole["generated_text"] == generated and whole["prompt"] == prompt


def test_a_short_text_is_shown_whole():
    assert readable("Paris.") == "'Paris.'"
    assert readable("x" * TEXT_SHOWN) == repr("x" * TEXT_SHOWN)
    cut = readable("a" * 10 + "b" * 1000 + "c" * 10, 20)
    assert cut == "'aaaaaaaaaa' … [1,000 characters left out] … 'cccccccccc'"

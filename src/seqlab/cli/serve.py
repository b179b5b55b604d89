"""``seqlab serve RUN [RUN ...]``: the runs over HTTP (``seqlab.serving``) with their web page at ``/``.

Each run is loaded once; the API is described at ``/docs``. It binds 127.0.0.1 unless ``--host`` says otherwise
(``--host 0.0.0.0`` shows it to the network: the server has no authentication). Needs the ``serve`` extra.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seqlab.errors import ConfigError
from seqlab.validation import check_threads

PORT_RANGE = (1, 65535)


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``serve`` to the ``seqlab`` command."""
    serve = commands.add_parser("serve", help="serve runs over HTTP, with a web page to try them")
    serve.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run directories (seqlab train's output)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default: 8000)")
    serve.add_argument(
        "--max-concurrency", type=int, default=4, help="requests worked on at once; others wait (default: 4)"
    )
    serve.add_argument(
        "--max-batch-size",
        type=int,
        default=32,
        help="most inputs of one batched predict call; 1 runs each request alone (default: 32)",
    )
    serve.add_argument(
        "--batch-wait-ms",
        type=int,
        default=2,
        help="how long a predict batch waits for more requests after its first, in ms (default: 2)",
    )
    serve.add_argument(
        "--nbest", type=int, default=5, help="hypotheses per word, and beam width, of runs that take it (default: 5)"
    )
    serve.add_argument(
        "--compile",
        action="store_true",
        help="run the GPT runs' decoding steps compiled (torch.compile), compiled once at load (seconds to minutes)",
    )
    serve.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads of the models (default: torch's, one per core); 1 leaves a core to the server's "
        "event loop, which streams faster on a 2-core machine",
    )
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    if not PORT_RANGE[0] <= args.port <= PORT_RANGE[1]:
        raise ConfigError(f"--port ({args.port}) must be in [{PORT_RANGE[0]}, {PORT_RANGE[1]}]")
    # fastapi and uvicorn come with the optional ``serve`` extra: imported here so that every other command
    # works without them.
    try:
        import uvicorn

        from seqlab.serving import ServeLimits, create_app, load_models
    except ImportError as e:
        raise ConfigError(
            f"seqlab serve needs the serve extra ({e.name} is missing): pip install 'seqlab[serve]'"
        ) from None
    try:
        limits = ServeLimits(
            max_concurrency=args.max_concurrency, max_batch_size=args.max_batch_size, batch_wait_ms=args.batch_wait_ms
        )
    except ConfigError as e:  # "max_batch_size (0) must be an integer >= 1", with its flag
        flag = "--" + str(e).split(" ", 1)[0].replace("_", "-")
        raise ConfigError(f"{flag}: {e}") from None
    if not 1 <= args.nbest <= limits.max_beams:
        raise ConfigError(f"--nbest ({args.nbest}) must be in [1, {limits.max_beams}]")
    if args.threads is not None:
        check_threads("--threads", args.threads)
        import torch  # already imported by seqlab.serving

        torch.set_num_threads(args.threads)
    app = create_app(load_models(args.runs, nbest=args.nbest, compile=args.compile), limits=limits)
    print(f"seqlab: serving {len(args.runs)} run(s) on http://{args.host}:{args.port}/", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0

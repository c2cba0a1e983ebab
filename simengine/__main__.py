"""`python -m simengine [--port 8000] [options]`: serve the simulated engine until interrupted."""

from __future__ import annotations

import sys

from simengine.config import SimConfig, build_parser
from simengine.server import serve


def main(argv: list[str] | None = None, prog: str = "python -m simengine") -> int:
    parser = build_parser(prog=prog)
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone (internal)")
    if argv and argv[0] == "--":  # `llm-bench sim -- --port 0` passes its separator through
        argv = argv[1:]
    args = vars(parser.parse_args(argv))
    parent_pid = args.pop("parent_pid")
    try:
        config = SimConfig(**args)
    except ValueError as exc:
        parser.error(str(exc))
    return serve(config, parent_pid)


if __name__ == "__main__":
    sys.exit(main())

"""The `mmspec` command line: one parser, a module per verb under `mmspec.commands`.

Every verb works on a saved pipeline directory (`--pipeline`, a shipped model by default),
on `--device` in `--dtype`. A user error prints one line and exits with status 2, before any work.
"""

from __future__ import annotations

import errno
import logging
import sys

from mmspec.commands import batch, bench, caption, demo, generate, mesh, speak, train_drafter, video
from mmspec.commands.common import OneLineParser, UserError, decoding_configs, resolve_placement, sampling_kwargs

VERBS = (generate, bench, batch, caption, mesh, speak, video, demo, train_drafter)
# the disk refused a write: no mistake in the request, but one line too (files are written
# atomically, and the verbs that run batches resume where they stopped)
WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="mmspec", description="Parallel decoding for autoregressive generators.")
    sub = parser.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        verb.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # --help, or a bad flag already reported in one line
        return exit.code
    try:
        resolve_placement(args)  # --device and --dtype on this machine, for every verb, before any work
        if args.command not in ("demo", "caption", "mesh", "video", "train-drafter"):  # bad flags fail before any loading (these check their own)
            decoding_configs(args)
            sampling_kwargs(args)
        args.run(args)
    except (UserError, ValueError) as err:
        message = " ".join(str(err).split())  # one line, even for a library's multi-line message
        print(f"mmspec {args.command}: error: {message}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in WRITE_FAILURES:
            raise
        out = getattr(args, "out", None) or getattr(args, "out_dir", None)
        print(f"mmspec {args.command}: error: cannot write {out}: {err.strerror}; free space there or choose another output",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`mmspec demo`: the Gradio app over a saved pipeline, on a port checked before the models load."""

from __future__ import annotations

from mmspec.commands.common import UserError, add_pipeline, load, port_number
from mmspec.utils.checkpoint import first_line


def add_parser(sub) -> None:
    d = sub.add_parser("demo", help="launch the Gradio demo app (needs the [demo] extra)")
    add_pipeline(d)
    d.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    d.add_argument("--port", type=port_number, default=7860, help="port, 1 to 65535 (default 7860)")
    d.set_defaults(run=cmd_demo)


def cmd_demo(args) -> None:
    try:
        from mmspec.apps.demo import launch
    except ModuleNotFoundError as err:
        if err.name != "gradio":
            raise
        raise UserError("the demo needs gradio, an optional extra: pip install 'mmspec[demo]'") from None
    check_port_free(args.host, args.port)
    pipe = load(args)
    try:
        launch(pipe, host=args.host, port=args.port)
    except OSError as err:  # the port was taken between the check and the launch
        raise UserError(f"cannot listen on {args.host}:{args.port} ({first_line(err)}); choose another --port") from None


def check_port_free(host: str, port: int) -> None:
    """Refuses, before the models load, a port another program holds or a host this machine
    cannot listen on."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise UserError(f"--host {host!r} is not an address this machine can listen on ({err.strerror})") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: a port held only in TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as err:
            raise UserError(f"cannot listen on {host}:{port} ({err.strerror}); choose another --port or --host") from None

"""Serve an exported folder on 127.0.0.1 for local viewing: ``python -m fnarray.export.serve DIR [--port N]``.

WebGPU needs a secure context, which ``http://127.0.0.1`` is (a ``file://`` page
is not), and ES modules and WGSL need their MIME types: ``.js`` and ``.mjs`` as
``text/javascript``, ``.wgsl`` as ``text/wgsl``, ``.json`` as ``application/json``,
``.bin`` as ``application/octet-stream``. Responses are not cached, so a fresh
export shows on reload. Only the loopback address is bound: nothing is served to
the network.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import threading

__all__ = ["MIME_TYPES", "make_server", "serve_in_thread", "main"]

HOST = "127.0.0.1"
MIME_TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".wgsl": "text/wgsl",
    ".json": "application/json",
    ".bin": "application/octet-stream",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME_TYPES}
    quiet = False

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        if not self.quiet:
            super().log_message(format, *args)


def make_server(directory, port: int = 8000, quiet: bool = False) -> http.server.ThreadingHTTPServer:
    """An HTTP server of ``directory`` on ``127.0.0.1:port`` (``port=0``: a free port; see ``server_port``).

    Raises ``FileNotFoundError`` when ``directory`` is not a folder, ``OSError`` when the port is taken.
    """
    directory = os.path.abspath(os.fspath(directory))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"fnarray.export.serve: {directory} is not a folder; give the folder that "
                                "fnarray.export.webgpu wrote (or a site folder holding it)")
    handler = type("Handler", (_Handler,), {"quiet": quiet})
    return http.server.ThreadingHTTPServer((HOST, port), functools.partial(handler, directory=directory))


def serve_in_thread(directory, port: int = 0, quiet: bool = True):
    """Start serving ``directory`` in a daemon thread; returns ``(server, base_url)``.

    Stop it with ``server.shutdown(); server.server_close()``.
    """
    server = make_server(directory, port, quiet)
    threading.Thread(target=server.serve_forever, name="fnarray-export-serve", daemon=True).start()
    return server, f"http://{HOST}:{server.server_port}/"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fnarray.export.serve", description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="the folder to serve (an export, or a page with its export)")
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000; 0 picks a free one)")
    args = parser.parse_args(argv)
    try:
        server = make_server(args.directory, args.port)
    except (FileNotFoundError, OSError) as e:
        parser.error(str(e))
    print(f"serving {os.path.abspath(args.directory)} at http://{HOST}:{server.server_port}/ (Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

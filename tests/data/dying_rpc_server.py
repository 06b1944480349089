"""TVM's own RPC device server (``tvm.rpc.Server``, what ``python -m tvm.exec.rpc_server``
starts) with one fault built in, at a moment the test chooses: the first session that loads a
module while the file named by ``CL_TEST_DIE_MARKER`` exists takes the whole server down
(SIGKILL to its process group), the way a board that loses power mid-run disappears. Removing
the marker is the claim, so exactly one server dies however many share it.

Run as ``python dying_rpc_server.py --host H --port P --port-end E --tracker T:PORT --key K``.
"""

from __future__ import annotations

import argparse
from typing import Any


def install_fault() -> None:
    """Runs in the server's own process (TVM's ``server_init_callback``), before it serves:
    every session it forks loads modules through the wrapped loader."""
    import multiprocessing
    import os
    import signal

    import tvm_ffi
    from tvm.rpc import server

    marker = os.environ["CL_TEST_DIE_MARKER"]
    session_env = server._server_env

    def with_fault(*args: Any, **kwargs: Any) -> Any:
        temp = session_env(*args, **kwargs)
        load = tvm_ffi.get_global_func("tvm.rpc.server.load_module")

        def load_module(file_name: str) -> Any:
            try:
                os.unlink(marker)
            except FileNotFoundError:
                return load(file_name)
            os.killpg(os.getpgid(0), signal.SIGKILL)
            raise AssertionError("unreachable: the server was killed")

        tvm_ffi.register_global_func("tvm.rpc.server.load_module", load_module, override=True)
        return temp

    server._server_env = with_fault
    multiprocessing.set_start_method("fork", force=True)  # sessions inherit the patch


def main() -> None:
    from tvm import rpc

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--port-end", type=int, required=True)
    parser.add_argument("--tracker", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--silent", action="store_true")
    args = parser.parse_args()
    host, port = args.tracker.rsplit(":", 1)
    server = rpc.Server(args.host, args.port, args.port_end, key=args.key,
                        tracker_addr=(host, int(port)), silent=args.silent,
                        server_init_callback=install_fault)
    server.proc.join()


if __name__ == "__main__":
    main()

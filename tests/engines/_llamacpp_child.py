"""Child process: llama.cpp's C++ HTTP server (xllamacpp.Server) on 127.0.0.1.

Run as a script: python _llamacpp_child.py '<json config>'. Prints "LISTENING <url>" on stdout once the model
is loaded and the server listens, then blocks. It exits when its stdin reaches EOF (the parent closed it or
died: the kernel closes a dead process's pipe ends) or when its parent PID changes (polling backup), and on
SIGTERM (default action). No PR_SET_PDEATHSIG: that fires when the *thread* that spawned us exits.
"""

import json
import os
import sys
import threading
import time


def _watch_parent(parent_pid: int) -> None:
    def stdin_eof():
        try:
            while sys.stdin.buffer.read(1024):
                pass
        except Exception:
            pass
        os._exit(0)

    def poll_ppid():
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=stdin_eof, daemon=True).start()
    threading.Thread(target=poll_ppid, daemon=True).start()


def _resolve(value, xlc):
    """"xllamacpp.X.Y" names an attribute of the module (an enum member JSON cannot carry)."""
    if isinstance(value, list):
        return [_resolve(v, xlc) for v in value]
    if isinstance(value, str) and value.startswith("xllamacpp."):
        obj = xlc
        for part in value.split(".")[1:]:
            obj = getattr(obj, part)
        return obj
    return value


def _set(obj, dotted: str, value):
    *path, last = dotted.split(".")
    for part in path:
        obj = getattr(obj, part)
    if last == "model_alias" and isinstance(value, (list, tuple)):
        value = set(value)
    setattr(obj, last, value)


def main() -> None:
    config = json.loads(sys.argv[1])
    _watch_parent(config["parent_pid"])

    import xllamacpp as xlc

    params = xlc.CommonParams()
    for dotted, value in config["params"].items():
        _set(params, dotted, _resolve(value, xlc))
    server = xlc.Server(params)  # returns once the model is loaded and the HTTP server listens
    print("LISTENING " + server.listening_address, flush=True)
    threading.Event().wait()  # keep `server` alive until killed


if __name__ == "__main__":
    main()

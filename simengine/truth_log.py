"""The truth log: one JSON line per finished request, flushed per line, so tests can read it live."""

from __future__ import annotations

import json


class TruthLog:
    def __init__(self, path: str | None) -> None:
        self._file = open(path, "a", encoding="utf-8") if path else None

    def write(self, row: dict) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

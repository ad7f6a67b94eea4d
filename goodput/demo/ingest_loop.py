"""The demo's analyzer database, kept current from the trace store while readers (the console) read it.

Each cycle ingests only the Parquet files that appeared since the last one, into a copy of the database,
then renames the copy into place: a reader that has the file open keeps reading the version it opened (a
consistent snapshot), and no reader ever holds a lock this writer needs.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect

__all__ = ["IngestLoop"]


class IngestLoop:
    def __init__(self, traces: Path, db: Path, interval_s: float = 10.0) -> None:
        self.traces, self.db, self.interval_s = traces, db, interval_s
        self.seen: set[Path] = set()
        self.requests = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ingest-loop", daemon=True)

    def start(self) -> IngestLoop:
        self._thread.start()
        return self

    def once(self) -> int:
        """Ingest the files that are new since the last call; returns requests added."""
        new = sorted(set(self.traces.glob("date=*/hour=*/*.parquet")) - self.seen)
        if not new:
            return 0
        tmp = self.db.with_name(self.db.name + ".next")
        if self.db.exists():
            shutil.copyfile(self.db, tmp)
        else:
            tmp.unlink(missing_ok=True)
        con = connect(tmp)
        try:
            added = ingest(con, new).requests
        finally:
            con.close()
        os.replace(tmp, self.db)
        self.seen.update(new)
        self.requests += added
        return added

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.once()
                self.error = None
            except Exception as e:  # noqa: BLE001 - a failed cycle is retried at the next; the demo keeps running
                self.error = f"{type(e).__name__}: {e}"

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

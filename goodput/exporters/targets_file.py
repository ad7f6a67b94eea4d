"""The engine exporter's targets file as it changes: polled, reloaded when its content changes, last good set kept.

``poll()`` costs one ``stat`` while nothing changed. A changed signature (mtime, size, inode: a Kubernetes ConfigMap
update swaps a symlink, so the inode moves) re-reads the file, and only new content (by SHA-256) is parsed. A file
that no longer parses, or is gone, is *rejected*: the last good set keeps being served, the reason is logged once per
bad content and kept for ``/healthz``; fixing the file (or putting the good content back) clears it. Only a regular
file is read, opened without blocking: a FIFO put in its place is rejected like a bad file, where ``open`` would block
the scrape loop for ever (``/metrics`` frozen, engines that stopped still ``up 1``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from goodput.exporters.config import Targets, parse_targets
from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import MAX_YAML_BYTES, read_bytes

__all__ = ["Rejected", "TargetsFile"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rejected:
    """Why the file's current content is not served, and since when (``clock`` seconds)."""

    reason: str
    at: float


class TargetsFile:
    """A targets file read at start (``ConfigError`` when invalid) and re-read by ``poll``."""

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time) -> None:
        self.path, self.clock = Path(path), clock
        self._signature = self._stat()
        data = read_bytes(self.path, MAX_YAML_BYTES, regular=True)
        self.targets = parse_targets(data, str(self.path))
        self._digest = self._seen = hashlib.sha256(data).digest()
        self.loaded_at = clock()
        self.rejected: Rejected | None = None

    def _stat(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev

    def poll(self) -> Targets | None:
        """The new target set when the file changed to valid new content; else None (unchanged or rejected)."""
        signature = self._stat()
        if signature == self._signature and signature is not None:
            return None
        self._signature = signature
        try:
            data = read_bytes(self.path, MAX_YAML_BYTES, regular=True)
        except ConfigError as e:
            self._reject(str(e), b"")
            return None
        digest = hashlib.sha256(data).digest()
        if digest == self._digest:  # touched, or the last good content put back
            if self.rejected is not None:
                log.warning("engine exporter: targets file %s is back to the set being served", self.path)
            self.rejected, self._seen = None, digest
            return None
        try:
            targets = parse_targets(data, str(self.path))
        except ConfigError as e:
            self._reject(str(e), digest)
            return None
        self.targets, self._digest, self._seen = targets, digest, digest
        self.loaded_at, self.rejected = self.clock(), None
        return targets

    def _reject(self, reason: str, digest: bytes) -> None:
        if self.rejected is not None and digest == self._seen:
            return  # the same bad content again: said already
        self._seen = digest
        self.rejected = Rejected(reason, self.clock())
        log.warning("engine exporter: targets file rejected, keeping the last good set of %d targets: %s",
                    len(self.targets.targets), reason)

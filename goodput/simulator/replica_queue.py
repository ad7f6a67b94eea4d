"""Replicas ordered by the end of their current segment: the fleet's next replica event.

An indexed binary heap of replicas rather than ``heapq`` over (time, replica) tuples: each replica
sits in it once and knows its slot, so a segment that changes (an arrival cut a decode run short)
moves the replica instead of leaving a stale entry behind, and compiled it compares plain doubles.
Equal end times go to the replica queued first, so runs stay deterministic.
"""

from __future__ import annotations

from math import inf

from goodput.simulator.replica import Replica

__all__ = ["ReplicaQueue"]


class ReplicaQueue:
    def __init__(self) -> None:
        self.heap: list[Replica] = []
        self._keys = 0

    def __len__(self) -> int:
        return len(self.heap)

    def next_time(self) -> float:
        if not self.heap:
            return inf
        first = self.heap[0]
        return first.seg_end

    def first(self) -> Replica:
        return self.heap[0]

    def update(self, rep: Replica) -> None:
        """Put ``rep`` where its current segment's end belongs, or take it out when it has none."""
        if rep.seg_end == inf or not rep.alive:  # idle
            if rep.queue_pos >= 0:
                self._remove(rep.queue_pos)
            return
        if rep.queue_pos < 0:
            self._keys += 1
            rep.queue_key = self._keys
            self.heap.append(rep)
            rep.queue_pos = len(self.heap) - 1
        self._sift(rep.queue_pos)

    def _remove(self, pos: int) -> None:
        heap = self.heap
        heap[pos].queue_pos = -1
        last = heap.pop()
        if pos < len(heap):
            self._place(pos, last)
            self._sift(pos)

    def _place(self, pos: int, rep: Replica) -> None:
        self.heap[pos] = rep
        rep.queue_pos = pos

    def _sift(self, pos: int) -> None:
        """Move the replica at ``pos`` up, or else down, to where its segment end belongs."""
        heap = self.heap
        rep = heap[pos]
        while pos > 0:
            parent = (pos - 1) >> 1
            if not _before(rep, heap[parent]):
                break
            self._place(pos, heap[parent])
            pos = parent
        n = len(heap)
        while True:  # a replica that moved up is already before its new children: this stops at once
            child = 2 * pos + 1
            if child >= n:
                break
            if child + 1 < n and _before(heap[child + 1], heap[child]):
                child += 1
            if not _before(heap[child], rep):
                break
            self._place(pos, heap[child])
            pos = child
        self._place(pos, rep)


def _before(a: Replica, b: Replica) -> bool:
    return a.seg_end < b.seg_end or (a.seg_end == b.seg_end and a.queue_key < b.queue_key)

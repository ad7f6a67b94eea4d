# Static types for goodput/simulator/replica_queue.py when it is compiled (see goodput/simulator/compiled.py).
cimport cython

from goodput.simulator.replica cimport Replica


@cython.final
cdef class ReplicaQueue:
    cdef public list heap
    cdef long _keys

    @cython.locals(first=Replica)
    cdef double next_time(self)
    cdef Replica first(self)
    cdef update(self, Replica rep)
    @cython.locals(last=Replica)
    cdef _remove(self, long pos)
    cdef inline _place(self, long pos, Replica rep)
    @cython.locals(rep=Replica, parent=long, child=long, n=long)
    cdef _sift(self, long pos)

cdef bint _before(Replica a, Replica b)

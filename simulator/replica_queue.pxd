# Static types for simulator/replica_queue.py when it is compiled (see simulator/compiled.py).
cimport cython

from simulator.replica cimport Replica


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
    @cython.locals(rep=Replica, other=Replica, parent=long)
    cdef _sift_up(self, long pos)
    @cython.locals(rep=Replica, other=Replica, child=long, n=long)
    cdef _sift_down(self, long pos)


cdef bint _before(Replica a, Replica b)

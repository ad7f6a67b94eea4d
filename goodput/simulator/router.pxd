# Static types for goodput/simulator/router.py when it is compiled (see goodput/simulator/compiled.py).
cimport cython

from goodput.simulator.replica cimport Replica
from goodput.simulator.request cimport Request


@cython.final
cdef class Router:
    cdef public str policy
    cdef public long kind, next, _n_seen
    cdef public list _ready
    cdef public double _valid_until

    cpdef invalidate(self)
    @cython.locals(r=Replica)
    cdef list _ready_at(self, list replicas, double t)
    @cython.locals(r=Replica, best=Replica, ready=list, n=long, start=long, i=long, s=double, best_score=double)
    cpdef Replica pick(self, list replicas, Request req, double t)

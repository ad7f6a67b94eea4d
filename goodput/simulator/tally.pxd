# Static types for goodput/simulator/tally.py when it is compiled (see goodput/simulator/compiled.py).
cimport cython

from goodput.simulator.request cimport Request


@cython.final
cdef class ScrapeCounts:
    cdef public long deployment, tokens, waits
    cdef public list bounds, counts

    @cython.locals(w=double)
    cpdef add(self, Request req)


@cython.final
cdef class SloTally:
    cdef public double bucket_s, until
    cdef public list ttft, tpot, total, good
    cdef public long rejected

    @cython.locals(a=double, b=long, rank=long, n=long)
    cpdef add(self, Request req)

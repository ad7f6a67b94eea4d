# Static types for goodput/simulator/fleet.py when it is compiled (see goodput/simulator/compiled.py).
cimport cython

from goodput.simulator.replica cimport Replica
from goodput.simulator.replica_queue cimport ReplicaQueue
from goodput.simulator.request cimport Request
from goodput.simulator.roofline cimport Roofline
from goodput.simulator.router cimport Router


cdef class Deployment:  # a dataclass: its __init__ takes the fields in the order declared here, keep it the .py's
    cdef public long index
    cdef public object cfg
    cdef public Roofline roofline
    cdef public long num_blocks
    cdef public Router router
    cdef public list replicas
    cdef public double step_scale, prefill_scale, decode_scale
    cdef public str role
    cdef public object decode


cdef class Fleet:
    cdef public object cfg, observer_factory, arrivals, _cols_for, gateway, cold_rng
    cdef public long max_run_steps, next_arrival, next_event, next_rid
    cdef public ReplicaQueue queue
    cdef public list done, deployments, events, releases, workload_deployment, workload_tier
    cdef public dict by_name, cold_starts
    cdef public double now
    cdef public tuple _cols
    cdef public bint keep_done
    cdef public list sinks, transfers

    cpdef _finished(self, Request req)
    cpdef _hand_off(self, Request req, double t)
    @cython.locals(req=Request, rep=Replica)
    cpdef _arrive(self, double t)
    cpdef reschedule(self, Replica rep)
    @cython.locals(dep=Deployment, rep=Replica)
    cpdef submit(self, Request req, double t)
    cdef tuple _columns(self)
    cdef Request _arrival_request(self, long i)
    @cython.locals(rep=Replica, queue=ReplicaQueue, t_rep=double, t_arr=double, t_ev=double, i=long, n_arr=long,
                   ticks=long, qs=list, events=list, t_gw=double, t_kv=double)
    cpdef run(self, double until, object progress=*)

# Static types for goodput/simulator/replica.py when it is compiled (see goodput/simulator/compiled.py).
cimport cython

from goodput.simulator.request cimport Request
from goodput.simulator.roofline cimport DecodeRun, Roofline


# request states and segment kinds: C constants in the compiled build (Python names in the source)
cdef long WAITING, PREFILLING, DECODING, DONE
cdef long IDLE, SINGLE, RUN


cdef class Replica:
    cdef public long index, max_run_steps, bs, total_blocks, used_blocks, n_waiting, _seq, counter, n_dec, dec_base
    cdef public long _token, seg_kind, seg_n, seg_dec, preemptions_total, steps_total, deployment, queue_pos, queue_key
    cdef public long incoming
    cdef public long max_model_len, max_waiting_requests, max_num_seqs, max_num_batched_tokens, prefill_chunk_tokens
    cdef public double max_queue_time_s
    cdef public object on_done, obs, fresh, cache, handoff
    cdef public list waiting, prefilling, res, fin_heap, seg_chunks, aborts
    cdef public dict running
    cdef public Roofline rf
    cdef public bint alive
    cdef public double available_from, cache_tokens, cache_capacity, step_scale, prefill_scale, decode_scale
    cdef public double seg_start, seg_end
    cdef public DecodeRun seg_run

    cpdef reject(self, Request req, double t, str reason, str finish=*)
    cpdef bint submit(self, Request req, double t)
    cdef bint _interrupt(self, double t)
    @cython.locals(req=Request, chunk=long)
    cpdef complete_segment(self)
    @cython.locals(req=Request, c0=long, c=long, token=long)
    cdef _advance_decode(self, long n, double end)
    cdef long _blocks_needed(self, long c0, long n)
    cdef long _max_steps_for_blocks(self, long c0, long free)
    cdef _prefill_done(self, Request req, double t)
    cdef _hand_off(self, Request req, double t)
    cpdef bint receive(self, Request req, double t)
    cdef _leave_decode(self, Request req)
    cdef _finish(self, Request req, double t)
    cdef _unschedule(self, Request req)
    cdef _preempt(self, Request req)
    cdef long _cache_hit_tokens(self, Request req)
    cdef _cache_insert(self, Request req)
    @cython.locals(req=Request)
    cdef _expire(self, double now)
    @cython.locals(preemptions=long, n_dec=long, budget=long, preempted=bint)
    cdef _plan(self, double now)
    @cython.locals(req=Request)
    cdef _drop_aborts(self, double now)
    cdef _reserve_decode_blocks(self)
    @cython.locals(req=Request, victim=Request, chunk=long, need=long, chunk_limit=long)
    cdef long _continue_prefills(self, list chunks, long budget)
    @cython.locals(req=Request, chunk=long, need=long, chunk_limit=long, cached=long)
    cdef _admit(self, list chunks, long budget, double now)
    cdef _start_prefill(self, Request req, long cached, long need, double now)
    @cython.locals(r=Request, c=long, p_tokens=long, pairs=double, kv=double, s_dec=double)
    cdef _plan_step(self, double now, list chunks, long n_dec)
    @cython.locals(c0=long, n=long, n_fin=long, run=DecodeRun, head=Request, token=long)
    cdef _plan_decode_run(self, double now, long n_dec, bint preempted)
    cdef _enqueue(self, Request req, bint front=*)

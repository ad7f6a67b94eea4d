# Static types for goodput/simulator/request.py when it is compiled (see goodput/simulator/compiled.py).
cimport cython


@cython.final
cdef class Request:
    cdef public long rid, workload, tenant, tier_rank, deployment, replica
    cdef public str tier, finish_reason, reject_reason
    cdef public double arrival, queue_start, scheduled, first_token, last_token, completed, send_s
    cdef public double kv_ready, decode_start, kv_link_s
    cdef public long prompt_tokens, output_target, cached_tokens, generated, preemptions, prefix_block_tokens
    cdef public bint natural_stop, cache_checked
    cdef public object prefix, meta
    cdef public long prefill_target, computed, blocks, kv_len, dec_start, dec_token, res_idx, state, max_tokens
    cdef public long prefill_replica, kv_bytes

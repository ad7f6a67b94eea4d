# Static types for goodput/simulator/roofline.py when it is compiled (see goodput/simulator/compiled.py).
# Both classes are dataclasses: their fields must stay in the order of the .py.
cimport cython


@cython.final
cdef class Roofline:
    cdef public double sec_per_flop, sec_per_byte, sec_per_kv_byte, flops_per_token, attn_flops_per_ctx, weight_bytes
    cdef public double expert_bytes, expert_miss, kv_bytes_per_token, overhead_s, comm_s_per_token

    cpdef double weights_read(self, double tokens)
    cpdef double step_time(self, double tokens, double attn_pairs, double kv_tokens)
    cpdef DecodeRun decode_run(self, double n, double s0, double scale=*)


@cython.final
cdef class DecodeRun:
    cdef public double a1, b1, a2, b2, overhead_s, scale

    cpdef double step_time(self, long k)
    cpdef double time(self, long k)
    cpdef long steps_before(self, long limit, double budget)


cdef double _sum_linear(double a, double b, long k0, long k1)
cdef double _sum_max_linear(double a1, double b1, double a2, double b2, long k)

"""One vLLM-style engine replica in virtual time: continuous batching over paged KV blocks.

Each engine step the scheduler (as in vLLM V1) first gives every decoding sequence one token and
the partial prefills their next chunk, preempting the most recently scheduled sequence (recompute)
when a KV block cannot be allocated; the preempted request goes back to the head of its tier's
queue (V1's FCFS queue prepends it), so under KV pressure the sequences already started finish
before the burst's later requests start. Then, if nothing was preempted, it admits waiting requests
in that order (tier, preempted first, then arrival) while the token budget, ``max_num_seqs`` and
free blocks allow.

Speed without approximation: while no prefill is in flight and nobody can be admitted, successive
steps differ only by one token of context per sequence. Their times are linear in the step index
(see ``roofline.DecodeRun``), so a whole run of such steps up to the next finish, the next block
shortage, or the next arrival is computed in closed form instead of step by step. Per-sequence
state is kept relative to a shared decode-step counter, so a step costs O(1), not O(batch).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from heapq import heappop, heappush
from math import inf

from goodput.simulator.config import EngineConfig
from goodput.simulator.request import Request
from goodput.simulator.roofline import DecodeRun, Roofline

__all__ = ["Replica"]

WAITING, PREFILLING, DECODING, DONE = 1, 2, 3, 4
IDLE, SINGLE, RUN = 0, 1, 2


class Replica:
    """State and scheduler of one replica. The fleet calls ``submit`` and, at ``seg_end``, ``complete_segment``."""

    def __init__(self, index: int, engine: EngineConfig, roofline: Roofline, num_blocks: int,
                 on_done: Callable[[Request], None], observer=None, max_run_steps: int = 1 << 60) -> None:
        """``max_run_steps=1`` turns the closed-form decode runs off (one step per event): the baseline."""
        self.index = index
        self.deployment = 0  # the fleet's index of this replica's deployment (the fleet sets it)
        self.max_run_steps = max_run_steps
        # the engine's limits, copied: the scheduler reads them every step
        self.max_model_len = engine.max_model_len
        self.max_waiting_requests = engine.max_waiting_requests
        self.max_num_seqs = engine.max_num_seqs
        self.max_num_batched_tokens = engine.max_num_batched_tokens
        self.prefill_chunk_tokens = engine.prefill_chunk_tokens
        self.max_queue_time_s = engine.max_queue_time_s
        self.rf = roofline
        self.bs = engine.block_size
        self.total_blocks = num_blocks
        self.used_blocks = 0
        self.on_done = on_done
        self.obs = observer
        self.alive = True
        self.available_from = 0.0
        # queues
        self.waiting: list = []  # heap of (tier_rank, arrival, seq, req)
        self.n_waiting = 0
        self.fresh: deque[Request] = deque()  # never-scheduled waiting requests, for queue timeouts
        self.running: dict[int, Request] = {}  # schedule order; last = first to preempt
        self.prefilling: list[Request] = []
        self._seq = 0
        # decode state relative to a shared step counter
        self.counter = 0
        self.n_dec = 0
        self.dec_base = 0  # sum over decoding seqs of (kv_len - dec_start)
        self.res = [0] * self.bs  # decoding seqs by the counter residue at which they need a new block
        self.fin_heap: list = []  # (finish counter, token, req)
        self._token = 0
        # prefix cache: LRU of block hashes, capacity in tokens
        self.cache: OrderedDict | None = OrderedDict() if engine.prefix_cache else None
        self.cache_tokens = 0
        self.cache_capacity = engine.prefix_cache_fraction * num_blocks * self.bs
        # performance multipliers from releases
        self.step_scale = 1.0
        self.prefill_scale = 1.0
        self.decode_scale = 1.0
        # current segment
        self.seg_kind = IDLE
        self.seg_start = 0.0
        self.seg_end = inf
        self.seg_n = 0
        self.seg_run = DecodeRun(0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
        self.seg_chunks: list[tuple[Request, int]] = []
        self.seg_dec = 0
        # place in the fleet's ReplicaQueue (-1: not queued) and its tie-break order
        self.queue_pos = -1
        self.queue_key = 0
        # counters (also read by live metrics)
        self.preemptions_total = 0
        self.steps_total = 0
        self.aborts: list[Request] = []
        # a prefill replica of a disaggregated deployment hands each request off after its first token (the fleet
        # moves its KV to a decode replica); None: the replica decodes what it prefilled
        self.handoff: Callable[[Request, float], None] | None = None
        self.incoming = 0  # a decode replica: KV caches on the link to it, which its router counts as queued

    # ------------------------------------------------------------------ queries

    @property
    def outstanding(self) -> int:
        return self.n_waiting + len(self.running)

    @property
    def kv_usage(self) -> float:
        return self.used_blocks / self.total_blocks if self.total_blocks else 0.0

    def decoded_at(self, req: Request, t: float) -> int:
        """Tokens ``req`` has produced by time ``t`` (for streaming in real time)."""
        if req.state != DECODING:
            return req.generated
        steps = self.counter - req.dec_start
        if self.seg_kind == RUN and t > self.seg_start:
            done = self.seg_run.steps_before(self.seg_n, t - self.seg_start) - 1
            steps += max(0, done)
        return min(req.generated + steps, req.output_target)

    def segment_steps(self, n: int) -> list[tuple[float, int]]:
        """(duration, tokens) of the first ``n`` steps of the current segment (for live metrics)."""
        if self.seg_kind == SINGLE:
            return [(self.seg_end - self.seg_start, self.seg_dec + sum(c for _, c in self.seg_chunks))]
        return [(self.seg_run.step_time(k), self.n_dec) for k in range(n)]

    # ------------------------------------------------------------------ input

    def reject(self, req: Request, t: float, reason: str, finish: str = "rejected") -> None:
        req.finish_reason = finish
        req.reject_reason = reason
        req.completed = t
        req.state = DONE
        self.on_done(req)

    def submit(self, req: Request, t: float) -> bool:
        """Admit ``req`` at time ``t``; returns True when the current segment changed (re-schedule it)."""
        req.replica = self.index
        if req.prompt_tokens >= self.max_model_len:
            self.reject(req, t, "context_too_long")
            return False
        if -(-req.prompt_tokens // self.bs) > self.total_blocks:
            self.reject(req, t, "kv_capacity")
            return False
        if self.n_waiting >= self.max_waiting_requests:
            self.reject(req, t, "queue_full")
            return False
        if req.prompt_tokens + req.output_target > self.max_model_len:
            req.output_target = self.max_model_len - req.prompt_tokens
            req.natural_stop = False
        self._enqueue(req)
        self.fresh.append(req)
        return self._interrupt(t)

    def abort(self, req: Request, t: float) -> bool:
        """The client went away: drop ``req`` at the next step boundary (as vLLM does)."""
        if req.state == DONE:
            return False
        self.aborts.append(req)
        return self._interrupt(t)

    def _interrupt(self, t: float) -> bool:
        """Something arrived at ``t``: end the current run of decode steps at the first boundary after ``t``."""
        if self.seg_kind == IDLE or t <= self.seg_start:
            self._plan(t)
            return True
        if self.seg_kind == RUN and t < self.seg_end:
            k = self.seg_run.steps_before(self.seg_n, t - self.seg_start)
            if k < self.seg_n:
                self.seg_n = k
                self.seg_end = self.seg_start + self.seg_run.time(k)
                return True
        return False

    def set_scales(self, t: float, step: float, prefill: float, decode: float) -> bool:
        """A release changes step times from ``t`` on: steps already running keep theirs."""
        changed = self._interrupt(t) if self.seg_kind == RUN else False
        self.step_scale, self.prefill_scale, self.decode_scale = step, prefill, decode
        return changed

    def queued_since(self) -> float:
        """When the oldest request waiting here and never scheduled joined the queue (inf: none waits)."""
        for req in self.fresh:
            if req.state == WAITING and req.scheduled != req.scheduled:
                return req.queue_start
        return inf

    def _next_deadline(self) -> float:
        return self.queued_since() + self.max_queue_time_s

    def abort_all(self, t: float) -> None:
        """The run ends at ``t``: whatever is still queued or running is aborted then."""
        for req in [*self.running.values(), *(e[3] for e in self.waiting if e[3].state == WAITING)]:
            self._drop(req, t)
        self.waiting.clear()
        self.fresh.clear()
        self.seg_kind, self.seg_end = IDLE, inf

    def _drop(self, req: Request, t: float) -> None:
        if req.state == DONE:
            return
        if req.state == WAITING:
            self.n_waiting -= 1
        else:
            self._unschedule(req)
        req.state = DONE
        req.finish_reason = "abort"
        req.completed = t
        if self.obs is not None:
            self.obs.on_abort(self, req)
        self.on_done(req)

    def _enqueue(self, req: Request, front: bool = False) -> None:
        """Queue ``req`` by tier, then arrival; ``front``: ahead of its whole tier, the last one put there first
        (a preempted request: vLLM V1's FCFS queue takes it back with ``prepend_request``, at the head)."""
        req.state = WAITING
        self._seq += 1
        if front:
            heappush(self.waiting, (req.tier_rank, -inf, -self._seq, req))
        else:
            heappush(self.waiting, (req.tier_rank, req.arrival, self._seq, req))
        self.n_waiting += 1

    def fail_all(self, t: float) -> None:
        """The replica is lost at ``t``: everything on it ends with an error."""
        self.alive = False
        victims = list(self.running.values()) + [e[3] for e in self.waiting if e[3].state == WAITING]
        self.running.clear()
        self.prefilling.clear()
        self.waiting.clear()
        self.fresh.clear()
        self.fin_heap.clear()
        self.n_waiting = self.n_dec = self.dec_base = self.used_blocks = 0
        self.res = [0] * self.bs
        self.seg_kind, self.seg_end = IDLE, inf
        for req in victims:
            if req.state == DECODING:
                req.generated = min(req.output_target, req.generated + self.counter - req.dec_start)
            req.finish_reason = "error"
            req.completed = t
            req.state = DONE
            self.on_done(req)

    # ------------------------------------------------------------------ segments

    def complete_segment(self) -> None:
        """Apply the effects of the segment ending at ``seg_end`` and plan the next one."""
        end = self.seg_end
        if self.seg_kind == RUN:
            self._advance_decode(self.seg_n, end)
        elif self.seg_kind == SINGLE:
            if self.seg_dec:
                self._advance_decode(1, end)
            else:
                self.steps_total += 1
            obs = self.obs
            for req, chunk in self.seg_chunks:
                if req.state != PREFILLING:
                    continue
                req.computed += chunk
                if obs is not None:
                    obs.on_prompt_tokens(self, chunk)
                if req.computed >= req.prefill_target:
                    self._prefill_done(req, end)
        self._plan(end)

    def _advance_decode(self, n: int, end: float) -> None:
        c0 = self.counter
        self.used_blocks += self._blocks_needed(c0, n)
        self.counter = c = c0 + n
        self.steps_total += n
        if self.obs is not None:
            self.obs.on_decode(self, n, self.n_dec)
        heap = self.fin_heap
        while heap and heap[0][0] <= c:
            _, token, req = heappop(heap)
            if req.dec_token != token or req.state != DECODING:
                continue
            self._leave_decode(req)
            req.generated = req.output_target
            self._finish(req, end)

    def receive(self, req: Request, t: float) -> bool:
        """A disaggregated request whose prompt KV (and first token) arrived at ``t`` from a prefill replica: queued
        like a full prefix-cache hit, so admitting it allocates the prompt's blocks here and its first step computes
        only the first token's KV. A preemption later recomputes it all here, as vLLM does. Returns ``submit``'s."""
        req.kv_ready = t
        req.prefill_target = req.prompt_tokens + req.generated
        req.computed = req.prompt_tokens
        req.cache_checked = True
        return self.submit(req, t)

    def _blocks_needed(self, c0: int, n: int) -> int:
        if n <= 0 or not self.n_dec:
            return 0
        bs, res = self.bs, self.res
        full, rem = divmod(n, bs)
        total = full * self.n_dec
        for k in range(1, rem + 1):
            total += res[(c0 + k) % bs]
        return total

    def _max_steps_for_blocks(self, c0: int, free: int) -> int:
        n_dec = self.n_dec
        if not n_dec:
            return 1 << 60
        bs, res = self.bs, self.res
        full = free // n_dec
        left = free - full * n_dec
        r = 0
        for k in range(1, bs):
            need = res[(c0 + k) % bs]
            if need > left:
                break
            left -= need
            r = k
        return full * bs + r

    def _prefill_done(self, req: Request, t: float) -> None:
        self.prefilling.remove(req)
        req.generated += 1
        if req.first_token != req.first_token:  # NaN: first attempt
            req.first_token = t
            if self.obs is not None:
                self.obs.on_first_token(self, req, t)
        req.kv_len = req.prefill_target
        if req.generated >= req.output_target:
            req.blocks = -(-req.kv_len // self.bs)
            self._finish(req, t)
            return
        if self.handoff is not None:
            self._hand_off(req, t)
            return
        req.state = DECODING
        req.dec_start = c = self.counter
        self._token += 1
        req.dec_token = self._token
        req.res_idx = (c + 1 - req.kv_len) % self.bs
        self.res[req.res_idx] += 1
        self.n_dec += 1
        self.dec_base += req.kv_len - c
        heappush(self.fin_heap, (c + req.output_target - req.generated, self._token, req))

    def _hand_off(self, req: Request, t: float) -> None:
        """Prefill done on a prefill replica: its blocks are freed now (vLLM's NIXL connector keeps them until the
        decode replica has read them; the prefill pool's KV is not what binds) and the fleet moves its KV."""
        self.used_blocks -= req.blocks
        req.blocks = 0
        del self.running[req.rid]
        req.prefill_replica = self.index
        self._cache_insert(req)
        if self.obs is not None:
            self.obs.on_handoff(self, req, t)
        handoff = self.handoff
        assert handoff is not None, "only a prefill replica hands off"  # _prefill_done checked
        handoff(req, t)

    def _leave_decode(self, req: Request) -> None:
        steps = self.counter - req.dec_start
        req.blocks = -(-(req.kv_len + steps) // self.bs)
        self.n_dec -= 1
        self.dec_base -= req.kv_len - req.dec_start
        self.res[req.res_idx] -= 1
        req.dec_token = 0

    def _finish(self, req: Request, t: float) -> None:
        self.used_blocks -= req.blocks
        req.blocks = 0
        self.running.pop(req.rid, None)
        req.state = DONE
        req.last_token = t
        req.completed = t + req.send_s
        req.finish_reason = "stop" if req.natural_stop else "length"
        self._cache_insert(req)
        if self.obs is not None:
            self.obs.on_finish(self, req, t)
        self.on_done(req)

    def _unschedule(self, req: Request) -> None:
        """Take a running request out of the batch (keeping the tokens it produced) and free its blocks."""
        if req.state == DECODING:
            req.generated += self.counter - req.dec_start
            self._leave_decode(req)
        else:
            self.prefilling.remove(req)
        self.used_blocks -= req.blocks
        req.blocks = 0
        del self.running[req.rid]

    def _preempt(self, req: Request) -> None:
        self._unschedule(req)
        req.preemptions += 1
        self.preemptions_total += 1
        req.prefill_target = req.prompt_tokens + req.generated
        req.computed = 0
        req.cache_checked = False
        if self.obs is not None:
            self.obs.on_preempt(self, req)
        self._enqueue(req, True)

    # ------------------------------------------------------------------ prefix cache

    def _cache_hit_tokens(self, req: Request) -> int:
        cache = self.cache
        if cache is None or not req.prefix:
            return 0
        matched = 0
        for h in req.prefix:
            if h not in cache:
                break
            cache.move_to_end(h)
            matched += 1
        return min(matched * req.prefix_block_tokens, req.prefill_target - 1)

    def _cache_insert(self, req: Request) -> None:
        """A request leaving the replica leaves its prompt's prefix blocks in the LRU cache (the oldest evicted)."""
        cache, prefix, bt = self.cache, req.prefix, req.prefix_block_tokens
        if cache is None or not prefix:
            return
        for h in prefix:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = bt
                self.cache_tokens += bt
        while self.cache_tokens > self.cache_capacity and cache:
            _, size = cache.popitem(last=False)
            self.cache_tokens -= size

    # ------------------------------------------------------------------ scheduling

    def _expire(self, now: float) -> None:
        limit = self.max_queue_time_s
        fresh = self.fresh
        while fresh:
            req = fresh[0]
            if req.state != WAITING or req.scheduled == req.scheduled:
                fresh.popleft()
                continue
            deadline = req.queue_start + limit
            if deadline > now:
                break
            fresh.popleft()
            self.n_waiting -= 1
            self.reject(req, deadline, "queue_timeout", finish="timeout")

    def _plan(self, now: float) -> None:
        """Decide the step (or run of decode steps) starting at ``now``: the scheduler's four steps in order."""
        self.seg_start = now
        if self.aborts:
            self._drop_aborts(now)
        if self.fresh:
            self._expire(now)
        preemptions = self.preemptions_total  # a preemption in step 1 or 2 skips admission (step 3)
        if self.n_dec:
            self._reserve_decode_blocks()
        # the step's decode batch is fixed here; a prefill below may still preempt one of it (the step keeps its size)
        n_dec = self.n_dec
        chunks: list[tuple[Request, int]] = []
        budget = self.max_num_batched_tokens - n_dec
        if self.prefilling:
            budget = self._continue_prefills(chunks, budget)
        preempted = self.preemptions_total != preemptions
        if not preempted:
            self._admit(chunks, budget, now)
        if chunks:
            self._plan_step(now, chunks, n_dec)
        elif n_dec:
            self._plan_decode_run(now, n_dec, preempted)
        else:
            self.seg_kind = IDLE
            self.seg_end = inf

    def _drop_aborts(self, now: float) -> None:
        """Requests whose clients went away leave at this step boundary, before anything is scheduled."""
        for req in self.aborts:
            self._drop(req, now)
        self.aborts.clear()

    def _reserve_decode_blocks(self) -> None:
        """Step 1: every decoding sequence needs its next block; preempt the newest until they all fit."""
        while self.n_dec and self.res[(self.counter + 1) % self.bs] > self.total_blocks - self.used_blocks:
            self._preempt(next(reversed(self.running.values())))

    def _continue_prefills(self, chunks: list[tuple[Request, int]], budget: int) -> int:
        """Step 2: the partial prefills already running get their next chunk (appended to ``chunks``), preempting
        the newest request while a chunk's blocks do not fit. Returns the token budget left."""
        bs, running = self.bs, self.running
        chunk_limit = self.prefill_chunk_tokens
        for req in list(self.prefilling):
            if budget <= 0:
                break
            if req.state != PREFILLING:
                continue
            chunk = min(req.prefill_target - req.computed, budget, chunk_limit)
            need = -(-(req.computed + chunk) // bs) - req.blocks
            while need > self.total_blocks - self.used_blocks and req.state == PREFILLING:
                victim = next(reversed(running.values()))
                if victim is not req:  # a victim given a chunk earlier in this step gives its tokens back
                    budget += sum(c for v, c in chunks if v is victim)
                    chunks[:] = [(v, c) for v, c in chunks if v is not victim]
                self._preempt(victim)
            if req.state != PREFILLING:
                continue
            self.used_blocks += need
            req.blocks += need
            chunks.append((req, chunk))
            budget -= chunk
        return budget

    def _admit(self, chunks: list[tuple[Request, int]], budget: int, now: float) -> None:
        """Step 3: start waiting requests in queue order (their first chunk appended to ``chunks``) while the token
        budget, ``max_num_seqs`` and free blocks allow; the first that does not fit stops admission."""
        bs, waiting = self.bs, self.waiting
        chunk_limit = self.prefill_chunk_tokens
        while self.n_waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = waiting[0][3]
            if req.state != WAITING:
                heappop(waiting)
                continue
            cached = self._cache_hit_tokens(req) if not req.cache_checked else req.computed
            chunk = min(req.prefill_target - cached, budget, chunk_limit)
            need = -(-(cached + chunk) // bs)
            if need > self.total_blocks - self.used_blocks:
                break
            heappop(waiting)
            self.n_waiting -= 1
            self._start_prefill(req, cached, need, now)
            chunks.append((req, chunk))
            budget -= chunk

    def _start_prefill(self, req: Request, cached: int, need: int, now: float) -> None:
        """Move an admitted request from the queue into the batch: its prefix-cache hit counted once, ``need``
        blocks allocated, and its first scheduling (or a disaggregated request's first decode step) stamped."""
        if not req.cache_checked:
            req.cache_checked = True
            req.computed = cached
            if req.scheduled != req.scheduled:
                req.cached_tokens = cached
                if self.obs is not None:
                    self.obs.on_prefix_cache(self, req.prompt_tokens, cached)
        self.used_blocks += need
        req.blocks = need
        req.state = PREFILLING
        if req.scheduled != req.scheduled:
            req.scheduled = now
            if self.obs is not None:
                self.obs.on_scheduled(self, req, now)
        elif req.decode_start != req.decode_start and req.kv_ready == req.kv_ready:
            req.decode_start = now  # a disaggregated request's first step on its decode replica
        self.running[req.rid] = req
        self.prefilling.append(req)

    def _plan_step(self, now: float, chunks: list[tuple[Request, int]], n_dec: int) -> None:
        """Step 4, with prefill chunks: one step of ``n_dec`` decode tokens plus the chunks, timed by the roofline."""
        s_dec: float = self.dec_base + n_dec * (self.counter + 1)
        p_tokens, pairs, kv = 0, s_dec, s_dec
        for r, c in chunks:
            p_tokens += c
            pairs += c * r.computed + c * (c + 1) / 2
            kv += r.computed + c
        scale = self.step_scale * (n_dec * self.decode_scale + p_tokens * self.prefill_scale) / (n_dec + p_tokens)
        self.seg_kind = SINGLE
        self.seg_chunks = chunks
        self.seg_dec = n_dec
        self.seg_end = now + self.rf.step_time(n_dec + p_tokens, pairs, kv) * scale

    def _plan_decode_run(self, now: float, n_dec: int, preempted: bool) -> None:
        """Step 4, decode only: a run of steps in closed form, up to the next finish, block shortage or queue
        timeout (one step when a preemption skipped admission, so the next step may admit)."""
        c0 = self.counter
        heap = self.fin_heap
        while heap:  # drop entries of requests that left decoding (preempted) since they were pushed
            _, token, head = heap[0]
            if head.dec_token == token and head.state == DECODING:
                break
            heappop(heap)
        n_fin = heap[0][0] - c0 if heap else 1 << 60
        n = max(1, min(n_fin, self.max_run_steps, self._max_steps_for_blocks(c0, self.total_blocks - self.used_blocks)))
        if preempted and self.n_waiting:
            n = 1  # admission was skipped because of the preemption; the next step may admit
        self.seg_kind = RUN
        self.seg_run = run = self.rf.decode_run(n_dec, self.dec_base + n_dec * (c0 + 1),
                                                self.step_scale * self.decode_scale)
        if n > 1 and self.n_waiting and self.fresh:
            # a queue timeout can change the head of the queue: stop at the first step boundary after it
            deadline = self._next_deadline()
            if deadline < inf:
                n = min(n, run.steps_before(n, deadline - now))
        self.seg_n = n
        self.seg_end = now + run.time(n)

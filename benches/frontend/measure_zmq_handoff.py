"""Times one hop between vLLM's API server and engine-core processes: a small message over a
ZeroMQ IPC socket pair (pyzmq, as vLLM uses), half of a ping-pong round trip between two
processes.

    python benches/frontend/measure_zmq_handoff.py
"""

import multiprocessing as mp
import tempfile
import time

import zmq


def echo(addr_in, addr_out, n):
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(addr_in)
    push = ctx.socket(zmq.PUSH)
    push.connect(addr_out)
    for _ in range(n):
        push.send(pull.recv())


def main(n=20000):
    d = tempfile.mkdtemp()
    a, b = f"ipc://{d}/a", f"ipc://{d}/b"
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.bind(a)
    pull = ctx.socket(zmq.PULL)
    pull.bind(b)
    p = mp.Process(target=echo, args=(a, b, n), daemon=True)
    p.start()
    msg = b"x" * 256
    for _ in range(1000):
        push.send(msg)
        pull.recv()
    t0 = time.perf_counter()
    for _ in range(n - 1000):
        push.send(msg)
        pull.recv()
    rtt = (time.perf_counter() - t0) / (n - 1000) * 1e6
    print(f"round trip {rtt:.1f} us; one hop {rtt / 2:.1f} us")
    p.join()


if __name__ == "__main__":
    main()

"""Timing shared by the PyTorch peer scripts."""
import statistics
import time


def median_ms(fn, runs, warmup=10):
    """The median wall time of fn() in milliseconds over `runs` calls, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)

"""The progress line of a spec_value command: seconds since this process started, then the message."""
import time


def log(msg, t0=[time.time()]):    # noqa: B006 - the clock of this process
    print(f"[spec {time.time() - t0[0]:6.1f}s] {msg}", flush=True)

"""Whether a host that a download needs answers, asked once and at once.

Libraries find out slowly that there is no network: huggingface_hub retries each request five times with back-off
(23 s a file), and a resolver that gets no answer can hold a lookup for longer. A run about to fetch weights or a
dataset that is not cached asks here first, so that its one-line error (what to fetch, where to copy it) comes at once.
"""

import functools
import socket
import threading
import urllib.parse
import urllib.request

PROBE_S = 3.0  # a reachable host answers a TCP connection in well under this


def unreachable(url):
    """None when the host of `url` (or the proxy the environment names for it: HTTPS_PROXY, NO_PROXY...) accepts a TCP
    connection within PROBE_S seconds; else why not: "<host>:<port> cannot be reached (<reason>)". Asked once a process
    for each host and port."""
    host, port = _first_hop(url)
    return _connect(host, port)


@functools.cache
def _connect(host, port):
    outcome = []

    def attempt():  # in a thread: the name lookup itself takes no timeout
        try:
            socket.create_connection((host, port), timeout=PROBE_S).close()
            outcome.append(None)
        except OSError as e:
            outcome.append(e.strerror or str(e) or type(e).__name__)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(PROBE_S)
    why = outcome[0] if outcome else f"no answer within {PROBE_S:g} s"
    return None if why is None else f"{host}:{port} cannot be reached ({why})"


def _first_hop(url):
    """(host, port) a request for `url` connects to first: its own, or its proxy's."""
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


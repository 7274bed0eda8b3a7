"""A local HTTP server that answers slowly on purpose (a byte at a time), for download tests."""
import http.server
import threading
import time


class TrickleServer:
    """GET anything: 200 with ``Content-Length: size``, then ``chunk`` bytes every ``every``
    seconds until ``size`` bytes are sent or the client hangs up. ``requests`` lists the paths."""

    def __init__(self, size=4096, chunk=1, every=0.1):
        self.requests = []
        self.stop = threading.Event()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                sent = 0
                try:
                    while sent < size and not outer.stop.is_set():
                        n = min(chunk, size - sent)
                        self.wfile.write(b"x" * n)
                        self.wfile.flush()
                        sent += n
                        time.sleep(every)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class FileServer:
    """http.server in a thread serving ``directory``; ``requests`` lists the paths asked for."""

    def __init__(self, directory, handler=None):
        self.requests = []
        outer = self

        class H(handler or http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **k):
                super().__init__(*a, directory=str(directory), **k)

            def do_GET(self):
                outer.requests.append(self.path)
                super().do_GET()

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

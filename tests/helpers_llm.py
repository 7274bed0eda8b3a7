"""A local OpenAI-compatible chat-completions server (``POST /v1/chat/completions``) with scripted,
deterministic answers per class, for the attribute-generation tests. Never the network."""
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_CLASS = re.compile(r'of the class "([^"]+)"')


def answer(attrs):
    return ("json", {"attributes": list(attrs)})


class FakeChatServer:
    """``script[class]``: a list of steps used one per request for that class; afterwards (and for
    unscripted classes) ``default(class)``. Steps: ``("json", obj)`` (content = json.dumps(obj)),
    ``("raw", text)``, ``("status", code, headers, body)``, ``("sleep", seconds, step)``,
    ``("reflect", obj, how)``: like ``json`` with every ``$KEY`` in it replaced by the bearer token
    the request carried (``how``: "plain", "upper", or "escaped" as ``\\uXXXX`` in the JSON
    text), as a proxy or a misbehaving server that echoes credentials would.
    ``json_mode=False`` answers 400 to any request with ``response_format``."""

    def __init__(self, script=None, default=None, json_mode=True):
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.default = default or (lambda c: answer([f"{c.split()[0]}-part", "red", "round",
                                                     "shiny", "small"]))
        self.json_mode = json_mode
        self.requests = []          # (class, body dict, authorization header)
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "no such endpoint"}})
                m = _CLASS.search(body["messages"][-1]["content"])
                cname = m.group(1) if m else "?"
                with server.lock:
                    server.requests.append((cname, body, self.headers.get("Authorization")))
                    if not server.json_mode and "response_format" in body:
                        step = ("status", 400, {}, {"error": {
                            "message": "response_format is not supported by this server",
                            "type": "invalid_request_error"}})
                    else:
                        steps = server.script.get(cname)
                        step = steps.pop(0) if steps else server.default(cname)
                auth = self.headers.get("Authorization") or ""
                self._step(step, body, auth.split(" ", 1)[-1])

            def _step(self, step, body, token=""):
                kind = step[0]
                if kind == "reflect":
                    how = step[2] if len(step) > 2 else "plain"
                    text = json.dumps(step[1])
                    key = token.upper() if how == "upper" else token
                    if how == "escaped":
                        key = "".join(f"\\u{ord(c):04x}" for c in token)
                    step = ("raw", text.replace("$KEY", key))
                    kind = "raw"
                if kind == "sleep":
                    time.sleep(step[1])
                    return self._step(step[2], body, token)
                if kind == "status":
                    return self._send(step[1], step[3] if len(step) > 3 else
                                      {"error": {"message": "scripted", "type": "x"}}, step[2])
                content = json.dumps(step[1]) if kind == "json" else step[1]
                self._send(200, {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0,
                    "model": body.get("model", ""),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})

            def _send(self, code, obj, headers=None):
                data = json.dumps(obj).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass    # the client gave up (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def classes_asked(self):
        return [c for c, _, _ in self.requests]

#!/usr/bin/env python3
"""A git host for the GitOps controller's HTTPS test: git's own smart-HTTP server
(`git http-backend`, as Apache or nginx run it behind CGI) over TLS on a loopback
port, requiring HTTP basic authentication with one access token, as GitHub and
GitLab do for private repositories.

Usage: git_https.py PROJECT_ROOT CERT KEY TOKEN PORT_FILE LOG_FILE

Writes the port it listens on to PORT_FILE, and one line per request to LOG_FILE
(method, path, status and the user name; never the token).
"""

import base64
import http.server
import os
import ssl
import subprocess
import sys

ROOT, CERT, KEY, TOKEN, PORT_FILE, LOG_FILE = sys.argv[1:7]


def log(line):
    with open(LOG_FILE, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class GitHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep stderr quiet; LOG_FILE has the requests
        pass

    def user(self):
        """The user name when the request carries the token, else None."""
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            return None
        try:
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
        except ValueError:
            return None
        return user if password == TOKEN else None

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def serve(self, method):
        body = self.body()
        user = self.user()
        path, _, query = self.path.partition("?")
        if user is None:
            log(f"{method} {path} 401 -")
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        env = dict(
            os.environ,
            GIT_PROJECT_ROOT=ROOT,
            GIT_HTTP_EXPORT_ALL="1",
            PATH_INFO=path,
            QUERY_STRING=query,
            REQUEST_METHOD=method,
            REMOTE_USER=user,
            REMOTE_ADDR="127.0.0.1",
            CONTENT_TYPE=self.headers.get("Content-Type", ""),
            CONTENT_LENGTH=str(len(body)),
            HTTP_CONTENT_ENCODING=self.headers.get("Content-Encoding", ""),
            GIT_PROTOCOL=self.headers.get("Git-Protocol", ""),
        )
        out = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        ).stdout
        head, _, rest = out.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if not name:
                continue
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            else:
                headers.append((name, value.strip()))
        log(f"{method} {path} {status} {user}")
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)

    def do_GET(self):
        self.serve("GET")

    def do_POST(self):
        self.serve("POST")


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), GitHandler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
server.socket = context.wrap_socket(server.socket, server_side=True)
with open(PORT_FILE + ".tmp", "w", encoding="utf-8") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()

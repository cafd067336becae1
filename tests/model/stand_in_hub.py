"""A stand-in Hugging Face Hub on 127.0.0.1, for HF_ENDPOINT: the few endpoints that
huggingface_hub's `snapshot_download` calls, answered from repositories held in memory.

- GET /api/models/{repo}/revision/{rev}: the commit (`sha`) and its files (`siblings`);
- GET /api/models/{repo}/tree/{rev}?recursive=...: the files, with size and blob id;
- HEAD and GET /{repo}/resolve/{rev}/{path}: a file, with X-Repo-Commit, ETag and
  Content-Length;
- 404 with X-Error-Code RepoNotFound, RevisionNotFound or EntryNotFound for what it lacks,
  and RepoNotFound for a private repository asked without its token, as the Hub answers.

`requests` records the path of every request, for a test to see what was fetched.
"""
from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.parse
from dataclasses import dataclass, field


@dataclass
class Repo:
    """A repository: its commits (sha -> {path: bytes}) and its branches and tags."""

    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    token: str | None = None
    """A private repository's: asked without `Authorization: Bearer TOKEN`, it is not there."""

    def commit(self, revision: str) -> str | None:
        return self.refs.get(revision) or (revision if revision in self.commits else None)


class StandInHub:
    """The server, started on a free port in a thread; `url` is its HF_ENDPOINT."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.requests: list[str] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                hub.answer(self, body=True)

            def do_HEAD(self):  # noqa: N802
                hub.answer(self, body=False)

            def log_message(self, *args):  # quiet: pytest shows stderr of failures
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, name: str, files: dict[str, bytes], revision: str = "main",
            token: str | None = None) -> str:
        """Commit `files` to repository `name` as `revision` (a branch or tag), private to
        `token` if given; its sha."""
        repo = self.repos.setdefault(name, Repo(token=token))
        sha = hashlib.sha1(f"{name}@{revision}@{len(repo.commits)}".encode()).hexdigest()
        repo.commits[sha] = dict(files)
        repo.refs[revision] = sha
        return sha

    # Answers -------------------------------------------------------------------------------

    def answer(self, request, body: bool) -> None:
        url = urllib.parse.urlsplit(request.path)
        path = urllib.parse.unquote(url.path)
        self.requests.append(path)
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/"):]
            for word, reply in (("/revision/", self._info), ("/tree/", self._tree)):
                if word in rest:
                    name, _, revision = rest.partition(word)
                    return self._with_commit(request, name, revision, reply, body)
        elif "/resolve/" in path:
            name, _, rest = path[1:].partition("/resolve/")
            revision, _, filename = rest.partition("/")
            return self._with_commit(request, name, revision,
                                     lambda *a: self._file(*a, filename), body)
        self._error(request, 404, "EntryNotFound", body)

    def _with_commit(self, request, name: str, revision: str, reply, body: bool) -> None:
        repo = self.repos.get(name)
        if repo is None or (repo.token is not None and
                            request.headers.get("Authorization") != f"Bearer {repo.token}"):
            return self._error(request, 404, "RepoNotFound", body)
        sha = repo.commit(revision)
        if sha is None:
            return self._error(request, 404, "RevisionNotFound", body)
        reply(request, name, sha, repo.commits[sha], body)

    def _info(self, request, name, sha, files, body) -> None:
        self._json(request, {"id": name, "modelId": name, "sha": sha, "private": False,
                             "siblings": [{"rfilename": p} for p in sorted(files)]}, body)

    def _tree(self, request, name, sha, files, body) -> None:
        self._json(request, [{"type": "file", "path": p, "size": len(data),
                              "oid": hashlib.sha1(data).hexdigest()}
                             for p, data in sorted(files.items())], body)

    def _file(self, request, name, sha, files, body, filename) -> None:
        if filename not in files:
            return self._error(request, 404, "EntryNotFound", body)
        data = files[filename]
        self._send(request, 200, data, body, {
            "X-Repo-Commit": sha, "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
            "Content-Type": "application/octet-stream"})

    def _json(self, request, value, body: bool) -> None:
        self._send(request, 200, json.dumps(value).encode(), body,
                   {"Content-Type": "application/json"})

    def _error(self, request, status: int, code: str, body: bool) -> None:
        self._send(request, status, json.dumps({"error": code}).encode(), body,
                   {"X-Error-Code": code, "X-Error-Message": code,
                    "Content-Type": "application/json"})

    @staticmethod
    def _send(request, status: int, data: bytes, body: bool, headers: dict) -> None:
        request.send_response(status)
        for key, value in headers.items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if body:
            request.wfile.write(data)

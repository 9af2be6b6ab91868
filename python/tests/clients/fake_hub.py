"""A tiny Hugging Face Hub on 127.0.0.1, answering the few requests huggingface_hub's
snapshot_download makes (no network): so the cache the tests read is laid out by
huggingface_hub's own code, refs, snapshots, blobs and all.

    GET  /api/models/{org}/{name}[/revision/{rev}]      model_info: {"id", "sha", "siblings"}
    GET  /api/models/{org}/{name}/tree/{rev}[/path]     list_repo_tree: [{"type", "path", "size", "oid", "lfs"}]
    HEAD /{org}/{name}/resolve/{rev}/{file}              X-Repo-Commit, ETag (X-Linked-Etag), sizes
    GET  /{org}/{name}/resolve/{rev}/{file}              the bytes

A repository is {revision name: (commit, folder)}; a commit hash is a revision too. Files ending
in .safetensors are served as LFS files are (their blob named by sha256, as on the Hub).
"""
from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
from urllib.parse import unquote, urlsplit


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    def __init__(self, repos: dict):
        """repos: {"org/name": {"main": (commit, folder), "v1": (commit, folder), ...}}."""
        self.repos = repos
        self.requests: list = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                hub._answer(self, body=True)

            def do_HEAD(self):
                hub._answer(self, body=False)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- the repository's contents -------------------------------------------------------------

    def _revision(self, repo: str, revision: str):
        revisions = self.repos.get(repo)
        if revisions is None:
            return None
        if revision in revisions:
            return revisions[revision]
        return next((rev for rev in revisions.values() if rev[0] == revision), None)

    @staticmethod
    def _files(folder: str) -> list:
        out = []
        for root, _, names in os.walk(folder):
            for name in names:
                out.append(os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/"))
        return sorted(out)

    @staticmethod
    def _entry(folder: str, path: str) -> dict:
        with open(os.path.join(folder, path), "rb") as f:
            data = f.read()
        entry = {"type": "file", "path": path, "size": len(data), "oid": _git_blob_sha1(data)}
        if path.endswith(".safetensors"):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return entry

    # -- HTTP ----------------------------------------------------------------------------------

    def _answer(self, handler, body: bool) -> None:
        path = unquote(urlsplit(handler.path).path)
        self.requests.append((handler.command, path))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo = "/".join(parts[2:4])
            if len(parts) == 4 or parts[4] == "revision":
                return self._model_info(handler, repo, "/".join(parts[5:]) or "main", body)
            if parts[4] == "tree":
                return self._tree(handler, repo, parts[5], "/".join(parts[6:]), body)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(handler, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), body)
        return self._send(handler, 404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}, body)

    def _send(self, handler, status: int, data: bytes, headers: dict, body: bool) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    def _not_found(self, handler, repo: str, body: bool) -> None:
        self._send(handler, 404, json.dumps({"error": f"Repository {repo} not found"}).encode(),
                   {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"}, body)

    def _model_info(self, handler, repo: str, revision: str, body: bool) -> None:
        found = self._revision(repo, revision)
        if found is None:
            return self._not_found(handler, repo, body)
        commit, folder = found
        info = {"id": repo, "modelId": repo, "sha": commit, "private": False,
                "siblings": [{"rfilename": f} for f in self._files(folder)]}
        self._send(handler, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)

    def _tree(self, handler, repo: str, revision: str, under: str, body: bool) -> None:
        found = self._revision(repo, revision)
        if found is None:
            return self._not_found(handler, repo, body)
        _, folder = found
        entries = [self._entry(folder, f) for f in self._files(folder) if not under or f.startswith(under + "/")]
        self._send(handler, 200, json.dumps(entries).encode(), {"Content-Type": "application/json"}, body)

    def _resolve(self, handler, repo: str, revision: str, filename: str, body: bool) -> None:
        found = self._revision(repo, revision)
        if found is None:
            return self._not_found(handler, repo, body)
        commit, folder = found
        path = os.path.join(folder, filename)
        if filename not in self._files(folder):
            return self._send(handler, 404, b'{"error": "entry not found"}',
                              {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit}, body)
        with open(path, "rb") as f:
            data = f.read()
        entry = self._entry(folder, filename)
        etag = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{etag}"', "Content-Type": "application/octet-stream"}
        if "lfs" in entry:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data))})
        self._send(handler, 200, data, headers, body)

"""`gpuctl`: the command-line client of the gpuctl API server.

The server comes from `--server` or `$GPUCTL_SERVER` (default http://127.0.0.1:8000).
Every failure exits non-zero with one line on stderr: `error: <message>`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import httpx
import yaml

DEFAULT_SERVER = "http://127.0.0.1:8000"
API = "/api/v1"
DONE_STATES = {"Running", "Completed"}
FAILED_STATES = {"Failed"}


class CliError(Exception):
    pass


# ---- HTTP ----------------------------------------------------------------------------------


class Client:
    def __init__(self, server: str, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.http = httpx.Client(base_url=self.server, timeout=timeout)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self.http.request(method, API + path, **kw)
        except httpx.HTTPError as e:
            raise CliError(f"cannot reach gpuctl server {self.server}: {e}") from None
        try:
            body = r.json()
        except ValueError:
            body = None
        if r.status_code >= 400:
            msg = body.get("error") if isinstance(body, dict) else None
            raise CliError(f"{msg or r.text.strip() or r.reason_phrase} (HTTP {r.status_code})")
        return body


# ---- output --------------------------------------------------------------------------------


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "<none>"
        if isinstance(v, list):
            return ",".join(str(x) for x in v) or "<none>"
        return str(v)

    grid = [[h for h, _ in columns]] + [[cell(r.get(k)) for _, k in columns] for r in rows]
    widths = [max(len(row[i]) for row in grid) for i in range(len(columns))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in grid
    )


def emit(data: Any, output: str, render: Callable[[Any], str]) -> None:
    if output == "json":
        print(json.dumps(data, indent=2, ensure_ascii=False))
    elif output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
    else:
        print(render(data))


JOB_COLUMNS = [
    ("JOB ID", "jobId"),
    ("NAME", "name"),
    ("NAMESPACE", "namespace"),
    ("KIND", "kind"),
    ("STATUS", "status"),
    ("READY", "ready"),
    ("NODE", "node"),
    ("IP", "ip"),
    ("AGE", "age"),
]


def _items(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, dict) and "items" in data:
        return list(data["items"])
    return list(data) if isinstance(data, list) else [data]


# ---- commands ------------------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None


def _wait(c: Client, jobs: list[tuple[str, str]], timeout: float) -> None:
    """Poll each job until Running/Completed, printing status changes to stderr."""
    deadline = time.monotonic() + timeout
    pending = dict.fromkeys(jobs, "")
    while pending:
        for (ns, name), last in list(pending.items()):
            d = c.call("GET", f"/jobs/{name}", params={"namespace": ns})
            status = d.get("status", "")
            if status != last:
                print(f"{ns}/{name}: {status}", file=sys.stderr, flush=True)
                pending[(ns, name)] = status
            if status in DONE_STATES:
                del pending[(ns, name)]
            elif status in FAILED_STATES:
                raise CliError(f"job {ns}/{name} failed")
        if not pending:
            return
        if time.monotonic() > deadline:
            names = ", ".join(f"{ns}/{n} ({s or 'unknown'})" for (ns, n), s in pending.items())
            raise CliError(f"timed out after {timeout:g}s waiting for {names}")
        time.sleep(1.0)


def cmd_create(c: Client, a: argparse.Namespace) -> None:
    docs = [_read(f) for f in a.filename]
    if len(docs) == 1:
        r = c.call("POST", "/jobs", json={"yamlContent": docs[0]})
        created = [r]
        failed: list[dict[str, Any]] = []
    else:
        r = c.call("POST", "/jobs/batch", json={"yamlContents": docs})
        created, failed = r["success"], r["failed"]
        for f in failed:
            f["file"] = a.filename[f["index"]]
    if a.output != "table":
        emit({"success": created, "failed": failed} if len(docs) > 1 else r, a.output, str)
    else:
        for j in created:
            print(f"job/{j['name']} created in namespace {j.get('namespace', 'default')}")
        for f in failed:
            print(f"error: {f['file']}: {f['error']}", file=sys.stderr)
    if a.wait and created:
        _wait(c, [(j.get("namespace", "default"), j["name"]) for j in created], a.timeout)
    if failed:
        raise CliError(f"{len(failed)} of {len(docs)} jobs failed")


def _usage_cells(node: dict[str, Any]) -> dict[str, Any]:
    """cpu/memory as `requested/allocatable` for the table."""
    out = dict(node)
    for k in ("cpu", "memory"):
        v = node.get(k)
        if isinstance(v, dict):
            out[k] = f"{v.get('requested')}/{v.get('allocatable')}"
    return out


def cmd_get(c: Client, a: argparse.Namespace) -> None:
    what = a.resource
    if what in ("jobs", "job"):
        params = {
            k: v
            for k, v in {
                "kind": a.kind,
                "pool": a.pool,
                "status": a.status,
                "namespace": a.namespace,
                "page": a.page,
                "pageSize": a.page_size,
            }.items()
            if v is not None
        }
        data = c.call("GET", "/jobs", params=params)
        emit(data, a.output, lambda d: table(d["items"], JOB_COLUMNS))
    elif what in ("pools", "pool"):
        data = c.call("GET", "/pools")
        cols = [
            ("NAME", "name"),
            ("STATUS", "status"),
            ("GPU TOTAL", "gpuTotal"),
            ("GPU USED", "gpuUsed"),
            ("GPU FREE", "gpuFree"),
            ("GPU TYPE", "gpuType"),
            ("DESCRIPTION", "description"),
        ]
        emit(data, a.output, lambda d: table(_items(d), cols))
    elif what in ("nodes", "node"):
        params = {
            k: v
            for k, v in {
                "pool": a.pool,
                "gpuType": a.gpu_type,
                "status": a.status,
                "page": a.page,
                "pageSize": a.page_size,
            }.items()
            if v is not None
        }
        data = c.call("GET", "/nodes", params=params)
        cols = [
            ("NAME", "nodeName"),
            ("STATUS", "status"),
            ("GPU TOTAL", "gpuTotal"),
            ("GPU USED", "gpuUsed"),
            ("GPU FREE", "gpuFree"),
            ("GPU TYPE", "gpuType"),
            ("POOLS", "boundPools"),
            ("CPU", "cpu"),
            ("MEMORY", "memory"),
        ]
        emit(data, a.output, lambda d: table([_usage_cells(n) for n in _items(d)], cols))
    elif what in ("quotas", "quota"):
        params = {"namespace": a.namespace} if a.namespace else {}
        data = c.call("GET", "/quotas", params=params)
        cols = [
            ("NAME", "name"),
            ("NAMESPACE", "namespace"),
            ("CPU", "cpu"),
            ("MEMORY", "memory"),
            ("GPU", "gpu"),
        ]
        emit(data, a.output, lambda d: table(_items(d), cols))
    else:  # ns / namespaces
        data = c.call("GET", "/namespaces")
        cols = [("NAME", "name"), ("STATUS", "status"), ("AGE", "age")]
        emit(data, a.output, lambda d: table(_items(d), cols))


def _describe(d: dict[str, Any]) -> str:
    lines = [
        f"Name:          {d['name']}",
        f"Namespace:     {d['namespace']}",
        f"Kind:          {d['kind']} ({d['resource_type']})",
        f"Status:        {d['status']}",
        f"Priority:      {d.get('priority')}",
        f"Pool:          {d.get('pool') or '<none>'}",
        f"Age:           {d.get('age')}",
        f"Started:       {d.get('started') or '<none>'}",
        f"Completed:     {d.get('completed') or '<none>'}",
        f"Resources:     {', '.join(f'{k}={v}' for k, v in (d.get('resources') or {}).items())}",
        f"Pods:          {', '.join(d.get('pods') or []) or '<none>'}",
    ]
    am = d.get("access_methods") or {}
    if am.get("pod_ip_access"):
        lines.append(f"Pod access:    {am['pod_ip_access']['url']}")
    if am.get("node_port_access"):
        lines.append(f"NodePort:      {am['node_port_access']['url'] or am['node_port_access']['node_port']}")
    lines.append("Spec:")
    lines += ["  " + ln for ln in yaml.safe_dump(d["yaml_content"], sort_keys=False).splitlines()]
    lines.append("Events:")
    cols = [
        ("AGE", "age"),
        ("TYPE", "type"),
        ("REASON", "reason"),
        ("FROM", "from"),
        ("OBJECT", "object"),
        ("MESSAGE", "message"),
    ]
    lines += ["  " + ln for ln in table(d.get("events") or [], cols).splitlines()]
    return "\n".join(lines)


def cmd_describe(c: Client, a: argparse.Namespace) -> None:
    params = {"namespace": a.namespace} if a.namespace else {}
    d = c.call("GET", f"/jobs/{a.name}", params=params)
    emit(d, a.output, _describe)


def cmd_delete(c: Client, a: argparse.Namespace) -> None:
    params: dict[str, Any] = {"force": str(a.force).lower()}
    if a.namespace:
        params["namespace"] = a.namespace
    d = c.call("DELETE", f"/jobs/{a.name}", params=params)
    emit(d, a.output, lambda r: f"job/{r['jobId']} {r['status']}")


def cmd_logs(c: Client, a: argparse.Namespace) -> None:
    params: dict[str, Any] = {"tail": a.tail}
    if a.namespace:
        params["namespace"] = a.namespace
    if a.pod:
        params["pod"] = a.pod
    if not a.follow:
        d = c.call("GET", f"/jobs/{a.name}/logs", params=params)
        for line in d["logs"]:
            print(line)
        return
    from urllib.parse import urlencode

    from websockets.exceptions import ConnectionClosed, WebSocketException
    from websockets.sync.client import connect

    url = c.server.replace("http", "ws", 1) + f"{API}/jobs/{a.name}/logs/ws?{urlencode(params)}"
    try:
        with connect(url, open_timeout=10) as ws:
            for raw in ws:
                msg = json.loads(raw)
                if msg.get("type") == "log":
                    print(msg.get("data", ""), flush=True)
                elif msg.get("type") == "error":
                    raise CliError(str(msg.get("data")))
                elif msg.get("type") == "end":
                    return
    except ConnectionClosed:
        return
    except (OSError, WebSocketException) as e:
        raise CliError(f"cannot follow logs from {c.server}: {e}") from None


def cmd_label(c: Client, a: argparse.Namespace) -> None:
    for item in a.labels:
        if a.delete:
            key = item.split("=", 1)[0]
            d = c.call("DELETE", f"/nodes/{a.node}/labels/{key}")
        else:
            if "=" not in item:
                raise CliError(f"label {item!r} must be key=value")
            key, value = item.split("=", 1)
            d = c.call(
                "POST", f"/nodes/{a.node}/labels", json={"key": key, "value": value, "overwrite": a.overwrite}
            )
        emit(d, a.output, lambda _r, k=key: f"node/{a.node} label {k} {'removed' if a.delete else 'set'}")


# ---- parser --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", default=argparse.SUPPRESS, help="API server URL (env GPUCTL_SERVER)")
    common.add_argument("-o", "--output", choices=("table", "json", "yaml"), default=argparse.SUPPRESS)
    common.add_argument("-n", "--namespace", default=argparse.SUPPRESS)

    p = argparse.ArgumentParser(prog="gpuctl", description="gpuctl: GPU jobs on Kubernetes", parents=[common])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("create", parents=[common], help="create jobs from YAML files")
    s.add_argument(
        "-f", "--filename", action="append", required=True, help="job YAML (repeatable, - for stdin)"
    )
    s.add_argument("--wait", action="store_true", help="wait until the jobs are Running or Completed")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds to wait with --wait")
    s.set_defaults(fn=cmd_create)

    s = sub.add_parser("get", parents=[common], help="list jobs, pools, nodes, quotas or namespaces")
    s.add_argument(
        "resource",
        choices=("jobs", "job", "pools", "pool", "nodes", "node", "quotas", "quota", "ns", "namespaces"),
    )
    s.add_argument("--kind")
    s.add_argument("--pool")
    s.add_argument("--gpu-type")
    s.add_argument("--status")
    s.add_argument("--page", type=int)
    s.add_argument("--page-size", type=int)
    s.set_defaults(fn=cmd_get)

    s = sub.add_parser("describe", parents=[common], help="show a job in detail")
    s.add_argument("what", choices=("job",))
    s.add_argument("name")
    s.set_defaults(fn=cmd_describe)

    s = sub.add_parser("delete", parents=[common], help="delete a job and everything it created")
    s.add_argument("what", choices=("job",))
    s.add_argument("name")
    s.add_argument("--force", action="store_true", help="grace period 0")
    s.set_defaults(fn=cmd_delete)

    s = sub.add_parser("logs", parents=[common], help="print a job's logs")
    s.add_argument("name")
    s.add_argument("-f", "--follow", action="store_true")
    s.add_argument("--tail", type=int, default=100)
    s.add_argument("--pod")
    s.set_defaults(fn=cmd_logs)

    s = sub.add_parser("label", parents=[common], help="set or remove node labels")
    s.add_argument("what", choices=("node",))
    s.add_argument("node")
    s.add_argument("labels", nargs="+", help="key=value (or key with --delete)")
    s.add_argument("--overwrite", action="store_true")
    s.add_argument("--delete", action="store_true")
    s.set_defaults(fn=cmd_label)
    return p


def _fail(msg: str) -> NoReturn:
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    a.server = getattr(a, "server", None) or os.environ.get("GPUCTL_SERVER") or DEFAULT_SERVER
    a.output = getattr(a, "output", None) or "table"
    a.namespace = getattr(a, "namespace", None)
    try:
        a.fn(Client(a.server), a)
    except CliError as e:
        _fail(str(e))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpuctl ... | head`
        sys.stderr.close()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

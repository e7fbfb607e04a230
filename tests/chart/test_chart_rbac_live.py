"""The chart's least-privilege RBAC is enough in practice: after `helm install`, the real
controller, gpuctl and hypervisor processes run with their chart ServiceAccount's token (and
the env the chart gives their containers) and become ready; the same tokens are refused what
the chart does not grant."""

from __future__ import annotations

import asyncio
import base64
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_kit import CHART, Helm, LoggedService, container, one, plain_env
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

# Values the local processes cannot take from the container spec: their listen addresses and
# node-local paths (the hypervisor's host paths live under tmp here).
_LOCAL = ("_HTTP_PORT", "_GRPC_PORT", "_HTTP_HOST", "_GRPC_HOST")


def _sa_kubeconfig(devcluster: Any, token: str, path: Path) -> Path:
    assert devcluster.pki is not None
    ca = base64.b64encode(Path(devcluster.pki.ca_cert).read_bytes()).decode()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": devcluster.server, "certificate-authority-data": ca}}
                ],
                "users": [{"name": "sa", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sa"}}],
                "current-context": "c",
            }
        )
    )
    return path


async def _sa_client(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


async def test_services_run_with_their_chart_service_accounts(
    helm: Helm, devcluster: Any, namespace: str, mint_token: Any, tmp_path: Path
) -> None:
    release = f"rb{secrets.token_hex(3)}"
    r = helm.run(
        "install", release, str(CHART), "--namespace", namespace,
        "--set", "lens.enabled=false", "--set", "controller.replicas=1",
        "--set", "hypervisor.backend=simulated", "--set", "hypervisor.simulatedDevices=2xH100-80GB",
        kubeconfig=devcluster.kubeconfig,
    )  # fmt: skip
    assert r.rc == 0, r.stderr
    docs = helm.render(
        namespace=namespace,
        release=release,
        sets=(
            "lens.enabled=false",
            "hypervisor.backend=simulated",
            "hypervisor.simulatedDevices=2xH100-80GB",
        ),
    )
    fields = {
        "metadata.namespace": namespace,
        "metadata.name": f"{release}-pod",
        "spec.nodeName": "gpu-node-0",
    }
    procs: list[LoggedService] = []
    try:
        kubeconfigs: dict[str, Path] = {}
        envs: dict[str, dict[str, str]] = {}
        for comp, kind in (
            ("controller", "Deployment"),
            ("gpuctl", "Deployment"),
            ("hypervisor", "DaemonSet"),
        ):
            workload = one(docs, kind, comp)
            sa = workload["spec"]["template"]["spec"]["serviceAccountName"]
            token = await mint_token(namespace, sa)
            kubeconfigs[comp] = _sa_kubeconfig(devcluster, token, tmp_path / f"{comp}.kubeconfig")
            env = plain_env(container(workload), fields)
            envs[comp] = {k: v for k, v in env.items() if not k.endswith(_LOCAL)}

        # All three start at once (the controller's gRPC port is known before it listens;
        # the others retry until it does).
        ctrl = LoggedService(
            "controller", kubeconfigs["controller"], envs["controller"], tmp_path / "controller.log"
        )
        envs["gpuctl"]["GPUPLANE_GPUCTL_CONTROLLER_ADDRESS"] = ctrl.grpc_target
        envs["hypervisor"].update(
            {
                "GPUPLANE_HYPERVISOR_CONTROLLER": ctrl.grpc_target,
                "GPUPLANE_HYPERVISOR_STATE_FILE": str(tmp_path / "hyp" / "state.json"),
                "GPUPLANE_HYPERVISOR_SHM_HOST_ROOT": str(tmp_path / "shm"),
            }
        )
        procs = [
            ctrl,
            LoggedService("gpuctl", kubeconfigs["gpuctl"], envs["gpuctl"], tmp_path / "gpuctl.log"),
            LoggedService(
                "hypervisor", kubeconfigs["hypervisor"], envs["hypervisor"], tmp_path / "hypervisor.log"
            ),
        ]
        for proc in procs:
            proc.launch()
        for proc in procs:
            await asyncio.to_thread(proc.wait_ready)
        # Let the informers, leader election, heartbeats and status writers run a little, then
        # look for any call the API server refused: a grant missing from the chart.
        await asyncio.sleep(3)
        for p in procs:
            refused = [line for line in p.log.read_text().splitlines() if "forbidden" in line.lower()]
            assert not refused, f"{p.script} was refused by RBAC:\n" + "\n".join(refused[:5])

        # What the chart does not grant is refused with the same tokens.
        for comp, denied in (
            ("hypervisor", lambda api: client.CoreV1Api(api).list_pod_for_all_namespaces(limit=1)),
            ("gpuctl", lambda api: client.CoreV1Api(api).list_secret_for_all_namespaces(limit=1)),
            (
                "controller",
                lambda api: client.CoreV1Api(api).list_namespaced_config_map("kube-system", limit=1),
            ),
        ):
            api = await _sa_client(kubeconfigs[comp])
            try:
                with pytest.raises(ApiException) as err:
                    await denied(api)
                assert err.value.status == 403, comp
            finally:
                await api.close()
        # TokenReview, which both the controller and the hypervisor rely on, is granted.
        for comp in ("controller", "hypervisor"):
            api = await _sa_client(kubeconfigs[comp])
            try:
                review = await client.AuthenticationV1Api(api).create_token_review(
                    {"spec": {"token": await mint_token(namespace, "default")}}
                )
                assert review.status.authenticated is True
            finally:
                await api.close()
    finally:
        for proc in reversed(procs):
            proc.stop()
        helm.run("uninstall", release, "--namespace", namespace, kubeconfig=devcluster.kubeconfig)

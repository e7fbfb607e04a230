"""Pure parts of devcluster: wrapper go.mod generation, PKI and node objects."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from devcluster.build import _local_replaces, _wrapper_gomod
from devcluster.nodes import GPU_TAINT, NodeShape, gpu_node
from devcluster.pki import ensure_pki
from devcluster.versions import etcd, kubernetes

K8S_GOMOD = """module k8s.io/kubernetes

go 1.24.0

require (
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
)
"""

ETCD_GOMOD = """module go.etcd.io/etcd/server/v3

replace (
\tgo.etcd.io/etcd/api/v3 => ../api
\tgo.etcd.io/etcd/pkg/v3 => ../pkg
)

replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY
replace go.etcd.io/tests/v3 => ./FORBIDDEN_DEPENDENCY
"""


def test_staging_replaces_point_at_published_versions() -> None:
    k8s = kubernetes("v1.34.4")
    assert k8s.sibling_version == "v0.34.4"
    gomod = _wrapper_gomod(k8s, K8S_GOMOD)
    assert "require k8s.io/kubernetes v1.34.4" in gomod
    assert "\tk8s.io/api => k8s.io/api v0.34.4" in gomod
    assert "\tk8s.io/client-go => k8s.io/client-go v0.34.4" in gomod
    assert "tool k8s.io/kubernetes/cmd/kube-apiserver" in gomod
    assert "-X k8s.io/component-base/version.gitVersion=v1.34.4" in k8s.ldflags


def test_etcd_guard_replaces_are_not_siblings() -> None:
    assert _local_replaces(ETCD_GOMOD) == ["go.etcd.io/etcd/api/v3", "go.etcd.io/etcd/pkg/v3"]
    gomod = _wrapper_gomod(etcd("v3.6.16"), ETCD_GOMOD)
    assert "FORBIDDEN" not in gomod
    assert "tool go.etcd.io/etcd/server/v3\n" in gomod


def test_pki_is_generated_once_with_private_keys_0600(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    ca_before = pki.ca_cert.read_bytes()
    assert ensure_pki(tmp_path / "pki").ca_cert.read_bytes() == ca_before
    for key in ("ca.key", "sa.key", "admin.key", "apiserver.key"):
        assert (pki.path(key).stat().st_mode & 0o777) == 0o600
    serving = x509.load_pem_x509_certificate(pki.path("apiserver.crt").read_bytes())
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    admin = x509.load_pem_x509_certificate(pki.path("admin.crt").read_bytes())
    orgs = [a.value for a in admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]


def test_gpu_node_carries_capacity_labels_and_taint() -> None:
    node = gpu_node("gpu-node-0", NodeShape(gpus=4, model="A100"))
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert node["metadata"]["labels"]["tensor-fusion.ai/gpu-model"] == "A100"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert node["spec"]["taints"] == [GPU_TAINT]
    with pytest.raises(ValueError, match="unknown GPU model"):
        gpu_node("x", NodeShape(model="Z9000"))

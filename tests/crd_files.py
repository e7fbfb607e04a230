"""The chart's CRD files and samples, as the CRD tests (unit and cluster) read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CRD_DIR = REPO / "charts" / "gpuplane" / "crds"
SAMPLE_DIR = REPO / "charts" / "gpuplane" / "crd-samples"
INVALID_DIR = SAMPLE_DIR / "invalid"

GROUP = "tensor-fusion.ai"
VERSION = "v1"


def load(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) == 1, f"{path.name}: expected exactly one YAML document"
    doc = docs[0]
    assert isinstance(doc, dict)
    return doc


def expectations(path: Path) -> dict[str, str]:
    """The `# expect-status:` / `# expect-field:` / `# field-validation:` header of an invalid sample."""
    out = {}
    for line in path.read_text().splitlines():
        for key in ("expect-status", "expect-field", "field-validation"):
            if line.startswith(f"# {key}:"):
                out[key] = line.split(":", 1)[1].strip()
    return out


CRD_FILES = sorted(CRD_DIR.glob("*.yaml"))
CRDS = {crd["spec"]["names"]["kind"]: crd for crd in map(load, CRD_FILES)}
VALID_SAMPLES = sorted(SAMPLE_DIR.glob("*.yaml"))
INVALID_SAMPLES = sorted(INVALID_DIR.glob("*.yaml"))

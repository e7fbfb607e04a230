"""`devcluster`: build and run a real local Kubernetes control plane."""

from __future__ import annotations

import argparse
import sys

from devcluster.build import BuildError, build_all
from devcluster.cluster import ORDER, DevCluster
from devcluster.helm import build_helm, helm_path
from devcluster.nodes import GPU_MODELS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="devcluster", description=__doc__)
    p.add_argument("--name", default="default", help="cluster name (state is kept per name)")
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="build etcd, kube-* and kwok from Go modules (cached per version)")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.add_argument("--helm", action="store_true", help="also build helm (for the chart tests)")
    b.add_argument("--only-helm", action="store_true", help="build only helm")

    hp = sub.add_parser("helm-path", help="print the path of the cached helm binary")
    hp.add_argument("--build", action="store_true", help="build helm first if it is missing")

    up = sub.add_parser("up", help="start the cluster (building first if needed) and create GPU nodes")
    up.add_argument("--gpu-nodes", type=int, default=3)
    up.add_argument("--gpus-per-node", type=int, default=8)
    up.add_argument("--gpu-model", default="H100", choices=sorted(GPU_MODELS))
    up.add_argument("--cpu-nodes", type=int, default=1)
    up.add_argument("--timeout", type=float, default=180)

    sub.add_parser("down", help="stop the cluster and delete its state")
    sub.add_parser("env", help="print KUBECONFIG=... for the cluster")
    sub.add_parser("status", help="show which components run")

    args = p.parse_args(argv)
    cluster = DevCluster(args.name)
    try:
        if args.cmd == "build":
            if not args.only_helm:
                for name, path in build_all(force=args.force).items():
                    print(f"{name}: {path}")
            if args.helm or args.only_helm:
                print(f"helm: {build_helm(force=args.force)}")
        elif args.cmd == "helm-path":
            print(helm_path(build=args.build))
        elif args.cmd == "up":
            cluster.up(
                gpu_nodes=args.gpu_nodes,
                gpus_per_node=args.gpus_per_node,
                gpu_model=args.gpu_model,
                cpu_nodes=args.cpu_nodes,
                timeout=args.timeout,
            )
            print(f"KUBECONFIG={cluster.kubeconfig}")
        elif args.cmd == "down":
            cluster.down()
        elif args.cmd == "env":
            if not cluster.kubeconfig.exists():
                print(f"devcluster {args.name!r} is not up; run `devcluster up`", file=sys.stderr)
                return 1
            print(f"KUBECONFIG={cluster.kubeconfig}")
        elif args.cmd == "status":
            for name in ORDER:
                print(f"{name:24} {'running' if cluster.procs.alive(name) else 'stopped'}")
            return 0 if cluster.is_running() else 1
    except (BuildError, RuntimeError, TimeoutError) as e:
        print(f"devcluster: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`gpuctl` command-line client (commands arrive with the job API)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpuctl", description="gpuctl: GPU jobs on Kubernetes")
    p.add_argument("--server", default="http://127.0.0.1:8000", help="gpuctl API server URL")
    p.parse_args(argv)
    p.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())

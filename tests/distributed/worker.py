"""Runs scenario groups in one process group: `worker.py --suite collectives --suite dtensor ...`,
started once per rank by launch.py (or torchrun). See common.py for what it records."""
import importlib

import common

SUITES = ("collectives", "dtensor", "train", "hosts")


def main():
    args = common.parse_args()
    unknown = set(args.suite) - set(SUITES)
    if unknown or not args.suite:
        raise SystemExit(f"--suite must name some of {SUITES}, got {args.suite}")
    ctx = common.init(args)
    scenarios = []
    for suite in args.suite:
        scenarios += importlib.import_module(suite).scenarios(ctx)
    common.run(ctx, scenarios)
    common.finish()


if __name__ == "__main__":
    main()

"""sft db: share the tuning database between machines.

  sft db export FILE   every plan and measurement of this machine's database, as JSON
  sft db import FILE   merge another's export: for a measurement the faster wins, for a plan the
                       one whose chosen candidate measured faster (else the newer); records of
                       another IREE version are left out (they would never replay)

Records are keyed by workload, target identity (the target key holds the host's ISA, CPU model,
cores and calibration) and IREE version, so an import replays only on machines of the same
identity; a cluster tunes once.
"""

from __future__ import annotations

import argparse
import json

from ..errors import SftError
from .opt import run_tool


def main(argv: list[str] | None = None) -> int:
    """sft db's entry point: 0 on success; 1 and one line on stderr for a file that is not an
    export or cannot be read or written."""
    p = argparse.ArgumentParser(prog="sft db", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("export", "import"))
    p.add_argument("file", help="the JSON file to write (export) or read (import)")
    p.add_argument("--db", metavar="PATH", help="the database (default: the cache's tuning.sqlite)")
    args = p.parse_args(argv)

    def body() -> int:
        from ..tuning_db import TuningDB

        db = TuningDB(args.db)
        if args.action == "export":
            data = db.export_records()
            with open(args.file, "w") as f:
                json.dump(data, f, indent=1)
            print(f"sft db: {len(data['plans'])} plans and {len(data['measurements'])} measurements "
                  f"written to {args.file}")
            return 0
        with open(args.file) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as err:
                raise SftError(f"not JSON: {err.msg}", f"{args.file}:{err.lineno}:{err.colno}") from None
        counts = db.import_records(data, args.file)
        print(f"sft db: {args.file}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        return 0
    return run_tool("sft db", body)

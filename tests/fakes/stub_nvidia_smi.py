#!/usr/bin/env python3
"""A stand-in for nvidia-smi in tests: replays a recorded output.

Environment:
  STUB_SMI_OUTPUT     file whose content is printed to stdout (nothing when unset)
  STUB_SMI_STDERR     file whose content is printed to stderr (optional)
  STUB_SMI_EXIT       exit status (default 0)
  STUB_SMI_SLEEP      seconds to sleep before answering (to test timeouts)
  STUB_SMI_ARGV_LOG   file to which the arguments are appended, one JSON list per call
  STUB_SMI_CHILD      file to which the pid of a child is appended: a hung helper process
                      that holds stdout open and sleeps for an hour (an orphan unless killed)
"""

import json
import os
import subprocess
import sys
import time


def main() -> int:
    argv_log = os.environ.get("STUB_SMI_ARGV_LOG")
    if argv_log:
        with open(argv_log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(sys.argv[1:]) + "\n")
    child_log = os.environ.get("STUB_SMI_CHILD")
    if child_log:
        child = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL)
        with open(child_log, "a", encoding="utf-8") as handle:
            handle.write(f"{child.pid}\n")
    delay = float(os.environ.get("STUB_SMI_SLEEP", "0") or 0)
    if delay > 0:
        time.sleep(delay)
    for variable, stream in (("STUB_SMI_OUTPUT", sys.stdout), ("STUB_SMI_STDERR", sys.stderr)):
        path = os.environ.get(variable)
        if path:
            with open(path, encoding="utf-8") as handle:
                stream.write(handle.read())
    sys.stdout.flush()
    sys.stderr.flush()
    return int(os.environ.get("STUB_SMI_EXIT", "0") or 0)


if __name__ == "__main__":
    sys.exit(main())

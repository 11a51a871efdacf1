"""Each device is timed in a process of its own (in one, the devices' OpenMP threads slow each
other): a benchmark runs its own script again with arguments, and the child prints its result as
JSON on its last line."""
import json
import os
import subprocess
import sys


def rerun(script, *arguments):
    """The result `script` prints last when run with `arguments` in a fresh interpreter."""
    out = subprocess.run([sys.executable, os.path.abspath(script), *map(str, arguments)], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])

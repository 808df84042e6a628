"""What the one-call device scripts (tools/device_*.py) share: run a step under a hard time limit with its
output echoed and saved under $OUT, and hand back a recorded table.

On a lent GPU machine the tree arrives without .git: put the commit in the command you send, e.g.
`WORKBOOK_COMMIT=<git rev-parse --short HEAD> python3 tools/device_kmeans.py`, so recorded rows carry it.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def out_dir(name: str) -> Path:
    """$OUT on the device machine, build/<name> elsewhere; created."""
    out = Path(os.environ.get("OUT", ROOT / "build" / name))
    out.mkdir(parents=True, exist_ok=True)
    return out


def tee(cmd, log: str, timeout_s: int, out: Path) -> int:
    """Run `cmd` in the repository root, echoing and saving its output to out/log; kill it after `timeout_s`
    (a hung kernel must not eat the device budget). Returns its exit status."""
    print("$", " ".join(cmd), flush=True)
    with open(out / log, "w") as f:
        proc = subprocess.Popen(["timeout", "-s", "KILL", str(timeout_s), *cmd], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
            f.flush()
        return proc.wait()


def keep(table: str, out: Path, gpu: str = "h200") -> None:
    """Copy data/measured/<gpu>/<table>.csv (with this run's rows appended) to $OUT, to bring it back."""
    csv = ROOT / "data" / "measured" / gpu / f"{table}.csv"
    if csv.exists():
        shutil.copy(csv, out / csv.name)

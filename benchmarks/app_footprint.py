"""The app's peak memory with both shipped models loaded, and its cold start against its imports.

1. **Peak resident memory**: a child interpreter builds the app as ``python app.py`` does
   (``return_memory_when_idle``, ``build_demo(preload=False)``, ``preload_models``), waits for the
   background thread to read every shipped model (all-MiniLM-L6-v2 and SmolLM2-135M-Instruct),
   checks that both loaded, and exits; its peak is ``getrusage(RUSAGE_CHILDREN).ru_maxrss``
   (the kernel's high-water mark of the child's resident set). Target: ≤ 1.8 GB.
2. **Cold start**: wall time from starting ``python app.py`` to its first HTTP 200 on ``/``,
   against the wall time of ``python -c "import app"`` (the same interpreter start and every
   module the app imports: torch, gradio, transformer, ui); alternated ``--repeats`` times,
   minimum of each. Weights are read in the background after the page is served, so they are
   not in the cold start. Target: ≤ 1.5×. ``import torch, gradio`` alone is printed beside it
   (the yardstick of ``benchmarks/app_latency.py``).

Usage: python -m benchmarks.app_footprint [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEMORY_TARGET_GB = 1.8
COLD_START_TARGET = 1.5

LOAD_BOTH = """
import app
from transformer.pretrained import shipped_models
from ui.serving.memory import return_memory_when_idle
return_memory_when_idle()
demo = app.build_demo("cpu", preload=False)
app.preload_models(demo)
registry = demo.model_registry
registry._preloading.join()
names = [m.name for m in shipped_models() if m.available]
assert len(names) == 2 and all(n in registry.pretrained for n in names), registry.errors
print(", ".join(names))
"""


def environment() -> dict[str, str]:
    return {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(ROOT)}


def peak_memory_gb() -> tuple[float, str]:
    """(peak resident GB of a child that loads the app and both shipped models, their names)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = subprocess.run(
        [sys.executable, "-c", LOAD_BOTH],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KB on Linux
    if peak_kb <= before:
        raise SystemExit("run this benchmark in a fresh process (an earlier child peaked higher)")
    return peak_kb / 1024**2, result.stdout.strip().splitlines()[-1]


def import_seconds(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environment(), check=True)
    return time.perf_counter() - start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cold_start_seconds() -> float:
    """Seconds from starting ``python app.py`` to its first HTTP 200 (the process is ended)."""
    port = free_port()
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port), "--device", "cpu"],
            cwd=ROOT,
            env=environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            while time.perf_counter() - start < 300:
                if process.poll() is not None:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-2000:]
                    raise SystemExit(f"the app exited during start-up:\n{tail}")
                try:
                    url = f"http://127.0.0.1:{port}/"
                    with urllib.request.urlopen(url, timeout=1) as response:
                        if response.status == 200:
                            return time.perf_counter() - start
                except OSError:
                    time.sleep(0.05)
            raise SystemExit("the app did not serve its page within 300 s")
        finally:
            process.terminate()
            process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    memory, names = peak_memory_gb()
    imports, basics, colds = [], [], []
    for _ in range(args.repeats):
        imports.append(import_seconds("import app"))
        basics.append(import_seconds("import torch, gradio"))
        colds.append(cold_start_seconds())
    imported, cold = min(imports), min(colds)
    print(
        f"peak resident memory, app + {names} loaded: {memory:.2f} GB "
        f"(target ≤ {MEMORY_TARGET_GB} GB: {'met' if memory <= MEMORY_TARGET_GB else 'MISSED'})"
    )
    print(
        f"cold start to HTTP 200: {cold:.2f} s; python -c 'import app': {imported:.2f} s; "
        f"ratio {cold / imported:.2f} (target ≤ {COLD_START_TARGET}: "
        f"{'met' if cold / imported <= COLD_START_TARGET else 'MISSED'})"
    )
    print(
        f"  (python -c 'import torch, gradio': {min(basics):.2f} s, ratio "
        f"{cold / min(basics):.2f}; all runs: cold {[round(c, 2) for c in colds]}, "
        f"import app {[round(i, 2) for i in imports]})"
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""llama.cpp as a peer for the GPT-2 benchmarks (scripts/bench_gpt2_infer.py,
scripts/bench_serve.py): its `llama-bench` and `llama-server`, and GGUF copies
of a GPT-2 checkpoint written by llama.cpp's own convert_hf_to_gguf.py.

The sources are the llama.cpp vendored in the llama-cpp-python sdist on PyPI
(pinned by version and sha256 below; PyPI is reachable where GitHub may not
be), built with CMake for this CPU (GGML_NATIVE). Everything lives under the
git-ignored assets/.llama.cpp and is reused by later runs; a GGUF is written
to a temporary name and renamed, so an interrupted run leaves nothing half-made.
The conversion runs in the benchmark's Python (it needs torch, numpy and
transformers, as the peers do); CMake and Ninja come from pip where absent.

Usage: scripts/llama_cpp_peer.py [--model DIR --outtype f32|bf16|q8_0 ...]
prints {"bench": PATH, "server": PATH, "gguf": {OUTTYPE: PATH}} as JSON.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "assets/.llama.cpp"
SDIST = "llama_cpp_python-0.3.36.tar.gz"
SDIST_URL = ("https://files.pythonhosted.org/packages/ec/e9/"
             "e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/" + SDIST)
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
TOOLS = ("llama-bench", "llama-server")


def log(msg):
    print(f"llama_cpp_peer: {msg}", file=sys.stderr, flush=True)


def sources():
    """The llama.cpp source tree (downloaded and unpacked once)."""
    src = HOME / "src"
    if (src / "CMakeLists.txt").exists():
        return src
    HOME.mkdir(parents=True, exist_ok=True)
    tar = HOME / SDIST
    if not tar.exists() or hashlib.sha256(tar.read_bytes()).hexdigest() != SDIST_SHA256:
        log(f"downloading {SDIST} from PyPI")
        part = tar.with_suffix(".part")
        with urllib.request.urlopen(SDIST_URL, timeout=300) as r, open(part, "wb") as f:
            shutil.copyfileobj(r, f)
        digest = hashlib.sha256(part.read_bytes()).hexdigest()
        if digest != SDIST_SHA256:
            part.unlink()
            raise SystemExit(f"llama_cpp_peer: {SDIST} has sha256 {digest}, expected {SDIST_SHA256}")
        part.rename(tar)
    prefix = SDIST[: -len(".tar.gz")] + "/vendor/llama.cpp/"
    tmp = Path(tempfile.mkdtemp(dir=HOME, prefix="src."))
    with tarfile.open(tar) as t:
        members = [m for m in t.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        for m in members:
            m.name = m.name[len(prefix):]
        # The "data" filter (no links out of the tree, no odd modes) where this Python has it.
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        t.extractall(tmp, members=members, **safe)
    shutil.rmtree(src, ignore_errors=True)
    tmp.rename(src)
    return src


def build_tool(name):
    return HOME / "build" / "bin" / name


def tools(py=sys.executable):
    """Paths of llama-bench and llama-server, built if missing."""
    if all(build_tool(t).exists() for t in TOOLS):
        return {t: build_tool(t) for t in TOOLS}
    src = sources()
    env = dict(os.environ)
    if not (shutil.which("cmake") and shutil.which("ninja")):
        # pip's cmake and ninja land next to the Python that installed them.
        subprocess.run([py, "-m", "pip", "install", "-q", "cmake", "ninja"], check=True)
        env["PATH"] = f"{Path(py).parent}{os.pathsep}{env.get('PATH', '')}"
    build = HOME / "build"
    shutil.rmtree(build, ignore_errors=True)  # what an interrupted build left
    log(f"building {' '.join(TOOLS)} in {build} (minutes)")
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_NATIVE=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                    "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2), "--target", *TOOLS],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return {t: build_tool(t) for t in TOOLS}


def gguf(model_dir, outtype, dest=None, py=sys.executable):
    """GGUF of the HF checkpoint (GPT-2 or BERT) in model_dir, in outtype (f32, bf16 or q8_0): written to
    dest if given, else kept under assets/.llama.cpp/gguf and written once per checkpoint
    (keyed by its folder and the safetensors file's size and mtime)."""
    model_dir = Path(model_dir).resolve()
    if dest is None:
        st = (model_dir / "model.safetensors").stat()
        key = hashlib.sha256(f"{model_dir}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
        out = HOME / "gguf" / f"{model_dir.name}-{key}-{outtype}.gguf"
        if out.exists():
            return out
    else:
        out = Path(dest)
    src = sources()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        # The converter reads GPT-2's context length from n_ctx, which newer transformers
        # no longer write (n_positions is the same number): a view with a config that has it.
        view = Path(tmp) / "model"
        view.mkdir()
        for f in model_dir.iterdir():
            if f.name != "config.json":
                (view / f.name).symlink_to(f)
        cfg = json.loads((model_dir / "config.json").read_text())
        if "n_positions" in cfg:
            cfg.setdefault("n_ctx", cfg["n_positions"])
        (view / "config.json").write_text(json.dumps(cfg))
        part = Path(tmp) / "out.gguf"
        log(f"converting {model_dir} to {outtype} GGUF")
        env = dict(os.environ, PYTHONPATH=str(src / "gguf-py"))
        p = subprocess.run([py, str(src / "convert_hf_to_gguf.py"), str(view), "--outtype", outtype,
                            "--outfile", str(part)], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"llama_cpp_peer: converting {model_dir} failed:\n{p.stderr[-3000:]}")
        part.rename(out)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="an HF checkpoint folder (GPT-2 or BERT) to convert")
    ap.add_argument("--outtype", action="append", default=[], choices=["f32", "bf16", "q8_0"])
    a = ap.parse_args()
    paths = {k.removeprefix("llama-"): str(v) for k, v in tools().items()}
    if a.model:
        paths["gguf"] = {t: str(gguf(a.model, t)) for t in a.outtype or ["f32"]}
    print(json.dumps(paths))


if __name__ == "__main__":
    main()

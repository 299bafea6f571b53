#!/usr/bin/env python3
"""Runs the README's `lmkit ...` command examples on tiny data, so that an
example that no longer works fails CI.

    python3 scripts/check_readme.py [--lmkit target/debug/lmkit] [--readme README.md]

Reads README.md at run time: every line of a fenced sh/bash/console block
that starts with `lmkit ` (continuation lines joined, trailing `# comments`
dropped) is run with bash in a scratch folder holding tiny stand-ins for the
README's data: `corpus/` (text files), `train.jsonl` / `dev.jsonl` (the
committed classification data), `sts.train.jsonl` / `sts.dev.jsonl` (the
committed regression data), `swag.train.jsonl` / `swag.dev.jsonl` (the
committed multiple-choice data), `lambada.jsonl`, `coqa.jsonl`, `test.jsonl`, `data/`.
Sizes are made tiny by explicit rewrites (REWRITES), and paths of the
README's models by SUBSTITUTIONS. Commands that cannot run offline or
finish (a server, a hub download, a placeholder) are skipped by the rules in
SKIP, each printed with its reason; nothing is skipped silently.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (pattern on the command, reason): commands not run.
SKIP = [
    (r"\.\.\.", "a placeholder (`...`), not a whole command"),
    (r"^lmkit serve\b", "a server: it does not exit (scripts/check_serve_page.sh runs it)"),
    # Also skipped, at run time: `--model X` where X is no folder by then (a
    # hub name, or a model made by a `cargo run --example` line).
]

# (pattern, replacement): tiny sizes for a debug build on 2 cores.
REWRITES = [
    (r"--vocab-size\s+\d+", "--vocab-size 300"),
    (r"--preset\s+\S+", "--preset tiny --seq-len 32 --batch-size 2"),
    (r"--max-steps\s+\d+", "--max-steps 2"),
    (r"--max-new-tokens\s+\d+", "--max-new-tokens 4"),
    (r"--epochs\s+\d+", "--epochs 1"),
    (r"--steps\s+\d+", "--steps 2"),
    # A resume continues the run above (stopped at its --max-steps 2).
    (r"(--resume)(\s|$)", r"\1 --max-steps 3\2"),
]

# README paths of models -> the committed tiny fixtures.
SUBSTITUTIONS = {
    "assets/minilm": str(ROOT / "tests/fixtures/bert-tiny-bare"),
}


def commands(readme):
    """The `lmkit ...` lines of the README's shell blocks, in order."""
    out, block = [], None
    lines = readme.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^\s*```(\w*)", line)
        if fence:
            block = None if block is not None else fence.group(1)
            i += 1
            continue
        if block in ("sh", "bash", "console", "shell"):
            cmd = line.strip()
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            cmd = cmd.removeprefix("$ ")
            if cmd.startswith("lmkit "):
                # Drop a trailing comment (shlex knows quoting).
                lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                lexer.commenters = "#"
                words = list(lexer)
                out.append(" ".join(w if re.fullmatch(r"[\w@%+=:,./*>~-]+", w) else shlex.quote(w) for w in words))
        i += 1
    return out


def stage(work):
    """Tiny stand-ins for the README's data files."""
    data = ROOT / "tests/data"
    (work / "corpus").mkdir()
    text = (data / "lambada/rust_book.jsonl").read_text(encoding="utf-8")
    for k in range(2):
        (work / "corpus" / f"part{k}.txt").write_text(text[k * 20000 : (k + 1) * 20000], encoding="utf-8")
    shutil.copytree(work / "corpus", work / "data")
    head = lambda p, n: "".join((data / p).read_text(encoding="utf-8").splitlines(True)[:n])
    (work / "train.jsonl").write_text(head("classify/prose_code.train.jsonl", 16), encoding="utf-8")
    (work / "dev.jsonl").write_text(head("classify/prose_code.eval.jsonl", 8), encoding="utf-8")
    (work / "test.jsonl").write_text(head("classify/prose_code.eval.jsonl", 8), encoding="utf-8")
    (work / "sts.train.jsonl").write_text(head("regression/replaced.train.jsonl", 16), encoding="utf-8")
    (work / "sts.dev.jsonl").write_text(head("regression/replaced.eval.jsonl", 8), encoding="utf-8")
    (work / "lambada.jsonl").write_text(head("lambada/rust_book.jsonl", 4), encoding="utf-8")
    (work / "ner.train.conll").write_text(head("tagging/rust_prose.train.conll", 60), encoding="utf-8")
    (work / "ner.dev.conll").write_text(head("tagging/rust_prose.eval.conll", 30), encoding="utf-8")
    (work / "en_fr.jsonl").write_text(head("translate/en_fr.jsonl", 5), encoding="utf-8")
    (work / "coqa.jsonl").write_text(head("qa/coqa_tiny.jsonl", 2), encoding="utf-8")
    (work / "swag.train.jsonl").write_text(head("multiple_choice/rust_story.train.jsonl", 8), encoding="utf-8")
    (work / "swag.dev.jsonl").write_text(head("multiple_choice/rust_story.eval.jsonl", 4), encoding="utf-8")
    (work / "home").mkdir()


def prepare(cmd, lmkit, work):
    for pat, why in SKIP:
        if re.search(pat, cmd):
            return None, why
    for pat, rep in REWRITES:
        cmd = re.sub(pat, rep, cmd)
    for a, b in SUBSTITUTIONS.items():
        cmd = cmd.replace(a, b)
    for model in re.findall(r"--model\s+(\S+)", cmd):
        if not (work / model).is_dir():
            return None, f"model `{model}` is no folder here: a hub name, or made by a non-lmkit example"
    return shlex.quote(lmkit) + cmd[len("lmkit") :], None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lmkit", default=str(ROOT / "target/debug/lmkit"))
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    args = ap.parse_args()
    lmkit = str(Path(args.lmkit).resolve())
    cmds = commands(Path(args.readme).read_text(encoding="utf-8"))
    if not cmds:
        sys.exit("check_readme: no `lmkit ...` examples found in the README")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="lmkit-readme-") as tmp:
        work = Path(tmp)
        stage(work)
        env = dict(os.environ, HOME=str(work / "home"), RAYON_NUM_THREADS="2")
        for cmd in cmds:
            run, why = prepare(cmd, lmkit, work)
            if run is None:
                print(f"SKIP {cmd}\n     ({why})")
                continue
            # A redirect into a folder that does not exist yet (~/.local/...) gets it.
            for target in re.findall(r">\s*(\S+)", run):
                Path(os.path.expanduser(target.replace("~", str(work / "home")))).parent.mkdir(parents=True, exist_ok=True)
            r = subprocess.run(["bash", "-c", run], cwd=work, env=env, capture_output=True, text=True)
            if r.returncode == 0:
                print(f"ok   {cmd}")
            else:
                failed += 1
                print(f"FAIL {cmd}\n     ran: {run}\n     exit {r.returncode}: {r.stderr.strip()[-800:]}")
    print(f"check_readme: {len(cmds)} examples, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks that every import inside the `lmkit` library points down the layers.

    python3 scripts/check_layers.py             # check crates/lmkit/src
    python3 scripts/check_layers.py --graph     # also print layer -> layer reference counts
    python3 scripts/check_layers.py --self-test # the parser on small inline cases

Layers, bottom to top (docs/architecture.md says what each holds):

    util (+ error.rs) -> kernels -> spec -> checkpoint -> data -> models -> train -> eval -> tasks -> recipes

A file may refer to its own layer and the layers below it. Every `crate::x`
path counts (`use` lines, grouped `use crate::{a::b, c}`, paths written inline
in code) and `super::` paths are resolved from the file's module. Comments and
string literals are skipped. Two more rules:
- no two files (modules) inside one layer import each other, directly or
  through others (a loop such as spec/config <-> spec/layout);
- lib.rs only declares the layers.
And one rule over every crate's src/: tasks are dispatched through the
registry (`crates/lmkit/src/tasks`), so outside that folder no code names a
task kind (`TaskKind::QA`) or matches on a task's name (`"qa" =>`).
Exit status 1 on any violation, each printed as `file:line: ...`.
"""
import pathlib
import re
import sys

# One lexer for both checks: comments and string, raw-string and char
# literals blanked, lines kept.
from check_sizes import strip_code

LAYERS = ["util", "kernels", "spec", "checkpoint", "data", "models", "train", "eval", "tasks", "recipes"]
# Top-level files that belong to a layer.
FILE_LAYER = {"error": "util"}

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "crates" / "lmkit" / "src"


def expand_use_tree(tree):
    """`crate::{a::b, c::{d, e}}` -> ['crate::a::b', 'crate::c::d', 'crate::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0:
        return [tree]
    prefix = tree[:i]
    body = tree[i + 1 : tree.rfind("}")]
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:k])
            start = k + 1
    parts.append(body[start:])
    out = []
    for p in parts:
        if p:
            out.extend(expand_use_tree(prefix + p))
    return out


def module_path(path):
    """crates/lmkit/src/models/bert/model.rs -> ['models', 'bert', 'model']."""
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def layer_of(mod):
    if not mod:
        return None
    top = mod[0]
    top = FILE_LAYER.get(top, top)
    return top if top in LAYERS else None


def references(text, mod):
    """(line, target module path) for every crate-internal path in `text`."""
    code = strip_code(text)
    refs = []
    # use trees (may span lines)
    for m in re.finditer(r"\buse\s+((?:crate|super|self)(?:::[^;]*))\s*;", code):
        line = code.count("\n", 0, m.start()) + 1
        for p in expand_use_tree(m.group(1)):
            refs.append((line, p))
    # inline paths outside use statements
    uses = [(m.start(), m.end()) for m in re.finditer(r"\buse\s+[^;]*;", code)]
    for m in re.finditer(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)", code):
        if any(a <= m.start() < b for a, b in uses):
            continue
        line = code.count("\n", 0, m.start()) + 1
        refs.append((line, m.group(0)))
    out = []
    for line, p in refs:
        segs = [s for s in p.split("::") if s]
        if not segs:
            continue
        if segs[0] == "crate":
            target = segs[1:]
        elif segs[0] in ("super", "self"):
            base = list(mod)
            while segs and segs[0] in ("super", "self"):
                if segs.pop(0) == "super":
                    base = base[:-1]
            target = base + segs
        else:
            continue
        out.append((line, target, p))
    return out


def resolve_file(target, files):
    """The longest module prefix of `target` that is a file of the crate."""
    for k in range(len(target), 0, -1):
        if tuple(target[:k]) in files:
            return tuple(target[:k])
    return None


def check(src=SRC, graph=False):
    files = {}
    for f in sorted(src.rglob("*.rs")):
        files[tuple(module_path(f))] = f
    errors, counts, edges, nrefs = [], {}, {}, 0
    for mod, f in files.items():
        rel = f.relative_to(ROOT)
        if mod in ((), ("lib",)):
            continue
        own = layer_of(list(mod))
        if own is None:
            errors.append(f"{rel}:1: not in any layer (add it to LAYERS in scripts/check_layers.py)")
            continue
        text = f.read_text()
        for line, target, p in references(text, list(mod)):
            nrefs += 1
            tl = layer_of(target)
            if tl is None:
                continue  # crate::Error / crate::Result live in lib.rs re-exports of util
            counts[(own, tl)] = counts.get((own, tl), 0) + 1
            if LAYERS.index(tl) > LAYERS.index(own):
                errors.append(f"{rel}:{line}: layer {own} imports layer {tl} ({p})")
            elif tl == own:
                dst = resolve_file(target, files)
                # A file inside its own subtree (a child module, tests) is not a loop.
                if dst and dst != mod and not (dst[: len(mod)] == mod or mod[: len(dst)] == dst):
                    edges.setdefault(mod, {}).setdefault(dst, line)
    # Loops between files of one layer.
    seen_cycles = set()
    def dfs(node, stack, on_stack):
        for nxt in edges.get(node, {}):
            if nxt in on_stack:
                cyc = stack[stack.index(nxt):]
                key = frozenset(cyc)
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    names = " -> ".join("/".join(m) for m in cyc + [nxt])
                    f = files[node].relative_to(ROOT)
                    errors.append(f"{f}:{edges[node][nxt]}: import loop {names}")
            elif nxt not in done:
                on_stack.add(nxt)
                stack.append(nxt)
                dfs(nxt, stack, on_stack)
                stack.pop()
                on_stack.discard(nxt)
        done.add(node)
    done = set()
    for m in list(edges):
        if m not in done:
            dfs(m, [m], {m})
    if graph:
        for (a, b), n in sorted(counts.items(), key=lambda kv: (LAYERS.index(kv[0][0]), LAYERS.index(kv[0][1]))):
            print(f"{a:>10} -> {b:<10} {n}")
    return errors, len(files), nrefs


TASKS = SRC / "tasks"
CRATES = ROOT / "crates"


def strip_comments(text):
    """The text with `//` comments blanked; string literals kept."""
    return "\n".join(re.sub(r'^((?:[^"/]|"(?:[^"\\]|\\.)*"|/(?!/))*)//.*$', r"\1", l) for l in text.split("\n"))


def task_names(tasks=TASKS):
    """The names the registry's tasks answer to (their `fn name` and `fn aliases`)."""
    names = set()
    for f in tasks.glob("*.rs"):
        t = f.read_text()
        for m in re.finditer(r"fn (?:name|aliases)\(&self\)[^{]*\{\s*&?\[?((?:\s*\"[^\"]+\",?)+)", t):
            names.update(re.findall(r'"([^"]+)"', m.group(1)))
    return names


def dispatch_violations(text, names):
    """`(line, what)` of each task dispatch in `text` (comments skipped)."""
    out = []
    code = strip_comments(text)
    for i, line in enumerate(code.split("\n"), 1):
        for m in re.finditer(r"\bTaskKind::[A-Z][A-Z_]*\b", line):
            out.append((i, f"names a task kind ({m.group(0)}): dispatch through the task registry"))
        for m in re.finditer(r'"([a-z-]+)"\s*(?:\|[^=]*)?=>', line):
            if m.group(1) in names:
                out.append((i, f'matches on the task name "{m.group(1)}": dispatch through the task registry'))
    return out


def check_dispatch(crates=CRATES, tasks=TASKS):
    names = task_names(tasks)
    errors = []
    for f in sorted(crates.glob("*/src/**/*.rs")):
        if tasks in f.parents:
            continue
        for line, what in dispatch_violations(f.read_text(), names):
            errors.append(f"{f.relative_to(ROOT)}:{line}: {what}")
    return errors, names


def self_test():
    cases = {
        "grouped": ("use crate::{spec::config::X, models::{gpt2::A, bert::B}};\n", ["models", "data"], 0),
        "upward": ("fn f() { let x = crate::recipes::pretrain::run(); }\n", ["models", "x"], 1),
        "comment": ("// use crate::recipes::x;\n/// [`crate::recipes::y`]\nfn f() {}\n", ["util", "x"], 0),
        "string": ('fn f() { let s = "crate::recipes::x"; let c = \'"\'; }\n', ["util", "x"], 0),
        "super": ("use super::super::recipes::x;\n", ["train", "a", "b"], 0),
    }
    failed = 0
    for name, (text, mod, want_up) in cases.items():
        refs = references(text, mod)
        up = sum(1 for _, t, _ in refs if layer_of(t) and LAYERS.index(layer_of(t)) > LAYERS.index(layer_of(mod)))
        if up != want_up:
            print(f"self-test {name}: {up} upward references, expected {want_up}: {refs}")
            failed += 1
    # `super::super` from train/a/b.rs is train::recipes... -> not a layer module: check resolution.
    r = references("use super::super::x;\n", ["models", "bert", "qa"])
    if r[0][1] != ["models", "x"]:
        print(f"self-test super resolution: {r}")
        failed += 1
    g = expand_use_tree("crate::{a::b, c::{d, e}}")
    if g != ["crate::a::b", "crate::c::d", "crate::c::e"]:
        print(f"self-test expand: {g}")
        failed += 1
    names = {"qa", "classify"}
    for text, want in [
        ('match t { "qa" => 1, _ => 2 }\n', 1),
        ('if t == TaskKind::QA {}\n', 1),
        ('let x = "qa"; // "classify" => no\n', 0),
        ('let t: TaskKind = "qa".parse()?;\n', 0),
        ('match s { "lm" => 1 }\n', 0),
    ]:
        got = dispatch_violations(text, names)
        if len(got) != want:
            print(f"self-test dispatch {text!r}: {got}, expected {want}")
            failed += 1
    if not {"qa", "squad", "classify", "lm"} <= task_names():
        print(f"self-test task names: {task_names()}")
        failed += 1
    print("check_layers self-test:", "FAILED" if failed else "ok")
    return failed == 0


def main():
    if "--self-test" in sys.argv:
        sys.exit(0 if self_test() else 1)
    errors, nfiles, nrefs = check(graph="--graph" in sys.argv)
    dispatch, names = check_dispatch()
    errors += dispatch
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s)")
        sys.exit(1)
    print(
        f"check_layers: ok ({nfiles} files, {nrefs} crate-internal references, every one points down; "
        f"no task dispatch outside tasks/ ({len(names)} task names))"
    )


if __name__ == "__main__":
    main()

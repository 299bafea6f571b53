#!/usr/bin/env python3
"""Checks the house size rules on the workspace's Rust sources.

    python3 scripts/check_sizes.py             # check crates/*/src
    python3 scripts/check_sizes.py --report    # also list the biggest files and functions
    python3 scripts/check_sizes.py --self-test # the function finder on small inline cases

The rules (tests inside a file count):
- a .rs file under crates/*/src is at most 800 lines, except the generated
  files of ALLOWED (each named with its reason) and the kernels
  (crates/lmkit/src/kernels/, hand-tuned loops kept together);
- a file under crates/lmkit-cli/src/cmd/ (one CLI command) is at most 300 lines;
- a Rust function spans at most 150 lines (its `fn` line to its closing
  brace), unless the lines just above it carry
  `#[allow(clippy::too_many_lines, reason = "...")]`, or that allow with a
  plain `//` comment beside it giving the reason. Kernels and backward
  passes are no exception: a long one says why.
Comments, strings, chars and raw strings are skipped when matching braces.
Exit status 1 on any violation, each printed as `file:line: ...`.
"""
import pathlib
import re
import sys

MAX_FILE = 800
MAX_CMD_FILE = 300
MAX_FN = 150

# Generated files allowed over MAX_FILE, each with why (none today: the
# pre-tokenizer's Unicode tables are one generated file per class).
ALLOWED: dict = {}
# Files here may be any length (functions still follow the rule).
KERNELS = "crates/lmkit/src/kernels/"
CMD = "crates/lmkit-cli/src/cmd/"

ROOT = pathlib.Path(__file__).resolve().parent.parent

CHAR = re.compile(r"b?'(\\x[0-9a-fA-F]{2}|\\u\{[0-9a-fA-F]+\}|\\.|[^\\'\n])'")
RAW = re.compile(r'b?r(#*)"')
FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
ALLOW = re.compile(r"#\[\s*(allow|expect)\s*\(([^\]]*)\)\s*\]", re.S)
REASON = re.compile(r'\breason\s*=\s*"[^"]*\S[^"]*"')


def blank(s):
    return "".join(ch if ch == "\n" else " " for ch in s)


def strip_code(text):
    """The text with comments and string/char literals blanked (lines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        prev = text[i - 1] if i else ""
        ident_before = prev.isalnum() or prev == "_"
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif c in "rb" and not ident_before and RAW.match(text, i):
            m = RAW.match(text, i)
            hashes = m.group(1)
            end = text.find('"' + hashes, m.end())
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"' or (c == "b" and not ident_before and text.startswith('b"', i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(blank(text[i:j]))
            i = j
        elif c in "'b" and not (c == "b" and ident_before) and CHAR.match(text, i):
            m = CHAR.match(text, i)
            out.append(" " * len(m.group(0)))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of every function with a body in `text`."""
    code = strip_code(text)
    line_starts = [0] + [k + 1 for k, ch in enumerate(code) if ch == "\n"]

    def line_of(pos):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    out = []
    for m in FN.finditer(code):
        # The body's `{`: the first one outside (), [] and <> of the signature;
        # a `;` there first is a declaration without a body.
        depth, j, body = 0, m.end(), None
        while j < len(code):
            ch = code[j]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif ch == ";" and depth == 0:
                break
            elif ch == "{" and depth == 0:
                body = j
                break
            j += 1
        if body is None:
            continue
        level, k = 0, body
        while k < len(code):
            if code[k] == "{":
                level += 1
            elif code[k] == "}":
                level -= 1
                if level == 0:
                    break
            k += 1
        out.append((m.group(1), line_of(m.start()), line_of(min(k, len(code) - 1))))
    return out


def allowed_long(lines, fn_line):
    """Whether the attributes and comments just above line `fn_line` (1-based)
    allow clippy::too_many_lines with a reason."""
    k = fn_line - 2
    block = []
    while k >= 0:
        s = lines[k].strip()
        if not s or s.endswith(("}", ";", "{")) and not s.startswith(("#", "//")):
            break
        block.insert(0, s)
        k -= 1
    head = "\n".join(block)
    for m in ALLOW.finditer(head):
        if "clippy::too_many_lines" not in m.group(2):
            continue
        if REASON.search(m.group(2)):
            return True
        # A plain `//` comment (not a doc comment) beside the attribute.
        if any(s.startswith("//") and not s.startswith(("///", "//!")) and len(s.strip("/ ")) > 0
               for s in block):
            return True
    return False


def check(root=ROOT):
    errors, files, fns = [], [], []
    for f in sorted(root.glob("crates/*/src/**/*.rs")):
        rel = f.relative_to(root).as_posix()
        text = f.read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n")
        n = len(lines) - (1 if text.endswith("\n") else 0)
        files.append((n, rel))
        if rel.startswith(CMD) and n > MAX_CMD_FILE:
            errors.append(f"{rel}:{n}: {n} lines, a CLI command file is at most {MAX_CMD_FILE}")
        elif n > MAX_FILE and rel not in ALLOWED and not rel.startswith(KERNELS):
            errors.append(f"{rel}:{n}: {n} lines, at most {MAX_FILE} (split it into submodules)")
        for name, a, b in functions(text):
            span = b - a + 1
            fns.append((span, rel, a, name))
            if span > MAX_FN and not allowed_long(lines, a):
                errors.append(
                    f"{rel}:{a}: fn {name} spans {span} lines, at most {MAX_FN} "
                    f'(split it, or #[allow(clippy::too_many_lines, reason = "...")])'
                )
    return errors, files, fns


def report(files, fns, top=15):
    print(f"biggest files (limit {MAX_FILE}, {MAX_CMD_FILE} under {CMD}):")
    for n, rel in sorted(files, reverse=True)[:top]:
        note = " (allowed: generated)" if rel in ALLOWED else " (kernel)" if rel.startswith(KERNELS) else ""
        print(f"  {n:6} {rel}{note}")
    print(f"longest functions (limit {MAX_FN}):")
    for span, rel, a, name in sorted(fns, reverse=True)[:top]:
        print(f"  {span:6} {rel}:{a} {name}")


def self_test():
    failed = 0

    def expect(name, got, want):
        nonlocal failed
        if got != want:
            print(f"self-test {name}: got {got!r}, expected {want!r}")
            failed += 1

    src = (
        "fn a() {\n"
        '    let s = "}{ fn fake() {";\n'
        "    let c = '}'; let d = b'{'; let e = '\\x7f';\n"
        "    // } fn commented() {\n"
        "    /* } /* nested { */ */\n"
        '    let r = r#"}"{"#;\n'
        "    let t = br\"\\\"; let l: &'static str = \"x\";\n"
        "}\n"
        "trait T { fn decl(&self) -> [u8; 4]; fn def(&self) { } }\n"
        "pub(crate) async unsafe fn g<T: Into<u8>>(x: [u8; 2]) -> impl Fn() -> u8\n"
        "where T: Copy\n"
        "{\n"
        "    move || { 1 }\n"
        "}\n"
    )
    expect("spans", functions(src), [("a", 1, 8), ("def", 9, 9), ("g", 10, 14)])
    lines = [
        "}",
        "",
        "/// Does a lot.",
        '#[allow(clippy::too_many_lines, reason = "one pass over the tensor")]',
        "fn long() {",
        "// the loop body is one kernel",
        "#[allow(clippy::too_many_lines)]",
        "fn long2() {",
        "/// Docs only.",
        "#[allow(clippy::too_many_lines)]",
        "fn long3() {",
        "#[allow(",
        "    clippy::too_many_lines,",
        '    reason = "multi-line attribute"',
        ")]",
        "pub fn long4() {",
        "let x = 1;",
        "fn long5() {",
    ]
    expect("reason", allowed_long(lines, 5), True)
    expect("comment", allowed_long(lines, 8), True)
    expect("doc only", allowed_long(lines, 11), False)
    expect("multi-line", allowed_long(lines, 16), True)
    expect("none", allowed_long(lines, 18), False)
    expect("previous item", allowed_long(["#[allow(clippy::too_many_lines)] // x", "fn a() {}", "fn b() {"], 3), False)
    print("check_sizes self-test:", "FAILED" if failed else "ok")
    return failed == 0


def main():
    if "--self-test" in sys.argv:
        sys.exit(0 if self_test() else 1)
    errors, files, fns = check()
    if "--report" in sys.argv:
        report(files, fns)
    for e in errors:
        print(e)
    if errors:
        print(f"check_sizes: {len(errors)} violation(s)")
        sys.exit(1)
    print(f"check_sizes: ok ({len(files)} files, {len(fns)} functions within the limits)")


if __name__ == "__main__":
    main()

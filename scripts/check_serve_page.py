#!/usr/bin/env python3
"""Drives the page `lmkit serve` shows at / in headless Chromium, panel by
panel, as a user would: types into the fields, clicks the button, waits for
the result and checks what reached the page against the server's own answer
where there is one. WebDriver over plain HTTP/JSON to Debian's
`chromedriver` (package chromium-driver); standard library only.

Two servers: every kind of model (a GPT-2, a sentence encoder, an MLM, a
classifier, a QA model, a cross-encoder; behind an API key the page asks
for), where all seven panels must show and work; and a sentence encoder
alone, where only its panels (embeddings, rerank) may show. Screenshots of
the whole page at desktop and phone widths go to OUT_DIR.

Usage: python3 scripts/check_serve_page.py LMKIT GPT2_DIR [OUT_DIR]
(after scripts/fetch-assets.sh; scripts/check_serve_page.sh makes GPT2_DIR)
"""
import base64
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests/fixtures")
KEY = "page-key"
PANELS = ["complete", "tokens", "fill", "classify", "qa", "embed", "rerank"]
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
TIMEOUT = 60


def http(method, url, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{method} {url}: {e.code} {e.read()[:500]!r}") from None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """A WebDriver session on chromedriver."""

    def __init__(self, tmp):
        port = free_port()
        self.log = open(os.path.join(tmp, "chromedriver.log"), "w")
        self.proc = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=self.log, stderr=self.log)
        self.base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if http("GET", self.base + "/status")["value"]["ready"]:
                    break
            except Exception:
                pass
            time.sleep(0.1)
        binary = os.environ.get("CHROMIUM", "/usr/bin/chromium")
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--window-size=1280,900", f"--user-data-dir={tmp}/profile"]
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                                                 "goog:chromeOptions": {"binary": binary, "args": args}}}}
        self.sid = http("POST", self.base + "/session", caps)["value"]["sessionId"]
        self.s = f"{self.base}/session/{self.sid}"

    def cmd(self, method, path, body=None):
        return http(method, self.s + path, body)["value"]

    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css):
        return self.cmd("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def type(self, css, text):
        e = self.find(css)
        self.cmd("POST", f"/element/{e}/clear", {})
        self.cmd("POST", f"/element/{e}/value", {"text": text})

    def click(self, css):
        self.cmd("POST", f"/element/{self.find(css)}/click", {})

    def hover(self, css):
        e = self.find(css)
        self.cmd("POST", "/actions", {"actions": [{"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
                                                   "actions": [{"type": "pointerMove", "origin": {ELEMENT: e}, "x": 0, "y": 0}]}]})

    def wait(self, script, what, *args):
        t0 = time.time()
        while time.time() - t0 < TIMEOUT:
            v = self.js(script, *args)
            if v:
                return v
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def cdp(self, cmd, params):
        return self.cmd("POST", "/goog/cdp/execute", {"cmd": cmd, "params": params})

    def screenshot(self, path, width, mobile=False):
        """The whole page at `width` CSS pixels (a phone's with `mobile`)."""
        self.cdp("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                        "mobile": mobile})
        time.sleep(0.3)
        h = self.js("return document.documentElement.scrollHeight")
        w = self.js("return document.documentElement.clientWidth")
        shot = self.cdp("Page.captureScreenshot", {"captureBeyondViewport": True,
                                                   "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}})
        open(path, "wb").write(base64.b64decode(shot["data"]))
        overflow = self.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        self.cdp("Emulation.clearDeviceMetricsOverride", {})
        return overflow

    def close(self):
        try:
            http("DELETE", self.s)
        finally:
            self.proc.terminate()
            self.proc.wait()


def serve(lmkit, models, tmp, name, key=None):
    args = [lmkit, "serve", "--addr", "127.0.0.1:0"]
    for m in models:
        args += ["--model", m]
    if key:
        args += ["--api-key", key]
    log = open(os.path.join(tmp, name + ".log"), "w+")
    proc = subprocess.Popen(args, stderr=log)
    for _ in range(300):
        log.seek(0)
        m = re.search(r"listening on (http://\S+)", log.read())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    log.seek(0)
    raise RuntimeError(f"lmkit serve did not start: {log.read()[-2000:]}")


def api(addr, path, body, key=KEY):
    return http("POST", addr + path, body, {"Authorization": "Bearer " + key})


def run(b, panel, key, expect="done", **fields):
    """Types `fields` into a panel's inputs (`#KEY-NAME`), clicks its button
    and waits for the run to end in `expect` (done or error); its status line."""
    for name, text in fields.items():
        b.type(f"#{key}-{name}", text)
    b.click(f"#{key}-go")
    st = b.wait(f"const s = document.getElementById('p-{panel}').dataset.state;"
                " return s === 'done' || s === 'error' ? s : null", f"the {panel} panel's result")
    msg = b.js(f"return document.getElementById('{key}-stat').textContent")
    if st != expect:
        raise AssertionError(f"{panel}: the page ended in {st}, not {expect}: {msg}")
    return msg


def visible(b):
    return b.js("return [...document.querySelectorAll('main > section')].filter(s => !s.hidden).map(s => s.id.slice(2))")


def close(a, b, tol, what):
    if not math.isclose(a, b, rel_tol=tol, abs_tol=tol):
        raise AssertionError(f"{what}: page {a} vs server {b}")


def check_all(b, addr, out):
    b.go(addr + "/")
    b.wait("return /API key/.test(document.getElementById('served').textContent)", "the page to ask for the key")
    b.type("#key", KEY)
    b.js("document.getElementById('key').dispatchEvent(new Event('change'))")
    b.wait("return document.body.dataset.ready === '1'", "the models to load")
    shown = visible(b)
    assert shown == PANELS, f"panels shown {shown}, expected {PANELS}"
    selected = {p: b.js(f"return document.querySelector('#p-{p} select').value") for p in PANELS}
    print("models per panel:", selected)
    assert selected["complete"] == "gpt2" and selected["fill"] == "mlm" and selected["qa"] == "qa", selected
    assert selected["classify"] == "cls" and selected["rerank"] == "cross" and selected["embed"] == "minilm", selected

    # Completion: streamed text, its finish and a tokens/s figure.
    prompt = "The Rust programming language"
    stat = run(b, "complete", "c", prompt=prompt, max="16")
    text = b.js("return document.getElementById('c-out').textContent")
    want = api(addr, "/v1/completions", {"model": "gpt2", "prompt": prompt, "max_tokens": 16, "temperature": 0})
    assert text == want["choices"][0]["text"] and text, f"completion {text!r} vs {want['choices'][0]['text']!r}"
    m = re.search(r"(\d+) tokens .* ([0-9.]+) tokens/s", stat)
    assert m and int(m.group(1)) == want["usage"]["completion_tokens"] and float(m.group(2)) > 0, stat
    print(f"completion: {text[:60]!r} | {stat}")

    # Token view: prompt and completion tokens coloured, with the top 5 on hover.
    prompt = "Ownership is how Rust manages memory"
    run(b, "tokens", "t", prompt=prompt, max="6")
    want = api(addr, "/v1/completions", {"model": "gpt2", "prompt": prompt, "max_tokens": 6, "temperature": 0,
                                         "echo": True, "logprobs": 5})["choices"][0]["logprobs"]
    toks = b.js("return [...document.querySelectorAll('#t-out .tok')].map(s =>"
                " [s.textContent, s.dataset.lp, s.classList.contains('gen'), getComputedStyle(s).backgroundColor])")
    assert [t[0] for t in toks] == want["tokens"], f"tokens {[t[0] for t in toks]} vs {want['tokens']}"
    for (_, lp, _, bg), w in zip(toks, want["token_logprobs"]):
        if w is None:
            assert lp == "", lp
        else:
            close(float(lp), w, 1e-4, "token logprob")
    assert sum(t[2] for t in toks) >= 1 and len({t[3] for t in toks}) > 1, "no generated tokens or no colours"
    b.hover("#t-out .tok.gen")
    b.wait("const t = document.getElementById('t-tip'); return !t.hidden && t.querySelectorAll('tr.alt').length >= 5",
           "the alternatives on hover")
    tip = b.js("return document.getElementById('t-tip').innerText")
    open(os.path.join(out, "hover.png"), "wb").write(base64.b64decode(b.cmd("GET", "/screenshot")))
    print(f"tokens: {len(toks)} shown; hover: {tip.splitlines()[0]!r} + {len(tip.splitlines()) - 1} rows")
    b.js("document.getElementById('t-tip').hidden = true")

    # An error reaches the panel (and marks it failed) rather than showing nothing; then
    # the panel recovers.
    msg = run(b, "fill", "f", expect="error", text="no mask here")
    assert "[MASK]" in msg, f"a text without a mask: {msg!r}"
    print(f"fill-mask without a mask: {msg!r}")

    # Fill mask: top k rows, as the route gives them.
    text = "The capital of France is [MASK]."
    run(b, "fill", "f", text=text, k="4")
    rows = b.js("return [...document.querySelectorAll('#f-out tr')].map(r => r.cells[0].textContent)")
    want = api(addr, "/v1/fill-mask", {"model": "mlm", "inputs": text, "top_k": 4})
    assert rows == [p["token_str"] for p in want], f"fill-mask {rows} vs {want}"
    print("fill-mask:", rows)

    # Classification: every label with its score.
    text = "A small crate that parses TOML files."
    run(b, "classify", "k", text=text)
    rows = b.js("return [...document.querySelectorAll('#k-out tr')].map(r => [r.cells[0].textContent, +r.cells[2].textContent])")
    want = api(addr, "/predict", {"model": "cls", "inputs": text, "truncate": True})
    assert [r[0] for r in rows] == [s["label"] for s in want] and len(rows) >= 2, f"classify {rows} vs {want}"
    for r, w in zip(rows, want):
        close(r[1], w["score"], 1e-4, "class score")
    print("classification:", rows)

    # QA: the answer highlighted in the context.
    q, ctx = "Who designed Rust?", "Rust was designed by Graydon Hoare at Mozilla Research in 2006."
    run(b, "qa", "q", question=q, context=ctx)
    marked = b.js("const m = document.querySelectorAll('#q-out mark'); return m.length === 1 ? m[0].textContent : null")
    whole = b.js("return document.getElementById('q-out').textContent")
    want = api(addr, "/v1/qa", {"model": "qa", "question": q, "context": ctx})
    assert marked and marked == ctx[want["start"]:want["end"]] and whole == ctx, f"qa mark {marked!r} vs {want}"
    print(f"qa: {marked!r}")

    # Embeddings: an n x n matrix of cosines, 1 on the diagonal, symmetric.
    sents = ["A man is eating food.", "Someone is having a meal.", "The train leaves at noon.", "Rust has no garbage collector."]
    run(b, "embed", "e", texts="\n".join(sents))
    cells = b.js("return [...document.querySelectorAll('#e-out tr')].slice(1).map(r => [...r.querySelectorAll('td.cos')].map(c => +c.textContent))")
    assert len(cells) == len(sents) and all(len(r) == len(sents) for r in cells), cells
    vec = [d["embedding"] for d in api(addr, "/v1/embeddings", {"model": "minilm", "input": sents})["data"]]
    for i in range(len(sents)):
        for j in range(len(sents)):
            dot = sum(x * y for x, y in zip(vec[i], vec[j]))
            cos = dot / math.sqrt(sum(x * x for x in vec[i]) * sum(y * y for y in vec[j]))
            close(cells[i][j], cos, 2e-3, f"cosine {i},{j}")
    assert cells[0][1] > cells[0][2], f"the two meal sentences should be closest: {cells}"
    print("embeddings:", cells)

    # Rerank: the passages in the route's order with their scores.
    query = "How do I read a file in Rust?"
    texts = ["The weather is sunny today.", "Use std::fs::read_to_string to read a whole file.", "A BufReader reads lines."]
    run(b, "rerank", "r", query=query, texts="\n".join(texts))
    items = b.js("return [...document.querySelectorAll('#r-out li')].map(l => [l.children[0].textContent, +l.children[1].textContent])")
    want = api(addr, "/rerank", {"model": "cross", "query": query, "texts": texts, "truncate": True})
    assert [i[0] for i in items] == [texts[w["index"]] for w in want], f"rerank {items} vs {want}"
    for i, w in zip(items, want):
        close(i[1], w["score"], 1e-4, "rerank score")
    print("rerank:", items)


def main():
    lmkit, gpt2 = sys.argv[1], sys.argv[2]
    out = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "target/serve-page")
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="lmkit-page-")
    minilm = os.path.join(ROOT, "assets/minilm")
    procs = []
    b = None
    try:
        models = ["gpt2=" + gpt2, "minilm=" + minilm, "mlm=" + FIX + "/bert-tiny-mlm", "cls=" + FIX + "/bert-tiny-classify",
                  "qa=" + FIX + "/bert-tiny-qa", "cross=" + FIX + "/cross-encoder-tiny"]
        proc, addr = serve(lmkit, models, tmp, "all", key=KEY)
        procs.append(proc)
        proc, addr_one = serve(lmkit, ["minilm=" + minilm], tmp, "one")
        procs.append(proc)
        b = Browser(tmp)
        check_all(b, addr, out)
        b.screenshot(os.path.join(out, "desktop.png"), 1280)
        overflow = b.screenshot(os.path.join(out, "phone.png"), 390, mobile=True)
        assert overflow <= 0, f"the page is {overflow}px wider than a phone's screen"
        # Only the panels of what is served.
        b.go(addr_one + "/")
        b.wait("return document.body.dataset.ready === '1'", "the models to load (minilm alone)")
        shown = visible(b)
        assert shown == ["embed", "rerank"], f"minilm alone: panels shown {shown}"
        print("minilm alone: panels", shown)
        print(f"serve page: every panel works; screenshots in {out}")
    finally:
        if b:
            b.close()
        for p in procs:
            p.terminate()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

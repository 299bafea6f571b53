#!/usr/bin/env python3
"""Drives `lmkit serve` with the official `openai` Python package, unchanged
(`base_url` pointed at the server): completions, streamed completions,
embeddings, model listing, and an error surfacing as the client's own
exception. Exits non-zero on any mismatch.

Usage: python scripts/check_openai_client.py PATH_TO_LMKIT
(in a venv with `openai`; scripts/test.sh makes one; after scripts/fetch-assets.sh)
"""
import base64
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import openai

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def byte_level_gpt2(folder):
    """The tiny GPT-2 fixture with a byte-level tokenizer (no merges)."""
    os.makedirs(folder)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(ROOT, "tests/fixtures/gpt2-tiny", f), folder)
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    vocab, extra = {}, 0
    for b in range(256):
        if b in printable:
            c = b
        else:
            extra += 1
            c = 255 + extra
        vocab[chr(c)] = b
    vocab["<|endoftext|>"] = 256
    json.dump(vocab, open(os.path.join(folder, "vocab.json"), "w"))
    open(os.path.join(folder, "merges.txt"), "w").write("#version: 0.2\n")


def main():
    lmkit = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="lmkit-openai-")
    tiny = os.path.join(tmp, "tiny")
    byte_level_gpt2(tiny)
    minilm = os.path.join(ROOT, "assets/minilm")
    server = subprocess.Popen(
        [lmkit, "serve", "--addr", "127.0.0.1:0", "--model", tiny, "--model", "minilm=" + minilm,
         "--api-key", "k-test"],
        stderr=subprocess.PIPE, text=True)
    try:
        addr = None
        for line in server.stderr:
            m = re.match(r"lmkit serve: listening on (http://\S+)", line)
            if m:
                addr = m.group(1)
                break
        assert addr, "the server did not start"
        client = openai.OpenAI(base_url=addr + "/v1", api_key="k-test", max_retries=0)

        ids = sorted(m.id for m in client.models.list().data)
        assert ids == ["minilm", "tiny"], ids

        prompt = "Hello, wor"
        want = json.loads(subprocess.check_output(
            [lmkit, "generate", "--model", tiny, "--prompt", prompt, "--greedy", "--max-new-tokens", "12",
             "--json"]).decode().strip().splitlines()[-1])
        c = client.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0)
        assert c.choices[0].text == want["text"], (c.choices[0].text, want["text"])
        assert c.usage.completion_tokens == want["new_tokens"], c.usage
        print(f"completion: {c.choices[0].text!r} ({c.usage.completion_tokens} tokens) = lmkit generate --greedy")

        pieces, finish = [], None
        for chunk in client.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0,
                                               stream=True):
            pieces.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        assert "".join(pieces) == want["text"], pieces
        assert finish in ("stop", "length"), finish
        print(f"stream: {len(pieces)} chunks, finish_reason {finish}")

        # logprobs with echo, as the client's typed Logprobs object; the
        # penalties equal lmkit generate's.
        c = client.completions.create(model="tiny", prompt=prompt, max_tokens=6, temperature=0, logprobs=2,
                                      echo=True)
        lp = c.choices[0].logprobs
        n = c.usage.prompt_tokens + c.usage.completion_tokens
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n, lp
        assert lp.token_logprobs[0] is None and all(x <= 0 for x in lp.token_logprobs[1:]), lp
        assert "".join(lp.tokens) == c.choices[0].text, (lp.tokens, c.choices[0].text)
        want = json.loads(subprocess.check_output(
            [lmkit, "generate", "--model", tiny, "--prompt", prompt, "--greedy", "--max-new-tokens", "12",
             "--presence-penalty", "1", "--frequency-penalty", "0.5", "--json"]).decode().strip().splitlines()[-1])
        c = client.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0,
                                      presence_penalty=1, frequency_penalty=0.5)
        assert c.choices[0].text == want["text"], (c.choices[0].text, want["text"])
        print(f"logprobs: {n} tokens with echo; penalties = lmkit generate --presence-penalty --frequency-penalty")

        texts = ["A man is eating food.", "Someone is having a meal."]
        cli = [json.loads(l) for l in subprocess.run(
            [lmkit, "embed", "--model", minilm], input="\n".join(texts) + "\n", capture_output=True,
            text=True, check=True).stdout.splitlines()]
        e = client.embeddings.create(model="minilm", input=texts)
        for got, ref in zip(e.data, cli):
            diff = max(abs(a - b) for a, b in zip(got.embedding, ref))
            assert diff < 1e-5, diff
        # The client asks for base64 under the hood and decodes it; asked for
        # explicitly, base64 comes back as the string: little-endian f32.
        e64 = client.embeddings.create(model="minilm", input=texts[0], encoding_format="base64")
        raw = base64.b64decode(e64.data[0].embedding)
        floats = struct.unpack(f"<{len(raw) // 4}f", raw)
        assert max(abs(a - b) for a, b in zip(floats, cli[0])) < 1e-5
        print(f"embeddings: {len(e.data)} x {len(e.data[0].embedding)} = lmkit embed")

        try:
            client.completions.create(model="tiny", prompt="x", max_tokens=100000)
            raise AssertionError("an over-long max_tokens was accepted")
        except openai.BadRequestError as err:
            assert err.body and err.body.get("param") == "max_tokens", err.body
        try:
            openai.OpenAI(base_url=addr + "/v1", api_key="wrong", max_retries=0).models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError:
            pass
        print("errors: BadRequestError (param max_tokens), AuthenticationError")
        print("openai client: ok")
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()

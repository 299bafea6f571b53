#!/usr/bin/env python3
"""BERT throughput: lmkit against PyTorch transformers, sentence-transformers
and ONNX Runtime, measured in the same run, all on the same number of threads
(default 2). Prints each measurement and the ratios lmkit / peer.

    python3 scripts/bench_bert.py [--threads 2] [--rounds 2] [--cases forward,onnx,embed] [--quick] [--json FILE]

Cases:
  forward  BERT-base (assets/big/bert-base-random: random init, 12 layers, d 768),
           batch 32 x 128 tokens, sentences/s, f32 and bf16 (lmkit: bf16 encoder
           weights; PyTorch: the whole model in bfloat16).
  embed    all-MiniLM-L6-v2 (assets/minilm) embedding 1000 real sentences from
           assets/books/corpus.txt, tokenization + pooling + normalization
           included, model loading excluded (sentence-transformers encode(),
           batch 32).
  onnx     the BERT-base f32 forward exported with torch.onnx.export and run by
           ONNX Runtime (graph optimizations on), and the same graph after ONNX
           Runtime's dynamic int8 quantization of the weights (quantize_dynamic,
           QInt8: the usual CPU recipe for a quantized BERT), against lmkit f32,
           and lmkit int8 (`--dtype int8`) against ONNX Runtime int8.

Rounds alternate lmkit and the peer so that load on a shared machine hits both;
each side keeps its best time. Needs torch, transformers, sentence-transformers
(and onnx + onnxruntime for the ONNX case); assets from scripts/fetch-assets.sh
and `python3 scripts/make_fixtures.py --big assets/big`.
--json FILE writes the figures in scripts/bench_common.py's format (work: forward
FLOPs per sentence, matmuls + attention, unpadded) for scripts/bench.sh.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_common import bert_forward_flops, figure, write_json  # noqa: E402
BIG = ROOT / "assets/big/bert-base-random"
MINILM = ROOT / "assets/minilm"
CORPUS = ROOT / "assets/books/corpus.txt"


def lmkit(args, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = ["cargo", "bench", "-q", "-p", "lmkit", "--bench", "bert_throughput", "--"] + args
    out = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def best_time(fn, reps):
    fn()  # warm-up
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def sentences(n):
    out, seen = [], set()
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if len(line.split()) >= 4 and line not in seen:
            seen.add(line)
            out.append(line)
            if len(out) == n:
                break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cases", default="forward,onnx,embed",
                    help="comma-separated subset of forward, onnx, embed")
    ap.add_argument("--quick", action="store_true", help="batch 8 x 128 and 200 sentences")
    ap.add_argument("--json", metavar="FILE", help="write the figures here (bench_common format)")
    a = ap.parse_args()
    cases = set(a.cases.split(","))

    import torch
    from transformers import BertModel

    torch.set_num_threads(a.threads)
    for p in (BIG / "model.safetensors", MINILM / "model.safetensors", CORPUS):
        if not p.exists():
            sys.exit(f"missing {p}: run scripts/fetch-assets.sh and scripts/make_fixtures.py --big assets/big")
    subprocess.run(["cargo", "bench", "-q", "-p", "lmkit", "--bench", "bert_throughput", "--no-run"],
                   cwd=ROOT, check=True)
    b, t = (8, 128) if a.quick else (32, 128)
    n_sent = 200 if a.quick else 1000
    results, figs, skipped = [], [], []

    def report(name, ours, peer, peer_name, flops=None, dtype="f32", peer_dtype=None):
        ratio = ours / peer
        results.append((name, ours, peer, peer_name, ratio))
        figs.append(figure(name, "sentences/s", ours, {peer_name: {"value": peer, "dtype": peer_dtype or dtype}},
                           dtype=dtype, threads=a.threads, flops_per_item=flops))
        print(f"{name:<28} lmkit {ours:9.2f}/s   {peer_name:<22} {peer:9.2f}/s   ratio {ratio:5.2f}x", flush=True)

    # ---- BERT-base forward, f32 and bf16 ------------------------------------
    model = BertModel.from_pretrained(str(BIG), attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, model.config.vocab_size, (b, t), generator=g)
    mask = torch.ones_like(ids)
    c = model.config
    fwd_flops = bert_forward_flops(c.num_hidden_layers, c.hidden_size, c.intermediate_size, t)
    for dtype, flag in ((torch.float32, []), (torch.bfloat16, ["--dtype", "bf16"])) if "forward" in cases else ():
        m = model.to(dtype)
        ours, peer = 0.0, 0.0
        for _ in range(a.rounds):
            r = lmkit(["forward", "--model", str(BIG), "--batch", str(b), "--seq", str(t),
                       "--reps", str(a.reps)] + flag, a.threads)
            ours = max(ours, r["sentences_per_s"])
            with torch.inference_mode():
                s = best_time(lambda: m(input_ids=ids, attention_mask=mask), a.reps)
            peer = max(peer, b / s)
        d = "bf16" if flag else "f32"
        report(f"BERT-base forward {b}x{t} {d}", ours, peer, f"pytorch {str(dtype).split('.')[-1]}",
               fwd_flops, d)
    model = model.to(torch.float32)

    # ---- ONNX Runtime --------------------------------------------------------
    if "onnx" in cases:
        try:
            import onnxruntime as ort
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "bert.onnx")
                eager = BertModel.from_pretrained(str(BIG), attn_implementation="eager").eval()

                class Encoder(torch.nn.Module):
                    """Keyword call of BertModel: its positional order changes between versions."""

                    def __init__(self, m):
                        super().__init__()
                        self.m = m

                    def forward(self, input_ids, attention_mask):
                        out = self.m(input_ids=input_ids, attention_mask=attention_mask)
                        return out.last_hidden_state, out.pooler_output

                with torch.no_grad():
                    torch.onnx.export(Encoder(eager), (ids, mask), path, input_names=["input_ids", "attention_mask"],
                                      output_names=["last_hidden_state", "pooler_output"],
                                      dynamic_axes={"input_ids": {0: "b", 1: "t"}, "attention_mask": {0: "b", 1: "t"}},
                                      opset_version=17, dynamo=False)
                so = ort.SessionOptions()
                so.intra_op_num_threads = a.threads
                so.inter_op_num_threads = 1
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                from onnxruntime.quantization import QuantType, quantize_dynamic

                qpath = os.path.join(tmp, "bert.int8.onnx")
                quantize_dynamic(path, qpath, weight_type=QuantType.QInt8)
                sess = {q: ort.InferenceSession(f, so, providers=["CPUExecutionProvider"])
                        for q, f in (("f32", path), ("int8", qpath))}
                feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
                # lmkit f32 against both, and lmkit int8 (int8 weights, activations
                # quantized per row) against ONNX Runtime's int8.
                ours, peer = {"f32": 0.0, "int8": 0.0}, {"f32": 0.0, "int8": 0.0}
                for _ in range(a.rounds):
                    for q in ours:
                        r = lmkit(["forward", "--model", str(BIG), "--batch", str(b), "--seq", str(t),
                                   "--reps", str(a.reps), "--dtype", q], a.threads)
                        ours[q] = max(ours[q], r["sentences_per_s"])
                    for q, se in sess.items():
                        s = best_time(lambda: se.run(None, feed), a.reps)
                        peer[q] = max(peer[q], b / s)
                for q in sess:
                    report(f"BERT-base forward {b}x{t} f32", ours["f32"], peer[q], f"onnxruntime {q}", fwd_flops,
                           "f32", q)
                report(f"BERT-base forward {b}x{t} int8", ours["int8"], peer["int8"], "onnxruntime int8",
                       fwd_flops, "int8", "int8")
        except Exception as e:  # report the ratio either way: say why it is missing
            print(f"ONNX Runtime case skipped: {type(e).__name__}: {e}", flush=True)
            skipped.append(f"BERT-base vs ONNX Runtime: {type(e).__name__}: {e}")

    # ---- MiniLM embeddings of real sentences ---------------------------------
    if "embed" in cases:
        embed_case(a, n_sent, report)
    if a.json:
        write_json(a.json, figs, skipped=skipped)
    print(json.dumps([{"case": n, "lmkit_per_s": o, "peer": pn, "peer_per_s": p, "ratio": r}
                      for n, o, p, pn, r in results]))


def embed_case(a, n_sent, report):
    from sentence_transformers import SentenceTransformer

    sents = sentences(n_sent)
    st = SentenceTransformer(str(MINILM), device="cpu")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(sents) + "\n")
        sent_file = f.name
    try:
        ours, peer = 0.0, 0.0
        for _ in range(a.rounds):
            r = lmkit(["embed", "--model", str(MINILM), "--input", sent_file, "--reps", str(a.reps)], a.threads)
            ours = max(ours, r["sentences_per_s"])
            s = best_time(lambda: st.encode(sents, batch_size=32), a.reps)
            peer = max(peer, len(sents) / s)
        c = st[0].auto_model.config
        lens = [len(x) for x in st.tokenizer(sents, truncation=True, max_length=st.max_seq_length)["input_ids"]]
        flops = sum(bert_forward_flops(c.num_hidden_layers, c.hidden_size, c.intermediate_size, n)
                    for n in lens) / len(lens)
        report(f"MiniLM-L6 embed {len(sents)} sentences (tokenize + encode + pool)", ours, peer,
               "sentence-transformers", flops)
    finally:
        os.unlink(sent_file)


if __name__ == "__main__":
    main()

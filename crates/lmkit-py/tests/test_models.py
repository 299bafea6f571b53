"""lmkit.GPT2, lmkit.Bert and lmkit.Classifier against the references HF
wrote (tests/fixtures: transformers and sentence-transformers outputs) and
against the CLI (`lmkit ... --json`, whose outputs are tested against HF)."""

import json
import os
import subprocess

import numpy as np
import pytest

import lmkit

from conftest import FIXTURES, ROOT, read_safetensors


def reference(case):
    return (
        json.loads((FIXTURES / case / "reference.json").read_text()),
        read_safetensors(FIXTURES / case / "reference.safetensors"),
    )


def cli(*args):
    """`lmkit ARGS --json` as JSON lines (the binary: $LMKIT, else target/debug/lmkit)."""
    exe = os.environ.get("LMKIT", str(ROOT / "target" / "debug" / "lmkit"))
    if not os.path.exists(exe):
        raise FileNotFoundError(f"{exe}: build the CLI (cargo build -p lmkit-cli) or set LMKIT")
    out = subprocess.run([exe, *args, "--json"], check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return lmkit.Bert.from_pretrained(minilm_dir)


def test_embeddings_equal_sentence_transformers(minilm):
    meta, ref = reference("minilm-embeddings")
    emb = minilm.embed(meta["sentences"])
    assert isinstance(emb, np.ndarray) and emb.dtype == np.float32
    assert emb.shape == ref["embeddings"].shape == (22, 384)
    assert np.abs(emb - ref["embeddings"]).max() < 1e-5
    raw = minilm.embed(meta["sentences"], normalize=False)
    assert np.abs(raw - ref["mean_pooled"]).max() < 1e-5
    # A str is one row; batching does not change a vector.
    one = minilm.embed(meta["sentences"][3])
    assert one.shape == (1, 384) and np.abs(one[0] - emb[3]).max() < 1e-6
    assert np.abs(minilm.embed(meta["sentences"], batch_size=5) - emb).max() < 1e-6
    assert minilm.embed([]).shape == (0, 384)


def test_reduced_precision_embeddings_stay_close(minilm_dir):
    meta, ref = reference("minilm-embeddings")
    # int8: lowest cosine 0.9935 over these 22 sentences (measured).
    for dtype, min_cos in (("bf16", 0.999), ("int8", 0.99)):
        emb = lmkit.Bert.from_pretrained(minilm_dir, dtype=dtype).embed(meta["sentences"])
        cos = (emb * ref["embeddings"]).sum(axis=1)
        assert cos.min() > min_cos, (dtype, cos.min())


def test_dtype_auto_picks_a_format_and_says_why(minilm_dir, tmp_path, monkeypatch, capfd):
    # Measured on the first load (the cache folder is empty), one line on stderr each.
    monkeypatch.setenv("LMKIT_CACHE_DIR", str(tmp_path))
    loads = (lambda: lmkit.Bert.from_pretrained(minilm_dir, dtype="auto"),
             lambda: lmkit.GPT2.from_pretrained(str(FIXTURES / "gpt2-zeroshot"), dtype="auto"))
    for load in loads:
        load()
        err = capfd.readouterr().err
        said = [line for line in err.splitlines() if line.startswith("dtype auto: ")]
        assert len(said) == 1, err
        assert said[0].split()[2] in ("f32", "bf16", "int8"), said[0]
        assert "measured, cached in" in said[0], said[0]
    assert len(list(tmp_path.glob("dtype-*.json"))) == 2


def test_greedy_generation_equals_transformers():
    # gpt2-tiny: a random 2-layer GPT-2 and HF's greedy generate (no eos stop).
    meta, ref = reference("gpt2-tiny")
    gpt2 = lmkit.GPT2.from_pretrained(str(FIXTURES / "gpt2-tiny"), tokenizer=str(ROOT / "assets" / "gpt2"))
    for i in (0, 1):
        prompt = ref[f"generate.{i}.prompt_ids"][0].tolist()
        want = ref[f"generate.{i}.new_ids"][0].tolist()
        assert gpt2.generate_ids(prompt, len(want), temperature=0, ignore_eos=True) == want


def test_logits_and_perplexity_equal_transformers():
    meta, ref = reference("gpt2-tiny")
    gpt2 = lmkit.GPT2.from_pretrained(str(FIXTURES / "gpt2-tiny"), tokenizer=str(ROOT / "assets" / "gpt2"))
    for b in range(2):
        logits = gpt2.logits(ref["input_ids"][b].tolist())
        assert logits.shape == (12, 128) and logits.dtype == np.float32
        assert np.abs(logits - ref["logits"][b]).max() < 1e-4
    s = meta["scalars"]
    ppl = gpt2.perplexity(ref["ppl.input_ids"][0].tolist(), context=s["ppl.max_length"]["value"], stride=s["ppl.stride"]["value"])
    assert ppl["tokens"] == s["ppl.scored_tokens"]["value"]
    assert abs(ppl["nll"] - s["ppl.mean_nll"]["value"]) < 1e-5
    assert abs(ppl["perplexity"] / s["ppl.perplexity"]["value"] - 1) < 1e-4


def test_text_generation_streams_and_stops():
    gpt2 = lmkit.GPT2.from_pretrained(str(FIXTURES / "gpt2-zeroshot"))
    text = gpt2.generate("The dog", 24, temperature=0, ignore_eos=True)
    assert "".join(gpt2.generate_stream("The dog", 24, temperature=0, ignore_eos=True)) == text
    # The CLI's greedy text is the same.
    (cli_out,) = cli("generate", "--model", str(FIXTURES / "gpt2-zeroshot"), "--prompt", "The dog",
                     "--max-new-tokens", "24", "--greedy", "--ignore-eos")
    assert cli_out["text"] == text
    # Sampling is reproducible with a seed; stop strings cut the text.
    a = gpt2.generate("The dog", 16, seed=7, top_k=20, top_p=0.9)
    assert a == gpt2.generate("The dog", 16, seed=7, top_k=20, top_p=0.9)
    if len(text) > 4:
        stop = text[2:4]
        assert gpt2.generate("The dog", 24, temperature=0, ignore_eos=True, stop=[stop]) == text[: text.index(stop)]
    # Breaking out of a stream ends its generation; the model is usable again.
    for _ in gpt2.generate_stream("The dog", 24, temperature=0):
        break
    assert gpt2.generate("The dog", 24, temperature=0, ignore_eos=True) == text
    for dtype in ("bf16", "int8"):
        assert len(lmkit.GPT2.from_pretrained(str(FIXTURES / "gpt2-zeroshot"), dtype=dtype).generate("The", 4)) >= 0


def test_fill_mask_equals_the_hf_pipeline():
    meta, _ = reference("bert-tiny-mlm")
    bert = lmkit.Bert.from_pretrained(str(FIXTURES / "bert-tiny-mlm"))
    for r in meta["fill_mask"]["results"]:
        ours = bert.fill_mask(r["text"], top_k=5)
        masks = [ours] if len(r["masks"]) == 1 else ours
        for got, want in zip(masks, r["masks"]):
            assert [x["token"] for x in got] == [w["id"] for w in want]
            assert [x["token_str"] for x in got] == [w["token"] for w in want]
            assert [x["sequence"] for x in got] == [w["sequence"] for w in want]
            assert max(abs(x["score"] - w["score"]) for x, w in zip(got, want)) < 1e-5


def test_classify_and_qa_equal_the_cli(tmp_path):
    clf_dir = str(FIXTURES / "bert-tiny-classify")
    bert = lmkit.Bert.from_pretrained(clf_dir)
    texts = ["the dog was very old", "she found london", "a b c"]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts) + json.dumps({"text": "x y", "text_pair": "z"}) + "\n")
    want = cli("classify", "--model", clf_dir, "--input", str(inp))
    got = bert.classify(texts + [("x y", "z")])
    assert [g["label"] for g in got] == [w["label"] for w in want]
    assert max(abs(g["score"] - w["score"]) for g, w in zip(got, want)) < 1e-6
    # One input alone: the same labels, scores within batching's rounding.
    for one, many in [(bert.classify("the dog was very old"), got[0]), (bert.classify({"text": "x y", "text_pair": "z"}), got[3])]:
        assert [s["label"] for s in one["scores"]] == [s["label"] for s in many["scores"]]
        assert max(abs(a["score"] - b["score"]) for a, b in zip(one["scores"], many["scores"])) < 1e-6
    # lmkit.Classifier (either family, read from config.json) is the same classifier.
    assert lmkit.Classifier.from_pretrained(clf_dir).classify(texts + [("x y", "z")]) == got

    qa_dir = str(FIXTURES / "bert-tiny-qa")
    ctx = "the old man saw the dog by the river and the dog saw him too"
    (tmp_path / "ctx.txt").write_text(ctx)
    qa = lmkit.Bert.from_pretrained(qa_dir)
    want = cli("qa", "--model", qa_dir, "--question", "who saw the dog", "--context", str(tmp_path / "ctx.txt"), "--top-k", "2")
    got = qa.qa("who saw the dog", ctx, top_k=2)
    assert [(g["answer"], g["start"], g["end"]) for g in got] == [(w["answer"], w["start"], w["end"]) for w in want]
    assert qa.qa("who saw the dog", ctx)["answer"] == got[0]["answer"]


def test_model_tokenizer_property_is_shared_until_changed(minilm):
    # Each access hands out the model's tokenizer without copying its tables;
    # changing one copies it then, so neither the model's nor a later
    # access's tokenizer sees the change (as before the sharing).
    text = "a sentence long enough to be cut by a truncation to five tokens"
    full = minilm.tokenizer.encode(text).ids
    assert len(full) > 5
    cut = minilm.tokenizer
    cut.enable_truncation(5)
    assert len(cut.encode(text).ids) == 5
    assert minilm.tokenizer.encode(text).ids == full
    gpt2 = lmkit.GPT2.from_pretrained(str(FIXTURES / "gpt2-tiny"), tokenizer=str(ROOT / "assets" / "gpt2"))
    ids = gpt2.tokenizer.encode(text).ids
    short = gpt2.tokenizer
    short.enable_truncation(2)
    assert len(short.encode(text).ids) == 2
    assert gpt2.tokenizer.encode(text).ids == ids and len(ids) > 2


def test_model_errors_are_python_exceptions(minilm_dir, tmp_path):
    with pytest.raises(ValueError, match="holds a BERT model"):
        lmkit.GPT2.from_pretrained(minilm_dir)
    with pytest.raises(FileNotFoundError):
        lmkit.Bert.from_pretrained(str(tmp_path / "none"))
    with pytest.raises(ValueError, match="dtype"):
        lmkit.Bert.from_pretrained(minilm_dir, dtype="f8")
    with pytest.raises(ValueError, match="dtype"):
        lmkit.GPT2.from_pretrained(str(FIXTURES / "gpt2-zeroshot"), dtype="f8")
    gpt2 = lmkit.GPT2.from_pretrained(str(FIXTURES / "gpt2-zeroshot"))
    with pytest.raises(ValueError, match="out of range|vocabulary"):
        gpt2.logits([10**6])
    with pytest.raises(ValueError, match="exceeds|context"):
        gpt2.generate("word " * 400, 10)
    with pytest.raises(ValueError, match="MASK|mask"):
        lmkit.Bert.from_pretrained(str(FIXTURES / "bert-tiny-mlm")).fill_mask("no mask here")

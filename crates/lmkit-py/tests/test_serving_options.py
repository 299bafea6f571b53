"""The embedding and rerank options Python shares with `lmkit serve` and the
CLI, against sentence-transformers (tests/fixtures written by
scripts/make_fixtures_serving.py): `Bert.embed(chunking=...)` on a
5,000-token document, `truncate=False`, `dimensions`, and
`lmkit.CrossEncoder` against `CrossEncoder.predict`."""

import json

import numpy as np
import pytest

import lmkit

from conftest import FIXTURES, read_safetensors


def reference(case):
    return (
        json.loads((FIXTURES / case / "reference.json").read_text()),
        read_safetensors(FIXTURES / case / "reference.safetensors"),
    )


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return lmkit.Bert.from_pretrained(minilm_dir)


def test_chunked_embedding_equals_sentence_transformers_windows(minilm):
    meta, ref = reference("minilm-chunked")
    doc = meta["document"]
    for c in meta["chunkings"]:
        got = minilm.embed([doc], chunking=c)[0]
        want = ref[f"embedding_{c['max_tokens']}_{c['overlap']}"]
        assert np.abs(got - want).max() < 1e-5, c
    with pytest.raises(ValueError, match="256"):
        minilm.embed(doc, truncate=False)
    with pytest.raises(ValueError, match="overlap"):
        minilm.embed(doc, chunking={"max_tokens": 10, "overlap": 8})
    with pytest.raises(ValueError, match="unknown field"):
        minilm.embed(doc, chunking={"max_tokens": 64, "stride": 8})


def test_dimensions_truncate_then_renormalize(minilm):
    texts = ["the cat sat on the mat", "a dog ran across the road"]
    raw = minilm.embed(texts, normalize=False)
    got = minilm.embed(texts, dimensions=64)
    want = raw[:, :64] / np.linalg.norm(raw[:, :64], axis=1, keepdims=True)
    assert got.shape == (2, 64)
    assert np.abs(got - want).max() < 1e-6
    with pytest.raises(ValueError, match="dimensions"):
        minilm.embed(texts, dimensions=385)


def test_cross_encoder_equals_sentence_transformers():
    meta, ref = reference("cross-encoder-tiny")
    ce = lmkit.CrossEncoder.from_pretrained(str(FIXTURES / "cross-encoder-tiny"))
    pairs = [(meta["query"], t) for t in meta["texts"]]
    scores = ce.predict(pairs, truncate=True)
    assert np.abs(scores - ref["scores"]).max() < 1e-5
    raw = ce.predict(pairs, truncate=True, raw_scores=True)
    assert np.abs(raw - ref["raw_scores"]).max() < 1e-5
    ranked = ce.rank(meta["query"], meta["texts"], truncate=True, return_documents=True, top_k=3)
    order = np.argsort(-ref["scores"], kind="stable")[:3]
    assert [r["corpus_id"] for r in ranked] == list(order)
    assert ranked[0]["text"] == meta["texts"][order[0]]
    with pytest.raises(ValueError, match="32"):
        ce.predict(pairs)
    with pytest.raises(ValueError, match="one label"):
        lmkit.CrossEncoder.from_pretrained(str(FIXTURES / "bert-tiny-classify"))


def test_cross_encoder_applies_its_saved_activation(tmp_path):
    """A cross-encoder saved with `activation_fn` Identity (as ms-marco
    models are) scores with its logits by default, as `CrossEncoder.predict`
    does; `raw_scores=False` still gives the sigmoid."""
    import shutil

    meta, ref = reference("cross-encoder-tiny")
    model = tmp_path / "ce"
    shutil.copytree(FIXTURES / "cross-encoder-tiny", model)
    cfg_path = model / "config_sentence_transformers.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["activation_fn"] = "torch.nn.modules.linear.Identity"
    cfg_path.write_text(json.dumps(cfg))
    ce = lmkit.CrossEncoder.from_pretrained(str(model))
    pairs = [(meta["query"], t) for t in meta["texts"]]
    assert np.abs(ce.predict(pairs, truncate=True) - ref["raw_scores"]).max() < 1e-5
    assert np.abs(ce.predict(pairs, truncate=True, raw_scores=False) - ref["scores"]).max() < 1e-5
    cfg["activation_fn"] = "torch.nn.modules.activation.Tanh"
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="Tanh"):
        lmkit.CrossEncoder.from_pretrained(str(model))

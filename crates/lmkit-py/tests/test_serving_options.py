"""The embedding and rerank options Python shares with `lmkit serve` and the
CLI, against sentence-transformers (tests/fixtures written by
scripts/make_fixtures_serving.py): `Bert.embed(chunking=...)` on a
5,000-token document, `truncate=False` and `dimensions`."""

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

"""lmkit.Tokenizer and lmkit.tiktoken_compat against tiktoken and HF
tokenizers on the repository's real text: ids, offsets, special tokens,
pairs, truncation, padding, decode, training."""

import pytest

import lmkit
from lmkit import tiktoken_compat

from conftest import FIXTURES

# Text that exercises the pre-tokenizer: contractions, digits, whitespace
# runs, non-Latin scripts, emoji, special-token text.
ODD = [
    "",
    " ",
    "Hello, world",
    "I'm   here\n\n\tthere's 1234567 things ",
    "naïve café — 東京 😀👍🏽 ٱلْعَرَبِيَّة",
    "a<|endoftext|>b",
    "   leading and trailing   ",
    "\r\n\u00a0\u2028x",
]


@pytest.fixture(scope="module")
def gpt2(gpt2_dir):
    return lmkit.Tokenizer.from_pretrained(gpt2_dir)


@pytest.fixture(scope="module")
def enc():
    return tiktoken_compat.get_encoding("gpt2")


def test_ids_equal_tiktoken_on_the_books(enc, tiktoken_gpt2, corpus, paragraphs):
    assert enc.encode_ordinary(corpus) == tiktoken_gpt2.encode_ordinary(corpus)
    assert enc.encode_batch(paragraphs) == tiktoken_gpt2.encode_batch(paragraphs)
    assert enc.encode_ordinary_batch(ODD) == tiktoken_gpt2.encode_ordinary_batch(ODD)


def test_tiktoken_special_token_rules(enc, tiktoken_gpt2):
    text = "x <|endoftext|> y"
    for kw in [
        {"allowed_special": "all"},
        {"allowed_special": {"<|endoftext|>"}},
        {"disallowed_special": ()},
        {"allowed_special": set(), "disallowed_special": set()},
    ]:
        assert enc.encode(text, **kw) == tiktoken_gpt2.encode(text, **kw), kw
    with pytest.raises(ValueError) as ours:
        enc.encode(text)
    with pytest.raises(ValueError) as theirs:
        tiktoken_gpt2.encode(text)
    assert "disallowed special token" in str(ours.value)
    assert "disallowed special token" in str(theirs.value)
    with pytest.raises(ValueError):
        enc.encode_batch(["fine", text])
    assert enc.encode("plain") == tiktoken_gpt2.encode("plain")


def test_tiktoken_encoding_attributes(enc, tiktoken_gpt2):
    assert enc.n_vocab == tiktoken_gpt2.n_vocab == 50257
    assert enc.eot_token == tiktoken_gpt2.eot_token
    assert enc.max_token_value == tiktoken_gpt2.max_token_value
    assert enc.special_tokens_set == tiktoken_gpt2.special_tokens_set
    ids = tiktoken_gpt2.encode(ODD[4])
    assert enc.decode(ids) == tiktoken_gpt2.decode(ids)
    assert enc.decode_bytes(ids) == tiktoken_gpt2.decode_bytes(ids)
    # A token holding part of a character decodes as tiktoken does it.
    assert enc.decode(ids[:3]) == tiktoken_gpt2.decode(ids[:3])
    assert enc.decode_batch([ids, ids[:3]]) == tiktoken_gpt2.decode_batch([ids, ids[:3]])
    assert [enc.decode_single_token_bytes(t) for t in ids] == [
        tiktoken_gpt2.decode_single_token_bytes(t) for t in ids
    ]
    assert enc.encode_single_token("hello") == tiktoken_gpt2.encode_single_token("hello")
    assert enc.encode_single_token("<|endoftext|>") == 50256


def test_ids_and_offsets_equal_hf_tokenizers(gpt2, hf_gpt2, paragraphs):
    texts = paragraphs[:400] + [t for t in ODD if t]
    ours = gpt2.encode_batch(texts)
    theirs = hf_gpt2.encode_batch(texts)
    for t, a, b in zip(texts, ours, theirs):
        assert a.ids == b.ids, t
        assert a.offsets == b.offsets, t
        assert a.tokens == b.tokens, t
        assert a.attention_mask == b.attention_mask
        assert a.type_ids == b.type_ids


def test_wordpiece_equals_hf_tokenizers(minilm_dir, hf_minilm, paragraphs):
    tok = lmkit.Tokenizer.from_pretrained(minilm_dir)
    hf = hf_minilm
    texts = paragraphs[:300] + [t for t in ODD if t]
    for a, b in zip(tok.encode_batch(texts), hf.encode_batch(texts)):
        # MiniLM's tokenizer.json truncates and pads to 128, as HF loads it.
        assert (a.ids, a.offsets, a.tokens) == (b.ids, b.offsets, b.tokens)
        assert (a.attention_mask, a.type_ids, a.special_tokens_mask) == (
            b.attention_mask,
            b.type_ids,
            b.special_tokens_mask,
        )
    # Pairs, truncation strategies and padding, each as HF sets them.
    # A short first text (a question), so that "only_second" can always fit.
    pairs = [(paragraphs[i][:60], paragraphs[i + 1]) for i in range(0, 40, 2)]
    for strategy in ("longest_first", "only_second"):
        for direction in ("right", "left"):
            tok.enable_truncation(48, strategy=strategy, direction=direction)
            hf.enable_truncation(48, strategy=strategy, direction=direction)
            tok.enable_padding(pad_to_multiple_of=8)
            hf.enable_padding(pad_to_multiple_of=8)
            for a, b in zip(tok.encode_batch(pairs), hf.encode_batch(pairs)):
                assert (a.ids, a.type_ids, a.offsets, a.attention_mask) == (
                    b.ids,
                    b.type_ids,
                    b.offsets,
                    b.attention_mask,
                ), (strategy, direction)
    tok.no_truncation()
    tok.no_padding()
    hf.no_truncation()
    hf.no_padding()
    a, b = tok.encode("who saw it?", "the dog saw it"), hf.encode("who saw it?", "the dog saw it")
    assert (a.ids, a.type_ids, a.offsets) == (b.ids, b.type_ids, b.offsets)
    assert tok.decode(a.ids) == hf.decode(b.ids)
    assert tok.decode(a.ids, skip_special_tokens=False) == hf.decode(b.ids, skip_special_tokens=False)
    assert tok.encode("x", add_special_tokens=False).ids == hf.encode("x", add_special_tokens=False).ids


def test_bpe_truncation_and_padding_equal_hf(gpt2, hf_gpt2, paragraphs):
    texts = paragraphs[:20]
    gpt2.enable_truncation(16, direction="left")
    hf_gpt2.enable_truncation(16, direction="left")
    gpt2.enable_padding(pad_token="<|endoftext|>", direction="left")
    hf_gpt2.enable_padding(pad_id=50256, pad_token="<|endoftext|>", direction="left")
    try:
        for a, b in zip(gpt2.encode_batch(texts + ["short"]), hf_gpt2.encode_batch(texts + ["short"])):
            assert (a.ids, a.attention_mask, a.offsets) == (b.ids, b.attention_mask, b.offsets)
    finally:
        gpt2.no_truncation()
        gpt2.no_padding()
        hf_gpt2.no_truncation()
        hf_gpt2.no_padding()
    with pytest.raises(ValueError, match="no padding token"):
        gpt2.enable_padding()
    with pytest.raises(ValueError, match="WordPiece"):
        gpt2.encode("a", "b")


def test_decode_round_trips(gpt2, corpus):
    ids = gpt2.encode(corpus[:50_000]).ids
    assert gpt2.decode(ids) == corpus[:50_000]
    assert gpt2.decode_batch([ids[:10], ids[10:20]]) == [gpt2.decode(ids[:10]), gpt2.decode(ids[10:20])]
    assert gpt2.decode([50256, 31373], skip_special_tokens=True) == "hello"
    with pytest.raises(ValueError, match="out of range"):
        gpt2.decode([60000])


def test_train_a_vocabulary(tmp_path, corpus):
    text = tmp_path / "text.txt"
    text.write_text(corpus[:200_000], encoding="utf-8")
    bpe = lmkit.Tokenizer.train([text], kind="bpe", vocab_size=600)
    assert bpe.kind == "bpe" and bpe.get_vocab_size() == 600
    sample = corpus[200_000:210_000]
    assert bpe.decode(bpe.encode(sample).ids) == sample
    bpe.save(tmp_path / "bpe")
    again = lmkit.Tokenizer.from_file(tmp_path / "bpe" / "tokenizer.json")
    assert again.encode(sample).ids == bpe.encode(sample).ids
    # HF tokenizers reads what lmkit writes, with the same ids.
    from tokenizers import Tokenizer as HF

    assert HF.from_file(str(tmp_path / "bpe" / "tokenizer.json")).encode(sample).ids == bpe.encode(sample).ids
    wp = lmkit.Tokenizer.train_from_iterator(corpus[:200_000].splitlines(), kind="wordpiece", vocab_size=800)
    assert wp.kind == "wordpiece" and wp.get_vocab_size() <= 800
    wp.save(tmp_path / "wp")
    hf_wp = HF.from_file(str(tmp_path / "wp" / "tokenizer.json"))
    assert hf_wp.encode(sample).ids == wp.encode(sample).ids


def test_errors_are_python_exceptions(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.setenv(var, str(tmp_path))
    with pytest.raises(FileNotFoundError):
        lmkit.Tokenizer.from_file(tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError):
        lmkit.Tokenizer.from_pretrained(str(tmp_path / "nothing"))
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError):
        lmkit.Tokenizer.from_file(bad)
    with pytest.raises(ValueError, match="kind"):
        lmkit.Tokenizer.train_from_iterator(["a"], kind="unigram")
    with pytest.raises(ValueError, match="cl100k_base"):
        tiktoken_compat.get_encoding("cl200k")


def test_fixture_tokenizer_loads(gpt2_dir):
    # A model folder's tokenizer (GPT-2 fixture with its own small vocabulary).
    tok = lmkit.Tokenizer.from_pretrained(str(FIXTURES / "gpt2-zeroshot"))
    assert tok.kind == "bpe" and tok.get_vocab_size() > 0

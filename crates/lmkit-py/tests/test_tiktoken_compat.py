"""lmkit.tiktoken_compat against tiktoken itself for every OpenAI encoding:
tiktoken's own constructors (tiktoken_ext.openai_public) on the rank files
the tiktoken-rs crate ships, read locally and checked against the hashes
tiktoken expects, so both sides use the official vocabularies. (tiktoken's
own test suite runs against the compat module in
scripts/check_tiktoken_suite.py.)"""

import glob
import hashlib
import os
import pathlib
import pickle

import pytest

from lmkit import tiktoken_compat

from conftest import GPT2_DIR, need

NAMES = tiktoken_compat.list_encoding_names()

# Long runs without spaces, mixed scripts, emoji, lone surrogates, specials.
ADVERSARIAL = [
    "",
    "x" * 20_000,
    "ab" * 5_000 + "1" * 3_000,
    " " * 2_000 + "\n" * 2_000 + "\t x",
    "HELLOworld helloWorld I'M don't 'S 'ſ  \r\n\r\n//!\n/",
    "Ελληνικά Русский עברית العربية हिन्दी ไทย 漢字かなカナ한국어 e\u0301\u0301",
    "😀👍🏽👨‍👩‍👧‍👦🇫🇷 ❤️" * 50,
    "lone \ud83d surrogate \udc4d and pair \ud83d\udc4d",
    "<|endoftext|><|fim_prefix|><|endofprompt|><|start|> <|reserved_200018|>",
    "\u0000\u001b[31m\u007f\u0085\u00a0\u2028\u3000\ufeff",
]


def rank_file(name):
    """The tiktoken-rs crate's copy of `name`, as cargo unpacked it."""
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    found = glob.glob(os.path.join(home, "registry/src/*/tiktoken-rs-0.12.1/assets", name))
    if not found:
        raise FileNotFoundError(f"{name} of tiktoken-rs 0.12.1 is not in {home}: build lmkit first")
    return found[0]


@pytest.fixture(scope="module")
def reference(monkeypatch_module):
    """tiktoken's Encoding of each name, offline."""
    import tiktoken
    import tiktoken_ext.openai_public as public

    def load_tiktoken_bpe(url, expected_hash=None):
        path = rank_file(url.rsplit("/", 1)[1])
        data = pathlib.Path(path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == expected_hash, path
        return tiktoken.load.load_tiktoken_bpe(path, expected_hash)

    def data_gym(vocab_bpe_file, encoder_json_file, **_):
        return tiktoken.load.data_gym_to_mergeable_bpe_ranks(
            str(need(GPT2_DIR / "merges.txt")), str(need(GPT2_DIR / "vocab.json"))
        )

    monkeypatch_module.setattr(public, "load_tiktoken_bpe", load_tiktoken_bpe)
    monkeypatch_module.setattr(public, "data_gym_to_mergeable_bpe_ranks", data_gym)
    return {n: tiktoken.Encoding(**public.ENCODING_CONSTRUCTORS[n]()) for n in NAMES}


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.mark.parametrize("name", NAMES)
def test_ids_equal_tiktoken(name, reference, corpus, paragraphs):
    ours, theirs = tiktoken_compat.get_encoding(name), reference[name]
    assert ours.encode_ordinary(corpus) == theirs.encode_ordinary(corpus)
    assert ours.encode_batch(paragraphs[:500]) == theirs.encode_batch(paragraphs[:500])
    for text in ADVERSARIAL:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), text[:40]
        kw = dict(allowed_special="all")
        assert ours.encode(text, **kw) == theirs.encode(text, **kw), text[:40]
        b = text.encode("utf-8", "surrogatepass")
        assert ours._encode_bytes(b) == theirs._encode_bytes(b), text[:40]


@pytest.mark.parametrize("name", NAMES)
def test_vocabulary_equals_tiktoken(name, reference):
    ours, theirs = tiktoken_compat.get_encoding(name), reference[name]
    assert ours._special_tokens == theirs._special_tokens
    assert ours._pat_str == theirs._pat_str
    assert ours.n_vocab == theirs.n_vocab and ours.max_token_value == theirs.max_token_value
    assert ours._mergeable_ranks == theirs._mergeable_ranks
    assert ours.token_byte_values() == theirs.token_byte_values()
    for t in [0, 255, 1000, ours.n_vocab - 1]:
        assert ours.decode_single_token_bytes(t) == theirs.decode_single_token_bytes(t)
    assert ours.encode_single_token(b"\xa1") == theirs.encode_single_token(b"\xa1")
    ids = theirs.encode("héllo wörld 東京 😀")
    assert ours.decode_with_offsets(ids) == theirs.decode_with_offsets(ids)


def test_errors_and_custom_encodings():
    enc = tiktoken_compat.get_encoding("cl100k_base")
    with pytest.raises(KeyError):
        enc.decode_single_token_bytes(100_261)  # a hole in cl100k's ids
    with pytest.raises(KeyError):
        enc.encode_single_token("not one token")
    with pytest.raises(ValueError, match="disallowed special token"):
        enc.encode("<|endoftext|>")
    assert enc.encode_to_numpy("hello world").tolist() == [15339, 1917]
    custom = tiktoken_compat.Encoding(
        "custom", pat_str=enc._pat_str, mergeable_ranks=enc._mergeable_ranks,
        special_tokens={"<|x|>": 200_000},
    )
    again = pickle.loads(pickle.dumps(custom))
    assert again.encode("hi <|x|>", allowed_special="all") == [6151, 220, 200_000]
    assert pickle.loads(pickle.dumps(enc)) is not None
    with pytest.raises(ValueError, match="is invalid"):
        tiktoken_compat.Encoding("bad", pat_str=r"(\w+", mergeable_ranks={}, special_tokens={})
    assert tiktoken_compat.encoding_for_model("gpt-4o").name == "o200k_base"


def test_custom_patterns_run_on_fancy_regex(reference):
    """A pat_str with no scanner: tiktoken's ids. cl100k's pattern, wrapped
    so it is not the scanner's text, gives the scanner's ids."""
    import tiktoken

    base = reference["cl100k_base"]
    texts = ADVERSARIAL + ["hello  world\n\n  x", "a\u00a0b  \t"]
    for pat in [r"\S+|\s+", "(?:" + base._pat_str + ")"]:
        kw = dict(pat_str=pat, mergeable_ranks=base._mergeable_ranks, special_tokens=base._special_tokens)
        ours, theirs = tiktoken_compat.Encoding("c", **kw), tiktoken.Encoding("c", **kw)
        assert ours._pat_str == pat
        for text in texts:
            assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")
    ours = tiktoken_compat.Encoding("c", **kw)
    assert ours.encode_ordinary(texts[4]) == tiktoken_compat.get_encoding("cl100k_base").encode_ordinary(texts[4])


@pytest.mark.parametrize("name", ["gpt2", "cl100k_base", "o200k_base"])
def test_encode_with_unstable_equals_tiktoken(name, reference):
    ours, theirs = tiktoken_compat.get_encoding(name), reference[name]
    for text in ["hello fanta", "hello wor", "x = 1 +", "hello\n\n", "word  ", "<|endoftext|>", "ab<|endoftext|>c",
                 "Ελλην", "日本", "", " ", "don'"]:
        kw = dict(allowed_special="all")
        stable, completions = ours.encode_with_unstable(text, **kw)
        want_stable, want = theirs.encode_with_unstable(text, **kw)
        assert stable == want_stable, text
        assert sorted(map(tuple, completions)) == sorted(map(tuple, want)), text
    with pytest.raises(ValueError, match="disallowed special token"):
        ours.encode_with_unstable("<|endoftext|>")


def test_id_lists_are_the_callers_own():
    """Id lists share the tokenizer's int objects (one per vocabulary id):
    each call still returns a new, plain list of ints, special ids too, that
    the caller may change without touching the next result."""
    enc = tiktoken_compat.get_encoding("cl100k_base")
    text = "hello world, " * 2_000 + "<|endoftext|>"
    a = enc.encode(text, allowed_special="all")
    assert type(a) is list and all(type(x) is int for x in a)
    assert a[-1] == enc.eot_token
    want = list(a)
    a[0] = -1
    a.append(7)
    assert enc.encode(text, allowed_special="all") == want
    batch = enc.encode_ordinary_batch([text, "x"])
    assert type(batch) is list and [type(b) for b in batch] == [list, list]
    assert batch[0] == enc.encode_ordinary(text) and batch[1] == enc.encode_ordinary("x")


@pytest.mark.parametrize("name", ["r50k_base", "cl100k_base", "o200k_base"])
def test_texts_passed_as_they_are_equal_tiktoken(name, reference):
    """The str goes to the tokenizer as it is (its UTF-8 borrowed from it),
    and only a text with lone surrogates is made UTF-8 first, tiktoken's
    way (a pair becomes its character, a lone one U+FFFD): surrogates
    short and past the 4 KiB that releases the GIL, at either end, in one
    text of a batch, beside special-token text; ASCII, two-, three- and
    four-byte texts (each a different str layout in CPython); a str
    subclass; and a text encoded twice (CPython keeps its UTF-8)."""
    ours, theirs = tiktoken_compat.get_encoding(name), reference[name]

    class Str(str):
        pass

    long = "pair \ud83d\udc4d lone \ud83d x " * 400
    texts = [
        "\ud83d", "\udc4d", "a\ud83d\udc4db", "\ud83d\ud83d", "\udc4d\ud83d", "x\ud800",
        "\udfff<|endoftext|>", long, "é" * 5_000 + "\ud800", "\ud800" + "😀" * 2_000,
        "plain ascii " * 500, "ünïcödé " * 700, "漢字かな " * 900, "😀 x " * 1_500, Str("sub class é"),
    ]
    for text in texts:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), text[:20]
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), "again: " + text[:20]
        kw = dict(allowed_special="all")
        assert ours.encode(text, **kw) == theirs.encode(text, **kw), text[:20]
        assert ours.encode(text, disallowed_special=()) == theirs.encode(text, disallowed_special=())
    with pytest.raises(ValueError, match="disallowed special token"):
        ours.encode("\ud83d <|endoftext|>")
    assert ours.encode_ordinary_batch(texts) == theirs.encode_ordinary_batch(texts)
    assert ours.encode_batch(texts, allowed_special="all") == theirs.encode_batch(texts, allowed_special="all")
    # Any iterable of texts, as tiktoken's thread pool takes.
    assert ours.encode_ordinary_batch(t for t in texts) == theirs.encode_ordinary_batch(texts)
    assert ours.encode_batch(tuple(texts[:3])) == theirs.encode_batch(list(texts[:3]))
    with pytest.raises(TypeError):
        ours.encode_ordinary(b"bytes")


@pytest.mark.parametrize("name", ["gpt2", "o200k_base"])
def test_encode_to_numpy_equals_tiktoken(name, reference, corpus):
    """The ids straight into a uint32 array (no list): tiktoken's values,
    specials allowed or refused as in `encode`; a text with lone surrogates
    is made UTF-8 as `encode` does (tiktoken raises UnicodeEncodeError)."""
    import numpy as np

    ours, theirs = tiktoken_compat.get_encoding(name), reference[name]
    for text in ["", "hello world", corpus[:50_000], "x<|endoftext|>y"]:
        kw = dict(allowed_special="all")
        got = ours.encode_to_numpy(text, **kw)
        assert got.dtype == np.uint32 and got.ndim == 1
        assert np.array_equal(got, theirs.encode_to_numpy(text, **kw)), text[:20]
    with pytest.raises(ValueError, match="disallowed special token"):
        ours.encode_to_numpy("<|endoftext|>")
    text = "pair \ud83d\udc4d lone \ud83d"
    assert ours.encode_to_numpy(text).tolist() == theirs.encode(text)

"""Shared inputs of the Python package's tests: the repository's real text,
GPT-2's vocabulary and MiniLM (scripts/fetch-assets.sh puts them in assets/),
the committed HF fixtures, and the peers built from the same files."""

import json
import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
ASSETS = ROOT / "assets"
FIXTURES = ROOT / "tests" / "fixtures"
GPT2_DIR = ASSETS / "gpt2"
MINILM_DIR = ASSETS / "minilm"


def need(path):
    """A required input: missing assets are an error that says how to make them, never a skip."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run scripts/fetch-assets.sh")
    return path


def read_safetensors(path):
    """{name: numpy array} of a safetensors file (F32 / I64), without the safetensors package."""
    data = pathlib.Path(path).read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    out = {}
    dtypes = {"F32": np.float32, "I64": np.int64}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        buf = data[8 + n + a : 8 + n + b]
        out[name] = np.frombuffer(buf, dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


@pytest.fixture(scope="session")
def corpus():
    """The Rust books' text: 1 MB of it, and its paragraphs."""
    text = need(ASSETS / "books" / "corpus.txt").read_text(encoding="utf-8")[:1_000_000]
    return text


@pytest.fixture(scope="session")
def paragraphs(corpus):
    return [p for p in corpus.split("\n\n") if p.strip()][:3000]


@pytest.fixture(scope="session")
def tiktoken_gpt2():
    """tiktoken's own "gpt2" Encoding (tiktoken_ext's pattern and special
    token) on GPT-2's vocab.bpe / encoder.json as the tiktoken-rs crate ships
    them (assets/gpt2), read locally: tiktoken would download them."""
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str

    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=str(need(GPT2_DIR / "merges.txt")),
        encoder_json_file=str(need(GPT2_DIR / "vocab.json")),
    )
    return tiktoken.Encoding(
        name="gpt2",
        explicit_n_vocab=50257,
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
    )


@pytest.fixture(scope="session")
def hf_gpt2():
    """HF tokenizers' GPT-2 (as GPT2TokenizerFast builds it: byte-level BPE,
    no prefix space, offsets not trimmed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    tok = Tokenizer(models.BPE.from_file(str(need(GPT2_DIR / "vocab.json")), str(GPT2_DIR / "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


@pytest.fixture(scope="session")
def hf_minilm():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(need(MINILM_DIR / "tokenizer.json")))


@pytest.fixture(scope="session")
def gpt2_dir():
    return str(need(GPT2_DIR))


@pytest.fixture(scope="session")
def minilm_dir():
    return str(need(MINILM_DIR))


def pytest_configure(config):
    os.environ.setdefault("RAYON_NUM_THREADS", "2")

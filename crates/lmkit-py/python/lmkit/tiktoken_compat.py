"""tiktoken's `Encoding` on lmkit's byte-level BPE: code written for
tiktoken's GPT-2 encoding runs by changing its import.

    from lmkit import tiktoken_compat as tiktoken
    enc = tiktoken.get_encoding("gpt2")
    enc.encode("hello <|endoftext|>", allowed_special="all")

tiktoken downloads GPT-2's files on first use; lmkit has no network of its
own, so `get_encoding` reads them from the first of: the `path` argument,
the folder named by `$LMKIT_GPT2_TOKENIZER`, or GPT-2's tokenizer in the
local Hugging Face cache (`gpt2` / `openai-community/gpt2`, as transformers
leaves it). The ids are tiktoken's, id for id.
"""

import os
from typing import AbstractSet, Collection, List, Literal, Optional, Sequence, Union

from ._lmkit import Tokenizer

__all__ = ["Encoding", "get_encoding", "encoding_for_model", "list_encoding_names"]

_NAMES = ("gpt2", "r50k_base")


class Encoding:
    """tiktoken's `Encoding` API over an `lmkit.Tokenizer` (byte-level BPE)."""

    def __init__(self, name: str, tokenizer: Tokenizer):
        if tokenizer.kind != "bpe":
            raise ValueError("tiktoken encodings are byte-level BPE")
        self.name = name
        self._tok = tokenizer
        self._special = {t: tokenizer.token_to_id(t) for t in tokenizer.special_tokens}

    def __repr__(self) -> str:
        return f"<Encoding {self.name!r}>"

    # -- encoding ---------------------------------------------------------

    def encode_ordinary(self, text: str) -> List[int]:
        """Ids of `text`, special-token text encoded as ordinary text."""
        return self._tok.encode_ids(text, allowed_special=(), disallowed_special=())

    def encode(
        self,
        text: str,
        *,
        allowed_special: Union[Literal["all"], AbstractSet[str]] = set(),  # noqa: B006
        disallowed_special: Union[Literal["all"], Collection[str]] = "all",
    ) -> List[int]:
        """Ids of `text`; special-token text is a special token when
        allowed, a `ValueError` when disallowed (by default every one)."""
        return self._tok.encode_ids(
            text,
            allowed_special=allowed_special,
            disallowed_special=disallowed_special,
            tiktoken_defaults=True,
        )

    def encode_ordinary_batch(self, text: List[str], *, num_threads: int = 8) -> List[List[int]]:
        """`encode_ordinary` of each text, on all cores (`num_threads` is
        accepted for tiktoken's signature; lmkit uses its thread pool)."""
        return self._tok.encode_ids_batch(text, allowed_special=(), disallowed_special=())

    def encode_batch(
        self,
        text: List[str],
        *,
        num_threads: int = 8,
        allowed_special: Union[Literal["all"], AbstractSet[str]] = set(),  # noqa: B006
        disallowed_special: Union[Literal["all"], Collection[str]] = "all",
    ) -> List[List[int]]:
        """`encode` of each text, on all cores with the GIL released."""
        return self._tok.encode_ids_batch(
            text,
            allowed_special=allowed_special,
            disallowed_special=disallowed_special,
            tiktoken_defaults=True,
        )

    def encode_single_token(self, text_or_bytes: Union[str, bytes]) -> int:
        """The id of a text that is exactly one token (else `KeyError`)."""
        if isinstance(text_or_bytes, str):
            text_or_bytes = text_or_bytes.encode("utf-8")
        text = text_or_bytes.decode("utf-8", errors="surrogateescape")
        if text in self._special:
            return self._special[text]
        try:
            ids = self.encode_ordinary(text_or_bytes.decode("utf-8"))
        except UnicodeDecodeError:
            ids = []
        if len(ids) != 1:
            raise KeyError(text_or_bytes)
        return ids[0]

    # -- decoding ---------------------------------------------------------

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return self._tok.decode_bytes(list(tokens))

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors=errors)

    def decode_single_token_bytes(self, token: int) -> bytes:
        return self._tok.decode_bytes([token])

    def decode_tokens_bytes(self, tokens: Sequence[int]) -> List[bytes]:
        return [self.decode_single_token_bytes(t) for t in tokens]

    def decode_batch(
        self, batch: Sequence[Sequence[int]], *, errors: str = "replace", num_threads: int = 8
    ) -> List[str]:
        if errors == "replace":
            return self._tok.decode_batch([list(b) for b in batch])
        return [self.decode(b, errors=errors) for b in batch]

    def decode_bytes_batch(self, batch: Sequence[Sequence[int]], *, num_threads: int = 8) -> List[bytes]:
        return [self.decode_bytes(b) for b in batch]

    # -- vocabulary -------------------------------------------------------

    @property
    def eot_token(self) -> int:
        return self._special["<|endoftext|>"]

    @property
    def special_tokens_set(self) -> AbstractSet[str]:
        return set(self._special)

    @property
    def n_vocab(self) -> int:
        return self._tok.get_vocab_size()

    @property
    def max_token_value(self) -> int:
        return self.n_vocab - 1

    def is_special_token(self, token: int) -> bool:
        return token in self._special.values()


def _gpt2_tokenizer(path: Optional[Union[str, os.PathLike]]) -> Tokenizer:
    tried = []
    candidates = []
    if path is not None:
        candidates.append(os.fspath(path))
    if os.environ.get("LMKIT_GPT2_TOKENIZER"):
        candidates.append(os.environ["LMKIT_GPT2_TOKENIZER"])
    candidates += ["gpt2", "openai-community/gpt2"]
    for c in candidates:
        try:
            return Tokenizer.from_pretrained(c)
        except FileNotFoundError as e:
            tried.append(f"{c}: {e}")
    raise FileNotFoundError(
        "GPT-2's tokenizer files (vocab.json + merges.txt, or tokenizer.json) were not found; "
        "pass path=FOLDER or set LMKIT_GPT2_TOKENIZER. Tried:\n  " + "\n  ".join(tried)
    )


def get_encoding(encoding_name: str, *, path: Optional[Union[str, os.PathLike]] = None) -> Encoding:
    """tiktoken's `get_encoding` for "gpt2" (= "r50k_base")."""
    if encoding_name not in _NAMES:
        raise ValueError(
            f"Unknown encoding {encoding_name}. lmkit's tiktoken_compat has: {', '.join(_NAMES)}"
        )
    return Encoding(encoding_name, _gpt2_tokenizer(path))


def encoding_for_model(model_name: str, *, path: Optional[Union[str, os.PathLike]] = None) -> Encoding:
    """The encoding of a GPT-2-vocabulary model ("gpt2", "davinci", ...)."""
    if model_name.startswith("gpt2") or model_name in ("davinci", "curie", "babbage", "ada"):
        return get_encoding("gpt2", path=path)
    raise KeyError(f"Could not automatically map {model_name} to an lmkit encoding (GPT-2's only).")


def list_encoding_names() -> List[str]:
    return list(_NAMES)

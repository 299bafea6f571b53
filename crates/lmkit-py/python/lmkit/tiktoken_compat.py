"""tiktoken's API on lmkit's byte-level BPE: code written for tiktoken runs
by changing its import, with the same ids for every OpenAI encoding.

    from lmkit import tiktoken_compat as tiktoken
    enc = tiktoken.get_encoding("cl100k_base")
    enc.encode("hello <|endoftext|>", allowed_special="all")

The encodings ("gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base",
"o200k_base", "o200k_harmony") are built into the wheel from the rank files
the tiktoken-rs crate ships: nothing is downloaded. `Encoding(name,
pat_str=..., mergeable_ranks=..., special_tokens=...)` builds a custom one:
tiktoken's r50k/p50k, cl100k and o200k patterns run on lmkit's hand-written
scanners; any other `pat_str` is evaluated by fancy-regex (the engine
tiktoken uses): the same ids, several times slower. A pattern that does not
compile is a `ValueError`, as in tiktoken.

Not quite tiktoken: `encode_with_unstable` returns its completions sorted
(tiktoken's come from a set, in no order).
"""

import bisect
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import AbstractSet, Collection, Dict, List, Literal, Optional, Sequence, Tuple, Union

from ._lmkit import Tokenizer

__all__ = [
    "Encoding",
    "get_encoding",
    "encoding_for_model",
    "encoding_name_for_model",
    "list_encoding_names",
]

_NAMES = tuple(Tokenizer.tiktoken_encodings())

Specials = Union[Literal["all"], AbstractSet[str]]


def _utf8_safe(text: str) -> str:
    """tiktoken's rule for text with lone surrogates: through UTF-16 with
    them replaced (a valid surrogate pair becomes its character)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _fix_surrogates(text)


def _fix_surrogates(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _all_space(token: bytes) -> bool:
    """tiktoken's `token_is_all_space` (on an ordinary token's bytes)."""
    return bool(token) and all(b in b" \n\t" for b in token)


# Rust's `char::is_whitespace` (Unicode White_Space), which tiktoken uses.
_WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
)


def _last_char_size(data: bytes) -> int:
    """Bytes of the UTF-8 character `data` ends with (0 if it ends with none)."""
    for k in range(1, min(4, len(data)) + 1):
        try:
            if len(data[-k:].decode("utf-8")) == 1:
                return k
        except UnicodeDecodeError:
            continue
    return 0


class Encoding:
    """tiktoken's `Encoding` over an `lmkit.Tokenizer` (byte-level BPE)."""

    def __init__(
        self,
        name: str,
        *,
        pat_str: str,
        mergeable_ranks: Dict[bytes, int],
        special_tokens: Dict[str, int],
        explicit_n_vocab: Optional[int] = None,
    ):
        tok = Tokenizer.from_tiktoken_ranks(
            list(mergeable_ranks.items()), list(special_tokens.items()), pat_str
        )
        if explicit_n_vocab:
            assert len(mergeable_ranks) + len(special_tokens) == explicit_n_vocab
            assert tok.get_vocab_size() == explicit_n_vocab
        self._init(name, tok)
        self.__dict__["_mergeable_ranks"] = mergeable_ranks

    def _init(self, name: str, tok: Tokenizer) -> None:
        if tok.kind != "bpe":
            raise ValueError("tiktoken encodings are byte-level BPE")
        self.name = name
        self._tok = tok
        self._special_tokens: Dict[str, int] = dict(tok.tiktoken_special_tokens())
        self._special_token_values = set(self._special_tokens.values())
        self.max_token_value = tok.get_vocab_size() - 1

    @classmethod
    def _of(cls, name: str, tok: Tokenizer) -> "Encoding":
        enc = cls.__new__(cls)
        enc._init(name, tok)
        return enc

    def __repr__(self) -> str:
        return f"<Encoding {self.name!r}>"

    @property
    def _pat_str(self) -> str:
        return self._tok.tiktoken_pattern

    @functools.cached_property
    def _mergeable_ranks(self) -> Dict[bytes, int]:
        return dict(self._tok.ordinary_tokens())

    # -- encoding ---------------------------------------------------------

    def encode_ordinary(self, text: str) -> List[int]:
        """Ids of `text`, special-token text encoded as ordinary text."""
        # As tiktoken: the text as it is, and only a text that is not UTF-8
        # (lone surrogates: a UnicodeEncodeError) made so and passed again.
        try:
            return self._tok.encode_ids(text, allowed_special=(), disallowed_special=())
        except UnicodeEncodeError:
            text = _fix_surrogates(text)
            return self._tok.encode_ids(text, allowed_special=(), disallowed_special=())

    def encode(
        self,
        text: str,
        *,
        allowed_special: Specials = set(),  # noqa: B006
        disallowed_special: Union[Literal["all"], Collection[str]] = "all",
    ) -> List[int]:
        """Ids of `text`; special-token text is a special token when
        allowed, a `ValueError` when disallowed (by default every one)."""
        kw = dict(allowed_special=allowed_special, disallowed_special=disallowed_special, tiktoken_defaults=True)
        try:
            return self._tok.encode_ids(text, **kw)
        except UnicodeEncodeError:
            return self._tok.encode_ids(_fix_surrogates(text), **kw)

    def encode_to_numpy(
        self,
        text: str,
        *,
        allowed_special: Specials = set(),  # noqa: B006
        disallowed_special: Union[Literal["all"], Collection[str]] = "all",
    ):
        """`encode` as a numpy array of uint32 (made from the ids directly,
        no list between)."""
        kw = dict(allowed_special=allowed_special, disallowed_special=disallowed_special, tiktoken_defaults=True)
        try:
            return self._tok.encode_ids_numpy(text, **kw)
        except UnicodeEncodeError:
            return self._tok.encode_ids_numpy(_fix_surrogates(text), **kw)

    def encode_ordinary_batch(self, text: List[str], *, num_threads: int = 8) -> List[List[int]]:
        """`encode_ordinary` of each text, on all cores (`num_threads` is
        accepted for tiktoken's signature; lmkit uses its thread pool)."""
        text = text if type(text) is list else list(text)
        try:
            return self._tok.encode_ids_batch(text, allowed_special=(), disallowed_special=())
        except UnicodeEncodeError:
            texts = [_utf8_safe(t) for t in text]
            return self._tok.encode_ids_batch(texts, allowed_special=(), disallowed_special=())

    def encode_batch(
        self,
        text: List[str],
        *,
        num_threads: int = 8,
        allowed_special: Specials = set(),  # noqa: B006
        disallowed_special: Union[Literal["all"], Collection[str]] = "all",
    ) -> List[List[int]]:
        """`encode` of each text, on all cores with the GIL released."""
        kw = dict(allowed_special=allowed_special, disallowed_special=disallowed_special, tiktoken_defaults=True)
        text = text if type(text) is list else list(text)
        try:
            return self._tok.encode_ids_batch(text, **kw)
        except UnicodeEncodeError:
            return self._tok.encode_ids_batch([_utf8_safe(t) for t in text], **kw)

    def encode_with_unstable(
        self,
        text: str,
        *,
        allowed_special: Specials = set(),  # noqa: B006
        disallowed_special: Union[Literal["all"], Collection[str]] = "all",
    ) -> Tuple[List[int], List[List[int]]]:
        """The stable ids of `text` and the id sequences its unstable end
        (the last piece, with the all-space tokens before it) could become
        once more text follows: tiktoken's algorithm, step for step. The
        sequences are in sorted order (tiktoken's are a set's, unordered)."""
        tokens = self.encode(text, allowed_special=allowed_special, disallowed_special=disallowed_special)
        if allowed_special == "all":
            allowed_special = self.special_tokens_set
        allowed = [self._special_tokens[s] for s in allowed_special if s in self._special_tokens]
        last = self._tok.tiktoken_last_piece_token_len(_utf8_safe(text), allowed)
        if last == 0:
            return tokens, []
        if _all_space(self._token_bytes(tokens[-last])):
            while last < len(tokens) and _all_space(self._token_bytes(tokens[-last - 1])):
                last += 1
        unstable = self.decode_bytes(tokens[-last:])
        del tokens[-last:]
        completions = set()
        if not unstable:
            return tokens, []
        ranks, sorted_bytes = self._mergeable_ranks, self._sorted_token_bytes
        point = bisect.bisect_left(sorted_bytes, unstable)
        while point < len(sorted_bytes) and sorted_bytes[point].startswith(unstable):
            completions.add((ranks[sorted_bytes[point]],))
            point += 1
        for i in range(1, len(unstable)):
            prefix, suffix = unstable[:i], unstable[i:]
            point = bisect.bisect_left(sorted_bytes, suffix)
            while point < len(sorted_bytes) and sorted_bytes[point].startswith(suffix):
                possibility = prefix + sorted_bytes[point]
                try:
                    encoded = self.encode_ordinary(possibility.decode("utf-8"))
                except UnicodeDecodeError:
                    encoded = self._tok.byte_pair_encode(possibility)
                seq, seq_len = [], 0
                for token in encoded:
                    seq.append(token)
                    seq_len += len(self._token_bytes(token))
                    if seq_len >= len(unstable):
                        break
                completions.add(tuple(seq))
                point += 1
        if len(unstable) > 1:
            size = _last_char_size(unstable)
            if size and len(unstable) - size > 0 and unstable[-size:].decode("utf-8") in _WHITE_SPACE:
                head, tail = unstable[:-size], unstable[-size:]
                completions.add(tuple(self._tok.byte_pair_encode(head) + self._tok.byte_pair_encode(tail)))
        return tokens, [list(c) for c in sorted(completions)]

    def _token_bytes(self, token: int) -> bytes:
        return self._tok.token_bytes(token) or b""

    @functools.cached_property
    def _sorted_token_bytes(self) -> List[bytes]:
        return self.token_byte_values()

    def encode_single_token(self, text_or_bytes: Union[str, bytes]) -> int:
        """The id of the bytes (or text) of exactly one token, special
        tokens included; `KeyError` otherwise."""
        if isinstance(text_or_bytes, str):
            text_or_bytes = text_or_bytes.encode("utf-8")
        token = self._tok.bytes_to_id(text_or_bytes)
        if token is None:
            raise KeyError(text_or_bytes)
        return token

    def _encode_single_piece(self, text_or_bytes: Union[str, bytes]) -> List[int]:
        if isinstance(text_or_bytes, str):
            text_or_bytes = text_or_bytes.encode("utf-8")
        return self._tok.encode_single_piece(text_or_bytes)

    def _encode_only_native_bpe(self, text: str) -> List[int]:
        import regex

        ret = []
        for piece in regex.findall(regex.compile(self._pat_str), text):
            ret.extend(self._tok.encode_single_piece(piece.encode("utf-8")))
        return ret

    def _encode_bytes(self, text: bytes) -> List[int]:
        return self._tok.encode_bytes_tiktoken(text)

    # -- decoding ---------------------------------------------------------

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        try:
            return self._tok.decode_bytes(list(tokens))
        except ValueError as e:
            raise KeyError(str(e)) from None

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors=errors)

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one token (a special token's text); `KeyError` for
        an id that is no token."""
        out = self._tok.token_bytes(token) if 0 <= token < 2**32 else None
        if out is None:
            raise KeyError(token)
        return out

    def decode_tokens_bytes(self, tokens: Sequence[int]) -> List[bytes]:
        return [self.decode_single_token_bytes(t) for t in tokens]

    def decode_with_offsets(self, tokens: Sequence[int]) -> Tuple[str, List[int]]:
        """The text and, per token, the index of the first character holding
        its bytes (tiktoken's rule: raises on invalid UTF-8)."""
        token_bytes = self.decode_tokens_bytes(tokens)
        text_len = 0
        offsets = []
        for token in token_bytes:
            offsets.append(max(0, text_len - (0x80 <= token[0] < 0xC0)))
            text_len += sum(1 for c in token if not 0x80 <= c < 0xC0)
        text = b"".join(token_bytes).decode("utf-8", errors="strict")
        return text, offsets

    def decode_batch(
        self, batch: Sequence[Sequence[int]], *, errors: str = "replace", num_threads: int = 8
    ) -> List[str]:
        return [b.decode("utf-8", errors=errors) for b in self.decode_bytes_batch(batch)]

    def decode_bytes_batch(
        self, batch: Sequence[Sequence[int]], *, num_threads: int = 8
    ) -> List[bytes]:
        return [self.decode_bytes(b) for b in batch]

    # -- vocabulary -------------------------------------------------------

    def token_byte_values(self) -> List[bytes]:
        """Every ordinary token's bytes, sorted (as tiktoken returns them)."""
        return sorted(b for b, _ in self._tok.ordinary_tokens())

    @property
    def eot_token(self) -> int:
        return self._special_tokens["<|endoftext|>"]

    @functools.cached_property
    def special_tokens_set(self) -> AbstractSet[str]:
        return set(self._special_tokens)

    def is_special_token(self, token: int) -> bool:
        assert isinstance(token, int)
        return token in self._special_token_values

    @property
    def n_vocab(self) -> int:
        return self.max_token_value + 1

    # -- pickling ---------------------------------------------------------

    def __getstate__(self) -> object:
        # Built-in encodings by name, as tiktoken pickles registered ones.
        if _ENCODINGS.get(self.name) is self:
            return self.name
        return {
            "name": self.name,
            "pat_str": self._pat_str,
            "mergeable_ranks": self._mergeable_ranks,
            "special_tokens": self._special_tokens,
        }

    def __setstate__(self, value: object) -> None:
        if isinstance(value, str):
            self.__dict__ = get_encoding(value).__dict__
            return
        self.__init__(**value)


_ENCODINGS: Dict[str, Encoding] = {}


def get_encoding(encoding_name: str) -> Encoding:
    """One of tiktoken's encodings (see `list_encoding_names`), built in:
    made once per process."""
    if encoding_name not in _ENCODINGS:
        if encoding_name not in _NAMES:
            raise ValueError(
                f"Unknown encoding {encoding_name}.\nPlugins found: ['tiktoken_ext.openai_public']\n"
                f"tiktoken version: 0.14.0 (are you on latest?); lmkit has: {', '.join(_NAMES)}"
            )
        _ENCODINGS[encoding_name] = Encoding._of(encoding_name, Tokenizer.from_tiktoken(encoding_name))
    return _ENCODINGS[encoding_name]


def list_encoding_names() -> List[str]:
    return list(_NAMES)


# tiktoken 0.14's model table (tiktoken/model.py).
MODEL_PREFIX_TO_ENCODING: Dict[str, str] = {
    "o1-": "o200k_base",
    "o3-": "o200k_base",
    "o4-mini-": "o200k_base",
    "gpt-5": "o200k_base",
    "gpt-4.5-": "o200k_base",
    "gpt-4.1-": "o200k_base",
    "chatgpt-4o-": "o200k_base",
    "gpt-4o-": "o200k_base",
    "gpt-4-": "cl100k_base",
    "gpt-3.5-turbo-": "cl100k_base",
    "gpt-35-turbo-": "cl100k_base",
    "gpt-oss-": "o200k_harmony",
    "ft:gpt-4o": "o200k_base",
    "ft:gpt-4": "cl100k_base",
    "ft:gpt-3.5-turbo": "cl100k_base",
    "ft:davinci-002": "cl100k_base",
    "ft:babbage-002": "cl100k_base",
}

MODEL_TO_ENCODING: Dict[str, str] = {
    "o1": "o200k_base",
    "o3": "o200k_base",
    "o4-mini": "o200k_base",
    "gpt-5": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-4o": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5-turbo": "cl100k_base",
    "gpt-3.5": "cl100k_base",
    "gpt-35-turbo": "cl100k_base",
    "davinci-002": "cl100k_base",
    "babbage-002": "cl100k_base",
    "text-embedding-ada-002": "cl100k_base",
    "text-embedding-3-small": "cl100k_base",
    "text-embedding-3-large": "cl100k_base",
    "text-davinci-003": "p50k_base",
    "text-davinci-002": "p50k_base",
    "text-davinci-001": "r50k_base",
    "text-curie-001": "r50k_base",
    "text-babbage-001": "r50k_base",
    "text-ada-001": "r50k_base",
    "davinci": "r50k_base",
    "curie": "r50k_base",
    "babbage": "r50k_base",
    "ada": "r50k_base",
    "code-davinci-002": "p50k_base",
    "code-davinci-001": "p50k_base",
    "code-cushman-002": "p50k_base",
    "code-cushman-001": "p50k_base",
    "davinci-codex": "p50k_base",
    "cushman-codex": "p50k_base",
    "text-davinci-edit-001": "p50k_edit",
    "code-davinci-edit-001": "p50k_edit",
    "text-similarity-davinci-001": "r50k_base",
    "text-similarity-curie-001": "r50k_base",
    "text-similarity-babbage-001": "r50k_base",
    "text-similarity-ada-001": "r50k_base",
    "text-search-davinci-doc-001": "r50k_base",
    "text-search-curie-doc-001": "r50k_base",
    "text-search-babbage-doc-001": "r50k_base",
    "text-search-ada-doc-001": "r50k_base",
    "code-search-babbage-code-001": "r50k_base",
    "code-search-ada-code-001": "r50k_base",
    "gpt2": "gpt2",
    "gpt-2": "gpt2",
}


def encoding_name_for_model(model_name: str) -> str:
    """The encoding of a model (tiktoken's table; `KeyError` if unknown)."""
    if model_name in MODEL_TO_ENCODING:
        return MODEL_TO_ENCODING[model_name]
    for prefix, name in MODEL_PREFIX_TO_ENCODING.items():
        if model_name.startswith(prefix):
            return name
    raise KeyError(
        f"Could not automatically map {model_name} to a tokeniser. "
        "Please use `tiktoken.get_encoding` to explicitly get the tokeniser you expect."
    ) from None


def encoding_for_model(model_name: str) -> Encoding:
    return get_encoding(encoding_name_for_model(model_name))

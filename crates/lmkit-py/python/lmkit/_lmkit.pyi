"""Type stubs of the compiled module (re-exported by `lmkit`)."""

import os
from typing import (
    Any,
    Callable,
    Collection,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy as np
import numpy.typing as npt

__version__: str

_Path = Union[str, "os.PathLike[str]"]
_Specials = Union[Literal["all"], Collection[str]]
_Input = Union[str, Tuple[str, str]]

class Encoding:
    """One encoded input, as HF tokenizers' `Encoding`."""

    @property
    def ids(self) -> List[int]: ...
    @property
    def tokens(self) -> List[str]: ...
    @property
    def offsets(self) -> List[Tuple[int, int]]:
        """Character ranges in the text (a pair's second-text tokens: in that text)."""
    @property
    def byte_offsets(self) -> List[Tuple[int, int]]: ...
    @property
    def type_ids(self) -> List[int]: ...
    @property
    def attention_mask(self) -> List[int]: ...
    @property
    def special_tokens_mask(self) -> List[int]: ...
    def __len__(self) -> int: ...

class Tokenizer:
    """Byte-level BPE (GPT-2) or WordPiece (BERT)."""

    @staticmethod
    def from_file(path: _Path) -> "Tokenizer": ...
    @staticmethod
    def from_pretrained(name_or_path: str) -> "Tokenizer": ...
    @staticmethod
    def from_tiktoken(name: str) -> "Tokenizer": ...
    @staticmethod
    def tiktoken_encodings() -> List[str]: ...
    @staticmethod
    def from_tiktoken_ranks(
        ranks: Sequence[Tuple[bytes, int]], special_tokens: Sequence[Tuple[str, int]], pat_str: str
    ) -> "Tokenizer": ...
    @property
    def tiktoken_pattern(self) -> str: ...
    def tiktoken_special_tokens(self) -> List[Tuple[str, int]]: ...
    def token_bytes(self, id: int) -> Optional[bytes]: ...
    def ordinary_tokens(self) -> List[Tuple[bytes, int]]: ...
    def bytes_to_id(self, token: bytes) -> Optional[int]: ...
    def encode_single_piece(self, piece: bytes) -> List[int]: ...
    def encode_bytes_tiktoken(self, text: bytes) -> List[int]: ...
    @staticmethod
    def train(
        files: Sequence[_Path],
        *,
        kind: Literal["bpe", "wordpiece"] = "bpe",
        vocab_size: Optional[int] = None,
        min_frequency: int = 2,
        special_tokens: Optional[List[str]] = None,
    ) -> "Tokenizer": ...
    @staticmethod
    def train_from_iterator(
        texts: Iterable[str],
        *,
        kind: Literal["bpe", "wordpiece"] = "bpe",
        vocab_size: Optional[int] = None,
        min_frequency: int = 2,
        special_tokens: Optional[List[str]] = None,
    ) -> "Tokenizer": ...
    def save(self, folder: _Path) -> None: ...
    @property
    def kind(self) -> Literal["bpe", "wordpiece"]: ...
    @property
    def special_tokens(self) -> List[str]: ...
    def get_vocab_size(self) -> int: ...
    def token_to_id(self, token: str) -> Optional[int]: ...
    def id_to_token(self, id: int) -> Optional[str]: ...
    def encode(
        self,
        text: str,
        pair: Optional[str] = None,
        *,
        add_special_tokens: bool = True,
        allowed_special: Optional[_Specials] = None,
        disallowed_special: Optional[_Specials] = None,
    ) -> Encoding: ...
    def encode_batch(
        self,
        inputs: Iterable[_Input],
        *,
        add_special_tokens: bool = True,
        allowed_special: Optional[_Specials] = None,
        disallowed_special: Optional[_Specials] = None,
    ) -> List[Encoding]: ...
    def encode_ids(
        self,
        text: str,
        *,
        add_special_tokens: bool = True,
        allowed_special: Optional[_Specials] = None,
        disallowed_special: Optional[_Specials] = None,
        tiktoken_defaults: bool = False,
    ) -> List[int]: ...
    def encode_ids_numpy(
        self,
        text: str,
        *,
        add_special_tokens: bool = True,
        allowed_special: Optional[_Specials] = None,
        disallowed_special: Optional[_Specials] = None,
        tiktoken_defaults: bool = False,
    ) -> npt.NDArray[np.uint32]: ...
    def encode_ids_batch(
        self,
        texts: Sequence[str],
        *,
        add_special_tokens: bool = True,
        allowed_special: Optional[_Specials] = None,
        disallowed_special: Optional[_Specials] = None,
        tiktoken_defaults: bool = False,
    ) -> List[List[int]]: ...
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...
    def decode_bytes(self, ids: Sequence[int]) -> bytes: ...
    def decode_batch(self, sequences: Sequence[Sequence[int]], skip_special_tokens: bool = True) -> List[str]: ...
    def enable_truncation(
        self,
        max_length: int,
        *,
        stride: int = 0,
        strategy: Literal["longest_first", "only_first", "only_second"] = "longest_first",
        direction: Literal["right", "left"] = "right",
    ) -> None: ...
    def no_truncation(self) -> None: ...
    def enable_padding(
        self,
        *,
        length: Optional[int] = None,
        pad_to_multiple_of: Optional[int] = None,
        pad_id: Optional[int] = None,
        pad_token: Optional[str] = None,
        pad_type_id: int = 0,
        direction: Literal["right", "left"] = "right",
    ) -> None: ...
    def no_padding(self) -> None: ...

class GenerationStream(Iterator[str]):
    def __iter__(self) -> "GenerationStream": ...
    def __next__(self) -> str: ...

class GPT2:
    @staticmethod
    def from_pretrained(
        name_or_path: str, *, dtype: Literal["f32", "bf16", "int8"] = "f32", tokenizer: Optional[_Path] = None
    ) -> "GPT2": ...
    @property
    def tokenizer(self) -> Tokenizer: ...
    @property
    def config(self) -> Dict[str, Any]: ...
    def generate(
        self,
        prompt: str,
        max_new_tokens: int = 50,
        *,
        temperature: float = 1.0,
        top_k: int = 50,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[List[str]] = None,
        ignore_eos: bool = False,
        truncate: bool = False,
    ) -> str: ...
    def generate_stream(
        self,
        prompt: str,
        max_new_tokens: int = 50,
        *,
        temperature: float = 1.0,
        top_k: int = 50,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[List[str]] = None,
        ignore_eos: bool = False,
        truncate: bool = False,
    ) -> GenerationStream: ...
    def generate_ids(
        self,
        ids: Sequence[int],
        max_new_tokens: int = 50,
        *,
        temperature: float = 1.0,
        top_k: int = 50,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
        ignore_eos: bool = False,
        truncate: bool = False,
    ) -> List[int]: ...
    def logits(self, ids: Sequence[int]) -> npt.NDArray[np.float32]:
        """`(len(ids), vocab_size)` float32."""
    def perplexity(
        self, text: Union[str, Sequence[int]], *, context: Optional[int] = None, stride: Optional[int] = None
    ) -> Dict[str, float]: ...

_ClassifyInput = Union[str, Tuple[str, str], Dict[str, str]]

class Bert:
    @staticmethod
    def from_pretrained(name_or_path: str, *, dtype: Literal["f32", "bf16", "int8"] = "f32") -> "Bert": ...
    @property
    def tokenizer(self) -> Tokenizer: ...
    def embed(
        self,
        texts: Union[str, Sequence[str]],
        *,
        normalize: Optional[bool] = None,
        pooling: Optional[Literal["mean", "cls", "max", "mean_sqrt_len"]] = None,
        batch_size: int = 32,
        window: bool = False,
        truncate: Optional[bool] = None,
        chunking: Optional[Dict[str, int]] = None,
        dimensions: Optional[int] = None,
    ) -> npt.NDArray[np.float32]:
        """`(len(texts), hidden_size)` float32 (`(len(texts), dimensions)` with `dimensions`)."""
    def fill_mask(self, text: str, *, top_k: int = 5) -> Union[List[Dict[str, Any]], List[List[Dict[str, Any]]]]: ...
    def classify(
        self, inputs: Union[_ClassifyInput, Sequence[_ClassifyInput]], *, batch_size: int = 32, truncate: bool = False
    ) -> Union[Dict[str, Any], List[Dict[str, Any]]]: ...
    def qa(
        self,
        question: str,
        context: str,
        *,
        top_k: int = 1,
        max_answer_len: int = 15,
        max_seq_len: Optional[int] = None,
        doc_stride: Optional[int] = None,
        handle_impossible_answer: bool = False,
    ) -> Union[Dict[str, Any], List[Dict[str, Any]]]: ...

class Classifier:
    @staticmethod
    def from_pretrained(name_or_path: str, *, dtype: Literal["f32", "bf16"] = "f32") -> "Classifier": ...
    def classify(
        self, inputs: Union[_ClassifyInput, Sequence[_ClassifyInput]], *, batch_size: int = 32, truncate: bool = False
    ) -> Union[Dict[str, Any], List[Dict[str, Any]]]: ...

class CrossEncoder:
    @staticmethod
    def from_pretrained(name_or_path: str, *, dtype: Literal["f32", "bf16", "int8"] = "f32") -> "CrossEncoder": ...
    def predict(
        self,
        pairs: Sequence[Tuple[str, str]],
        *,
        batch_size: int = 32,
        raw_scores: Optional[bool] = None,
        truncate: bool = False,
    ) -> npt.NDArray[np.float32]:
        """`(len(pairs),)` float32: the logit through the activation the model was saved with
        (sigmoid unless Identity, as `CrossEncoder.predict`); `raw_scores=True` the logit,
        `False` its sigmoid."""
    def rank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_k: Optional[int] = None,
        return_documents: bool = False,
        batch_size: int = 32,
        raw_scores: Optional[bool] = None,
        truncate: bool = False,
    ) -> List[Dict[str, Any]]: ...

def keep_freed_memory() -> None: ...
def _pretrain(
    options_json: str, *, callback: Optional[Callable[[Dict[str, Any]], None]] = None, progress: bool = True
) -> Dict[str, Any]: ...
def _finetune(
    task: str,
    model: str,
    train: _Path,
    output: _Path,
    eval: Optional[_Path] = None,
    *,
    options_json: str = "{}",
    callback: Optional[Callable[[Dict[str, Any]], None]] = None,
    progress: bool = True,
) -> Dict[str, Any]: ...
def _evaluate(
    task: str, model: str, data: _Path, *, options_json: str = "{}", predictions: bool = False
) -> Any: ...

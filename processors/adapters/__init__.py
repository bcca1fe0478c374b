"""Input adapters: decode one logged record into a ``RefusalEvent``, or say precisely why not.

Pure functions, no I/O: batch mode (``refusal_audit.audit.readers``) and the Kafka worker both hand
a ``SourceRecord`` (the raw bytes plus where they came from) to ``decode_record``, which
returns a ``RefusalEvent`` or a ``DecodeFailure`` (a machine-readable ``reason_code`` and a
human-readable ``reason`` naming the field). Bad input never raises.

Formats (``InputFormat``):

``jsonl``
    One JSON object per record matching the ``RefusalEvent`` wire contract exactly
    (``event_time`` an RFC 3339 string with offset; unknown keys rejected).
``mapped-jsonl``
    Any JSON object; a ``FieldMapping`` says which source field feeds which event field, every
    other top-level source field is kept in ``attributes`` (strings as is, other values as
    compact JSON; a nested object a dotted path read from keeps its other keys). ``log_id`` and
    ``conversation_id`` may be integers; a mapped ``event_time`` may be RFC 3339 or Unix
    seconds, an unmapped one is ``default_event_time``; ``model`` defaults to
    ``default_model`` or ``"unknown"``, ``product`` to ``default_product``.
``openai``
    A chat-completions log record ``{"request": {"model", "messages": [...]}, "response":
    <ChatCompletion>, "log_id"?, "metadata"?, "conversation_id"?, "policy_bundle"?,
    "classifier"?}``: request = the last user message's text (string content, or its
    ``{"type": "text"}`` parts joined by newlines); response = ``choices[0].message.content``,
    or ``.refusal`` when content is null/empty (then ``classifier.is_refusal`` is set and
    ``attributes["openai.refusal_field"] = "true"``); log_id = ``log_id`` else
    ``response.id``; event_time = ``response.created`` (UTC) else ``default_event_time``;
    model = ``response.model`` else ``request.model`` else the defaults; ``metadata`` goes to
    ``attributes`` except ``metadata.product`` (the product); other top-level keys go to
    ``attributes`` too, plus ``openai.finish_reason`` and ``openai.response_id``.
``xstest-csv``
    A row of an XSTest v2 completions CSV (``id, type, prompt, completion, annotation_1,
    annotation_2, agreement, final_label``): request = prompt, response = completion, every
    other column an attribute; log_id = ``xstest-<file model>-<id>`` where the file model comes
    from the source name (``xstest_v2_completions_gpt4.csv`` -> ``gpt4``) and is also the
    event's model unless ``default_model`` is set; product ``xstest`` unless
    ``default_product``; event_time = ``default_event_time`` (required).

Reason codes (``REASON_CODES``): ``encoding``, ``not_json``, ``not_object``,
``malformed_row``, ``oversized``, ``missing_log_id``, ``missing_field``, ``wrong_type``,
``unknown_field``, ``bad_timestamp``, ``naive_timestamp``, ``empty_text``,
``invalid_value``, ``unsupported_version``, ``bad_mapping``, ``tombstone``.

The package holds one module per format (``jsonl``, ``mapped``, ``openai_chat``, ``xstest``),
the data types (``records``), what the decoders share (``checks``: the internal failure,
field and timestamp checks, the contract's error translation), the registry of decoders with
``decode_record`` (``registry``) and ``detect_format`` (``detect``). Import the public names
from ``processors.adapters``.
"""

from processors.adapters.detect import detect_format
from processors.adapters.records import (
    INPUT_FORMATS,
    MAPPABLE_FIELDS,
    REASON_CODES,
    REQUIRED_MAPPED_FIELDS,
    DecodeFailure,
    DecodeOptions,
    FieldMapping,
    InputFormat,
    SourceRecord,
)
from processors.adapters.registry import decode_record
from processors.adapters.xstest import XSTEST_COLUMNS, xstest_model_from_source

__all__ = [
    "INPUT_FORMATS",
    "MAPPABLE_FIELDS",
    "REASON_CODES",
    "REQUIRED_MAPPED_FIELDS",
    "XSTEST_COLUMNS",
    "DecodeFailure",
    "DecodeOptions",
    "FieldMapping",
    "InputFormat",
    "SourceRecord",
    "decode_record",
    "detect_format",
    "xstest_model_from_source",
]

"""Format ``openai``: a chat-completions log record (request messages and a ``ChatCompletion``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from processors.adapters.checks import (
    DecodeContext,
    attr_value,
    build,
    json_type,
    load_object,
    optional_str,
    parse_epoch,
    reject,
    require_log_id,
    require_text,
)
from processors.adapters.records import DecodeOptions, SourceRecord
from schemas.events import RefusalEvent

_OPENAI_KNOWN: Final = frozenset(
    {"request", "response", "log_id", "metadata", "conversation_id", "classifier", "policy_bundle"}
)


def _get_object(obj: dict[str, Any], key: str, label: str) -> dict[str, Any]:
    if key not in obj or obj[key] is None:
        reject("missing_field", f"{label} is {'missing' if key not in obj else 'null'}")
    value = obj[key]
    if not isinstance(value, dict):
        reject("wrong_type", f"{label} must be an object, got {json_type(value)}")
    return value


def _content_text(content: object, path: str) -> str | None:
    """Text of a message ``content``: a string, or the text parts of a list (joined by \\n)."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        reject(
            "wrong_type",
            f"field '{path}' must be a string or a list of parts, got {json_type(content)}",
        )
    texts: list[str] = []
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            reject("wrong_type", f"field '{path}[{i}]' must be an object, got {json_type(part)}")
        if part.get("type") == "text":
            text = part.get("text")
            if not isinstance(text, str):
                reject(
                    "wrong_type",
                    f"field '{path}[{i}].text' must be a string, got {json_type(text)}",
                )
            texts.append(text)
    return "\n".join(texts)


def _user_text(request: dict[str, Any], options: DecodeOptions) -> str:
    """The request: the text of the last message with role ``user``."""
    messages = request.get("messages")
    if messages is None:
        reject("missing_field", "field 'request.messages' is missing")
    if not isinstance(messages, list):
        reject(
            "wrong_type", f"field 'request.messages' must be an array, got {json_type(messages)}"
        )
    user_index = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            reject(
                "wrong_type",
                f"field 'request.messages[{i}]' must be an object, got {json_type(message)}",
            )
        if message.get("role") == "user":
            user_index = i
    if user_index is None:
        reject("missing_field", "field 'request.messages' has no message with role 'user'")
    user_path = f"request.messages[{user_index}].content"
    user_text = _content_text(messages[user_index].get("content"), user_path)
    return require_text(user_text, True, f"field '{user_path}'", options)


def _first_choice(response: dict[str, Any]) -> dict[str, Any]:
    """``response.choices[0]``, which must be an object."""
    choices = response.get("choices")
    if choices is None:
        reject("missing_field", "field 'response.choices' is missing")
    if not isinstance(choices, list):
        reject("wrong_type", f"field 'response.choices' must be an array, got {json_type(choices)}")
    if not choices:
        reject("missing_field", "field 'response.choices' is empty")
    choice = choices[0]
    if not isinstance(choice, dict):
        reject(
            "wrong_type", f"field 'response.choices[0]' must be an object, got {json_type(choice)}"
        )
    return choice


def _answer_text(choice: dict[str, Any], options: DecodeOptions) -> tuple[str, bool]:
    """The response text (the message's content, else its ``refusal``) and whether it
    came from ``refusal``."""
    message = _get_object(choice, "message", "field 'response.choices[0].message'")
    content_label = "field 'response.choices[0].message.content'"
    content = _content_text(message.get("content"), "response.choices[0].message.content")
    refusal = message.get("refusal")
    used_refusal = False
    if not content and refusal is not None:
        if not isinstance(refusal, str):
            reject(
                "wrong_type",
                f"field 'response.choices[0].message.refusal' must be a "
                f"string, got {json_type(refusal)}",
            )
        content, content_label, used_refusal = (
            refusal,
            "field 'response.choices[0].message.refusal'",
            True,
        )
    elif content is None:
        content_label += " (and .refusal)"
    return require_text(content, True, content_label, options), used_refusal


def _created_time(response: dict[str, Any], options: DecodeOptions) -> datetime:
    """``response.created`` (Unix seconds), else ``options.default_event_time``."""
    created = response.get("created")
    if created is None:
        if options.default_event_time is None:
            reject(
                "missing_field",
                "field 'response.created' is missing and no --event-time default was given",
            )
        return options.default_event_time
    if isinstance(created, int | float) and not isinstance(created, bool):
        return parse_epoch(created, "field 'response.created'")
    reject(
        "wrong_type",
        f"field 'response.created' must be Unix seconds, got {json_type(created)}",
    )


def decode_openai(record: SourceRecord, options: DecodeOptions, ctx: DecodeContext) -> RefusalEvent:
    """Decode one OpenAI chat request/response record into a ``RefusalEvent``; raises ``Reject``."""
    obj = load_object(record.raw)
    request = _get_object(obj, "request", "field 'request'")
    response = _get_object(obj, "response", "field 'response'")
    data: dict[str, Any] = {}

    if obj.get("log_id") is not None:
        data["log_id"] = require_log_id(obj["log_id"], True, "field 'log_id'", ctx)
    else:
        data["log_id"] = require_log_id(
            response.get("id"), "id" in response, "field 'log_id' (and 'response.id')", ctx
        )

    data["request"] = _user_text(request, options)
    choice = _first_choice(response)
    data["response"], used_refusal = _answer_text(choice, options)
    data["event_time"] = _created_time(response, options)

    model = (
        optional_str(response.get("model"), "field 'response.model'")
        or optional_str(request.get("model"), "field 'request.model'")
        or options.default_model
        or "unknown"
    )
    data["model"] = model

    attributes: dict[str, str] = {}
    metadata = obj.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            reject("wrong_type", f"field 'metadata' must be an object, got {json_type(metadata)}")
        attributes.update({k: attr_value(v) for k, v in metadata.items() if k != "product"})
    product = (
        optional_str(metadata.get("product"), "field 'metadata.product'") if metadata else None
    ) or options.default_product
    if product is not None:
        data["product"] = product
    conversation = optional_str(
        obj.get("conversation_id"), "field 'conversation_id'", allow_int=True
    )
    if conversation is not None:
        data["conversation_id"] = conversation
    bundle = optional_str(obj.get("policy_bundle"), "field 'policy_bundle'")
    if bundle is not None:
        data["policy_bundle"] = bundle
    if obj.get("classifier") is not None:
        data["classifier"] = obj["classifier"]
    elif used_refusal:
        data["classifier"] = {"is_refusal": True}
    for key, value in obj.items():
        if key not in _OPENAI_KNOWN:
            attributes[key] = attr_value(value)
    finish = choice.get("finish_reason")
    if isinstance(finish, str):
        attributes["openai.finish_reason"] = finish
    response_id = response.get("id")
    if isinstance(response_id, str) and response_id != data["log_id"]:
        attributes["openai.response_id"] = response_id
    if used_refusal:
        attributes["openai.refusal_field"] = "true"
    data["attributes"] = attributes
    return build(data)

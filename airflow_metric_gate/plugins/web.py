"""The plugin's HTTP plumbing: response headers, bounded form bodies, input loaded through a schema, and the
OpenAPI description of that input (for the app's own OpenAPI document)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse
from marshmallow import Schema, ValidationError, fields, validate

from airflow_metric_gate.plugins.layout import STYLE_HASH
from airflow_metric_gate.schemas.ui import MAX_MAP_INDEX, MapIndex

#: The largest form body ``POST /mark`` (or ``POST /accept``) reads.
MAX_FORM_BYTES = 16_384

#: The headers of every response: pages need no script, load nothing, post only here, and may be
#: framed only by the Airflow UI (served from the same origin); none is cached (forms carry tokens).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; style-src '{STYLE_HASH}'; img-src 'self' data:; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "SAMEORIGIN",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _load(schema: Schema, data: Mapping[str, Any]) -> dict:
    try:
        return schema.load(dict(data))
    except ValidationError as err:
        raise HTTPException(400, f"invalid input: {json.dumps(err.messages, sort_keys=True)}") from err


def _html(text: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status_code, headers={"Cache-Control": "no-store"})


async def _form_body(request: Request) -> bytes:
    """Read a form body of at most :data:`MAX_FORM_BYTES`, refusing a larger one before reading it.

    A ``Content-Length`` over the limit is refused at once; a body without one (chunked) is read
    chunk by chunk and refused as soon as it passes the limit, so a large body never sits in memory.
    """
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise HTTPException(400, "invalid Content-Length")
        if int(length) > MAX_FORM_BYTES:
            raise HTTPException(413, f"form too large (at most {MAX_FORM_BYTES} bytes)")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, f"form too large (at most {MAX_FORM_BYTES} bytes)")
    return bytes(body)


async def posted_form(request: Request, schema: Schema) -> dict:
    """Read a posted form (at most :data:`MAX_FORM_BYTES`) and load it with ``schema`` (400 when invalid).

    :param request: the request.
    :param schema: the form's input schema.
    """
    body = await _form_body(request)
    return _load(schema, dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)))


def _parameters(schema: Schema) -> list[dict]:
    """The OpenAPI query parameters of a marshmallow input schema (for the app's own OpenAPI document)."""
    return [{"name": name, "in": "query", "required": f.required, "schema": _field_schema(f)}
            for name, f in schema.fields.items()]


def _field_schema(f: fields.Field) -> dict:
    """The JSON schema of one input field, with the bounds its validators check."""
    spec: dict[str, Any] = {"type": "integer" if isinstance(f, (fields.Integer, MapIndex)) else "string"}
    if isinstance(f, MapIndex):
        spec.update(minimum=-1, maximum=MAX_MAP_INDEX)
    for v in f.validators:
        if isinstance(v, validate.Range):
            spec.update({k: b for k, b in (("minimum", v.min), ("maximum", v.max)) if b is not None})
        elif isinstance(v, validate.Length):
            spec.update({k: b for k, b in (("minLength", v.min), ("maxLength", v.max)) if b is not None})
        elif isinstance(v, validate.OneOf):
            spec["enum"] = list(v.choices)
    return spec


def _form_body_schema(schema: Schema) -> dict:
    properties = {name: _field_schema(f) for name, f in schema.fields.items()}
    required = [name for name, f in schema.fields.items() if f.required]
    return {"requestBody": {"required": True, "content": {"application/x-www-form-urlencoded": {
        "schema": {"type": "object", "properties": properties, "required": required}}}}}


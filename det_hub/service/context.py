"""Uploaded context archives, as the API sees them: base64 in, checked archive or an error out.

The checking is :func:`det_hub.archive.check_archive`'s; this module decodes the upload and
turns a refusal into the API's answer (400 naming the member, 413 for a size bound). It is
plain blocking code, which :func:`read_context` runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii

from det_hub.archive import ContextError, ContextLimits, check_archive
from det_hub.service.errors import BadRequest, TooLarge

__all__ = ["decode_context", "read_context"]


def decode_context(context_b64: str, limits: ContextLimits) -> bytes:
    """Decode an uploaded context and check it completely.

    Args:
        context_b64: The archive (a .tar.gz), base64-encoded.
        limits: The bounds it must keep.

    Returns:
        The archive's bytes.

    Raises:
        BadRequest: Not base64, not a readable archive, or an unsafe member; the message
            names the member, and ``details`` holds ``{"member": ..., "message": ...}``.
        TooLarge: Over a size bound (unpacked size, member count, inflated bytes).
    """
    try:
        context = base64.b64decode(context_b64, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise BadRequest("context: not valid base64") from None
    try:
        check_archive(context, limits)
    except ContextError as e:
        details = [] if e.member is None else [{"member": e.member, "message": str(e)}]
        if e.too_large:
            raise TooLarge(str(e), details) from None
        raise BadRequest(str(e), details) from None
    return context


async def read_context(context_b64: str | None, limits: ContextLimits) -> bytes | None:
    """:func:`decode_context` in a worker thread (the event loop only routes), before anything
    is stored; None when no context was sent.

    Raises:
        BadRequest, TooLarge: As :func:`decode_context`.
    """
    if not context_b64:
        return None
    return await asyncio.to_thread(decode_context, context_b64, limits)

"""Terminal-safe text: what the CLI prints of a tenant's strings cannot drive the terminal.

A job's command, name, reason and events are written by a tenant, and an admin reads them with
``tessera jobs``, ``job``, ``explain`` and ``logs``. Printed raw, an escape sequence in them
would act on the admin's terminal: ``\\x1b[2J`` clears the screen, ``\\x1b]0;…\\x07`` sets the
window title, others move the cursor to overwrite earlier lines or, on some terminals, write
to the clipboard (OSC 52). :func:`safe` writes every such character as a visible escape
instead (``\\x1b``, ``\\u202e``), so the text reads as what it is:

* C0 controls (``\\x00``-``\\x1f``) and DEL, except the line breaks and tabs that
  ``keep_lines`` keeps for multi-line output (rank logs);
* C1 controls (``\\x80``-``\\x9f``: ``\\x9b`` is a one-byte CSI on some terminals);
* the bidirectional embeddings, overrides and isolates (``U+202A``-``U+202E``,
  ``U+2066``-``U+2069``), which reorder the text around them ("Trojan Source").

A backslash is left alone: the escapes are for reading, not for decoding back. ``--json``
output needs none of this: JSON escapes every control character itself.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_LINES = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: object, keep_lines: bool = False) -> str:
    """``text`` (``str()`` of it) with control and bidi characters as visible escapes.

    ``keep_lines`` keeps ``\\n`` and ``\\t`` (a log's lines); otherwise they are escaped too,
    so a one-line field stays one line.
    """
    return (_UNSAFE_KEEP_LINES if keep_lines else _UNSAFE).sub(_escape, str(text))

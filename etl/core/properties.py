"""Java properties files, read exactly as ``java.util.Properties.load(Reader)`` reads them (pure
Python): the Kafka client's settings are such a file, written by operators for Java tools, and a
reader that differs (a ``\\`` continuation split into wrong keys, ``\\:`` kept as two characters)
would hand the client settings it was never given.

The grammar, as the JDK documents and implements it (``Properties.LineReader`` and ``load0``):

- Natural lines end at ``\\n``, ``\\r`` or ``\\r\\n``. A logical line starts at its first
  character that is not a space, tab or form feed; natural lines of only those are skipped.
- A line ending in an odd number of backslashes continues on the next natural line: that
  backslash and the terminator are dropped, and so are the next line's leading spaces, tabs and
  form feeds. At the end of the input the odd backslash is dropped too.
- A logical line whose first character is ``#`` or ``!`` is a comment, to the end of its natural
  line. A continuation is never a comment, unless nothing came before it (a line of only ``\\``):
  the JDK checks "nothing read yet", and so does this.
- The key runs to the first ``=``, ``:``, space, tab or form feed not escaped by a backslash;
  after it, spaces, tabs and form feeds, then at most one ``=`` or ``:``, then more of them, are
  skipped; the value is the rest of the line (trailing blanks kept).
- In keys and values ``\\t``, ``\\n``, ``\\f``, ``\\r`` and ``\\uXXXX`` are escapes; a backslash
  before any other character stands for that character; a ``\\u`` without four hex digits is an
  error. A key given twice: the later value wins.

Errors name the file and the natural line, never its content: a value is often a password.
"""

from __future__ import annotations

import re
from pathlib import Path

from etl.core.errors import ConfigError

_BLANK = " \t\f"
_TERMINATORS = "\r\n"
_ESCAPES = {"t": "\t", "n": "\n", "f": "\f", "r": "\r"}
_HEX = "0123456789abcdefABCDEF"
# Kafka's password-type settings and their kind (ssl.*.password, ssl.keystore.key, sasl.jaas.config,
# sasl.oauthbearer.*.secret, ...): never shown in an error or a log.
SECRET_SETTING = re.compile(r"(?i)password|secret|jaas|token|credential|(^|\.)key$")
_ASSIGNED = re.compile(r'=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')  # a JAAS option's value, quoted or not


class PropertiesError(ConfigError):
    """A properties file that cannot be read, or one Java would refuse; the message names the
    file and line but never shows a value or the line."""


def read(path: Path | str) -> dict[str, str]:
    """The properties of the file at ``path``, read as UTF-8 (a byte-order mark at its start is
    dropped: Windows editors write one, and it would otherwise start the first key)."""
    try:
        content = Path(path).read_bytes()
    except OSError as exc:
        raise PropertiesError(f"properties file {str(path)!r}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    return parse(decode(content, str(path)), str(path))


def decode(content: bytes, source: str) -> str:
    """``content`` as UTF-8 text, or an error naming the line of the first byte that is not."""
    try:
        return content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:  # exc.object: the content after a byte-order mark
        before = exc.object[:exc.start].decode("utf-8")
        line = before.count("\n") + before.count("\r") - before.count("\r\n") + 1
        offset = len(content) - len(exc.object) + exc.start
        raise PropertiesError(f"properties file {source!r}, line {line}: not UTF-8 (byte {offset + 1} of the file)") from None


def parse(text: str, source: str = "<text>") -> dict[str, str]:
    """The properties ``text`` holds (``source``: the file, for errors)."""
    out: dict[str, str] = {}
    numbers = _line_numbers(text)
    for chars, where in _logical_lines(text, numbers):
        key_end, value_start = _split(chars)
        key = _unescape(chars, where, 0, key_end, source, "key")
        out[key] = _unescape(chars, where, value_start, len(chars), source, "value")
    return out


def redact(text: str, properties: dict[str, str]) -> str:
    """``text`` (a client's error message) with every secret of ``properties`` masked: the value of
    each secret-bearing setting, and each option value inside it (a JAAS config's
    ``password="..."``, with or without its quotes), which a client's parse error may quote."""
    secrets = set()
    for key, value in properties.items():
        if SECRET_SETTING.search(key):
            secrets.add(value)
            for option in _ASSIGNED.finditer(value):
                secrets.update((option.group(1), option.group(1).strip('"')))
    for secret in sorted((s for s in secrets if len(s) >= 3), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _line_numbers(text: str) -> list[int]:
    """The natural line (from 1) of each character of ``text``; ``\\r\\n`` ends one line."""
    numbers, line = [], 1
    for i, c in enumerate(text):
        numbers.append(line)
        if c == "\n" or (c == "\r" and text[i + 1:i + 2] != "\n"):
            line += 1
    return numbers


def _logical_lines(text: str, numbers: list[int]):
    """Each logical line: its characters (continuations joined, comments and blanks gone) and the
    natural line of each. A transcription of the JDK's ``LineReader.readLine``."""
    i, n = 0, len(text)
    while True:
        chars: list[str] = []
        where: list[int] = []
        skip_blank, continued, backslash = True, False, False
        while True:
            if i >= n:
                if not chars:
                    return
                if backslash:
                    chars.pop(), where.pop()
                yield chars, where  # may be empty: a lone "\" at the end is the key ""
                return
            c = text[i]
            i += 1
            if skip_blank:
                if c in _BLANK:
                    continue
                if not continued and c in _TERMINATORS:
                    continue
                skip_blank = continued = False
            if not chars and c in "#!":  # a comment: skip to its natural line's end
                while i < n and text[i] not in _TERMINATORS:
                    i += 1
                if i >= n:
                    return
                i += 1
                skip_blank = True
                continue
            if c not in _TERMINATORS:
                chars.append(c)
                where.append(numbers[i - 1])
                backslash = not backslash if c == "\\" else False
                continue
            if not chars:  # an empty continuation line
                skip_blank = True
                continue
            if i >= n:
                if backslash:
                    chars.pop(), where.pop()
                yield chars, where
                return
            if not backslash:
                yield chars, where
                break
            chars.pop(), where.pop()  # the continuing backslash
            skip_blank, continued, backslash = True, True, False
            if c == "\r" and text[i] == "\n":
                i += 1


def _split(chars: list[str]) -> tuple[int, int]:
    """Where the key ends and the value starts (the JDK's ``load0``)."""
    limit, key_end, value_start, has_separator, backslash = len(chars), 0, len(chars), False, False
    while key_end < limit:
        c = chars[key_end]
        if c in "=:" and not backslash:
            value_start, has_separator = key_end + 1, True
            break
        if c in _BLANK and not backslash:
            value_start = key_end + 1
            break
        backslash = not backslash if c == "\\" else False
        key_end += 1
    while value_start < limit:
        c = chars[value_start]
        if c not in _BLANK:
            if has_separator or c not in "=:":
                break
            has_separator = True
        value_start += 1
    return key_end, value_start


def _unescape(chars: list[str], where: list[int], start: int, end: int, source: str, what: str) -> str:
    """The text of ``chars[start:end]`` with its escapes applied (the JDK's ``loadConvert``)."""
    out: list[str] = []
    i = start
    while i < end:
        c = chars[i]
        i += 1
        if c != "\\" or i >= end:  # a line never ends in an odd backslash: the second test is moot
            out.append(c)
            continue
        c = chars[i]
        i += 1
        if c != "u":
            out.append(_ESCAPES.get(c, c))
            continue
        digits = chars[i:i + 4]
        if i > end - 4 or any(d not in _HEX for d in digits):
            raise PropertiesError(f"properties file {source!r}, line {where[i - 2]}: a malformed \\uXXXX escape "
                                  f"in a {what} (four hex digits must follow \\u)")
        out.append(chr(int("".join(digits), 16)))
        i += 4
    # \uD83D\uDE00 is one character in Java's UTF-16 strings: joined here too (a lone surrogate stays).
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")

"""Keys never reach a message, an exception text or a log record."""

from __future__ import annotations

import logging
import re

# Anthropic keys and OpenAI-style keys (sk-..., sk-proj-...)
_KEY_SHAPE = re.compile(r"sk-(?:ant-)?[A-Za-z0-9_\-]{6,}")


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "[REDACTED]")
    return _KEY_SHAPE.sub("[REDACTED]", text)


class RedactingFilter(logging.Filter):
    """Formats a record's message and removes the secrets from it (and from exception text)."""

    def __init__(self, secrets: tuple[str, ...]):
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is still scrubbed as best we can
            msg = str(record.msg)
        record.msg, record.args = scrub(msg, self.secrets), None
        if record.exc_info:
            import traceback

            record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info)), self.secrets)
            record.exc_info = None
        return True


REDACTED_LOGGERS = ("steptp.cot", "steptp.eval", "steptp.llm", "anthropic", "anthropic._base_client",
                    "anthropic._response", "openai", "openai._base_client", "httpx2", "httpx",
                    "httpcore")


def install_redaction(secret: str) -> None:
    if not secret:
        return
    for name in REDACTED_LOGGERS:
        lg = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) and secret in f.secrets for f in lg.filters):
            lg.addFilter(RedactingFilter((secret,)))


__all__ = ["scrub", "RedactingFilter", "install_redaction", "REDACTED_LOGGERS"]

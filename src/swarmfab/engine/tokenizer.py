"""Text in and out: a ``tokenizer.json`` (Hugging Face ``tokenizers``), a chat template,
and incremental detokenisation that never emits half a UTF-8 character.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmfab.errors import EngineError, import_extra

__all__ = ["DEFAULT_CHAT_TEMPLATE", "Detokenizer", "Tokenizer"]

# Used when tokenizer_config.json has no chat_template: role-tagged turns, then the cue.
DEFAULT_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_REPLACEMENT = "\ufffd"


class Tokenizer:
    """Encode, decode and apply the chat template of one checkpoint."""

    def __init__(self, model_dir: Path):
        path = model_dir / "tokenizer.json"
        if not path.exists():
            raise EngineError(f"{model_dir} has no tokenizer.json (a Hugging Face fast "
                              "tokenizer file); the engine needs one to serve text")
        tokenizers = import_extra("tokenizers", "engine", "serving text")
        self._jinja2 = import_extra("jinja2", "engine", "a chat template")
        try:
            self._tokenizer = tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            raise EngineError(f"{path} cannot be loaded as a tokenizer: {exc}") from exc
        settings = _read_json(model_dir / "tokenizer_config.json")
        template = settings.get("chat_template") or DEFAULT_CHAT_TEMPLATE
        self._template = self._jinja2.Environment(autoescape=False).from_string(template)
        self.bos_token = settings.get("bos_token") if isinstance(
            settings.get("bos_token"), str) else None

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size())

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))

    def token_id(self, token: str) -> int | None:
        found = self._tokenizer.token_to_id(token)
        return None if found is None else int(found)

    def chat_prompt(self, messages: list[dict[str, Any]]) -> str:
        try:
            return self._template.render(messages=messages, add_generation_prompt=True,
                                         bos_token=self.bos_token or "")
        except self._jinja2.TemplateError as exc:
            raise EngineError(f"the chat template failed on these messages: {exc}") from exc


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        loaded = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise EngineError(f"{path} is not valid JSON: {exc}") from exc
    return loaded if isinstance(loaded, dict) else {}


@dataclass(slots=True)
class Detokenizer:
    """Text of a growing token list, released only up to the last complete character.

    Byte-level tokens may split a UTF-8 character; the tokenizer then decodes the tail
    as U+FFFD. That tail is held back until the next token completes it (or the request
    ends, when :meth:`flush` releases whatever is there)."""

    tokenizer: Tokenizer
    ids: list[int] = field(default_factory=list)
    text: str = ""          # decoded so far (complete characters only)

    def add(self, token: int) -> str:
        """Append one token; the newly complete text."""
        self.ids.append(token)
        decoded = self.tokenizer.decode(self.ids)
        stable = decoded.rstrip(_REPLACEMENT) if decoded.endswith(_REPLACEMENT) else decoded
        if len(stable) <= len(self.text):
            return ""
        new, self.text = stable[len(self.text):], stable
        return new

    def flush(self) -> str:
        decoded = self.tokenizer.decode(self.ids)
        new, self.text = decoded[len(self.text):], decoded
        return new

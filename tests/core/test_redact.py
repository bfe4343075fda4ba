"""Tests for specgate.core.redact."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from specgate.core.redact import MASK, Redactor, is_secret_name, secrets_from_env

SECRET = st.text(string.ascii_letters + string.digits + "-_.", min_size=8, max_size=40)
TEXT = st.text(string.printable, max_size=80)


@given(secret=SECRET, before=TEXT, after=TEXT)
def test_known_secret_never_survives(secret: str, before: str, after: str) -> None:
    text = before + secret + after + secret
    assert secret not in Redactor([secret]).redact(text)


@given(key=SECRET)
def test_api_key_patterns_are_masked_without_knowing_the_key(key: str) -> None:
    r = Redactor()
    for text in (
        f"python -m sglang.launch_server --api-key {key} --port 1",
        f"--api-key={key}",
        f"server_args=ServerArgs(model_path='/m', api_key='{key}', port=3)",
        f'{{"api_key": "{key}", "port": 3}}',
        f"Authorization: Bearer {key}",
        f"env HF_TOKEN={key} NCCL_PROTO=Simple",
    ):
        redacted = r.redact(text)
        assert MASK in redacted
        # The key may also occur by chance in the text around it (hypothesis found
        # 'sglang.l' inside 'sglang.launch_server'): count occurrences, not presence.
        assert redacted.count(key) == text.count(key) - 1, text


def test_innocent_text_and_none_are_left_alone() -> None:
    r = Redactor(["short"])  # too short to be treated as a secret
    text = "api_key=None NCCL_PROTO=Simple --port 30000 short"
    assert r.redact(text) == text


def test_redact_argv_masks_value_after_flag() -> None:
    assert Redactor().redact_argv(["--api-key", "abc", "--port", "1"]) == [
        "--api-key", MASK, "--port", "1"]


def test_secrets_from_env_picks_credentials_of_real_length() -> None:
    env = {"HF_TOKEN": "hf_abcdefgh", "OPENAI_API_KEY": "sk-12345678", "WANDB_API_KEY": "short",
           "NCCL_PROTO": "Simple-and-long", "MY_KEY_VAR": "value-long-enough"}
    found = secrets_from_env(env, extra_names=["MY_KEY_VAR"])
    assert sorted(found) == ["hf_abcdefgh", "sk-12345678", "value-long-enough"]
    assert is_secret_name("HUGGING_FACE_HUB_TOKEN")
    assert not is_secret_name("NCCL_PROTO")

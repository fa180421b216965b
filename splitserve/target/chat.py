"""Chat-template rendering, the one place it happens: the prompt a target answers (regeneration,
decoding, evaluation) and whole conversations with an assistant-only loss mask.

Each assistant turn's tokens (its content and the template's end-of-turn tokens) are found by
rendering the conversation up to that turn twice, with and without the turn, and taking the
difference. That needs a prefix-stable template (rendering more turns only appends tokens); a
template that is not is reported instead of silently masking the wrong tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _ids(tokenizer, messages, generation_prompt: bool) -> list[int]:
    out = tokenizer.apply_chat_template(
        list(messages), add_generation_prompt=generation_prompt, tokenize=True, return_dict=True
    )
    return list(out["input_ids"])


def prompt_ids(tokenizer, messages: Sequence[dict], max_tokens: int | None = None) -> list[int]:
    """The token ids of `messages` followed by the assistant's generation prompt: what the target
    answers. `max_tokens` keeps only the last that many (the end of a long prompt matters most)."""
    ids = _ids(tokenizer, messages, True)
    return ids[-max_tokens:] if max_tokens else ids


def render_with_loss_mask(tokenizer, messages: Sequence[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """messages: [{"role": "system"|"user"|"assistant", "content": str}, ...] ->
    (input_ids [L], loss_mask [L] bool, True exactly on assistant-turn tokens)."""
    if not messages or not any(m.get("role") == "assistant" for m in messages):
        raise ValueError("a training conversation needs at least one assistant turn")
    full = _ids(tokenizer, messages, False)
    mask = [False] * len(full)
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        before = _ids(tokenizer, messages[:i], True) if i else []
        # the last turn's `after` is `full` (a conversation that ends with its answer, as every
        # training sample does: two renders instead of three)
        after = full if i + 1 == len(messages) else _ids(tokenizer, messages[: i + 1], False)
        if full[: len(after)] != after or after[: len(before)] != before:
            raise ValueError(
                f"the tokenizer's chat template is not prefix-stable at turn {i}: "
                "cannot locate the assistant tokens for the loss mask"
            )
        for t in range(len(before), len(after)):
            mask[t] = True
    return torch.tensor(full, dtype=torch.long), torch.tensor(mask, dtype=torch.bool)
